// The collector of the snapshot chunk store, in three steps: chunk rows no snapshot references
// (and, for chunks stored before packs, their objects), then packs no chunk row names any
// more, then repacks of packs that collections left mostly dead. Each honours the grace
// period: a chunk touched, or a pack written or emptied by a repack, within it is left alone,
// so a replication still storing one and a rebuild that just looked up an old location are
// safe.
import type { BlobStore } from "../drivers/blobs/interface.js";
import type { Clock } from "../lib/clock.js";
import type { Logger } from "../lib/logger.js";
import * as packRepo from "../modules/snapshots/pack-repo.js";
import { chunkPrefix, storeTrackedPack } from "../modules/snapshots/packed-chunks.js";
import { chunkKey } from "../modules/snapshots/replication/chunk-store.js";
import {
  PACK_TARGET_BYTES,
  PackBuilder,
  PackFormatError,
  readPackIndex,
} from "../modules/snapshots/replication/pack.js";
import { checkChunk } from "../modules/snapshots/replication/rebuild.js";
import { ChunkError, type Digest } from "../modules/snapshots/replication/types.js";
import * as repo from "../modules/snapshots/repo.js";
import type { Db } from "../store/db.js";

/** A pack of which less than this fraction of the chunk bytes is live is repacked. */
export const REPACK_LIVE_FRACTION = 0.5;
const PACK_BATCH = 100;
const CHUNK_BATCH = 200;

export interface PackCollectorDeps {
  db: Db;
  clock: Clock;
  blobs: BlobStore;
  log: Logger;
}

/**
 * What the collector may take: what nothing touched since the grace period began, nor since
 * the oldest replication running now (any process's) began: its lease was taken
 * `leaseSeconds` before it ends. The grace alone would let a short one (0 is allowed) take a
 * chunk a running replication found stored and reused, before that replication records its
 * snapshot's references to it.
 */
export async function collectionCutoff(db: Db, now: Date, graceSeconds: number, leaseSeconds: number): Promise<Date> {
  const grace = now.getTime() - graceSeconds * 1000;
  const leaseEnd = await repo.earliestLeaseEnd(db, now);
  const running = leaseEnd ? leaseEnd.getTime() - leaseSeconds * 1000 : Number.POSITIVE_INFINITY;
  return new Date(Math.min(grace, running));
}

/**
 * Deletes the chunk rows no snapshot references and no replication touched since `cutoff`.
 * Each batch is first recorded as possibly missing (committed), then its rows (and the
 * objects of chunks stored before packs) go in one transaction, so a replication that
 * touches one of them waits and then knows to store it again, and a crash between an
 * object's delete and the commit leaves a row that says "store it again", never one that
 * says "stored". A packed chunk's bytes go with its pack (sweepDeadPacks).
 */
export async function collectUnreferencedChunks(deps: PackCollectorDeps, cutoff: Date): Promise<number> {
  let collected = 0;
  for (;;) {
    const marked = await repo.markGarbageChunks(deps.db, cutoff, CHUNK_BATCH);
    collected += await deps.db.tx(async (q) => {
      const rows = await repo.takeGarbageChunks(q, marked, cutoff);
      for (const row of rows)
        if (row.pack_key === null) await deps.blobs.delete(chunkKey(chunkPrefix(row.org_id), row.digest as Digest));
      return rows.length;
    });
    if (marked.length < CHUNK_BATCH) return collected;
  }
}

/**
 * Deletes the packs no chunk row names and nothing touched since `cutoff`: each is marked
 * `deleting` (committed: no chunk can be pointed at it any more) before its object is
 * deleted, and forgotten after. A collection cut short leaves marked rows, finished first.
 */
