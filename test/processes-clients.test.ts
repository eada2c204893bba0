// The clients of background processes on a real sandbox: the SDK's sandbox.processes (start,
// the Process handle's output iterator, stdin.write, wait, kill, a handle again by id that
// reads on from an offset) and the CLI's `warren sandbox start|ps|attach|kill`.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { NotFoundError, type Sandbox, Warren } from "../packages/sdk/src/index.js";
import { type CliResult, runCli } from "./support/cli.js";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";

describe("process clients [pglite, local runtime]", () => {
  let api: ApiServer;
  let warren: Warren;
  let sbx: Sandbox;
  let home: string;
  const ok = (res: CliResult) => {
    assert.equal(res.code, 0, `exit ${res.code}\nstdout: ${res.stdout}\nstderr: ${res.stderr}`);
    return res;
  };

  before(async () => {
    api = await startApiServer("pglite", { runtime: "procs-clients" });
    warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url, retryBaseDelayMs: 20 });
    sbx = await warren.sandboxes.create({ name: "procs", command: ["sleep", "3600"], network_access: "none" });
    home = await mkdtemp(path.join(os.tmpdir(), "warren-procs-cli-"));
    ok(await runCli(["login", "--url", api.url, "--api-key-stdin"], { home, stdin: `${api.t.orgA.keys.owner}\n` }));
  });
  after(async () => {
    await api?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it("starts a process, iterates its output, writes its stdin, waits for it and re-attaches by id", async () => {
    const proc = await sbx.processes.start(
      ["sh", "-c", "echo ready; while read line; do echo got $line; done; sleep 0.2; echo bye >&2"],
      {
        stdin: true,
      },
    );
    assert.equal(proc.state, "running");
    const seen: string[] = [];
    const iterator = proc.output();
    const first = await iterator.next();
    assert.ok(!first.done && first.value.type === "stdout");
    seen.push(first.value.data.toString());
    assert.equal(seen.join(""), "ready\n");
    assert.equal(await proc.stdin.write("one\n"), 4);
    await proc.stdin.write("two\n");
    await proc.stdin.close();
    for await (const chunk of { [Symbol.asyncIterator]: () => iterator }) {
      if (chunk.type !== "gap") seen.push(`${chunk.type === "stderr" ? "!" : ""}${chunk.data.toString()}`);
    }
    assert.equal(seen.join(""), "ready\ngot one\ngot two\n!bye\n");
    const ended = await proc.wait();
    assert.equal(ended.state, "exited");
    assert.equal(ended.exit_code, 0);
    // Another handle by id, reading on from an offset: the same bytes from there.
    const again = await sbx.processes.get(proc.id);
    assert.equal(again.record?.exit_code, 0);
    assert.equal(await again.outputText({ offset: 6 }), "got one\ngot two\nbye\n");
    const listed = await sbx.processes.list();
    assert.ok(listed.some((p) => p.id === proc.id));
    await assert.rejects(sbx.processes.get("proc_01jzzzzzzzzzzzzzzzzzzzzzzz"), NotFoundError);
  });

  it("kills a process, and times one out", async () => {
    const proc = await sbx.processes.start(["sleep", "600"]);
    const killed = await proc.kill();
    assert.equal(killed.id, proc.id);
    const ended = await proc.wait();
    assert.equal(ended.exit_code, 137);
    assert.equal(ended.end_reason, "killed");
    const timed = await sbx.processes.start(["sleep", "600"], { timeoutSeconds: 1 });
    assert.equal((await timed.wait()).end_reason, "timeout");
  });

  it("warren sandbox start, ps, attach and kill", async () => {
    const started = ok(
      await runCli(["sandbox", "start", "procs", "--", "sh", "-c", "echo out; sleep 0.2; echo err >&2; exit 3"], {
        home,
      }),
    );
    const id = started.stdout.trim();
    assert.match(id, /^proc_/);
    const attached = await runCli(["sandbox", "attach", "procs", id], { home });
    assert.equal(attached.code, 3, attached.stderr);
    assert.equal(attached.stdout, "out\n");
    assert.equal(attached.stderr, "err\n");
    const long = ok(await runCli(["sandbox", "start", "procs", "--", "sleep", "600"], { home })).stdout.trim();
    const ps = ok(await runCli(["sandbox", "ps", "procs"], { home }));
    assert.match(ps.stdout, new RegExp(`${long}\\s+running`));
    assert.doesNotMatch(ps.stdout, new RegExp(id));
    const all = JSON.parse(ok(await runCli(["sandbox", "ps", "procs", "--all", "--json"], { home })).stdout) as {
      id: string;
    }[];
    assert.ok(all.some((p) => p.id === id));
    ok(await runCli(["sandbox", "kill", "procs", long, "--signal", "SIGTERM"], { home }));
    const waited = await runCli(["sandbox", "attach", "procs", long], { home });
    assert.equal(waited.code, 143, waited.stderr);
  });
});
