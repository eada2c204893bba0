// `warren sandbox exec` over the streaming exec, run as a process against a real server with
// the local runtime: stdin forwarded from a pipe (`echo x | warren sandbox exec dev -- cat`),
// --env and --cwd, separate stdout and stderr with the command's exit code, 127 for a missing
// binary, 124 on a timeout, --json still the unary exec's one answer, and --tty from a real
// terminal (util-linux `script` gives the CLI one): raw mode, the terminal's size inside.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ensureCliBuilt, runCli, WARREN_BIN } from "./support/cli.js";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";

// The compiled CLI, as users run it (built when stale).
before(() => ensureCliBuilt());

describe("warren sandbox exec, streamed [pglite, local runtime]", { timeout: 300_000 }, () => {
  let api: ApiServer;
  let home: string;
  const cli = (args: string[], stdin?: string) =>
    runCli(args, {
      home,
      env: { WARREN_API_URL: api.url, WARREN_API_KEY: api.t.orgA.keys.owner },
      ...(stdin !== undefined ? { stdin } : {}),
    });

  before(async () => {
    api = await startApiServer("pglite", { runtime: "cli-stream" });
    home = await mkdtemp(path.join(os.tmpdir(), "warren-cli-stream-home-"));
    const created = await cli([
      "sandbox",
      "create",
      "--json",
      "--name",
      "dev",
      "--network",
      "none",
      "--",
      "sleep",
      "3600",
    ]);
    assert.equal(created.code, 0, created.stderr);
  });
  after(async () => {
    await api?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it("forwards stdin from a pipe and closes it at its end", async () => {
    const res = await cli(["sandbox", "exec", "dev", "--", "cat"], "x\n");
    assert.equal(res.code, 0, res.stderr);
    assert.equal(res.stdout, "x\n");
    const counted = await cli(["sandbox", "exec", "dev", "--", "wc", "-c"], "y".repeat(300_000));
    assert.equal(counted.stdout.trim(), "300000");
  });

  it("takes --env and --cwd, keeps stderr apart and exits with the command's code", async () => {
    const res = await cli([
      "sandbox",
      "exec",
      "--env",
      "A=1",
      "--env",
      "B=two words",
      "--cwd",
      "/tmp",
      "dev",
      "--",
      "sh",
      "-c",
      'echo "$A $B"; pwd; echo oops >&2; exit 7',
    ]);
    assert.equal(res.code, 7, res.stderr);
    assert.equal(res.stdout, "1 two words\n/tmp\n");
    assert.equal(res.stderr, "oops\n");
  });

  it("exits 127 for a missing binary and 124 on a timeout", async () => {
    const missing = await cli(["sandbox", "exec", "dev", "--", "no-such-binary"]);
    assert.equal(missing.code, 127, missing.stderr);
    assert.match(missing.stderr, /could not be started/);
    const slow = await cli(["sandbox", "exec", "--timeout", "1", "dev", "--", "sleep", "30"]);
    assert.equal(slow.code, 124, slow.stderr);
    const unary = await cli(["sandbox", "exec", "--json", "dev", "--", "no-such-binary"]);
    assert.equal(unary.code, 127, unary.stderr);
    assert.equal(JSON.parse(unary.stderr).error.code, "spawn_failed");
  });

  it("runs on a terminal with --tty when its stdin is one", async () => {
    // `script` runs the CLI on a new pseudo-terminal of 0x0, resized here to 37x111 first.
    const line = `stty rows 37 cols 111; exec ${process.execPath} ${WARREN_BIN} sandbox exec --tty dev -- sh -c 'stty size; exit 5'`;
    const child = spawn("/usr/bin/script", ["-qec", line, "/dev/null"], {
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        HOME: home,
        WARREN_API_URL: api.url,
        WARREN_API_KEY: api.t.orgA.keys.owner,
      },
      stdio: ["pipe", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    assert.match(out, /37 111/);
    assert.equal(code, 5, out);
  });
});
