// One leader for blob and volume collection and store maintenance (docs/hosts.md): a lease row
// in the store by the database's clock (modules/hosts/leader.ts). On PostgreSQL one holder at a
// time; a holder that dies (stops renewing, lease left behind) is taken over once the lease runs
// out, a clean stop hands it over at once, and a holder that cannot renew stops leading on its
// own clock, and a server that does not lead skips the collection its timer runs. On PGlite
// (one process per data dir) the single server leads.
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { volumeCollectionPass } from "../src/controllers/volume-collection.js";
import { createLogger } from "../src/lib/logger.js";
import { COLLECTION_LEASE, holderName, LeaderLease, leaseHolder } from "../src/modules/hosts/leader.js";
import { volumeKeys } from "../src/modules/volumes/blobs.js";
import { VolumeCollector } from "../src/modules/volumes/collector.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";
import { createVolume, pushTree, treeOf } from "./support/volumes.js";

const HOST_A = "h_a1000000000000000000000a";
const HOST_B = "h_b1000000000000000000000b";
const silent = () => createLogger("error", new Writable({ write: (_chunk, _encoding, done) => done() }));

for (const store of STORE_KINDS) {
  describe(`the collection lease [${store}]`, () => {
    let t: TestApp;
    const leases: LeaderLease[] = [];
    const lease = (hostId: string, extra: { monotonicNow?: () => number; ttlSeconds?: number } = {}) => {
      const made = new LeaderLease(t.c.db, silent(), {
        holder: holderName(hostId),
        ttlSeconds: extra.ttlSeconds ?? 2,
        renewIntervalMs: 200,
        ...(extra.monotonicNow ? { monotonicNow: extra.monotonicNow } : {}),
      });
      leases.push(made);
      return made;
    };

    before(async () => {
      t = await startTestApp(store);
    });
    after(async () => {
      for (const made of leases) await made.stop();
      await t?.close();
    });

    if (store === "pglite") {
      it("the single server leads, whatever the row says", async () => {
        await t.c.db.query(
          "INSERT INTO leases (name, holder, expires_at) VALUES ($1, 'h_x/1', now() + interval '1 hour')",
          [COLLECTION_LEASE],
        );
        const a = lease(HOST_A);
        await a.start();
        assert.equal(a.isLeader(), true);
        await a.stop();
        await t.c.db.query("DELETE FROM leases");
      });
      return;
    }

    it("one holder at a time; a holder that dies is taken over once its lease runs out", async () => {
      const a = lease(HOST_A);
      const b = lease(HOST_B);
      await a.start();
      await b.start();
      assert.equal(a.isLeader(), true);
      assert.equal(b.isLeader(), false);
      assert.equal(await leaseHolder(t.c.db, COLLECTION_LEASE), HOST_A);
      // A few renewals later still A alone.
      await new Promise((resolve) => setTimeout(resolve, 600));
      assert.equal(a.isLeader(), true);
      assert.equal(b.isLeader(), false);
      // A dies: it stops renewing and leaves its row behind.
      await a.stop(false);
      assert.equal(await b.tick(), false, "A's lease still runs");
      await eventually("B takes over", async () => b.isLeader(), 10_000);
      assert.equal(await leaseHolder(t.c.db, COLLECTION_LEASE), HOST_B);
    });

    it("a clean stop hands the lease over at once", async () => {
      const b = leases[1] as LeaderLease;
      const c = lease(HOST_A, { ttlSeconds: 3600 });
      assert.equal(await c.tick(), false);
      await b.stop();
      assert.equal(await c.tick(), true, "the released lease is free without waiting for its expiry");
      assert.equal(await leaseHolder(t.c.db, COLLECTION_LEASE), HOST_A);
      await c.stop();
    });

    it("a server that does not lead skips volume collection; the leader's pass collects", async () => {
      await t.c.db.query("DELETE FROM leases");
      const leader = lease(HOST_A, { ttlSeconds: 3600 });
      const follower = lease(HOST_B, { ttlSeconds: 3600 });
      try {
        assert.equal(await leader.tick(), true);
        assert.equal(await follower.tick(), false);
        // A deleted volume: the next collection releases it and removes its version's manifest.
        const owner = t.orgA.keys.owner;
        const volume = await createVolume(t, owner, `leader-${Date.now()}`);
        const pushed = await pushTree(t, owner, volume.id, treeOf({ f: `led ${Date.now()}` }));
        assert.equal(pushed.publish.status, 200, pushed.publish.raw);
        const version = (pushed.publish.body.version as { version_digest: string }).version_digest;
        const manifest = async () => (await t.c.blobs.head(volumeKeys.versionManifest(t.orgA.id, version))) !== null;
        assert.equal((await t.request("DELETE", `/v1/volumes/${volume.id}`, { key: owner })).status, 200);
        const collector = new VolumeCollector(t.c.db, t.c.clock, silent(), t.c.blobs, {
          gcGraceSeconds: 3600,
          pushTtlSeconds: 3600,
        });
        const pass = (held: LeaderLease) =>
          volumeCollectionPass({ leads: () => held.isLeader(), collector, cache: null, hostId: null });
        assert.deepEqual(await pass(follower), { collected: null, swept: null });
        assert.ok(await manifest(), "the non-leader's pass removed nothing");
        const led = await pass(leader);
        assert.equal(led.collected?.releasedVolumes, 1, JSON.stringify(led));
        assert.equal(led.collected?.manifests, 1, JSON.stringify(led));
        assert.equal(await manifest(), false, "the leader's pass collected it");
      } finally {
        // The next test takes the lease: it is free whatever happened here.
        await leader.stop();
        await follower.stop();
      }
    });

    it("a holder that cannot renew stops leading on its own clock", async () => {
      let now = 0;
      const d = lease(HOST_B, { monotonicNow: () => now, ttlSeconds: 5 });
      assert.equal(await d.tick(), true);
      now = 4_900;
      assert.equal(d.isLeader(), true);
      now = 5_000;
      assert.equal(d.isLeader(), false, "past the lease from the last renewal's send, whatever the store says");
      await d.stop();
    });
  });
}
