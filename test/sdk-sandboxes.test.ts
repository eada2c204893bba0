// The SDK's Sandbox handle on real runc sandboxes (local runtime, throwaway registry):
// create and wait, the three exec outcomes, files (binary, over the file API), a lost
// exec answer retried under one Idempotency-Key runs once, stop/wake, snapshot and restore,
// get by name, list, typed errors, and `await using` deleting the sandbox.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import {
  NotFoundError,
  type Sandbox,
  SandboxNotRunningError,
  toArray,
  Warren,
  WarrenApiError,
} from "../packages/sdk/src/index.js";
import { type ApiServer, type FaultyProxy, startApiServer, startFaultyProxy } from "./support/sdk-server.js";

describe("SDK sandboxes [pglite, local runtime]", () => {
  let api: ApiServer;
  let proxy: FaultyProxy;
  let warren: Warren;
  let sbx: Sandbox;

  before(async () => {
    api = await startApiServer("pglite", { runtime: "sdk" });
    proxy = await startFaultyProxy(api.url);
    warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url, retryBaseDelayMs: 20 });
  });
  after(async () => {
    await proxy?.close();
    await api?.close();
  });

  it("creates a sandbox and waits until it is running, showing the states on the way", async () => {
    const states: string[] = [];
    sbx = await warren.sandboxes.create(
      { name: "sdk-main", command: ["sleep", "3600"], network_access: "none" },
      { onState: (state) => states.push(state) },
    );
    assert.equal(sbx.state, "running");
    assert.equal(states.at(-1), "running");
    assert.match(sbx.id, /^sbx-[0-9a-f]{40}$/);
    assert.ok(sbx.runId, "the ambient run");
    const byName = await warren.sandboxes.get("sdk-main");
    assert.equal(byName.id, sbx.id);
  });

  it("answers the three exec outcomes as a discriminated union", async () => {
    const lines: string[] = [];
    const done = await sbx.exec(["sh", "-c", "echo out; echo err >&2; exit 3"], { onStdout: (t) => lines.push(t) });
    assert.equal(done.kind, "completed");
    if (done.kind === "completed") assert.equal(done.exit, 3);
    assert.equal(done.stdout, "out\n");
    assert.equal(done.stderr, "err\n");
    assert.deepEqual(lines, ["out\n"]);
    const slow = await sbx.exec(["sh", "-c", "echo partial; sleep 30"], { timeoutSeconds: 1 });
    assert.equal(slow.kind, "timed_out");
    assert.equal(slow.stdout, "partial\n");
    assert.ok(!("exit" in slow));
  });

  it("retries an exec whose answer was lost under the same Idempotency-Key: the command runs once", async () => {
    const client = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: proxy.url, retryBaseDelayMs: 20 });
    const handle = await client.sandboxes.get(sbx.id);
    proxy.dropNextAfterRequest(":exec");
    const result = await handle.exec(["sh", "-c", "echo run >> /tmp/count; wc -l < /tmp/count"]);
    assert.equal(proxy.seen.filter((line) => line.includes(":exec")).length, 2, "sent twice");
    assert.equal(result.kind, "completed");
    assert.equal(result.stdout.trim(), "1", "the retry replayed the recorded outcome");
    const count = await sbx.exec(["wc", "-l", "/tmp/count"]);
    assert.match(count.stdout, /^\s*1 /, "and the file has one line");
  });

  it("reads, writes and lists files (binary, larger than one exec's argument)", async () => {
    const blob = randomBytes(300_000);
    await sbx.files.write("/workspace/blob.bin", blob);
    await sbx.files.write("/workspace/note.txt", "hello\nwarren\n");
    assert.ok((await sbx.files.read("/workspace/blob.bin")).equals(blob));
    assert.equal(await sbx.files.readText("/workspace/note.txt"), "hello\nwarren\n");
    const entries = await sbx.files.list("/workspace");
    const names = entries.map((e) => `${e.name}:${e.type}:${e.size}`);
    assert.ok(names.includes("blob.bin:file:300000"), names.join());
    assert.ok(names.includes("note.txt:file:13"), names.join());
    await assert.rejects(sbx.files.read("/workspace/missing"), NotFoundError);
  });

  it("stops and wakes; exec on a stopped sandbox is SandboxNotRunningError; files survive", async () => {
    await sbx.stop();
    assert.equal(sbx.state, "stopped");
    const error = await sbx.exec(["true"]).catch((e: unknown) => e);
    assert.ok(error instanceof SandboxNotRunningError, String(error));
    assert.equal(error.status, 409);
    await sbx.wake();
    assert.equal(sbx.state, "running");
    assert.equal(await sbx.files.readText("/workspace/note.txt"), "hello\nwarren\n");
  });

  it("snapshots and restores into a new sandbox holding the files; lists both; await using deletes", async () => {
    const snap = await sbx.snapshot({ name: "sdk-snap" });
    assert.ok(snap.snapshot_id);
    const listed = await toArray(warren.snapshots.list());
    assert.ok(listed.some((s) => s.id === snap.snapshot_id && s.name === "sdk-snap"));
    let restoredId = "";
    {
      await using restored = await warren.sandboxes.fromSnapshot(snap.snapshot_id, { command: ["sleep", "3600"] });
      restoredId = restored.id;
      assert.equal(restored.state, "running");
      assert.equal(await restored.files.readText("/workspace/note.txt"), "hello\nwarren\n");
      const ids = [];
      for await (const s of warren.sandboxes.list()) ids.push(s.id);
      assert.ok(ids.includes(sbx.id) && ids.includes(restoredId));
    }
    const gone = await warren.sandboxes.get(restoredId);
    assert.ok(["terminating", "terminated"].includes(gone.state as string), String(gone.state));
    const inUse = await warren.snapshots.delete(snap.snapshot_id).catch((e: unknown) => e);
    assert.ok(inUse === undefined || inUse instanceof WarrenApiError, String(inUse));
  });

  it("another organization's sandbox is NotFoundError; delete then waits for terminated", async () => {
    const theirs = new Warren({ apiKey: api.t.orgB.keys.owner, baseUrl: api.url });
    await assert.rejects(theirs.sandboxes.get(sbx.id), NotFoundError);
    await sbx.delete();
    await sbx.waitUntil("terminated", { timeoutSeconds: 60 });
    await assert.rejects(sbx.delete(), NotFoundError);
  });
});

