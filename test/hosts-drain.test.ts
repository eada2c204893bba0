// Draining and cordoning a host (issue 25 step 7, docs/hosts.md "Draining") through the admin
// routes, on a real host with a warm pool of runc sandboxes: the host sees a drain on its next
// heartbeat, its pool empties and stops refilling, and the list reports it drained; uncordon
// fills the pool again; cordon changes nothing on the host. What an operator asked survives
// a re-join and a spell of `unreachable` (before migration 0034 a renewal made it `ready`).
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { PooledRuntime } from "../src/drivers/runtime/local/pool.js";
import {
  closeFixtureLeavingNothing,
  type RuntimeFixture,
  startRuntimeFixture,
} from "../src/drivers/runtime/local/test-support.js";
import { createLogger } from "../src/lib/logger.js";
import type { HostJson } from "../src/modules/admin/schemas.js";
import { isDrained } from "../src/modules/hosts/directory.js";
import { renewHeartbeat } from "../src/modules/hosts/repo.js";
import { newSandboxId } from "../src/modules/sandboxes/service.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { assertErrorEnvelope } from "./support/assertions.js";
import { eventually } from "./support/eventually.js";

const HOST = "h_d0000000000000000000000d";
const OTHER = "h_e0000000000000000000000e";

describe("isDrained", () => {
  it("holds only for a draining host with no pool member and no pending replication", () => {
    const host = { state: "draining" as const, pool_members: 0, pending_replications: 0 };
    assert.equal(isDrained(host), true);
    assert.equal(isDrained({ ...host, pool_members: 1 }), false);
    assert.equal(isDrained({ ...host, pending_replications: 2 }), false);
    assert.equal(isDrained({ ...host, state: "cordoned" }), false);
    assert.equal(isDrained({ ...host, state: "ready" }), false);
  });
});

