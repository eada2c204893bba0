// The hosts registry (docs/hosts.md): a host id kept per data dir, joins that bump the
// epoch, heartbeats on the database clock, fencing when the epoch is gone, the self-fence
// lease, and the adoption of rows from before the registry by the first host only.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { createLogger } from "../src/lib/logger.js";
import { HostMembership, hostIdOf, leaseHeld } from "../src/modules/hosts/membership.js";
import * as hosts from "../src/modules/hosts/repo.js";
import type { Db } from "../src/store/db.js";
import { forEachStore, type TestApp } from "./harness.js";

const quiet = createLogger("silent");

function member(db: Db, id: string, clock?: { now: number }) {
  return new HostMembership(db, quiet, {
    id,
    role: "all",
    heartbeatIntervalMs: 60_000,
    leaseMs: 10_000,
    ...(clock ? { monotonicNow: () => clock.now } : {}),
  });
}

async function insertLegacySandbox(t: () => TestApp): Promise<string> {
  const sandbox = await t().c.db.query<{ id: string }>(
    `INSERT INTO sandboxes (id, org_id, project_id, image, workload_image, storage_class, placement_class, network_access,
       lineage_path, metadata, resources, desired_state, state, run_id, created_by, created_by_kind, created_by_key_id,
       created_at, updated_at)
     VALUES ('sbx-' || md5(random()::text) || '00000000', $1, $2, 'img', 'img', 'standard', 'standard', 'none',
       'x', '{}'::jsonb, '{"memory_mb":128,"cpu_millis":500}'::jsonb, 'running', 'running', 'run-none', '', '', '', now(), now())
     RETURNING id`,
    [t().orgA.id, t().orgA.defaultProjectId],
  );
  return sandbox.rows[0]?.id as string;
}

async function ownerOf(t: () => TestApp, id: string) {
  const { rows } = await t().c.db.query<{ host_id: string | null; host_epoch: number | null }>(
    "SELECT host_id, host_epoch FROM sandboxes WHERE id = $1",
    [id],
  );
  return rows[0];
}

describe("host id", () => {
  it("is made once per data dir and kept; another data dir gets another; junk is refused", async () => {
    const dirs = [
      await mkdtemp(path.join(os.tmpdir(), "warren-host-")),
      await mkdtemp(path.join(os.tmpdir(), "warren-host-")),
    ];
    try {
      const first = await hostIdOf(path.join(dirs[0] as string, "data"));
      assert.match(first, /^h_[0-9a-f]{24}$/);
      assert.equal(await hostIdOf(path.join(dirs[0] as string, "data")), first);
      assert.notEqual(await hostIdOf(dirs[1] as string), first);
      await writeFile(path.join(dirs[1] as string, "host-id"), "not an id\n");
      await assert.rejects(hostIdOf(dirs[1] as string), /does not hold a host id/);
    } finally {
      for (const dir of dirs) await rm(dir, { recursive: true, force: true });
    }
  });

  it("a lease holds from the send of its last renewal for less than its length", () => {
    assert.equal(leaseHeld(null, 0, 10), false);
    assert.equal(leaseHeld(100, 109, 10), true);
    assert.equal(leaseHeld(100, 110, 10), false);
  });
});