describe("the README's SDK walkthrough [pglite, local runtime]", () => {
  let api: ApiServer;
  before(async () => {
    api = await startApiServer("pglite", { runtime: "sdk-walk" });
  });
  after(async () => {
    await api?.close();
  });

  it("runs packages/sdk/examples/walkthrough.ts to the end and leaves no sandbox running", async () => {
    // Not spawnSync: the server runs in this process.
    const { spawn } = await import("node:child_process");
    const child = spawn(process.execPath, ["--import", "tsx", "packages/sdk/examples/walkthrough.ts"], {
      env: { PATH: process.env.PATH ?? "", WARREN_API_URL: api.url, WARREN_API_KEY: api.t.orgA.keys.owner },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const res = { stdout: "", stderr: "", status: null as number | null };
    child.stdout.on("data", (chunk) => {
      res.stdout += chunk;
    });
    child.stderr.on("data", (chunk) => {
      res.stderr += chunk;
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), 180_000);
    res.status = await new Promise<number | null>((resolve) => child.once("close", resolve));
    clearTimeout(timer);
    assert.equal(res.status, 0, `stdout: ${res.stdout}\nstderr: ${res.stderr}`);
    assert.match(res.stdout, /exit 0 Linux/);
    assert.match(res.stdout, /restored: hello/);
    assert.match(res.stdout, /version_digest/);
    assert.match(res.stdout, /event sandbox\.state_changed/);
    const warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url });
    const states = [];
    for await (const s of warren.sandboxes.list()) states.push(s.state);
    assert.ok(states.length === 2 && states.every((s) => s === "terminating" || s === "terminated"), states.join());
  });
});