export async function sweepDeadPacks(deps: PackCollectorDeps, cutoff: Date): Promise<number> {
  let deleted = 0;
  const finish = async (keys: string[]) => {
    for (const key of keys) {
      await deps.blobs.delete(key);
      await packRepo.dropPackRow(deps.db, key);
      deleted++;
    }
  };
  await finish(await packRepo.deletingPacks(deps.db, PACK_BATCH));
  for (;;) {
    const marked = await packRepo.markDeadPacks(deps.db, cutoff, PACK_BATCH);
    await finish(marked);
    if (marked.length < PACK_BATCH) break;
  }
  return deleted;
}

/**
 * Copies the live chunks of sparse packs (under REPACK_LIVE_FRACTION live, untouched since
 * `cutoff`) into new packs of their organization, re-points their rows in the transaction
 * that claims the new pack, and touches the old packs, which sweepDeadPacks deletes a grace
 * period later. A chunk that cannot be read from its old pack stays where it is (a rebuild
 * reports it missing, as it would have), and so does one whose bytes do not match its digest.
 * Returns how many chunks moved.
 */
export async function repackSparsePacks(
  deps: PackCollectorDeps,
  cutoff: Date,
  options: { liveFraction?: number; targetBytes?: number } = {},
): Promise<{ packs: number; chunks: number }> {
  const sparse = await packRepo.sparsePacks(deps.db, cutoff, options.liveFraction ?? REPACK_LIVE_FRACTION, PACK_BATCH);
  const targetBytes = options.targetBytes ?? PACK_TARGET_BYTES;
  const byOrg = new Map<string, string[]>();
  for (const pack of sparse) byOrg.set(pack.org_id, [...(byOrg.get(pack.org_id) ?? []), pack.key]);
  let packs = 0;
  let moved = 0;
  for (const [orgId, keys] of byOrg) {
    let builder = new PackBuilder();
    /** The old pack of each chunk in the builder. */
    let origins = new Map<Digest, string>();
    const write = async () => {
      if (builder.count === 0) return;
      const sealed = builder.seal(chunkPrefix(orgId));
      const from = origins;
      builder = new PackBuilder();
      origins = new Map();
      await storeTrackedPack(deps, orgId, sealed, async (q) => {
        const now = deps.clock.now();
        for (const old of new Set(from.values())) {
          const entries = sealed.entries.filter((entry) => from.get(entry.digest) === old);
          moved += await packRepo.moveChunks(q, orgId, old, sealed.key, entries, now);
        }
      });
      packs++;
    };
    for (const key of keys) {
      let index: Awaited<ReturnType<typeof readPackIndex>>;
      try {
        index = await readPackIndex(deps.blobs, key);
      } catch (error) {
        if (!(error instanceof PackFormatError)) throw error;
        deps.log.warn({ pack: key, err: error.message }, "a pack's index is unreadable: not repacked");
        continue;
      }
      if (index === null) continue;
      const plainSizes = new Map(index.map((entry) => [entry.digest, entry.plainSize]));
      for (const chunk of await packRepo.liveChunksOf(deps.db, key)) {
        const plainSize = plainSizes.get(chunk.digest);
        if (plainSize === undefined || origins.has(chunk.digest)) continue;
        const data = await deps.blobs.getRange(key, chunk.offset, chunk.length);
        if (data === null || data.length !== chunk.length) continue;
        // A damaged chunk stays where it is (a rebuild reports it corrupt, as it would have):
        // copied, it would live on in a pack whose name matches its bytes, and the damaged
        // pack, the evidence, would be deleted.
        const intact = await checkChunk(chunk.digest, plainSize, data).then(
          () => true,
          (error: unknown) => {
            if (!(error instanceof ChunkError)) throw error;
            deps.log.warn({ pack: key, digest: chunk.digest, err: error.message }, "a damaged chunk is not repacked");
            return false;
          },
        );
        if (!intact) continue;
        builder.append(chunk.digest, plainSize, data);
        origins.set(chunk.digest, key);
        if (builder.isFull(targetBytes)) await write();
      }
    }
    await write();
  }
  if (moved > 0) deps.log.info({ packs, chunks: moved }, "repacked the live chunks of sparse packs");
  return { packs, chunks: moved };
}