forEachStore(
  "hosts registry",
  (t) => {
    // First in the suite: the store has no host yet, as an upgraded single-host data dir.
    it("the first host adopts the rows from before the registry; a second host adopts nothing", async () => {
      const legacy = await insertLegacySandbox(t);
      const a = member(t().c.db, "h_a00000000000000000000001");
      const joined = await a.join();
      assert.equal(joined.adopted.sandboxes, 1);
      assert.deepEqual(await ownerOf(t, legacy), { host_id: a.id, host_epoch: joined.host.epoch });
      const later = await insertLegacySandbox(t);
      const b = member(t().c.db, "h_b00000000000000000000001");
      assert.equal((await b.join()).adopted.sandboxes, 0);
      assert.deepEqual(await ownerOf(t, later), { host_id: null, host_epoch: null });
      assert.deepEqual(await ownerOf(t, legacy), { host_id: a.id, host_epoch: joined.host.epoch });
      await a.stop();
      await b.stop();
    });

    it("a re-join bumps the epoch, moves the host's rows to it and fences the process of the old epoch", async () => {
      const old = member(t().c.db, "h_c00000000000000000000001");
      const first = await old.join();
      assert.equal(first.host.state, "ready");
      assert.equal(first.host.epoch, 1);
      const sandbox = await insertLegacySandbox(t);
      await t().c.db.query("UPDATE sandboxes SET host_id = $2, host_epoch = 1 WHERE id = $1", [sandbox, old.id]);
      let fenced = 0;
      old.onFenced(() => fenced++);
      assert.equal(old.canAct(), true);
      assert.equal(await old.beat(), true);

      const again = member(t().c.db, old.id);
      const second = await again.join();
      assert.equal(second.host.epoch, 2);
      assert.deepEqual(await ownerOf(t, sandbox), { host_id: old.id, host_epoch: 2 });
      assert.deepEqual(again.owner(), { hostId: old.id, epoch: 2 });

      assert.equal(await old.beat(), false);
      assert.equal(fenced, 1);
      assert.equal(old.canAct(), false);
      assert.equal(old.isFenced(), true);
      assert.equal(await again.beat(), true);
      assert.equal(again.canAct(), true);
      await old.stop();
      await again.stop();
    });

    it("heartbeats stamp the database's clock; an unreachable host that renews is ready again", async () => {
      const host = member(t().c.db, "h_d00000000000000000000001");
      await host.join();
      await t().c.db.query(
        "UPDATE hosts SET heartbeat_at = now() - interval '1 hour', state = 'unreachable' WHERE id = $1",
        [host.id],
      );
      assert.equal(await host.beat(), true);
      const { rows } = await t().c.db.query<{ state: string; age: number }>(
        "SELECT state, extract(epoch FROM now() - heartbeat_at)::float8 AS age FROM hosts WHERE id = $1",
        [host.id],
      );
      assert.equal(rows[0]?.state, "ready");
      assert.ok((rows[0]?.age ?? 99) < 60, `heartbeat ${rows[0]?.age} s old`);
      await host.stop();
    });

    it("a host declared dead (its epoch bumped by another) is fenced at its next heartbeat", async () => {
      const host = member(t().c.db, "h_e00000000000000000000001");
      await host.join();
      await t().c.db.query("UPDATE hosts SET state = 'dead', epoch = epoch + 1 WHERE id = $1", [host.id]);
      let fenced = false;
      host.onFenced(() => {
        fenced = true;
      });
      assert.equal(await host.beat(), false);
      assert.equal(fenced, true);
      assert.equal(host.canAct(), false);
      // A re-join takes a new epoch and acts again.
      const rejoined = await host.join();
      assert.equal(rejoined.host.state, "ready");
      assert.equal(host.canAct(), true);
      assert.equal(host.owner().epoch, rejoined.host.epoch);
      await host.stop();
    });

    it("a host whose lease lapsed stops acting on PostgreSQL until a heartbeat renews it", async () => {
      const clock = { now: 1_000 };
      const host = member(t().c.db, "h_f00000000000000000000001", clock);
      await host.join();
      let renewed = 0;
      host.onRenewedAfterLapse(() => renewed++);
      clock.now += 9_999;
      assert.equal(host.canAct(), true);
      clock.now += 1;
      // The embedded store has one process per data dir: no other host can take over there.
      assert.equal(host.canAct(), t().store === "pglite");
      assert.equal(await host.beat(), true);
      assert.equal(host.canAct(), true);
      assert.equal(renewed, t().store === "postgres" ? 1 : 0);
      const listed = await hosts.listHosts(t().c.db);
      assert.ok(listed.some((row) => row.id === host.id && row.state === "ready"));
      await host.stop();
    });
  },
  // No runtime: the app itself is no host, so the registry starts empty as an upgraded store's.
  { overrides: { runtime: null } },
);
