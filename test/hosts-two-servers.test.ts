// Two servers as two hosts on one store (issue 25's "Why", in one process): host A runs a
// real runc sandbox; host B, with a runtime root of its own, starts beside it. B's start-up
// pass must leave A's sandbox and A's in-flight keyed exec alone; an exec through B is routed
// to A (A's internal API), runs there and is recorded by A (a keyed retry through either replays);
// stop, wake and delete through B are carried out by A's reconciler; a quarantine written
// through B is seen by A's next exec; a snapshot, a network switch and a growth through B are A's;
// A declared dead by B is fenced, re-joins and removes the container of its host_lost sandbox.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { type Container, createApp, createContainer } from "../src/container.js";
import { HostSweeper } from "../src/controllers/host-sweeper.js";
import { startControllers } from "../src/controllers/index.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { FsBlobStore } from "../src/drivers/blobs/fs.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { App } from "../src/http/types.js";
import { createLogger } from "../src/lib/logger.js";
import { Keyring } from "../src/modules/secrets/keyring.js";
import { STORE_KINDS, startTestApp, type TestApp, type TestResponse } from "./harness.js";
import { eventually } from "./support/eventually.js";

const HOST_A = "h_a0000000000000000000000a";
const HOST_B = "h_b0000000000000000000000b";

