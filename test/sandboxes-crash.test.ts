// Crash safety of the sandbox layer: the real server (src/main.ts, bundled as `make run`
// runs it) as a child process is
// killed with SIGKILL while sandboxes run, creates are in flight and an exec is running,
// then started again on the same data dir and runtime root. The restarted server must adopt
// the running sandboxes, finish (or fail with a reason) the interrupted creates, answer the
// interrupted exec as indeterminate under its Idempotency-Key, remove runtime state the
// store does not know, and after the deletes leave nothing on the host: no runc state,
// mount, cgroup, network namespace, veth, nftables rule or process of those sandboxes.
//
// This file runs on PGlite only: the server under test uses its default embedded store in
// its data dir (a kill -9 of the process holding PGlite is the crash that matters here).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { LocalRuntimeDriver } from "../src/drivers/runtime/local/driver.js";
import { run, TOOLS } from "../src/drivers/runtime/local/host.js";
import { Layout } from "../src/drivers/runtime/local/layout.js";
import { mountsUnder, readMounts } from "../src/drivers/runtime/local/mounts.js";
import { hostTraces, type RuntimeFixture, TEST_RESOURCES, vethsOf } from "../src/drivers/runtime/local/test-support.js";
import {
  type CrashRig,
  eventually,
  type Json,
  processesMentioning,
  type Reply,
  type ServerProcess,
  startCrashRig,
} from "./support/server-process.js";

