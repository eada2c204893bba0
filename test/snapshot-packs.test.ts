// Packs as the server keeps them, on both stores (migration 0020): a replication's chunks are
// recorded only once their pack is stored, a failed or refused pack leaves no chunk row, the
// collector deletes a pack once no chunk names it (after the grace period) and repacks
// sparse ones, a rebuild that looked up a location a repack moved finds the chunk again, and
// chunks stored before packs are still read and collected.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, it } from "node:test";
import {
  collectionCutoff,
  collectUnreferencedChunks,
  repackSparsePacks,
  sweepDeadPacks,
} from "../src/controllers/snapshot-collector.js";
import type { FsBlobStore } from "../src/drivers/blobs/fs.js";
import type { BlobStore } from "../src/drivers/blobs/interface.js";
import type { Clock } from "../src/lib/clock.js";
import * as packRepo from "../src/modules/snapshots/pack-repo.js";
import { chunkPrefix, IndexedChunkSource, trackedPackStore } from "../src/modules/snapshots/packed-chunks.js";
import { blobChunkStore, chunkKey } from "../src/modules/snapshots/replication/chunk-store.js";
import { compressChunk, digestOf } from "../src/modules/snapshots/replication/codec.js";
import { readPackIndex } from "../src/modules/snapshots/replication/pack.js";
import type { Digest } from "../src/modules/snapshots/replication/types.js";
import * as repo from "../src/modules/snapshots/repo.js";
import { forEachStore } from "./harness.js";
import { openTestBlobStore } from "./support/blob-store.js";

const T0 = new Date("2026-03-01T00:00:00Z").getTime();

async function someChunks(count: number) {
  return Promise.all(
    Array.from({ length: count }, async () => {
      const plain = randomBytes(30_000);
      return { digest: digestOf(plain), plain, compressed: await compressChunk(plain) };
    }),
  );
}

type Chunk = Awaited<ReturnType<typeof someChunks>>[0];