for (const store of STORE_KINDS) {
  describe(`two hosts on one store [${store}]`, () => {
    let fixtureA: RuntimeFixture;
    let fixtureB: RuntimeFixture;
    let a: TestApp;
    let reconcilerA: SandboxReconciler;
    let b: Container;
    let appB: App;
    let controllersB: { stop(): Promise<void> } | null = null;
    let id = "";
    let blobDir = "";
    const owner = () => a.orgA.keys.owner;

    before(async () => {
      fixtureA = await startRuntimeFixture(`hosts-a-${store}`);
      fixtureB = await startRuntimeFixture(`hosts-b-${store}`);
      const keyring = Keyring.ephemeral();
      const defaults = loadConfig({});
      const sandbox = { ...defaults.sandbox, defaultImage: fixtureA.busyboxRef, memoryMiB: 128, pids: 128 };
      a = await startTestApp(store, {
        overrides: { runtime: fixtureA.driver, keyring, hostId: HOST_A },
        config: { sandbox, internalListen: { host: "127.0.0.1", port: 0 } },
      });
      reconcilerA = new SandboxReconciler(a.c, fixtureA.driver, { pids: 128, retentionSeconds: 3600 });
      await reconcilerA.start();
      blobDir = await mkdtemp(path.join(os.tmpdir(), "warren-hosts-blobs-"));
      const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
      b = await createContainer(
        {
          ...defaults,
          authCacheTtlMs: 0,
          egress: { ...defaults.egress, gatewayPort: 0 },
          sandbox,
          internalListen: { host: "127.0.0.1", port: 0 },
        },
        createLogger("info", silent),
        {
          db: a.c.db,
          keyring,
          runtime: fixtureB.driver,
          hostId: HOST_B,
          blobs: await FsBlobStore.open({ dir: blobDir, signingKey: randomBytes(32), publicBaseUrl: "http://x" }),
          processMetrics: false,
        },
      );
      appB = await createApp(b);
    });

    after(async () => {
      await controllersB?.stop();
      await reconcilerA?.stop();
      // B's app closes its own services and host membership; the store is A's, closed with A.
      await appB?.close();
      await a?.close();
      if (blobDir) await rm(blobDir, { recursive: true, force: true });
      await fixtureB?.cleanup();
      await fixtureA?.cleanup();
    });

    const through = async (
      server: "a" | "b",
      method: string,
      url: string,
      body?: unknown,
      headers: Record<string, string> = {},
    ): Promise<TestResponse> => {
      if (server === "a") return a.request(method, url, { key: owner(), headers, ...(body ? { body } : {}) });
      const res = await appB.inject({
        method: method as "GET",
        url,
        headers: { authorization: `Bearer ${owner()}`, ...headers },
        ...(body ? { payload: body as object } : {}),
      });
      return {
        status: res.statusCode,
        headers: res.headers,
        body: res.body ? JSON.parse(res.body) : {},
        raw: res.body,
      };
    };
    const waitFor = async (state: string) => {
      const res = await through("a", "GET", `/v1/sandboxes/${id}?wait_state=${state}&wait_timeout_seconds=25`);
      assert.equal(res.status, 200, res.raw);
      assert.equal((res.body.sandbox as { state: string }).state, state, res.raw);
    };
    const execRecords = async (key: string) =>
      (
        await a.c.db.query<{ outcome: string; host_id: string | null }>(
          "SELECT outcome, host_id FROM sandbox_execs WHERE sandbox_id = $1 AND idempotency_key = $2",
          [id, key],
        )
      ).rows;

    it("a sandbox created through A is A's: its row names host A at A's epoch", async () => {
      const res = await through("a", "POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" });
      assert.equal(res.status, 200, res.raw);
      id = res.body.id as string;
      await waitFor("running");
      const { rows } = await a.c.db.query<{ host_id: string; host_epoch: number }>(
        "SELECT host_id, host_epoch FROM sandboxes WHERE id = $1",
        [id],
      );
      assert.deepEqual(rows[0], { host_id: HOST_A, host_epoch: a.c.host?.owner().epoch });
    });

    it("B's start-up leaves A's running sandbox and A's in-flight keyed exec alone", async () => {
      const gate = "/tmp/hosts-test-go";
      const blocked = through(
        "a",
        "POST",
        `/v1/sandboxes/${id}:exec`,
        { cmd: ["sh", "-c", `while [ ! -e ${gate} ]; do sleep 0.1; done; echo released`] },
        { "idempotency-key": "held-exec" },
      );
      await eventually("the keyed exec's record", async () => (await execRecords("held-exec")).length === 1);
      controllersB = await startControllers(b);
      // Whatever B's start-up kicked has been reconciled.
      await b.reconcileQueue.idle();
      assert.deepEqual(await execRecords("held-exec"), [{ outcome: "running", host_id: HOST_A }]);
      const release = await through("a", "POST", `/v1/sandboxes/${id}:exec`, { cmd: ["touch", gate] });
      assert.equal(release.status, 200, release.raw);
      const done = await blocked;
      assert.equal(done.status, 200, done.raw);
      assert.equal(done.body.stdout, "released\n");
      assert.deepEqual(await execRecords("held-exec"), [{ outcome: "completed", host_id: HOST_A }]);
      const sandbox = await through("a", "GET", `/v1/sandboxes/${id}`);
      assert.equal((sandbox.body.sandbox as { state: string }).state, "running", sandbox.raw);
      assert.deepEqual(await fixtureB.driver.list(), []);
    });

    it("an exec through B runs in A's sandbox on A; a keyed one is A's record and replays through A and B", async () => {
      const marker = await through("a", "POST", `/v1/sandboxes/${id}:exec`, {
        cmd: ["sh", "-c", "echo only-in-this-sandbox > /tmp/marker"],
      });
      assert.equal(marker.status, 200, marker.raw);
      const plain = await through("b", "POST", `/v1/sandboxes/${id}:exec`, { cmd: ["cat", "/tmp/marker"] });
      assert.equal(plain.status, 200, plain.raw);
      assert.equal(plain.body.stdout, "only-in-this-sandbox\n");
      assert.deepEqual(plain.body.exit, 0);
      const body = { cmd: ["sh", "-c", "echo ran >> /tmp/routed-runs; echo ran on A"] };
      const ran = await through("b", "POST", `/v1/sandboxes/${id}:exec`, body, { "idempotency-key": "k-moved" });
      assert.equal(ran.status, 200, ran.raw);
      assert.equal(ran.body.stdout, "ran on A\n");
      // Claimed and recorded by the owner, never by the server it came through.
      assert.deepEqual(await execRecords("k-moved"), [{ outcome: "completed", host_id: HOST_A }]);
      for (const server of ["a", "b"] as const) {
        const replayed = await through(server, "POST", `/v1/sandboxes/${id}:exec`, body, {
          "idempotency-key": "k-moved",
        });
        assert.equal(replayed.status, 200, replayed.raw);
        assert.equal(replayed.body.stdout, "ran on A\n");
      }
      const runs = await through("a", "POST", `/v1/sandboxes/${id}:exec`, { cmd: ["cat", "/tmp/routed-runs"] });
      assert.equal(runs.body.stdout, "ran\n", "the keyed command ran exactly once");
      // B's runtime never ran anything.
      assert.deepEqual(await fixtureB.driver.list(), []);
    });

    it("a keyed exec through B still running on A: a retry through B waits for A's outcome", async () => {
      const body = { cmd: ["sh", "-c", "sleep 1; echo slow >> /tmp/slow-runs; echo done"] };
      const key = { "idempotency-key": "k-slow" };
      const first = through("b", "POST", `/v1/sandboxes/${id}:exec`, body, key);
      await eventually("the keyed exec claimed on A", async () => (await execRecords("k-slow")).length === 1, 10_000);
      const retried = await through("b", "POST", `/v1/sandboxes/${id}:exec`, body, key);
      assert.equal(retried.status, 200, retried.raw);
      assert.equal(retried.body.stdout, "done\n");
      assert.equal((await first).body.stdout, "done\n");
      const runs = await through("a", "POST", `/v1/sandboxes/${id}:exec`, { cmd: ["cat", "/tmp/slow-runs"] });
      assert.equal(runs.body.stdout, "slow\n", "the keyed command ran exactly once");
    });

    it("a snapshot and a network switch through B are carried out by A", async () => {
      const snapshot = await through("b", "POST", `/v1/sandboxes/${id}:snapshot`, {});
      assert.equal(snapshot.status, 200, snapshot.raw);
      const snapshotId = snapshot.body.snapshot_id as string;
      const rows = await a.c.db.query<{ state: string; host_id: string }>(
        "SELECT state, host_id FROM sandbox_snapshots WHERE id = $1",
        [snapshotId],
      );
      assert.deepEqual(rows.rows, [{ state: "sealed", host_id: HOST_A }]);
      assert.ok(await fixtureA.driver.localSnapshot(snapshotId), "A holds the local copy");
      assert.equal(await fixtureB.driver.localSnapshot(snapshotId), null);
      const network = await through("b", "PATCH", `/v1/sandboxes/${id}`, { network_access: "public" });
      assert.equal(network.status, 200, network.raw);
      const receipt = network.body.network_access_receipt as { network_access: string };
      assert.equal(receipt.network_access, "public", network.raw);
      const after = await through("b", "GET", `/v1/sandboxes/${id}`);
      assert.equal((after.body.sandbox as { network_access: string }).network_access, "public", after.raw);
      const back = await through("b", "PATCH", `/v1/sandboxes/${id}`, { network_access: "none" });
      assert.equal(back.status, 200, back.raw);
    });

    it("a workspace growth through B is applied by A", async () => {
      const res = await through("a", "POST", "/v1/sandboxes", {
        command: ["sleep", "3600"],
        network_access: "none",
        storage_class: "durable",
        workspace_capacity_gib: 1,
      });
      assert.equal(res.status, 200, res.raw);
      const durable = res.body.id as string;
      const running = await through("a", "GET", `/v1/sandboxes/${durable}?wait_state=running&wait_timeout_seconds=25`);
      assert.equal((running.body.sandbox as { state: string }).state, "running", running.raw);
      const grown = await through("b", "PATCH", `/v1/sandboxes/${durable}`, { workspace_capacity_gib: 2 });
      if (grown.status !== 200) {
        // A host that cannot grow a mounted filesystem refuses a running sandbox's growth the same way on one host.
        assert.equal(grown.body.code, "operation_conflict", grown.raw);
      } else {
        const row = await a.c.db.query<{ workspace_capacity_gib: number }>(
          "SELECT workspace_capacity_gib FROM sandboxes WHERE id = $1",
          [durable],
        );
        assert.equal(row.rows[0]?.workspace_capacity_gib, 2);
      }
      const removed = await through("a", "DELETE", `/v1/sandboxes/${durable}`);
      assert.equal(removed.status, 202, removed.raw);
      const gone = await through("a", "GET", `/v1/sandboxes/${durable}?wait_state=terminated&wait_timeout_seconds=25`);
      assert.equal((gone.body.sandbox as { state: string }).state, "terminated", gone.raw);
    });

    it("a quarantine written through B is seen by A's next exec", async () => {
      const warm = await through("a", "POST", `/v1/sandboxes/${id}:exec`, { cmd: ["true"] });
      assert.equal(warm.status, 200, warm.raw);
      await b.sandboxes.setQuarantine(id, true, "seen by every host");
      const refused = await through("a", "POST", `/v1/sandboxes/${id}:exec`, { cmd: ["true"] });
      assert.equal(refused.status, 409, refused.raw);
      assert.equal(refused.body.code, "quarantined");
      await b.sandboxes.setQuarantine(id, false, "");
    });

    it("stop, wake and delete through B are carried out by A's reconciler", async () => {
      const stop = await through("b", "PATCH", `/v1/sandboxes/${id}`, { state: "stopped" });
      assert.equal(stop.status, 200, stop.raw);
      await waitFor("stopped");
      assert.equal((await fixtureA.driver.observe(id)).status, "stopped");
      const wake = await through("b", "PATCH", `/v1/sandboxes/${id}`, { state: "running" });
      assert.equal(wake.status, 200, wake.raw);
      await waitFor("running");
      const exec = await through("a", "POST", `/v1/sandboxes/${id}:exec`, { cmd: ["echo", "awake"] });
      assert.equal(exec.body.stdout, "awake\n", exec.raw);
      const removed = await through("b", "DELETE", `/v1/sandboxes/${id}`);
      assert.equal(removed.status, 202, removed.raw);
      await waitFor("terminated");
      assert.deepEqual(await fixtureA.driver.list(), []);
    });

    it("a create through B while B is cordoned is placed on A, whose reconciler runs it", async () => {
      await a.c.db.query("UPDATE hosts SET state = 'cordoned' WHERE id = $1", [HOST_B]);
      try {
        const res = await through("b", "POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" });
        assert.equal(res.status, 200, res.raw);
        const placed = res.body.id as string;
        const { rows } = await a.c.db.query<{ host_id: string; host_epoch: number }>(
          "SELECT host_id, host_epoch FROM sandboxes WHERE id = $1",
          [placed],
        );
        assert.deepEqual(rows[0], { host_id: HOST_A, host_epoch: a.c.host?.owner().epoch });
        const running = await through("a", "GET", `/v1/sandboxes/${placed}?wait_state=running&wait_timeout_seconds=25`);
        assert.equal((running.body.sandbox as { state: string }).state, "running", running.raw);
        assert.equal((await through("a", "DELETE", `/v1/sandboxes/${placed}`)).status, 202);
        const gone = await through("a", "GET", `/v1/sandboxes/${placed}?wait_state=terminated&wait_timeout_seconds=25`);
        assert.equal((gone.body.sandbox as { state: string }).state, "terminated", gone.raw);
        assert.deepEqual(await fixtureA.driver.list(), []);
      } finally {
        await a.c.db.query("UPDATE hosts SET state = 'ready' WHERE id = $1", [HOST_B]);
      }
    });

    it("A declared dead by B: its sandbox is host_lost; A, fenced, re-joins and removes the container", async () => {
      const res = await through("a", "POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" });
      assert.equal(res.status, 200, res.raw);
      id = res.body.id as string;
      await waitFor("running");
      assert.deepEqual(await fixtureA.driver.list(), [id]);
      // A goes silent past the dead grace (its heartbeats stopped, the last one moved back, not waited for).
      const hostA = a.c.host;
      assert.ok(hostA);
      await hostA.stop();
      await a.c.db.query("UPDATE hosts SET heartbeat_at = now() - interval '5 minutes' WHERE id = $1", [HOST_A]);
      // B's own sweeper may judge first: either way A ends dead once.
      await new HostSweeper(b, { retentionSeconds: 3600 }).pass();
      const row = await a.c.db.query<{ state: string }>("SELECT state FROM hosts WHERE id = $1", [HOST_A]);
      assert.equal(row.rows[0]?.state, "dead");
      const lost = await through("b", "GET", `/v1/sandboxes/${id}`);
      const sandbox = lost.body.sandbox as { state: string; state_reason?: { code: string } };
      assert.equal(sandbox.state, "failed", lost.raw);
      assert.equal(sandbox.state_reason?.code, "host_lost");
      // Its container still runs on A, which has not noticed; A's next heartbeat fences it.
      assert.equal(await hostA.beat(), false);
      assert.equal(hostA.canAct(), false);
      assert.deepEqual(await fixtureA.driver.list(), [id]);
      await hostA.join();
      await reconcilerA.rejoined();
      assert.deepEqual(await fixtureA.driver.list(), []);
      const after = await through("a", "GET", `/v1/sandboxes/${id}`);
      assert.equal((after.body.sandbox as { state: string }).state, "failed", after.raw);
    });
  });
}
