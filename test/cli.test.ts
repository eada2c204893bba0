// The `warren` CLI run as a process against a real server with the local runtime: login
// (config file 0600), whoami, sandbox create/exec/get/list/snapshot/restore/stop/wake/ssh/delete,
// volume push, run tail (-f ends at the run's end), sql, admin through the server,
// completion, --json everywhere and the documented exit codes.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Command } from "commander";
import { buildProgram } from "../packages/cli/src/build.js";
import { EXAMPLES } from "../packages/cli/src/program.js";
import { Warren } from "../packages/sdk/src/index.js";
import { type CliResult, ensureCliBuilt, runCli, WARREN_BIN } from "./support/cli.js";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";

// The compiled CLI, as users run it (built when stale).
before(() => ensureCliBuilt());

describe("warren CLI command tree", () => {
  it("ends quietly when its reader goes away (`warren ... | head`)", async () => {
    const piped = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [WARREN_BIN, "completion", "bash"], {
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
        stdio: ["ignore", "pipe", "pipe"],
      });
      child.stdout.destroy();
      let stderr = "";
      child.stderr.on("data", (chunk) => {
        stderr += chunk;
      });
      child.once("error", reject);
      child.once("close", (code) => resolve({ code, stderr }));
    });
    assert.equal(piped.code, 0, piped.stderr);
    assert.equal(piped.stderr, "");
  });

  it("gives every command an example in its --help", () => {
    const missing: string[] = [];
    const walk = (command: Command, path: string[]) => {
      for (const sub of command.commands) {
        const here = [...path, sub.name()];
        if (sub.commands.length === 0 && sub.name() !== "help" && !EXAMPLES.has(sub)) missing.push(here.join(" "));
        walk(sub, here);
      }
    };
    walk(buildProgram(), []);
    assert.deepEqual(missing, []);
  });
});