describe("draining a host", { concurrency: 1 }, () => {
  for (const store of STORE_KINDS) {
    describe(`[${store}]`, () => {
      let fixture: RuntimeFixture;
      let pool: PooledRuntime;
      let t: TestApp;

      before(async () => {
        fixture = await startRuntimeFixture(`drain-${store}`);
        pool = await PooledRuntime.open(fixture.driver, {
          size: 1,
          image: fixture.busyboxRef,
          memoryMiB: 128,
          cpuMillis: 1000,
          pids: 128,
          newId: newSandboxId,
          log: createLogger("warn", new Writable({ write: (_chunk, _encoding, done) => done() })),
        });
        t = await startTestApp(store, {
          overrides: { runtime: pool, hostId: HOST },
          config: {
            sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
          },
        });
        pool.startFilling();
      });
      after(async () => {
        await pool?.close();
        await t?.close();
        if (fixture) await closeFixtureLeavingNothing(fixture, []);
      });

      const admin = (method: string, url: string) => t.request(method, url, { key: t.orgA.keys.owner });
      const hostOf = async (id = HOST): Promise<HostJson> => {
        const res = await admin("GET", "/v1/admin/hosts");
        assert.equal(res.status, 200, res.raw);
        const host = (res.body.hosts as HostJson[]).find((h) => h.id === id);
        assert.ok(host, `host ${id} in ${res.raw}`);
        return host;
      };
      const act = async (action: string, id = HOST): Promise<HostJson> => {
        const res = await admin("POST", `/v1/admin/hosts/${id}:${action}`);
        assert.equal(res.status, 200, res.raw);
        return res.body.host as HostJson;
      };
      const beat = async () => assert.equal(await t.c.host?.beat(), true);
      const defaultShape = () => ({
        image: fixture.busyboxRef,
        memoryMiB: 128,
        cpuMillis: 1000,
        storageClass: "standard" as const,
        workspaceCapacityGiB: null,
        network: "none" as const,
      });

      it("lists the host ready, with its warm pool as its last heartbeat reported it", async () => {
        await eventually("the pool fills", async () => pool.pooledIds().length === 2, 120_000);
        await beat();
        const host = await hostOf();
        assert.equal(host.state, "ready");
        assert.equal(host.operator_state, null);
        assert.equal(host.pool_members, 2);
        assert.equal(host.pending_replications, 0);
        assert.equal(host.live_sandboxes, 0);
        assert.equal(host.drained, false);
        assert.equal(typeof host.heartbeat_age_seconds, "number");
        assert.equal(host.epoch, t.c.host?.owner().epoch);
      });

      it("drain: the host sees it on its heartbeat, its pool empties and stays empty, then it is drained", async () => {
        const asked = await act("drain");
        assert.equal(asked.state, "draining");
        assert.equal(asked.operator_state, "draining");
        assert.equal(asked.drained, false, "its pool members are still reported");
        // The host learns it on a heartbeat (this one, or its own every 2 s: on a loaded machine
        // one may have come during the request, so what it knew just before is not asserted).
        await beat();
        assert.equal(t.c.host?.state(), "draining");
        await eventually(
          "the pool is empty",
          async () => pool.memberCount() === 0 && (await pool.driver.list()).length === 0,
        );
        assert.equal(pool.take(defaultShape()), null, "a draining host's pool serves no create");
        await beat();
        const host = await hostOf();
        assert.equal(host.pool_members, 0);
        assert.equal(host.drained, true);
        // No refill while draining (a sleep that only proves an absence).
        await new Promise((resolve) => setTimeout(resolve, 500));
        assert.equal(pool.memberCount(), 0);
      });

      it("keeps draining across a re-join and a spell of unreachable", async () => {
        const before = t.c.host?.owner().epoch ?? 0;
        await t.c.host?.join();
        assert.equal(t.c.host?.owner().epoch, before + 1);
        assert.equal((await hostOf()).state, "draining");
        // What the sweeper of another host writes when the heartbeat is late.
        await t.c.db.query("UPDATE hosts SET state = 'unreachable' WHERE id = $1", [HOST]);
        await beat();
        const host = await hostOf();
        assert.equal(host.state, "draining", "a renewal brings back what the operator asked, not ready");
        assert.equal(pool.memberCount(), 0);
      });

      it("uncordon: back to ready, and the pool fills again", async () => {
        const host = await act("uncordon");
        assert.equal(host.state, "ready");
        assert.equal(host.operator_state, null);
        await beat();
        await eventually("the pool fills again", async () => pool.pooledIds().length === 2, 120_000);
        assert.ok(pool.take(defaultShape()), "a ready host's pool serves a create again");
      });

      it("cordon: placement's business only; the host keeps its pool", async () => {
        await eventually("the pool is full", async () => pool.pooledIds().length === 2, 120_000);
        const host = await act("cordon");
        assert.equal(host.state, "cordoned");
        await beat();
        assert.equal(t.c.host?.state(), "cordoned");
        assert.equal(pool.pooledIds().length, 2);
        // A create its pool could serve is not taken either: the only host takes no creates.
        const refused = await t.request("POST", "/v1/sandboxes", {
          key: t.orgA.keys.owner,
          body: { network_access: "none", command: ["sleep", "1000"] },
        });
        assertErrorEnvelope(refused, 503, "host_unavailable");
        assert.equal(pool.pooledIds().length, 2);
        assert.equal((await act("uncordon")).state, "ready");
      });

      it("an unreachable host asked to drain stays unreachable until it renews, then drains", async () => {
        await t.c.db.query(
          `INSERT INTO hosts (id, state, epoch, heartbeat_at) VALUES ($1, 'unreachable', 3, now() - interval '30 seconds')`,
          [OTHER],
        );
        const host = await act("drain", OTHER);
        assert.equal(host.state, "unreachable");
        assert.equal(host.operator_state, "draining");
        assert.equal(await renewHeartbeat(t.c.db, OTHER, 3, { capacity: {}, poolMembers: 0 }), "draining");
        assert.equal((await hostOf(OTHER)).state, "draining");
        await t.c.db.query("DELETE FROM hosts WHERE id = $1", [OTHER]);
      });

      it("answers not_found for an unknown host and invalid_argument for a malformed id", async () => {
        assertErrorEnvelope(await admin("POST", `/v1/admin/hosts/h_${"f".repeat(24)}:drain`), 404, "not_found");
        assertErrorEnvelope(await admin("POST", "/v1/admin/hosts/not-a-host:cordon"), 400, "invalid_argument");
        assertErrorEnvelope(await admin("POST", `/v1/admin/hosts/${HOST}:explode`), 404, "not_found");
        assertErrorEnvelope(
          await t.request("GET", "/v1/admin/hosts", { key: t.orgB.keys.owner }),
          403,
          "permission_denied",
        );
      });
    });
  }
});
