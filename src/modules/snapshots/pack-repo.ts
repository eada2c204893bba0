// SQL of packs and of where chunks lie in them (migration 0020). The order of the steps is
// what keeps a crash from leaving a chunk row that names a pack not (or no longer) stored:
// a pack is recorded (recordPackIntent) before its put, its chunks are pointed at it
// (pointChunksAtPack) only after, in a transaction that first checks the pack is not being
// deleted, and the collector commits `deleting` (markDeadPacks) before it deletes an object.
import type { Queryable } from "../../store/db.js";
import { chunkKey } from "./replication/chunk-store.js";
import type { ChunkLocation, PackEntry } from "./replication/pack.js";
import type { Digest } from "./replication/types.js";

/** Records a pack about to be put (its key is new: pack.ts makes every pack's bytes unique). */
export async function recordPackIntent(
  q: Queryable,
  pack: { key: string; orgId: string; chunkBytes: number; chunkCount: number },
  now: Date,
  options: { ifAbsent?: boolean } = {},
): Promise<void> {
  await q.query(
    `INSERT INTO blob_packs (key, org_id, chunk_bytes, chunk_count, created_at, touched_at)
     VALUES ($1, $2, $3, $4, $5, $5)
     ON CONFLICT (key) DO ${options.ifAbsent ? "NOTHING" : "UPDATE SET touched_at = EXCLUDED.touched_at"}`,
    [pack.key, pack.orgId, pack.chunkBytes, pack.chunkCount, now],
  );
}

/**
 * Touches the pack and reports whether chunks may be pointed at it: false when it is gone
 * or being deleted (a collection ran since its intent was recorded). Row-locks the pack
 * until the caller's transaction ends, so a collection waits for it.
 */
export async function claimPackForChunks(q: Queryable, key: string, now: Date): Promise<boolean> {
  const { rows } = await q.query(
    "UPDATE blob_packs SET touched_at = $2 WHERE key = $1 AND NOT deleting RETURNING key",
    [key, now],
  );
  return rows.length > 0;
}

/**
 * Records the pack's chunks as stored there. A chunk already recorded stored elsewhere (a
 * concurrent replication stored it too) keeps its location; its copy here is dead space.
 */
export async function pointChunksAtPack(
  q: Queryable,
  orgId: string,
  key: string,
  entries: readonly PackEntry[],
  now: Date,
): Promise<void> {
  if (entries.length === 0) return;
  await q.query(
    `INSERT INTO blob_chunks (org_id, digest, stored_bytes, touched_at, pack_key, pack_offset)
       SELECT $1, v.digest, v.bytes, $3, $2, v.at
         FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS v (digest, bytes, at)
     ON CONFLICT (org_id, digest) DO UPDATE
       SET stored_bytes = EXCLUDED.stored_bytes, pack_key = EXCLUDED.pack_key, pack_offset = EXCLUDED.pack_offset,
           touched_at = EXCLUDED.touched_at
       WHERE blob_chunks.stored_bytes = 0`,
    [
      orgId,
      key,
      now,
      entries.map((entry) => entry.digest),
      entries.map((entry) => entry.length),
      entries.map((entry) => entry.offset),
    ],
  );
}

/** Where each of `digests` lies, per the index; a digest with no row is left out. */
export async function chunkLocations(
  q: Queryable,
  orgId: string,
  prefix: string,
  digests: readonly Digest[],
): Promise<Map<Digest, ChunkLocation>> {
  const locations = new Map<Digest, ChunkLocation>();
  for (let at = 0; at < digests.length; at += 5000) {
    const { rows } = await q.query<{
      digest: Digest;
      pack_key: string | null;
      pack_offset: string | null;
      stored_bytes: string;
    }>(
      `SELECT digest, pack_key, pack_offset::text AS pack_offset, stored_bytes::text AS stored_bytes
         FROM blob_chunks WHERE org_id = $1 AND digest = ANY($2::text[])`,
      [orgId, digests.slice(at, at + 5000)],
    );
    for (const row of rows) {
      if (row.pack_key !== null)
        locations.set(row.digest, {
          pack: row.pack_key,
          offset: Number(row.pack_offset),
          length: Number(row.stored_bytes),
        });
      else
        locations.set(row.digest, { pack: null, key: chunkKey(prefix, row.digest), length: Number(row.stored_bytes) });
    }
  }
  return locations;
}