describe("warren CLI [pglite, local runtime]", () => {
  let api: ApiServer;
  let home: string;
  let loggedIn = false;
  const cli = (
    args: string[],
    options: { env?: Record<string, string>; stdin?: string; onStdout?: (stdout: string) => void } = {},
  ) => runCli(args, { home, ...options });
  const ok = (res: CliResult) => {
    assert.equal(res.code, 0, `exit ${res.code}\nstdout: ${res.stdout}\nstderr: ${res.stderr}`);
    return res;
  };
  const json = <T = Record<string, unknown>>(res: CliResult) => JSON.parse(ok(res).stdout) as T;

  before(async () => {
    api = await startApiServer("pglite", { runtime: "cli" });
    home = await mkdtemp(path.join(os.tmpdir(), "warren-cli-home-"));
  });
  after(async () => {
    await api?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it("login refuses a bad key (exit 6, nothing stored, the key not echoed) and stores a good one with mode 0600", async () => {
    const bad = await cli(["login", "--url", api.url, "--api-key-stdin"], { stdin: "wrn_bogus_key_value\n" });
    assert.equal(bad.code, 6, bad.stderr);
    assert.ok(!bad.stderr.includes("wrn_bogus_key_value"));
    await assert.rejects(stat(path.join(home, ".config", "warren", "config.json")));
    const good = ok(await cli(["login", "--url", api.url, "--api-key-stdin"], { stdin: `${api.t.orgA.keys.owner}\n` }));
    assert.match(good.stdout, /logged in to/);
    const file = path.join(home, ".config", "warren", "config.json");
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    assert.deepEqual(JSON.parse(await readFile(file, "utf8")), { url: api.url, api_key: api.t.orgA.keys.owner });
    const who = json<{ organization: { id: string } }>(await cli(["whoami", "--json"]));
    assert.equal(who.organization.id, api.t.orgA.id);
    loggedIn = true;
  });

  it("creates a sandbox, execs with the command's exit code, 124 on timeout, 3 for not_found", async () => {
    assert.ok(loggedIn);
    const created = json<{ id: string; state: string; run_id: string }>(
      await cli(["sandbox", "create", "--json", "--name", "cli-main", "--network", "none", "--", "sleep", "3600"]),
    );
    assert.equal(created.state, "running");
    assert.ok(created.run_id);
    const exec = await cli(["sandbox", "exec", "cli-main", "--", "sh", "-c", "echo hi; echo oops >&2; exit 7"]);
    assert.equal(exec.code, 7);
    assert.equal(exec.stdout, "hi\n");
    assert.equal(exec.stderr, "oops\n");
    const timedOut = await cli(["sandbox", "exec", "--timeout", "1", "cli-main", "--", "sleep", "20"]);
    assert.equal(timedOut.code, 124, timedOut.stderr);
    const missing = await cli(["sandbox", "get", "no-such-sandbox", "--json"]);
    assert.equal(missing.code, 3);
    assert.equal(JSON.parse(missing.stderr).error.code, "not_found");
    // Without a command the CLI keeps the sandbox alive (the image's CMD, sh, would exit at once).
    const kept = json<{ id: string; state: string }>(
      await cli(["sandbox", "create", "--json", "--name", "cli-kept", "--network", "none"]),
    );
    assert.equal(kept.state, "running");
    // Every process's argv (NUL-separated); this exec's own does not hold "sleep\0infinity".
    const argvs = ok(
      await cli(["sandbox", "exec", "cli-kept", "--", "sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null; true"]),
    );
    assert.match(argvs.stdout, /sleep\0infinity/);
    assert.equal(json<{ state: string }>(await cli(["sandbox", "get", "cli-kept", "--json"])).state, "running");
    ok(await cli(["sandbox", "delete", "cli-kept"]));
    const usage = await cli(["sandbox", "create", "--memory", "lots"]);
    assert.equal(usage.code, 2);
    const list = ok(await cli(["sandbox", "list"]));
    assert.match(list.stdout, /^ID\s+NAME\s+STATE\s+IMAGE\s+CREATED_AT\n/);
    assert.match(list.stdout, new RegExp(`${created.id}\\s+cli-main\\s+running`));
  });

  it("snapshots and restores; stop and wake; ssh answers a clear error without an SSH gateway", async () => {
    ok(await cli(["sandbox", "exec", "cli-main", "--", "sh", "-c", "echo kept > /workspace/kept.txt"]));
    const snap = json<{ snapshot_id: string }>(
      await cli(["sandbox", "snapshot", "cli-main", "--name", "cli-snap", "--json"]),
    );
    const snapshots = ok(await cli(["snapshot", "list"]));
    assert.match(snapshots.stdout, new RegExp(`${snap.snapshot_id}\\s+cli-snap`));
    const restored = json<{ id: string; state: string }>(
      await cli(["snapshot", "restore", snap.snapshot_id, "--json", "--", "sleep", "3600"]),
    );
    assert.equal(restored.state, "running");
    const cat = ok(await cli(["sandbox", "exec", restored.id, "--", "cat", "/workspace/kept.txt"]));
    assert.equal(cat.stdout, "kept\n");
    assert.equal(json<{ state: string }>(await cli(["sandbox", "stop", restored.id, "--json"])).state, "stopped");
    const notRunning = await cli(["sandbox", "exec", restored.id, "--", "true"]);
    assert.equal(notRunning.code, 4, notRunning.stderr);
    assert.match(notRunning.stderr, /sandbox_not_running/);
    assert.equal(json<{ state: string }>(await cli(["sandbox", "wake", restored.id, "--json"])).state, "running");
    const ssh = await cli(["sandbox", "ssh", "cli-main"]);
    assert.equal(ssh.code, 2);
    assert.match(ssh.stderr, /no SSH endpoint/);
    ok(await cli(["sandbox", "delete", restored.id]));
  });

  it("reports a create whose image is unavailable at once, with the reason as its code and exit code 8", async () => {
    const missing = api.fixture?.busyboxRef.replace("/test/busybox:latest", "/test/no-such-image:1") ?? "";
    const started = Date.now();
    const failed = await cli(["sandbox", "create", "--image", missing, "--json", "--", "sleep", "60"]);
    assert.equal(failed.code, 8, failed.stderr);
    const error = (JSON.parse(failed.stderr) as { error: Record<string, unknown> }).error;
    assert.equal(error.code, "image_unavailable", failed.stderr);
    assert.equal(error.state, "failed");
    // The server's wait ends when the sandbox fails, not at its 25 s deadline.
    assert.ok(Date.now() - started < 20_000, `reported after ${Date.now() - started} ms`);
    const human = ok(await cli(["sandbox", "get", String(error.sandbox_id)])).stdout;
    assert.match(human, /state_reason +image_unavailable: /);
    const plain = await cli(["sandbox", "create", "--image", missing, "--", "true"]);
    assert.equal(plain.code, 8);
    assert.match(plain.stderr, /image_unavailable/);
    const malformed = await cli(["sandbox", "create", "--image", "Not A Reference", "--", "true"]);
    assert.equal(malformed.code, 2, malformed.stderr);
    assert.match(malformed.stderr, /invalid_argument: body\.image: invalid image reference/);
  });

  it("creates a volume and pushes a directory, then nothing to upload", async () => {
    const dir = path.join(home, "tree");
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, "data.txt"), "volume data\n");
    const volume = json<{ id: string }>(await cli(["volume", "create", "cli-vol", "--quota-gib", "1", "--json"]));
    assert.ok(volume.id);
    const env = { XDG_CACHE_HOME: path.join(home, "cache") };
    const first = json<{ uploadedBlobs: number; version: { version_digest: string } }>(
      await cli(["volume", "push", dir, "--volume", "cli-vol", "--json"], { env }),
    );
    assert.equal(first.uploadedBlobs, 1);
    const again = json<{ uploadedBlobs: number }>(
      await cli(["volume", "push", dir, "--volume", volume.id, "--json"], { env }),
    );
    assert.equal(again.uploadedBlobs, 0);
    const listed = ok(await cli(["volume", "list"])).stdout;
    const line = listed.split("\n").find((l) => l.includes("cli-vol")) ?? "";
    assert.ok(line.includes(first.version.version_digest), `the current version is shown: ${listed}`);
    const usage = ok(await cli(["usage"])).stdout;
    assert.match(usage, /^METRIC +UNIT +CURRENT +RESERVED +LIMIT/);
    assert.match(usage, /\nsandboxes\.total +/);
    assert.equal(json<{ deleted: boolean }>(await cli(["volume", "delete", "cli-vol", "--json"])).deleted, true);
    const gone = await cli(["volume", "delete", volume.id]);
    assert.notEqual(gone.code, 0);
    assert.match(gone.stderr, /no volume/);
    assert.doesNotMatch(ok(await cli(["volume", "list"])).stdout, /cli-vol/);
  });

  it("tails a run (-f ends with the run), lists runs and runs SQL", async () => {
    const warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url });
    const run = await warren.runs.start({ project_id: api.t.orgA.defaultProjectId, label: "cli-tailed" });
    await warren.schemas.register({ name: "cli_note", json_schema: JSON.stringify({ type: "object" }) } as never);
    await warren.annotations.annotate({ schema_name: "cli_note", run_id: run.id, payload: { hello: "cli" } });
    // The run completes once the tail has shown the annotation: the tail is following by then.
    let shown: () => void = () => undefined;
    const annotationShown = new Promise<void>((resolve) => {
      shown = resolve;
    });
    const follow = cli(["run", "tail", "-f", run.id, "--json"], {
      onStdout: (stdout) => {
        if (stdout.includes("cli_note")) shown();
      },
    });
    await Promise.race([annotationShown, follow]);
    await warren.runs.complete(run.id, "succeeded");
    const tailed = ok(await follow);
    const items = tailed.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line));
    assert.ok(
      items.some((item) => item.data.name === "cli_note"),
      tailed.stdout,
    );
    assert.equal(items.at(-1).event, "end");
    const human = ok(await cli(["run", "tail", run.id]));
    assert.match(human.stdout, /cli_note \{"hello":"cli"\}/);
    assert.match(ok(await cli(["run", "list"])).stdout, /cli-tailed/);
    const sql = json<{ rows: unknown[][] }>(
      await cli(["sql", "--json", `SELECT label, status FROM runs WHERE id = '${run.id}'`]),
    );
    assert.deepEqual(sql.rows, [["cli-tailed", "succeeded"]]);
    const table = ok(await cli(["sql", `SELECT label FROM runs WHERE id = '${run.id}'`]));
    assert.equal(table.stdout, "LABEL\ncli-tailed\n");
    const refused = await cli(["sql", "DELETE FROM runs"]);
    assert.equal(refused.code, 2, refused.stderr);
  });

  it("manages secrets (value from stdin, never printed), schemas and data views", async () => {
    const value = "cli-secret-value-not-echoed";
    const secret = json<{ id: string; name: string }>(
      await cli(["secret", "create", "cli-token", "--dest-host", "api.openai.com", "--json"], { stdin: value }),
    );
    assert.equal(secret.name, "cli-token");
    const rotated = json<{ current_version: string | number }>(
      await cli(["secret", "rotate", secret.id, "--json"], { stdin: `${value}-2` }),
    );
    assert.equal(String(rotated.current_version), "2");
    const list = ok(await cli(["secret", "list"]));
    assert.match(list.stdout, /cli-token/);
    ok(await cli(["secret", "revoke", secret.id]));
    const empty = await cli(["secret", "create", "cli-empty"]);
    assert.equal(empty.code, 2, empty.stderr);
    for (const res of [list]) assert.ok(!res.stdout.includes(value) && !res.stderr.includes(value));
    const schema = json<{ name: string; version: string }>(
      await cli(["schema", "register", "cli_rating", "--json-schema", '{"type":"object"}', "--json"]),
    );
    assert.equal(String(schema.version), "1");
    assert.match(ok(await cli(["schema", "list"])).stdout, /cli_rating/);
    ok(await cli(["schema", "archive", "cli_rating"]));
    const spec = JSON.stringify({
      type: "sql.v1",
      sql: "SELECT label FROM runs WHERE label = $1",
      params: [{ name: "label", type: "text" }],
    });
    ok(await cli(["view", "put", "cli-by-label", "--spec", spec]));
    assert.match(ok(await cli(["view", "list"])).stdout, /cli-by-label/);
    const ran = json<{ rows: unknown[][] }>(
      await cli(["view", "run", "cli-by-label", "--params", '{"label":"cli-tailed"}', "--json"]),
    );
    assert.deepEqual(ran.rows, [["cli-tailed"]]);
    ok(await cli(["view", "delete", "cli-by-label"]));
  });

  it("runs the admin commands through the server, prints completion scripts, and help with examples", async () => {
    const orgs = json<{ organizations: { slug: string }[] }>(
      await cli(["admin", "org", "list"], {
        env: { WARREN_ADMIN_URL: api.url, WARREN_API_KEY: api.t.orgA.keys.owner },
      }),
    );
    assert.ok(orgs.organizations.some((org) => org.slug === "org-a"));
    // Logged in and nothing else set: the same server with the logged-in key, not a store of its own.
    const logged = json<{ organizations: { slug: string }[] }>(await cli(["admin", "org", "list"]));
    assert.ok(logged.organizations.some((org) => org.slug === "org-a"));
    const bash = ok(await cli(["completion", "bash"]));
    assert.match(bash.stdout, /complete -o default -F _warren_complete warren/);
    assert.match(bash.stdout, /"sandbox"\) words="create list get exec stop wake delete rm ssh snapshot/);
    assert.match(ok(await cli(["completion", "zsh"])).stdout, /compdef _warren warren/);
    const help = ok(await cli(["volume", "push", "--help"]));
    assert.match(help.stdout, /Example:\n {2}\$ warren volume push/);
    ok(await cli(["sandbox", "delete", "cli-main"]));
  });
});