describe("sandbox crash safety [pglite]", () => {
  let fixture: RuntimeFixture;
  let root = "";
  let server: ServerProcess;
  const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;

  const startServer = () => server.start();
  const stopServer = (signal: NodeJS.Signals) => server.stop(signal);
  const api = (method: string, url: string, body?: unknown, headers: Record<string, string> = {}) =>
    server.api(method, url, body, headers);
  const sandboxOf = (id: string, query = "") => server.sandbox(id, query);
  const waitFor = (id: string, state: string) => server.waitFor(id, state);
  const exec = (id: string, cmd: string[], extra: Json = {}, headers: Record<string, string> = {}) =>
    api("POST", `/v1/sandboxes/${id}:exec`, { cmd, ...extra }, headers);
  const stdoutOf = (res: Reply) => {
    assert.equal(res.status, 200, res.raw);
    assert.equal(res.body.exit, 0, res.raw);
    return res.body.stdout as string;
  };
  /** When the sandbox's first process started (field 22 of /proc/1/stat inside it). */
  const initStart = async (id: string) => stdoutOf(await exec(id, ["cat", "/proc/1/stat"])).split(" ")[21];

  let rig: CrashRig | undefined;
  before(async () => {
    rig = await startCrashRig("crash", apiKey, (busyboxRef) => ({
      WARREN_DEFAULT_IMAGE: busyboxRef,
      WARREN_SANDBOX_MEMORY_MB: "128",
      WARREN_SANDBOX_PIDS: "128",
      // What is checked here is what a clean shutdown leaves, not how fast it is: destroying
      // the pool's members takes well over the default 10 s on a loaded 2-core machine.
      WARREN_SHUTDOWN_TIMEOUT_MS: "180000",
    }));
    ({ fixture, root, server } = rig);
  });

  after(async () => {
    await rig?.cleanup();
  });

  const running: string[] = [];
  const inFlight: string[] = [];
  const starts = new Map<string, string | undefined>();
  let orphan = "";
  let execBody: Json = {};
  let interrupted: Promise<unknown> = Promise.resolve();
  let completed: Reply | null = null;
  let created: Reply | null = null;
  const createBody = { command: ["sleep", "3600"], name: "keyed", network_access: "none" };

  it("survives kill -9 while sandboxes run, creates are in flight and an exec runs", async (t) => {
    await startServer();
    for (const network_access of ["public", "none"]) {
      const res = await api("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access });
      assert.equal(res.status, 200, res.raw);
      running.push(res.body.id as string);
    }
    for (const id of running) {
      await waitFor(id, "running");
      starts.set(id, await initStart(id));
    }
    const [first] = running as [string];
    // Recorded outcomes from before the crash: a finished exec and a create, both keyed.
    completed = await exec(
      first,
      ["sh", "-c", "echo before >> /tmp/keyed-runs; echo done"],
      {},
      {
        "idempotency-key": "done-before-crash",
      },
    );
    assert.equal(completed.status, 200, completed.raw);
    created = await api("POST", "/v1/sandboxes", createBody, { "idempotency-key": "create-before-crash" });
    assert.equal(created.status, 200, created.raw);
    running.push(created.body.id as string);
    await waitFor(created.body.id as string, "running");
    starts.set(created.body.id as string, await initStart(created.body.id as string));

    execBody = {
      cmd: ["sh", "-c", "echo run >> /tmp/exec-runs; touch /tmp/exec-started; sleep 30; echo finished"],
      timeout_seconds: 120,
    };
    interrupted = api("POST", `/v1/sandboxes/${first}:exec`, execBody, { "idempotency-key": "crash-exec" }).then(
      (res) => res,
      (error: Error) => error,
    );
    await eventually(
      "the exec to start",
      async () => (await exec(first, ["test", "-e", "/tmp/exec-started"])).body.exit === 0,
    );

    // Creates caught at different points: two that got as far as materializing (or just
    // past it) and one accepted a moment before the kill.
    const createOne = async (n: number) => {
      const res = await api("POST", "/v1/sandboxes", {
        command: ["sleep", "3600"],
        name: `in-flight-${n}`,
        network_access: "none",
      });
      assert.equal(res.status, 200, res.raw);
      inFlight.push(res.body.id as string);
      return res.body.id as string;
    };
    const early = [await createOne(1), await createOne(2)];
    const seen = await eventually(
      "a create to be materializing",
      async () => {
        const states = await Promise.all(early.map(async (id) => (await sandboxOf(id)).state));
        return states.some((state) => state !== "requested" && state !== "reserved") ? states : null;
      },
      10_000,
    );
    await createOne(3);
    assert.equal(await stopServer("SIGKILL"), null, "killed, not exited");
    t.diagnostic(`creates at the kill: ${seen.join(", ")}, requested`);
    const lost = await interrupted;
    assert.ok(lost instanceof Error, "the exec's connection died with the server");

    // While the server is down, runtime state appears that the store knows nothing of.
    orphan = `sbx-${randomBytes(20).toString("hex")}`;
    const outsider = await LocalRuntimeDriver.open({ root, installPackages: false });
    try {
      const image = await outsider.prepareImage(fixture.busyboxRef);
      await outsider.create({
        id: orphan,
        source: { kind: "image", image },
        command: ["sleep", "3600"],
        resources: TEST_RESOURCES,
        storageClass: "standard",
        network: "none",
      });
      await outsider.start(orphan);
      assert.equal((await outsider.observe(orphan)).status, "running");
    } finally {
      await outsider.close();
    }
  });

  it("adopts the running sandboxes after a restart on the same data dir and root", async () => {
    await startServer();
    for (const id of running) {
      assert.equal((await sandboxOf(id)).state, "running");
      assert.equal(await initStart(id), starts.get(id), "the same first process: adopted, not restarted");
      assert.equal(stdoutOf(await exec(id, ["echo", "alive"])), "alive\n");
    }
  });

  it("answers the exec the crash interrupted as indeterminate under its Idempotency-Key", async () => {
    const [first] = running as [string];
    const replay = await exec(
      first,
      execBody.cmd as string[],
      { timeout_seconds: 120 },
      { "idempotency-key": "crash-exec" },
    );
    assert.equal(replay.status, 200, replay.raw);
    assert.deepEqual(replay.body, { indeterminate: {}, stdout: "", stderr: "", truncated: false });
    const again = await exec(
      first,
      execBody.cmd as string[],
      { timeout_seconds: 120 },
      { "idempotency-key": "crash-exec" },
    );
    assert.deepEqual(again.body, replay.body, "the same answer every time; the command is not run again");
    const other = await exec(first, ["true"], {}, { "idempotency-key": "crash-exec" });
    assert.equal(other.status, 409, other.raw);
    assert.equal(other.body.code, "idempotency_conflict");
    assert.equal(stdoutOf(await exec(first, ["cat", "/tmp/exec-runs"])), "run\n", "it ran once");

    const done = await exec(
      first,
      ["sh", "-c", "echo before >> /tmp/keyed-runs; echo done"],
      {},
      { "idempotency-key": "done-before-crash" },
    );
    assert.deepEqual(done.body, completed?.body, "a finished exec replays its recorded outcome after a restart");
    assert.equal(stdoutOf(await exec(first, ["cat", "/tmp/keyed-runs"])), "before\n", "and did not run again");
    const recreated = await api("POST", "/v1/sandboxes", createBody, { "idempotency-key": "create-before-crash" });
    assert.equal(recreated.status, 200, recreated.raw);
    assert.deepEqual(recreated.body, created?.body, "a keyed create replays the same id and run_id after a restart");
  });

  it("finishes the creates the crash interrupted, or fails them with a reason", async () => {
    for (const id of inFlight) {
      const settled = await eventually(
        `sandbox ${id} to settle`,
        async () => {
          const sandbox = await sandboxOf(id);
          return sandbox.state === "running" || sandbox.state === "failed" ? sandbox : null;
        },
        60_000,
      );
      if (settled.state === "failed") {
        assert.ok(settled.state_reason?.code, `failed with a reason: ${JSON.stringify(settled)}`);
      } else {
        assert.equal(stdoutOf(await exec(id, ["echo", "up"])), "up\n");
      }
    }
  });

  it("removes runtime state the store does not know", async () => {
    const layout = new Layout(root);
    await eventually("the orphan to be removed", async () => (await hostTraces(layout, orphan)).length === 0);
    assert.deepEqual(await processesMentioning(orphan), []);
  });

  it("leaves nothing on the host once the sandboxes are deleted", async () => {
    const all = [...running, ...inFlight];
    for (const id of all) {
      const res = await api("DELETE", `/v1/sandboxes/${id}`);
      assert.equal(res.status, 202, res.raw);
    }
    for (const id of all) await waitFor(id, "terminated");
    const layout = new Layout(root);
    for (const id of [...all, orphan].filter(Boolean)) {
      assert.deepEqual(await hostTraces(layout, id), [], `host traces of ${id}`);
      assert.deepEqual(await processesMentioning(id), [], `processes of ${id}`);
    }
    // The whole root is checked after the shutdown: while it runs, the server keeps started
    // sandboxes of the default shape in its pool (WARREN_SANDBOX_POOL_SIZE), and its
    // shutdown must remove them.
    assert.equal(await stopServer("SIGTERM"), 0, `a clean shutdown\n${server.log.slice(-4000)}`);
    assert.deepEqual(mountsUnder(await readMounts(), layout.sandboxesDir), [], "mounts under the root");
    assert.deepEqual(await vethsOf(layout), [], "veths of the root");
    const table = await run(TOOLS.nft, ["-a", "list", "table", "inet", layout.nftTable]).catch(() => "");
    assert.ok(!/warren:sbx-/.test(table), `nftables rules left:\n${table}`);
    assert.deepEqual(await readdir(layout.runcRoot), [], "runc state");
    assert.deepEqual(await processesMentioning(layout.runcRoot), [], "shims and runc calls of the root");
    assert.ok(!/warren failed to start|reconcile failed/.test(server.log), server.log);
  });
});
