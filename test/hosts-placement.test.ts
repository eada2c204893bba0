// Placement in the create path (docs/hosts.md "Placement"), on both stores: host A is a real
// server (runc driver); the other hosts are rows of the registry with a fresh heartbeat (no
// process runs their sandboxes here: these tests read which host each row is written with).
// A cordoned, draining or unreachable host is never chosen; a host whose published capacity is
// full is skipped; with WARREN_PLACEMENT=spread creates spread over equal hosts; with no host
// at all the create answers 503 host_unavailable with Retry-After. Ranked on a reused
// allocation view that no longer holds (another server's creates, stops), a create every host
// tried refused is ranked again on a fresh read and lands where there is room.
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, beforeEach, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { createLogger } from "../src/lib/logger.js";
import { getHost, HOST_HINT_LIMIT, renewHeartbeat } from "../src/modules/hosts/repo.js";
import { AllocationView } from "../src/modules/sandboxes/allocation-view.js";
import { placeAndAdmit } from "../src/modules/sandboxes/host-placement.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { assertError } from "./support/assertions.js";

const HOST_A = "h_a1000000000000000000000a";
const HOST_B = "h_b1000000000000000000000b";
const HOST_C = "h_c1000000000000000000000c";

for (const store of STORE_KINDS) {
  describe(`placement in create [${store}]`, () => {
    let fixture: RuntimeFixture;
    let a: TestApp;
    const defaults = loadConfig({});
    const sandbox = { ...defaults.sandbox, memoryMiB: 128, placement: "local_first" as "local_first" | "spread" };

    before(async () => {
      fixture = await startRuntimeFixture(`placement-${store}`);
      sandbox.defaultImage = fixture.busyboxRef;
      a = await startTestApp(store, { overrides: { runtime: fixture.driver, hostId: HOST_A }, config: { sandbox } });
    });
    after(async () => {
      await a?.close();
      await fixture?.cleanup();
    });

    const big = () => {
      const compute = fixture.driver.hostCompute();
      return { cpu_millis: compute.cpuMillis, memory_mib: compute.memoryMiB };
    };
    // Each host publishes A's image cache (A's driver pulled the test image), so only room decides.
    const setHost = async (id: string, state: string, capacity: object, ageSeconds = 0) => {
      const images = fixture.driver.cacheHints().images;
      await a.c.db.query(
        `INSERT INTO hosts (id, role, state, epoch, capacity, heartbeat_at, images)
         VALUES ($1, 'all', $2, 7, $3::jsonb, now() - make_interval(secs => $4), $5::text[])
         ON CONFLICT (id) DO UPDATE SET state = $2, capacity = $3::jsonb,
           heartbeat_at = now() - make_interval(secs => $4), images = $5::text[]`,
        [id, state, JSON.stringify(capacity), ageSeconds, images],
      );
    };
    const create = () =>
      a.request("POST", "/v1/sandboxes", {
        key: a.orgA.keys.owner,
        body: { command: ["sleep", "3600"], network_access: "none" },
      });
    const hostOf = async (id: string) =>
      (
        await a.c.db.query<{ host_id: string; host_epoch: number }>(
          "SELECT host_id, host_epoch FROM sandboxes WHERE id = $1",
          [id],
        )
      ).rows[0];

    beforeEach(async () => {
      sandbox.placement = "local_first";
      // The sandboxes of a test are only rows (nothing runs them): they go, so they count on no host.
      await a.c.db.query("UPDATE sandboxes SET state = 'terminated', desired_state = 'deleted', finished_at = now()");
      await a.c.db.query("UPDATE hosts SET state = 'ready' WHERE id = $1", [HOST_A]);
      await a.c.db.query("DELETE FROM hosts WHERE id <> $1", [HOST_A]);
    });

    it("a host publishes its capacity and cache hints with its heartbeat (bounded lists in its row)", async () => {
      assert.ok(fixture.driver.cacheHints().images.length > 0, "the fixture pulled its image through the cache");
      assert.equal(await a.c.host?.beat(), true);
      const row = await getHost(a.c.db, HOST_A);
      assert.deepEqual(row?.images, fixture.driver.cacheHints().images);
      assert.deepEqual(row?.warm_images, []);
      assert.ok(Array.isArray(row?.volumes));
      assert.equal(row?.capacity.memory_mib, fixture.driver.hostCompute().memoryMiB);
      const long = Array.from({ length: 100 }, (_, i) => `img-${i}`);
      await renewHeartbeat(a.c.db, HOST_A, a.c.host?.owner().epoch as number, {
        capacity: {},
        hints: { images: long, warmImages: [], volumes: long },
        poolMembers: 0,
      });
      const bounded = await getHost(a.c.db, HOST_A);
      assert.equal(bounded?.images.length, HOST_HINT_LIMIT);
      assert.equal(bounded?.volumes.length, HOST_HINT_LIMIT);
      assert.equal(await a.c.host?.beat(), true);
    });

    it("local_first: a create goes to the server it came through while that host is a candidate", async () => {
      await setHost(HOST_B, "ready", big());
      for (let i = 0; i < 3; i++) {
        const res = await create();
        assert.equal(res.status, 200, res.raw);
        assert.equal((await hostOf(res.body.id as string))?.host_id, HOST_A);
      }
    });

    it("a cordoned host is never chosen: the create goes to the ready one, at its epoch", async () => {
      await a.c.db.query("UPDATE hosts SET state = 'cordoned' WHERE id = $1", [HOST_A]);
      await setHost(HOST_B, "ready", big());
      const res = await create();
      assert.equal(res.status, 200, res.raw);
      assert.deepEqual(await hostOf(res.body.id as string), { host_id: HOST_B, host_epoch: 7 });
    });

    it("draining and unreachable hosts are never chosen; with no host left: 503 host_unavailable", async () => {
      await a.c.db.query("UPDATE hosts SET state = 'draining' WHERE id = $1", [HOST_A]);
      await setHost(HOST_B, "unreachable", big());
      await setHost(HOST_C, "ready", big(), 120);
      const res = await create();
      assertError(res, 503, "host_unavailable");
      assert.ok(Number(res.headers["retry-after"]) > 0);
      const { rows } = await a.c.db.query<{ n: string }>(
        "SELECT count(*)::text AS n FROM sandboxes WHERE state = 'requested'",
      );
      assert.equal(rows[0]?.n, "0");
    });

    it("a host whose published capacity is full is skipped", async () => {
      sandbox.placement = "spread";
      await a.c.db.query("UPDATE hosts SET state = 'cordoned' WHERE id = $1", [HOST_A]);
      await setHost(HOST_B, "ready", { cpu_millis: 100_000, memory_mib: 32 });
      await setHost(HOST_C, "ready", big());
      for (let i = 0; i < 4; i++) {
        const res = await create();
        assert.equal(res.status, 200, res.raw);
        assert.equal((await hostOf(res.body.id as string))?.host_id, HOST_C);
      }
    });

    it("the only host being full answers what its admission answers", async () => {
      await a.c.db.query("UPDATE hosts SET state = 'cordoned' WHERE id = $1", [HOST_A]);
      await setHost(HOST_B, "ready", { cpu_millis: 100_000, memory_mib: 32 });
      const res = await create();
      assertError(res, 422, "unsupported_capability");
    });

    it("spread: creates through one server spread over equal hosts", async () => {
      sandbox.placement = "spread";
      await setHost(HOST_B, "ready", big());
      const seen = new Map<string, number>();
      for (let i = 0; i < 6; i++) {
        const res = await create();
        assert.equal(res.status, 200, res.raw);
        const host = (await hostOf(res.body.id as string))?.host_id as string;
        seen.set(host, (seen.get(host) ?? 0) + 1);
      }
      assert.ok((seen.get(HOST_A) ?? 0) >= 2 && (seen.get(HOST_B) ?? 0) >= 2, JSON.stringify([...seen]));
    });

    it("a reused allocation view that no longer holds: every host it ranked refuses, a fresh read places the create", async () => {
      await a.c.db.query("UPDATE hosts SET state = 'cordoned' WHERE id = $1", [HOST_A]);
      // Room for two sandboxes of 128 MiB on each (memory overcommit 2).
      const two = { cpu_millis: big().cpu_millis, memory_mib: 128 };
      await setHost(HOST_B, "ready", two);
      await setHost(HOST_C, "ready", two);
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const res = await create();
        assert.equal(res.status, 200, res.raw);
        ids.push(res.body.id as string);
      }
      const moveTo = (host: string, which: string[]) =>
        a.c.db.query("UPDATE sandboxes SET host_id = $1, host_epoch = 7 WHERE id = ANY($2::text[])", [host, which]);
      // The view (its clock stands still: it is always young enough) reads one on B and two on C...
      const view = new AllocationView(() => 0);
      await moveTo(HOST_B, ids.slice(0, 1));
      await moveTo(HOST_C, ids.slice(1));
      await view.of(a.c.db, [HOST_B, HOST_C]);
      // ...then another server's placements fill B and C's sandboxes go: B is full, C empty.
      await moveTo(HOST_B, ids);
      const deps = {
        self: null,
        localCompute: null,
        policy: { memoryOvercommit: defaults.sandbox.memoryOvercommit, cpuOvercommit: defaults.sandbox.cpuOvercommit },
        mode: "spread" as const,
        log: createLogger("fatal", new Writable({ write: (_c, _e, cb) => cb() })),
        view,
      };
      const request = {
        id: "sbx-3333333333333333333333333333333333333333",
        compute: { memory_mb: 128, cpu_millis: 1000 },
        image: fixture.busyboxRef,
        volumes: [],
        snapshotHostId: null,
      };
      // On the view C looks full and B has room; B's admission (its live rows) refuses; read again: C.
      const owner = await a.c.db.tx((q) => placeAndAdmit(q, deps, request));
      assert.deepEqual(owner, { host_id: HOST_C, host_epoch: 7 });
      // The view read again, with the create counted: C holds one now.
      const { byHost, reused } = await view.of(a.c.db, [HOST_B, HOST_C]);
      assert.equal(reused, true);
      assert.equal(
        byHost.get(HOST_C)?.reduce((sum, row) => sum + row.memory, 0),
        128,
      );
      assert.equal(
        byHost.get(HOST_B)?.reduce((sum, row) => sum + row.memory, 0),
        3 * 128,
      );
    });
  });
}