describe("warren sandbox ssh through the SSH gateway [pglite, local runtime]", () => {
  let api: ApiServer;
  let home: string;
  before(async () => {
    api = await startApiServer("pglite", { runtime: "cli-ssh", ssh: true });
    home = await mkdtemp(path.join(os.tmpdir(), "warren-cli-ssh-home-"));
  });
  after(async () => {
    await api?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it("runs a command with the stock ssh, logged in with a short-lived SSH token the CLI asks for", async () => {
    const cli = (args: string[], stdin?: string) => runCli(args, { home, ...(stdin ? { stdin } : {}) });
    const login = await cli(["login", "--url", api.url, "--api-key-stdin"], `${api.t.orgA.keys.owner}\n`);
    assert.equal(login.code, 0, login.stderr);
    const created = await cli(["sandbox", "create", "--name", "cli-ssh", "--json", "--", "sleep", "3600"]);
    assert.equal(created.code, 0, created.stderr);
    const res = await cli(["sandbox", "ssh", "cli-ssh", "--", "echo", "via-ssh;", "exit", "7"]);
    assert.equal(res.stdout, "via-ssh\n", res.stderr);
    assert.equal(res.code, 7, "the remote command's exit code");
    assert.ok(!res.stderr.includes(api.t.orgA.keys.owner), "the API key is not the password");
    assert.equal((await cli(["sandbox", "delete", "cli-ssh"])).code, 0);
  });
});
