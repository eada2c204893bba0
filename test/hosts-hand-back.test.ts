// The owner's hand-back of a sandbox it refuses at start (docs/hosts.md "Placement",
// controllers/hand-back.ts), on both stores: host A is a real server (runc driver); B and C
// are rows of the registry with a fresh heartbeat (no process runs their sandboxes: these
// tests read which host each row is moved to). The hand-back moves the row to a host that
// has not refused it, at that host's epoch, recording the refusal; each host is tried once and
// at most three placements are made; a host that no longer owns the row moves nothing; with
// no other host the sandbox is left to fail as on one host.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { type HandBackDeps, handBack } from "../src/controllers/hand-back.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { HostGate } from "../src/modules/hosts/membership.js";
import * as repo from "../src/modules/sandboxes/repo.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";

const HOST_A = "h_a2000000000000000000000a";
const HOST_B = "h_b2000000000000000000000b";
const HOST_C = "h_c2000000000000000000000c";
const OTHER_EPOCH = 7;

for (const store of STORE_KINDS) {
  describe(`hand-back of a refused sandbox [${store}]`, () => {
    let fixture: RuntimeFixture;
    let a: TestApp;
    const defaults = loadConfig({});
    const sandbox = { ...defaults.sandbox, memoryMiB: 128 };

    before(async () => {
      fixture = await startRuntimeFixture(`hand-back-${store}`);
      sandbox.defaultImage = fixture.busyboxRef;
      a = await startTestApp(store, { overrides: { runtime: fixture.driver, hostId: HOST_A }, config: { sandbox } });
    });
    after(async () => {
      await a?.close();
      await fixture?.cleanup();
    });

    const setHost = async (id: string) => {
      const compute = fixture.driver.hostCompute();
      await a.c.db.query(
        `INSERT INTO hosts (id, role, state, epoch, capacity, heartbeat_at)
         VALUES ($1, 'all', 'ready', $2, $3::jsonb, now())
         ON CONFLICT (id) DO UPDATE SET state = 'ready', heartbeat_at = now()`,
        [id, OTHER_EPOCH, JSON.stringify({ cpu_millis: compute.cpuMillis, memory_mib: compute.memoryMiB })],
      );
    };
    /** The gate of another host's process (its id at its epoch), as its reconciler hands back. */
    const gateOf = (hostId: string): HostGate => ({
      id: hostId,
      owner: () => ({ hostId, epoch: OTHER_EPOCH }),
      canAct: () => true,
    });
    const deps = (host: HostGate): HandBackDeps => ({
      db: a.c.db,
      clock: a.c.clock,
      log: a.c.log,
      driver: fixture.driver,
      identity: a.c.identity,
      transitions: a.c.sandboxTransitions,
      host,
      placement: { policy: { memoryOvercommit: 2, cpuOvercommit: 8 }, mode: "local_first" },
    });
    const selfGate = () => a.c.host as HostGate;
    /** A sandbox row of A on its way to its first start (nothing runs it: no reconciler here). */
    const refusedOnA = async () => {
      const res = await a.request("POST", "/v1/sandboxes", {
        key: a.orgA.keys.owner,
        body: { command: ["sleep", "3600"], network_access: "none" },
      });
      assert.equal(res.status, 200, res.raw);
      const id = res.body.id as string;
      await a.c.db.query("UPDATE sandboxes SET state = 'materializing' WHERE id = $1", [id]);
      return id;
    };
    const stored = async (id: string) =>
      (
        await a.c.db.query<{ host_id: string; host_epoch: number; state: string; refused_hosts: string[] }>(
          "SELECT host_id, host_epoch, state, refused_hosts FROM sandboxes WHERE id = $1",
          [id],
        )
      ).rows[0];
    const row = async (id: string) => (await repo.getSandbox(a.c.db, id)) as repo.SandboxRow;
    const refusalEvents = async (id: string) =>
      (
        await a.c.db.query<{ payload: { reason: string; placement: number } }>(
          "SELECT payload FROM events WHERE name = 'sandbox.placement_refused' AND payload->>'sandbox_id' = $1 ORDER BY ts_wall_ns",
          [id],
        )
      ).rows.map((r) => r.payload);

    beforeEach(async () => {
      await a.c.db.query("UPDATE sandboxes SET state = 'terminated', desired_state = 'deleted', finished_at = now()");
      await a.c.db.query("DELETE FROM hosts WHERE id <> $1", [HOST_A]);
    });

    it("with no other host, nothing is moved: the sandbox fails as on one host", async () => {
      const id = await refusedOnA();
      assert.equal(await handBack(deps(selfGate()), await row(id), "storage_exhausted"), false);
      const after = await stored(id);
      assert.equal(after?.host_id, HOST_A);
      assert.deepEqual(after?.refused_hosts, []);
      assert.deepEqual(await refusalEvents(id), []);
    });

    it("each host is tried once; the refusal that ends the third placement is not handed back", async () => {
      await setHost(HOST_B);
      await setHost(HOST_C);
      const id = await refusedOnA();
      assert.equal(await handBack(deps(selfGate()), await row(id), "image_unavailable"), false, "not a refusal");
      assert.equal((await stored(id))?.host_id, HOST_A);

      assert.equal(await handBack(deps(selfGate()), await row(id), "storage_exhausted"), true);
      const first = await stored(id);
      assert.ok(first?.host_id === HOST_B || first?.host_id === HOST_C, JSON.stringify(first));
      assert.equal(first?.host_epoch, OTHER_EPOCH);
      assert.equal(first?.state, "materializing");
      assert.deepEqual(first?.refused_hosts, [HOST_A]);

      // A no longer owns it: its hand-back (a late or repeated one) moves nothing.
      assert.equal(await handBack(deps(selfGate()), await row(id), "storage_exhausted"), false);
      assert.deepEqual(await stored(id), first);

      const second = first?.host_id as string;
      assert.equal(await handBack(deps(gateOf(second)), await row(id), "storage_exhausted"), true);
      const moved = await stored(id);
      const third = second === HOST_B ? HOST_C : HOST_B;
      assert.equal(moved?.host_id, third, "the one host that has not refused it");
      assert.deepEqual(moved?.refused_hosts, [HOST_A, second]);

      // The third placement refused: no fourth, whatever hosts are left (A is ready again).
      assert.equal(await handBack(deps(gateOf(third)), await row(id), "storage_exhausted"), false);
      assert.deepEqual(await stored(id), moved);
      assert.deepEqual(await refusalEvents(id), [
        { sandbox_id: id, reason: "storage_exhausted", placement: 1 },
        { sandbox_id: id, reason: "storage_exhausted", placement: 2 },
      ]);
    });

    it("a sandbox deleted meanwhile is not moved", async () => {
      await setHost(HOST_B);
      const id = await refusedOnA();
      const seen = await row(id);
      await a.c.db.query("UPDATE sandboxes SET desired_state = 'deleted' WHERE id = $1", [id]);
      assert.equal(await handBack(deps(selfGate()), seen, "storage_exhausted"), false);
      assert.equal((await stored(id))?.host_id, HOST_A);
    });
  });
}
