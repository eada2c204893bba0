// The chunk bookkeeping that keeps the blob store collectable and never loses a chunk a
// replication relies on: which chunks a replication must store, which the collector may
// take, and (on PostgreSQL, where they can overlap) a replication touching a chunk the
// collector is deleting waits for it and then stores the chunk again.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import * as repo from "../src/modules/snapshots/repo.js";
import { forEachStore, startTestApp, type TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";

const T0 = new Date("2026-01-01T00:00:00Z");
const at = (seconds: number) => new Date(T0.getTime() + seconds * 1000);
const digest = (n: number) => `blake3:${n.toString(16).padStart(64, "0")}`;

async function insertSnapshot(t: TestApp, id: string, state: string, replication: string): Promise<void> {
  await t.c.db.query(
    `INSERT INTO sandbox_snapshots (id, org_id, project_id, source_sandbox_id, run_id, image, lineage_path,
       storage_class, state, replication, request_hash, created_at)
     VALUES ($1, $2, $3, 'sbx-src', 'run-x', 'img', 'sbx-src', 'durable', $4, $5, 'x', $6)`,
    [id, t.orgA.id, t.orgA.defaultProjectId, state, replication, T0],
  );
}

forEachStore("snapshot chunk records", (t) => {
  it("asks a replication to store chunks it has no record of, or whose store a crash cut short", async () => {
    const org = t().orgA.id;
    const db = t().c.db;
    assert.deepEqual([...(await repo.touchChunks(db, org, [digest(1), digest(2)], T0))].sort(), [digest(1), digest(2)]);
    await repo.recordChunkSizes(db, org, [{ digest: digest(1), storedBytes: 100 }]);
    // digest(2)'s row exists but was never recorded stored: still missing.
    assert.deepEqual([...(await repo.touchChunks(db, org, [digest(1), digest(2)], at(1)))], [digest(2)]);
    // Another organization shares nothing.
    assert.deepEqual([...(await repo.touchChunks(db, t().orgB.id, [digest(1)], at(1)))], [digest(1)]);
  });

  it("collects only unreferenced chunks untouched within the grace period", async () => {
    const org = t().orgA.id;
    const db = t().c.db;
    for (const n of [10, 11, 12]) {
      await repo.touchChunks(db, org, [digest(n)], T0);
      await repo.recordChunkSizes(db, org, [{ digest: digest(n), storedBytes: 10 }]);
    }
    await insertSnapshot(t(), `snp-${"1".repeat(40)}`, "sealed", "replicated");
    await repo.insertSnapshotChunks(db, `snp-${"1".repeat(40)}`, org, [digest(10)]);
    await repo.touchChunks(db, org, [digest(12)], at(100));
    const collect = async () => {
      const marked = await repo.markGarbageChunks(db, at(50), 100);
      return db.tx((q) => repo.takeGarbageChunks(q, marked, at(50)));
    };
    const taken = await collect();
    const mine = taken.filter((row) => row.org_id === org).map((row) => row.digest);
    assert.ok(mine.includes(digest(11)), "unreferenced and old: taken");
    assert.ok(!mine.includes(digest(10)), "referenced: kept");
    assert.ok(!mine.includes(digest(12)), "touched within the grace period: kept");
    // Deleting the snapshot drops its references; then its chunk goes too.
    await repo.deleteSnapshot(db, `snp-${"1".repeat(40)}`);
    const later = await collect();
    assert.deepEqual(
      later.filter((row) => row.org_id === org).map((row) => row.digest),
      [digest(10)],
    );
  });

  it("knows which snapshots are undurable and which restores still read a snapshot", async () => {
    const db = t().c.db;
    await insertSnapshot(t(), `snp-${"2".repeat(40)}`, "sealed", "gave_up");
    assert.equal(await repo.hasUndurable(db, "sbx-src"), false, "given up is resolved");
    await insertSnapshot(t(), `snp-${"3".repeat(40)}`, "sealed", "pending");
    assert.equal(await repo.hasUndurable(db, "sbx-src"), true, "replicating is undurable");
    assert.equal(await repo.restoresReading(db, `snp-${"3".repeat(40)}`), 0);
  });
});

describe("chunk collection against a concurrent replication [postgres]", () => {
  let t: TestApp;
  before(async () => {
    t = await startTestApp("postgres");
  });
  after(async () => {
    await t?.close();
  });

  it("makes a replication touching a chunk being collected wait, then store it again", async () => {
    const org = t.orgA.id;
    const db = t.c.db;
    await repo.touchChunks(db, org, [digest(20)], T0);
    await repo.recordChunkSizes(db, org, [{ digest: digest(20), storedBytes: 10 }]);
    let touched = new Set<string>();
    let touchDone = false;
    const marked = await repo.markGarbageChunks(db, at(50), 100);
    await db.tx(async (q) => {
      const taken = await repo.takeGarbageChunks(q, marked, at(50));
      assert.ok(taken.some((row) => row.digest === digest(20)));
      // A replication touches it now (its own connection): it must wait for this transaction.
      const touching = repo.touchChunks(db, org, [digest(20)], at(60)).then((result) => {
        touched = result;
        touchDone = true;
      });
      void touching;
      // A window of absence: a touch that did not wait would be done within it.
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(touchDone, false, "the touch waits while the collector holds the row");
    });
    await eventually("the touch done once the collector let go", async () => touchDone).catch(() => undefined);
    assert.ok(touchDone);
    assert.deepEqual([...touched], [digest(20)], "the collected chunk must be stored again");
  });
});
