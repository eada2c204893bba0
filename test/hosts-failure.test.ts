// Host failure (docs/hosts.md, the failure model), judged by another host on the database's
// clock: a stale heartbeat makes a host unreachable (its sandboxes keep their state); past the
// dead grace it is dead with its epoch bumped, its sandboxes end failed/host_lost (quota
// released), its running execs are indeterminate, and its old process is fenced.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { HOST_LOST_MESSAGE, HostSweeper } from "../src/controllers/host-sweeper.js";
import { createLogger } from "../src/lib/logger.js";
import { judgeHost } from "../src/modules/hosts/liveness.js";
import { HostMembership } from "../src/modules/hosts/membership.js";
import * as hosts from "../src/modules/hosts/repo.js";
import * as repo from "../src/modules/sandboxes/repo.js";
import { forEachStore, type TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";

const quiet = createLogger("silent");

describe("judgeHost", () => {
  const options = { unreachableAfterSeconds: 10, deadAfterSeconds: 60 };
  it("is unreachable past the first bound, dead past the second, and a dead host stays as it is", () => {
    assert.equal(judgeHost({ state: "ready", heartbeatAgeSeconds: 3 }, options), null);
    assert.equal(judgeHost({ state: "ready", heartbeatAgeSeconds: 11 }, options), "unreachable");
    assert.equal(judgeHost({ state: "cordoned", heartbeatAgeSeconds: 11 }, options), "unreachable");
    assert.equal(judgeHost({ state: "unreachable", heartbeatAgeSeconds: 30 }, options), null);
    assert.equal(judgeHost({ state: "unreachable", heartbeatAgeSeconds: 61 }, options), "dead");
    assert.equal(judgeHost({ state: "ready", heartbeatAgeSeconds: 600 }, options), "dead");
    assert.equal(judgeHost({ state: "dead", heartbeatAgeSeconds: 600 }, options), null);
  });
});

function member(t: () => TestApp, id: string) {
  return new HostMembership(t().c.db, quiet, { id, role: "all", heartbeatIntervalMs: 60_000 });
}

async function sandboxOn(t: () => TestApp, host: HostMembership, state: string, desired: string): Promise<string> {
  const { rows } = await t().c.db.query<{ id: string }>(
    `INSERT INTO sandboxes (id, org_id, project_id, image, workload_image, storage_class, placement_class, network_access,
       lineage_path, metadata, resources, desired_state, state, run_id, created_by, created_by_kind, created_by_key_id,
       created_at, updated_at, host_id, host_epoch)
     VALUES ('sbx-' || md5(random()::text) || '00000000', $1, $2, 'img', 'img', 'standard', 'standard', 'none',
       'x', '{}'::jsonb, '{"memory_mb":128,"cpu_millis":500}'::jsonb, $3, $4, 'run-none', '', '', '', now(), now(), $5, $6)
     RETURNING id`,
    [t().orgA.id, t().orgA.defaultProjectId, desired, state, host.id, host.owner().epoch],
  );
  return rows[0]?.id as string;
}

const stale = (t: () => TestApp, id: string, seconds: number) =>
  t().c.db.query("UPDATE hosts SET heartbeat_at = now() - make_interval(secs => $2) WHERE id = $1", [id, seconds]);

forEachStore(
  "host failure",
  (t) => {
    it("a silent host is unreachable, then dead: its sandboxes host_lost, quota released, its process fenced", async () => {
      const judge = member(t, "h_judge0000000000000000001");
      const lost = member(t, "h_lost00000000000000000001");
      const fresh = member(t, "h_fresh0000000000000000001");
      await judge.join();
      await lost.join();
      await fresh.join();
      const running = await sandboxOn(t, lost, "running", "running");
      const deleting = await sandboxOn(t, lost, "terminating", "deleted");
      const elsewhere = await sandboxOn(t, fresh, "running", "running");
      await t().c.db.query(
        `INSERT INTO sandbox_execs (id, org_id, sandbox_id, idempotency_key, request_hash, outcome, started_at, host_id, host_epoch)
         VALUES ('exe-lost', $1, $2, 'k', 'h', 'running', now(), $3, $4)`,
        [t().orgA.id, running, lost.id, lost.owner().epoch],
      );
      const runningBefore = await repo.countRunning(t().c.db, t().orgA.id);
      const sweeper = new HostSweeper({ ...t().c, host: judge }, { retentionSeconds: 3600 });

      /** The sandbox as its organization reads it through the API. */
      const shown = async (id: string) => {
        const res = await t().request("GET", `/v1/sandboxes/${id}`, { key: t().orgA.keys.owner });
        assert.equal(res.status, 200, res.raw);
        return res.body.sandbox as { state: string; host_state?: string };
      };
      assert.equal((await shown(running)).host_state, "ready");

      await stale(t, lost.id, 20);
      assert.deepEqual(await sweeper.pass(), { unreachable: [lost.id], dead: [] });
      assert.equal((await hosts.getHost(t().c.db, lost.id))?.state, "unreachable");
      assert.equal((await repo.getSandbox(t().c.db, running))?.state, "running");
      // The sandbox keeps its last state and shows its host's (read at most 1 s old).
      await eventually("the record to show its host unreachable", async () => {
        const view = await shown(running);
        return view.state === "running" && view.host_state === "unreachable";
      });
      assert.equal((await shown(elsewhere)).host_state, "ready");

      await stale(t, lost.id, 120);
      assert.deepEqual(await sweeper.pass(), { unreachable: [], dead: [lost.id] });
      const dead = await hosts.getHost(t().c.db, lost.id);
      assert.equal(dead?.state, "dead");
      assert.equal(dead?.epoch, lost.owner().epoch + 1);
      const failed = await repo.getSandbox(t().c.db, running);
      assert.equal(failed?.state, "failed");
      assert.equal(failed?.desired_state, "stopped");
      assert.equal(failed?.state_reason_code, "host_lost");
      assert.equal(failed?.state_reason_message, HOST_LOST_MESSAGE);
      // Finished: no host state is shown (the sandbox no longer has one that runs it).
      assert.equal((await shown(running)).host_state, undefined);
      assert.equal(failed?.host_epoch, dead?.epoch);
      assert.equal((await repo.getSandbox(t().c.db, deleting))?.state, "terminated");
      assert.equal((await repo.getSandbox(t().c.db, elsewhere))?.state, "running");
      assert.equal(await repo.countRunning(t().c.db, t().orgA.id), runningBefore - 1);
      const exec = await t().c.db.query<{ outcome: string }>("SELECT outcome FROM sandbox_execs WHERE id = 'exe-lost'");
      assert.equal(exec.rows[0]?.outcome, "indeterminate");
      const events = await t().c.db.query<{ payload: { to: string; reason?: string } }>(
        "SELECT payload FROM events WHERE name = 'sandbox.state_changed' AND payload->>'sandbox_id' = $1",
        [running],
      );
      assert.deepEqual(
        events.rows.map((row) => [row.payload.to, row.payload.reason]),
        [["failed", "host_lost"]],
      );

      // Judged once: a second judge (or pass) finds nothing more to do.
      assert.deepEqual(await new HostSweeper({ ...t().c, host: fresh }, { retentionSeconds: 3600 }).pass(), {
        unreachable: [],
        dead: [],
      });
      // The old process of the dead host is fenced at its next heartbeat and may not act.
      assert.equal(await lost.beat(), false);
      assert.equal(lost.canAct(), false);
      // Re-joined, it is ready again under a new epoch; its failed rows are its own to purge.
      await lost.join();
      assert.equal((await hosts.getHost(t().c.db, lost.id))?.state, "ready");
      assert.equal((await repo.getSandbox(t().c.db, running))?.host_epoch, lost.owner().epoch);
      assert.deepEqual([...(await repo.knownIds(t().c.db, lost.id))], []);
      for (const host of [judge, lost, fresh]) await host.stop();
    });
  },
  // No runtime: the app is no host of its own, the test's memberships are the hosts.
  { overrides: { runtime: null } },
);