/**
 * Up to `limit` packs no chunk row points at and nothing wrote or emptied since
 * `touchedBefore`, marked `deleting` (committed by the caller before any object is
 * deleted). Returns their keys.
 */
export async function markDeadPacks(q: Queryable, touchedBefore: Date, limit: number): Promise<string[]> {
  const { rows } = await q.query<{ key: string }>(
    `UPDATE blob_packs SET deleting = true WHERE key IN (
       SELECT p.key FROM blob_packs p
        WHERE p.touched_at < $1
          AND NOT EXISTS (SELECT 1 FROM blob_chunks c WHERE c.pack_key = p.key)
        ORDER BY p.touched_at LIMIT $2 FOR UPDATE SKIP LOCKED)
     RETURNING key`,
    [touchedBefore, limit],
  );
  return rows.map((row) => row.key);
}

/** Marked packs left by a collection cut short (their objects may be gone already). */
export async function deletingPacks(q: Queryable, limit: number): Promise<string[]> {
  const { rows } = await q.query<{ key: string }>("SELECT key FROM blob_packs WHERE deleting LIMIT $1", [limit]);
  return rows.map((row) => row.key);
}

/** Forgets a pack whose object is deleted. */
export async function dropPackRow(q: Queryable, key: string): Promise<void> {
  await q.query("DELETE FROM blob_packs WHERE key = $1 AND deleting", [key]);
}

export interface SparsePack {
  key: string;
  org_id: string;
  chunk_bytes: number;
  live_bytes: number;
}

/**
 * Packs of which less than `liveFraction` of the chunk bytes are still pointed at (but some
 * are), untouched since `touchedBefore`: candidates for a repack.
 */
export async function sparsePacks(
  q: Queryable,
  touchedBefore: Date,
  liveFraction: number,
  limit: number,
): Promise<SparsePack[]> {
  const { rows } = await q.query<{ key: string; org_id: string; chunk_bytes: string; live_bytes: string }>(
    `SELECT p.key, p.org_id, p.chunk_bytes::text AS chunk_bytes, sum(c.stored_bytes)::text AS live_bytes
       FROM blob_packs p JOIN blob_chunks c ON c.pack_key = p.key AND c.stored_bytes > 0
      WHERE p.touched_at < $1 AND NOT p.deleting
      GROUP BY p.key, p.org_id, p.chunk_bytes
     HAVING sum(c.stored_bytes) < p.chunk_bytes * $2::float8
      ORDER BY p.org_id, p.key LIMIT $3`,
    [touchedBefore, liveFraction, limit],
  );
  return rows.map((row) => ({
    key: row.key,
    org_id: row.org_id,
    chunk_bytes: Number(row.chunk_bytes),
    live_bytes: Number(row.live_bytes),
  }));
}

/** The chunks still pointed at the pack (stored, not marked for collection). */
export async function liveChunksOf(
  q: Queryable,
  key: string,
): Promise<{ digest: Digest; offset: number; length: number }[]> {
  const { rows } = await q.query<{ digest: Digest; pack_offset: string; stored_bytes: string }>(
    `SELECT digest, pack_offset::text AS pack_offset, stored_bytes::text AS stored_bytes
       FROM blob_chunks WHERE pack_key = $1 AND stored_bytes > 0 ORDER BY pack_offset`,
    [key],
  );
  return rows.map((row) => ({ digest: row.digest, offset: Number(row.pack_offset), length: Number(row.stored_bytes) }));
}

/**
 * Re-points the chunks that still lie in `from` at their copies in `to` (in the caller's
 * transaction, after claimPackForChunks of `to`), and touches `from` so its object outlives
 * the move by a grace period (a rebuild may have just looked up the old location).
 * Returns how many moved.
 */
export async function moveChunks(
  q: Queryable,
  orgId: string,
  from: string,
  to: string,
  entries: readonly PackEntry[],
  now: Date,
): Promise<number> {
  if (entries.length === 0) return 0;
  const { rows } = await q.query(
    `UPDATE blob_chunks c SET pack_key = $3, pack_offset = v.at
       FROM unnest($4::text[], $5::bigint[]) AS v (digest, at)
      WHERE c.org_id = $1 AND c.digest = v.digest AND c.pack_key = $2
     RETURNING c.digest`,
    [orgId, from, to, entries.map((entry) => entry.digest), entries.map((entry) => entry.offset)],
  );
  await q.query("UPDATE blob_packs SET touched_at = $2 WHERE key = $1", [from, now]);
  return rows.length;
}