forEachStore("snapshot packs", (t) => {
  let dir = "";
  let blobs: BlobStore;
  let nowMs = T0;
  const clock: Clock = { now: () => new Date(nowMs), nowNs: () => BigInt(nowMs) * 1_000_000n };
  const deps = () => ({ db: t().c.db, clock, blobs, log: t().c.log });
  const grace = 3600;
  const cutoff = () => new Date(nowMs - grace * 1000);

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-packs-"));
    blobs = await openTestBlobStore(dir);
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Stores `chunks` as a replication does (has, put, flush); returns the packs written. */
  async function replicate(orgId: string, chunks: Chunk[], options: { targetBytes?: number } = {}) {
    const store = trackedPackStore(deps(), orgId, options);
    let stored = 0;
    for (const chunk of chunks) {
      if (await store.has(chunk.digest)) continue;
      await store.put(chunk.digest, chunk.compressed, chunk.plain.length);
      stored++;
    }
    await store.flush();
    return { stored, packs: store.packsWritten };
  }

  const packRows = async (orgId: string) =>
    (
      await t().c.db.query<{ key: string; deleting: boolean }>(
        "SELECT key, deleting FROM blob_packs WHERE org_id = $1 ORDER BY key",
        [orgId],
      )
    ).rows;
  const locationOf = async (orgId: string, digest: Digest) =>
    (await packRepo.chunkLocations(t().c.db, orgId, chunkPrefix(orgId), [digest])).get(digest);
  /** A sealed snapshot's row: replicated, or (`pendingUntil`) still replicating under a lease. */
  const insertSnapshot = (
    snapshotId: string,
    orgId: string,
    projectId: string,
    at: { createdAt: Date; pendingUntil?: Date },
  ) =>
    t().c.db.query(
      `INSERT INTO sandbox_snapshots (id, org_id, project_id, source_sandbox_id, run_id, image, lineage_path,
         storage_class, state, replication, request_hash, created_at, replication_lease_until)
       VALUES ($1, $2, $3, 'sbx-src', 'run-x', 'img', 'sbx-src', 'durable', 'sealed', $4, 'x', $5, $6)`,
      [snapshotId, orgId, projectId, at.pendingUntil ? "pending" : "replicated", at.createdAt, at.pendingUntil ?? null],
    );
  const reference = (snapshotId: string, orgId: string, chunks: Chunk[]) =>
    t().c.db.query(
      `INSERT INTO snapshot_chunks (snapshot_id, org_id, digest) SELECT $1, $2, d FROM unnest($3::text[]) AS d`,
      [snapshotId, orgId, chunks.map((chunk) => chunk.digest)],
    );

  it("records a pack's chunks once the pack is stored; a second replication of them stores nothing", async () => {
    const org = t().orgA.id;
    const chunks = await someChunks(10);
    const first = await replicate(org, chunks, { targetBytes: 100_000 });
    assert.equal(first.stored, 10);
    assert.ok(first.packs >= 3, `${first.packs} packs`);
    const source = new IndexedChunkSource(t().c.db, blobs, org);
    await source.preload(chunks.map((chunk) => chunk.digest));
    for (const chunk of chunks) {
      const location = await locationOf(org, chunk.digest);
      assert.ok(location?.pack, "in a pack");
      assert.ok((await source.get(chunk.digest))?.equals(chunk.compressed));
      const index = await readPackIndex(blobs, location.pack);
      assert.ok(index?.some((entry) => entry.digest === chunk.digest && entry.offset === location.offset));
    }
    assert.equal((await packRows(org)).length, first.packs);
    const again = await replicate(org, chunks);
    assert.deepEqual(again, { stored: 0, packs: 0 });
    // Another organization shares nothing, and reads nothing of this one's.
    const other = new IndexedChunkSource(t().c.db, blobs, t().orgB.id);
    assert.equal(await other.get((chunks[0] as Chunk).digest), null);
  });

  it("leaves no chunk row for a pack whose put failed, and collects what it left after the grace period", async () => {
    const org = t().orgA.id;
    const chunks = await someChunks(3);
    const failing: BlobStore = Object.assign(Object.create(blobs) as BlobStore, {
      putIfAbsent: async () => {
        throw new Error("the store went away");
      },
    });
    const store = trackedPackStore({ ...deps(), blobs: failing }, org);
    for (const chunk of chunks) {
      assert.equal(await store.has(chunk.digest), false);
      await store.put(chunk.digest, chunk.compressed, chunk.plain.length);
    }
    await assert.rejects(store.flush(), /the store went away/);
    // has() touched them (rows saying "missing"); none names a pack.
    for (const chunk of chunks) assert.equal((await locationOf(org, chunk.digest))?.pack ?? null, null);
    const missing = await repo.touchChunks(
      t().c.db,
      org,
      chunks.map((chunk) => chunk.digest),
      clock.now(),
    );
    assert.equal(missing.size, 3, "a later replication stores them");
    const orphans = (await packRows(org)).length;
    assert.ok(orphans >= 1);
    assert.equal(await sweepDeadPacks(deps(), cutoff()), 0, "within the grace period: kept");
    nowMs += (grace + 1) * 1000;
    await collectUnreferencedChunks(deps(), cutoff());
    assert.ok((await sweepDeadPacks(deps(), cutoff())) >= 1);
  });

  it("refuses to point chunks at a pack being deleted (a collection ran during its put)", async () => {
    const org = t().orgA.id;
    const [chunk] = await someChunks(1);
    if (!chunk) throw new Error("no chunk");
    const store = trackedPackStore(deps(), org);
    await store.has(chunk.digest);
    await store.put(chunk.digest, chunk.compressed, chunk.plain.length);
    // Collected between intent and claim: mark every pack deleting as a collection would.
    const db = t().c.db;
    const racing: BlobStore = Object.assign(Object.create(blobs) as BlobStore, {
      putIfAbsent: async (key: string, data: Uint8Array) => {
        await db.query("UPDATE blob_packs SET deleting = true WHERE key = $1", [key]);
        return blobs.putIfAbsent(key, data);
      },
    });
    const raced = trackedPackStore({ ...deps(), blobs: racing }, org);
    await raced.put(chunk.digest, chunk.compressed, chunk.plain.length);
    await assert.rejects(raced.flush(), /collected while it was being stored/);
    assert.equal((await locationOf(org, chunk.digest))?.pack ?? null, null);
    // The collector finishes the marked pack (its object goes, its row after).
    const marked = (await packRows(org)).filter((row) => row.deleting).map((row) => row.key);
    assert.equal(marked.length, 1);
    await sweepDeadPacks(deps(), cutoff());
    assert.equal(await blobs.head(marked[0] as string), null);
    assert.ok(!(await packRows(org)).some((row) => row.key === marked[0]));
    await store.flush();
    assert.ok((await locationOf(org, chunk.digest))?.pack);
  });

  it("deletes a pack once no chunk names it, only after the grace period, and keeps packs with live chunks", async () => {
    const org = t().orgB.id;
    const kept = await someChunks(2);
    const dropped = await someChunks(2);
    await replicate(org, kept);
    await replicate(org, dropped);
    const keptPack = (await locationOf(org, (kept[0] as Chunk).digest)) as { pack: string };
    const droppedPack = (await locationOf(org, (dropped[0] as Chunk).digest)) as { pack: string };
    assert.notEqual(keptPack.pack, droppedPack.pack);
    await insertSnapshot(`snp-${"a".repeat(40)}`, org, t().orgB.defaultProjectId, { createdAt: clock.now() });
    await reference(`snp-${"a".repeat(40)}`, org, kept);
    nowMs += (grace + 1) * 1000;
    await collectUnreferencedChunks(deps(), cutoff());
    for (const chunk of dropped) assert.equal(await locationOf(org, chunk.digest), undefined);
    for (const chunk of kept) assert.ok(await locationOf(org, chunk.digest));
    // The rows went now; the pack they emptied is deleted with the next sweep (nothing touched it).
    assert.ok(await blobs.head(droppedPack.pack));
    await sweepDeadPacks(deps(), cutoff());
    assert.equal(await blobs.head(droppedPack.pack), null);
    assert.ok(await blobs.head(keptPack.pack));
    assert.ok(!(await packRows(org)).some((row) => row.key === droppedPack.pack));
  });

  it("never collects, even with no grace, a chunk touched since the oldest running replication began", async () => {
    const org = t().orgB.id;
    const chunks = await someChunks(2);
    await replicate(org, chunks);
    const lease = 600;
    // A replication of another snapshot began 300 s ago and runs on (its lease ends in 300 s);
    // it found these chunks stored 200 s ago and will reference them when it records its snapshot.
    nowMs += 200_000;
    const running = `snp-${"c".repeat(40)}`;
    await insertSnapshot(running, org, t().orgB.defaultProjectId, {
      createdAt: new Date(nowMs - 300_000),
      pendingUntil: new Date(nowMs + 300_000),
    });
    try {
      const withLease = await collectionCutoff(t().c.db, clock.now(), 0, lease);
      assert.equal(withLease.getTime(), nowMs - 300_000, "the running replication's start");
      await collectUnreferencedChunks(deps(), withLease);
      for (const chunk of chunks) assert.ok(await locationOf(org, chunk.digest), "kept for the running replication");
    } finally {
      await t().c.db.query("DELETE FROM sandbox_snapshots WHERE id = $1", [running]);
    }
    // Without a running replication the grace alone decides.
    assert.equal((await collectionCutoff(t().c.db, clock.now(), 0, lease)).getTime(), nowMs);
    await collectUnreferencedChunks(deps(), await collectionCutoff(t().c.db, clock.now(), 0, lease));
    for (const chunk of chunks) assert.equal(await locationOf(org, chunk.digest), undefined);
  });

  it("repacks a sparse pack: live chunks move in one transaction, the old pack outlives the move by the grace period", async () => {
    const org = t().orgA.id;
    const chunks = await someChunks(8);
    await replicate(org, chunks);
    const oldPack = ((await locationOf(org, (chunks[0] as Chunk).digest)) as { pack: string }).pack;
    const live = chunks.slice(0, 3);
    const snapshotId = `snp-${"b".repeat(40)}`;
    await insertSnapshot(snapshotId, org, t().orgA.defaultProjectId, { createdAt: clock.now() });
    await reference(snapshotId, org, live);
    // A rebuild looks the locations up now, before the repack.
    const reader = new IndexedChunkSource(t().c.db, blobs, org);
    await reader.preload(live.map((chunk) => chunk.digest));
    nowMs += (grace + 1) * 1000;
    await collectUnreferencedChunks(deps(), cutoff());

    const result = await repackSparsePacks(deps(), cutoff());
    assert.ok(result.chunks >= 3 && result.packs >= 1, JSON.stringify(result));
    for (const chunk of live) {
      const location = await locationOf(org, chunk.digest);
      assert.ok(location?.pack && location.pack !== oldPack, "moved to a new pack");
    }
    // The old pack is now nameless but touched by the move: kept for the grace period.
    await sweepDeadPacks(deps(), cutoff());
    assert.ok(await blobs.head(oldPack), "kept within the grace period");
    nowMs += (grace + 1) * 1000;
    await sweepDeadPacks(deps(), cutoff());
    assert.equal(await blobs.head(oldPack), null, "deleted after it");
    // The rebuild holding the old locations finds the chunks by looking them up again.
    for (const chunk of live) assert.ok((await reader.get(chunk.digest))?.equals(chunk.compressed));
    // A snapshot's chunk that is really gone stays missing.
    const [lost] = await someChunks(1);
    assert.equal(await reader.get((lost as Chunk).digest), null);
  });

  it("leaves a damaged chunk in its pack at a repack (the copy would launder it into a well-named pack)", async () => {
    const org = t().orgB.id;
    const chunks = await someChunks(6);
    await replicate(org, chunks);
    const [damaged, intact] = chunks as [Chunk, Chunk];
    const oldPack = ((await locationOf(org, damaged.digest)) as { pack: string }).pack;
    const snapshotId = `snp-${"d".repeat(40)}`;
    await insertSnapshot(snapshotId, org, t().orgB.defaultProjectId, { createdAt: clock.now() });
    await reference(snapshotId, org, [damaged, intact]);
    // One byte of the damaged chunk flipped in the blob store.
    const at = ((await locationOf(org, damaged.digest)) as { offset: number }).offset + 100;
    const file = (blobs as FsBlobStore).fileOf(oldPack);
    const bytes = await readFile(file);
    bytes[at] = (bytes[at] ?? 0) ^ 0xff;
    await chmod(file, 0o600);
    await writeFile(file, bytes);
    nowMs += (grace + 1) * 1000;
    await collectUnreferencedChunks(deps(), cutoff());

    const result = await repackSparsePacks(deps(), cutoff());
    assert.equal(result.chunks, 1, JSON.stringify(result));
    assert.notEqual(((await locationOf(org, intact.digest)) as { pack: string }).pack, oldPack, "the intact one moved");
    assert.equal(((await locationOf(org, damaged.digest)) as { pack: string }).pack, oldPack, "the damaged one stayed");
    assert.match(t().logs(), /a damaged chunk is not repacked/);
    // Its pack is kept (a row still names it), and a rebuild still finds the chunk damaged.
    nowMs += (grace + 1) * 1000;
    await sweepDeadPacks(deps(), cutoff());
    assert.ok(await blobs.head(oldPack));
    const reader = new IndexedChunkSource(t().c.db, blobs, org);
    assert.equal((await reader.get(damaged.digest))?.equals(damaged.compressed), false);
  });

  it("reads and collects chunks stored before packs (one object each, rows without a pack)", async () => {
    const org = t().orgB.id;
    const [legacy] = await someChunks(1);
    if (!legacy) throw new Error("no chunk");
    await repo.touchChunks(t().c.db, org, [legacy.digest], clock.now());
    await blobChunkStore(blobs, chunkPrefix(org)).put(legacy.digest, legacy.compressed, legacy.plain.length);
    await repo.recordChunkSizes(t().c.db, org, [{ digest: legacy.digest, storedBytes: legacy.compressed.length }]);
    const reader = new IndexedChunkSource(t().c.db, blobs, org);
    await reader.preload([legacy.digest]);
    assert.ok((await reader.get(legacy.digest))?.equals(legacy.compressed));
    // A replication knows it is stored and does not store it again.
    assert.deepEqual(await replicate(org, [legacy]), { stored: 0, packs: 0 });
    nowMs += (grace + 1) * 1000;
    assert.ok((await collectUnreferencedChunks(deps(), cutoff())) >= 1);
    assert.equal(await blobs.head(chunkKey(chunkPrefix(org), legacy.digest)), null);
  });
});
