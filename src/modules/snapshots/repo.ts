// SQL of snapshots, their replication and the chunks they reference (migration 0011; where
// chunks lie in packs: pack-repo.ts, migration 0020).
import type { Queryable } from "../../store/db.js";

export type SnapshotState = "pending" | "sealed" | "failed";
export type Replication = "none" | "pending" | "replicated" | "gave_up";

export interface SnapshotRow {
  id: string;
  org_id: string;
  project_id: string;
  source_sandbox_id: string;
  parent_snapshot_id: string | null;
  run_id: string;
  name: string | null;
  image: string;
  image_digest: string | null;
  lineage_path: string;
  storage_class: "standard" | "durable";
  workspace_capacity_gib: number | null;
  state: SnapshotState;
  durability: "local" | "replicated" | null;
  failure_code: string | null;
  failure_message: string | null;
  idempotency_key: string | null;
  request_hash: string;
  created_by: string;
  created_at: Date;
  sealed_at: Date | null;
  size_bytes: string | null;
  frozen_ms: number | null;
  replication: Replication;
  replication_lease_until: Date | null;
  replication_attempts: number;
  replication_error: string | null;
  replicate_after: Date | null;
  replicated_at: Date | null;
  manifest_key: string | null;
  chunk_count: number | null;
  new_chunk_count: number | null;
  plain_bytes: string | null;
  uploaded_bytes: string | null;
  /** The source's pinned volumes when the snapshot was taken; a restore pins them again. */
  volumes: { volume_id: string; version: string; target_path: string; name: string }[];
  /** The host holding its local copy (the sandbox's owner when taken) and that host's epoch then. */
  host_id: string | null;
  host_epoch: number | null;
}

const C = `id, org_id, project_id, source_sandbox_id, parent_snapshot_id, run_id, name, image, image_digest, lineage_path,
  storage_class, workspace_capacity_gib, state, durability, failure_code, failure_message, idempotency_key,
  request_hash, created_by, created_at, sealed_at, size_bytes::text AS size_bytes, frozen_ms, replication,
  replication_lease_until, replication_attempts, replication_error, replicate_after, replicated_at, manifest_key,
  chunk_count, new_chunk_count, plain_bytes::text AS plain_bytes, uploaded_bytes::text AS uploaded_bytes, volumes, host_id,
  host_epoch`;

export type NewSnapshot = Pick<
  SnapshotRow,
  | "id"
  | "org_id"
  | "project_id"
  | "source_sandbox_id"
  | "parent_snapshot_id"
  | "run_id"
  | "name"
  | "image"
  | "image_digest"
  | "lineage_path"
  | "storage_class"
  | "idempotency_key"
  | "request_hash"
  | "created_by"
  | "created_at"
  | "volumes"
  | "host_id"
  | "host_epoch"
>;

/** Inserts a pending snapshot; false when the sandbox already has one pending (the unique index). */
export async function insertPending(q: Queryable, s: NewSnapshot): Promise<boolean> {
  const { rows } = await q.query(
    `INSERT INTO sandbox_snapshots (id, org_id, project_id, source_sandbox_id, parent_snapshot_id, run_id, name, image,
       image_digest, lineage_path, storage_class, state, idempotency_key, request_hash, created_by, created_at, volumes,
       host_id, host_epoch)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'pending', $12, $13, $14, $15, $16::jsonb, $17, $18)
     ON CONFLICT DO NOTHING RETURNING id`,
    [
      s.id,
      s.org_id,
      s.project_id,
      s.source_sandbox_id,
      s.parent_snapshot_id,
      s.run_id,
      s.name,
      s.image,
      s.image_digest,
      s.lineage_path,
      s.storage_class,
      s.idempotency_key,
      s.request_hash,
      s.created_by,
      s.created_at,
      JSON.stringify(s.volumes),
      s.host_id,
      s.host_epoch,
    ],
  );
  return rows.length > 0;
}

/** The organization's snapshots that count against `snapshots.total`: pending and sealed (a failed one holds nothing). */
export async function countKept(q: Queryable, orgId: string): Promise<number> {
  const { rows } = await q.query<{ n: string }>(
    "SELECT count(*)::text AS n FROM sandbox_snapshots WHERE org_id = $1 AND state IN ('pending', 'sealed')",
    [orgId],
  );
  return Number(rows[0]?.n ?? 0);
}

export async function getSnapshot(
  q: Queryable,
  id: string,
  lock: "" | "update" | "share" = "",
): Promise<SnapshotRow | null> {
  const suffix = lock === "update" ? " FOR UPDATE" : lock === "share" ? " FOR SHARE" : "";
  const { rows } = await q.query<SnapshotRow>(`SELECT ${C} FROM sandbox_snapshots WHERE id = $1${suffix}`, [id]);
  return rows[0] ?? null;
}

export async function findByKey(
  q: Queryable,
  orgId: string,
  sandboxId: string,
  key: string,
): Promise<SnapshotRow | null> {
  const { rows } = await q.query<SnapshotRow>(
    `SELECT ${C} FROM sandbox_snapshots WHERE org_id = $1 AND source_sandbox_id = $2 AND idempotency_key = $3`,
    [orgId, sandboxId, key],
  );
  return rows[0] ?? null;
}

export async function pendingOf(q: Queryable, sandboxId: string): Promise<SnapshotRow | null> {
  const { rows } = await q.query<SnapshotRow>(
    `SELECT ${C} FROM sandbox_snapshots WHERE source_sandbox_id = $1 AND state = 'pending'`,
    [sandboxId],
  );
  return rows[0] ?? null;
}

/** Whether the sandbox has a snapshot that has not resolved (pending, or sealed and still replicating). */
export async function hasUndurable(q: Queryable, sandboxId: string): Promise<boolean> {
  const { rows } = await q.query(
    `SELECT 1 FROM sandbox_snapshots
      WHERE source_sandbox_id = $1 AND (state = 'pending' OR (state = 'sealed' AND replication = 'pending')) LIMIT 1`,
    [sandboxId],
  );
  return rows.length > 0;
}

export async function seal(
  q: Queryable,
  id: string,
  at: Date,
  sealed: { capacityGiB: number; sizeBytes: number; frozenMs: number; replicate: boolean },
): Promise<SnapshotRow | null> {
  const { rows } = await q.query<SnapshotRow>(
    `UPDATE sandbox_snapshots SET state = 'sealed', durability = 'local', sealed_at = $2, workspace_capacity_gib = $3,
       size_bytes = $4, frozen_ms = $5, replication = $6, replicate_after = $2
     WHERE id = $1 AND state = 'pending' RETURNING ${C}`,
    [
      id,
      at,
      sealed.capacityGiB,
      Math.round(sealed.sizeBytes),
      Math.round(sealed.frozenMs),
      sealed.replicate ? "pending" : "none",
    ],
  );
  return rows[0] ?? null;
}

export async function fail(q: Queryable, id: string, code: string, message: string): Promise<SnapshotRow | null> {
  const { rows } = await q.query<SnapshotRow>(
    `UPDATE sandbox_snapshots SET state = 'failed', failure_code = $2, failure_message = $3
     WHERE id = $1 AND state = 'pending' RETURNING ${C}`,
    [id, code, message],
  );
  return rows[0] ?? null;
}

/** Snapshots the host's earlier processes (epochs) left pending: no process of this host is taking them any more. */
export async function pendingOfEarlierEpochs(
  q: Queryable,
  owner: { hostId: string; epoch: number },
): Promise<SnapshotRow[]> {
  const { rows } = await q.query<SnapshotRow>(
    `SELECT ${C} FROM sandbox_snapshots WHERE state = 'pending' AND host_id = $1 AND host_epoch IS DISTINCT FROM $2`,
    [owner.hostId, owner.epoch],
  );
  return rows;
}

export async function listPage(
  q: Queryable,
  filter: {
    orgId: string;
    projectId: string;
    name?: string | undefined;
    sandboxId?: string | undefined;
    /** Only snapshots whose lineage_path is this path or one of its ancestors (a sandbox-scoped credential). */
    lineageOf?: string | undefined;
    after: { at: Date; id: string } | null;
    limit: number;
  },
): Promise<SnapshotRow[]> {
  const params: unknown[] = [filter.orgId, filter.projectId];
  const where = ["org_id = $1", "project_id = $2", "state <> 'failed'"];
  if (filter.name !== undefined) {
    params.push(filter.name);
    where.push(`name = $${params.length}`);
  }
  if (filter.sandboxId !== undefined) {
    params.push(filter.sandboxId);
    where.push(`source_sandbox_id = $${params.length}`);
  }
  if (filter.lineageOf !== undefined) {
    params.push(filter.lineageOf);
    where.push(`($${params.length} = lineage_path OR starts_with($${params.length}, lineage_path || '.'))`);
  }
  if (filter.after) {
    params.push(filter.after.at, filter.after.id);
    where.push(`(created_at, id) < ($${params.length - 1}, $${params.length})`);
  }
  params.push(filter.limit);
  const { rows } = await q.query<SnapshotRow>(
    `SELECT ${C} FROM sandbox_snapshots WHERE ${where.join(" AND ")}
      ORDER BY created_at DESC, id DESC LIMIT $${params.length}`,
    params,
  );
  return rows;
}

/** Sandboxes still restoring from the snapshot (they read its files until they exist on their own). */
export async function restoresReading(q: Queryable, snapshotId: string): Promise<number> {
  const { rows } = await q.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM sandboxes
      WHERE snapshot_id = $1 AND state IN ('requested', 'reserved', 'materializing') AND desired_state <> 'deleted'`,
    [snapshotId],
  );
  return Number(rows[0]?.n ?? 0);
}

export async function deleteSnapshot(q: Queryable, id: string): Promise<void> {
  await q.query("DELETE FROM sandbox_snapshots WHERE id = $1", [id]);
}

/** Takes the next snapshot due for replication under a lease; null when none is due. */
/** The next replication due among the host's snapshots (only the host holding the sealed copy can replicate it). */
export async function claimReplication(
  q: Queryable,
  now: Date,
  leaseUntil: Date,
  hostId: string,
): Promise<SnapshotRow | null> {
  const { rows } = await q.query<SnapshotRow>(
    `UPDATE sandbox_snapshots SET replication_lease_until = $2, replication_attempts = replication_attempts + 1
      WHERE id = (
        SELECT id FROM sandbox_snapshots
         WHERE host_id = $3 AND replication = 'pending' AND state = 'sealed' AND replicate_after <= $1
           AND (replication_lease_until IS NULL OR replication_lease_until < $1)
         ORDER BY replicate_after LIMIT 1 FOR UPDATE SKIP LOCKED)
      RETURNING ${C}`,
    [now, leaseUntil, hostId],
  );
  return rows[0] ?? null;
}

/** When the earliest replication leased now ends (null when none is), every process's. */
export async function earliestLeaseEnd(q: Queryable, now: Date): Promise<Date | null> {
  const { rows } = await q.query<{ until: Date | null }>(
    `SELECT min(replication_lease_until) AS until FROM sandbox_snapshots
      WHERE replication = 'pending' AND replication_lease_until >= $1`,
    [now],
  );
  const until = rows[0]?.until;
  return until ? new Date(until) : null;
}

/** Snapshots whose replication is leased now (at start: leases of a previous process, maybe). */
export async function leasedReplications(q: Queryable, now: Date, hostId: string): Promise<SnapshotRow[]> {
  const { rows } = await q.query<SnapshotRow>(
    `SELECT ${C} FROM sandbox_snapshots
      WHERE host_id = $2 AND replication = 'pending' AND state = 'sealed' AND replication_lease_until >= $1`,
    [now, hostId],
  );
  return rows;
}

/** Releases a replication's lease so it may be claimed at once. */
export async function releaseReplicationLease(q: Queryable, id: string): Promise<void> {
  await q.query(
    "UPDATE sandbox_snapshots SET replication_lease_until = NULL WHERE id = $1 AND replication = 'pending'",
    [id],
  );
}

export async function recordReplicated(
  q: Queryable,
  id: string,
  at: Date,
  result: { manifestKey: string; chunks: number; newChunks: number; plainBytes: number; uploadedBytes: number },
): Promise<SnapshotRow | null> {
  const { rows } = await q.query<SnapshotRow>(
    `UPDATE sandbox_snapshots SET replication = 'replicated', durability = 'replicated', replicated_at = $2,
       replication_lease_until = NULL, replication_error = NULL, manifest_key = $3, chunk_count = $4,
       new_chunk_count = $5, plain_bytes = $6, uploaded_bytes = $7
     WHERE id = $1 AND replication = 'pending' RETURNING ${C}`,
    [id, at, result.manifestKey, result.chunks, result.newChunks, result.plainBytes, result.uploadedBytes],
  );
  return rows[0] ?? null;
}

/** A failed attempt: tried again after `retryAt`, or given up (the snapshot stays local). */
export async function replicationFailed(
  q: Queryable,
  id: string,
  error: string,
  retryAt: Date | null,
): Promise<SnapshotRow | null> {
  const { rows } = await q.query<SnapshotRow>(
    `UPDATE sandbox_snapshots SET replication = $3, replication_error = $2, replicate_after = $4,
       replication_lease_until = NULL
     WHERE id = $1 AND replication = 'pending' RETURNING ${C}`,
    [id, error, retryAt ? "pending" : "gave_up", retryAt],
  );
  return rows[0] ?? null;
}

/** The latest replicated snapshot of the sandbox other than `except` (a base for the next one's delta). */
export async function latestReplicatedOf(q: Queryable, sandboxId: string, except: string): Promise<SnapshotRow | null> {
  const { rows } = await q.query<SnapshotRow>(
    `SELECT ${C} FROM sandbox_snapshots
      WHERE source_sandbox_id = $1 AND id <> $2 AND replication = 'replicated'
      ORDER BY created_at DESC LIMIT 1`,
    [sandboxId, except],
  );
  return rows[0] ?? null;
}

/**
 * Marks chunks as used now and reports which of them the blob store may not hold (no row
 * before, a row of a store cut short by a crash, or one just collected): those must be
 * stored. Waits on a collection that is deleting one of them until it commits.
 */
export async function touchChunks(q: Queryable, orgId: string, digests: string[], now: Date): Promise<Set<string>> {
  if (digests.length === 0) return new Set();
  const { rows } = await q.query<{ digest: string; missing: boolean }>(
    `INSERT INTO blob_chunks (org_id, digest, stored_bytes, touched_at)
       SELECT $1, d, 0, $3 FROM unnest($2::text[]) AS d
     ON CONFLICT (org_id, digest) DO UPDATE SET touched_at = EXCLUDED.touched_at
     RETURNING digest, stored_bytes = 0 AS missing`,
    [orgId, digests, now],
  );
  return new Set(rows.filter((row) => row.missing).map((row) => row.digest));
}

/**
 * Records chunks as stored each as an object of its own (their compressed sizes), in one
 * statement: how chunks were stored before packs (pack-repo.ts pointChunksAtPack now); the
 * tests make such rows to show they still restore and are collected.
 */
export async function recordChunkSizes(
  q: Queryable,
  orgId: string,
  chunks: { digest: string; storedBytes: number }[],
): Promise<void> {
  if (chunks.length === 0) return;
  await q.query(
    `UPDATE blob_chunks c SET stored_bytes = v.bytes
       FROM unnest($2::text[], $3::bigint[]) AS v(digest, bytes)
      WHERE c.org_id = $1 AND c.digest = v.digest`,
    [orgId, chunks.map((chunk) => chunk.digest), chunks.map((chunk) => chunk.storedBytes)],
  );
}

export async function insertSnapshotChunks(q: Queryable, snapshotId: string, orgId: string, digests: string[]) {
  if (digests.length === 0) return;
  await q.query(
    `INSERT INTO snapshot_chunks (snapshot_id, org_id, digest)
       SELECT $1, $2, d FROM unnest($3::text[]) AS d ON CONFLICT DO NOTHING`,
    [snapshotId, orgId, digests],
  );
}

/**
 * Up to `limit` chunks no snapshot references and no replication touched since
 * `touchedBefore`, recorded as possibly missing (stored_bytes 0) and committed before any
 * blob is deleted: a collection cut short by a crash rolls its deletes back, and a row
 * still claiming its chunk is stored would let a later replication reuse a chunk the blob
 * store no longer has. Returns them for takeGarbageChunks.
 */
export async function markGarbageChunks(
  q: Queryable,
  touchedBefore: Date,
  limit: number,
): Promise<{ org_id: string; digest: string }[]> {
  const { rows } = await q.query<{ org_id: string; digest: string }>(
    `UPDATE blob_chunks SET stored_bytes = 0 WHERE (org_id, digest) IN (
       SELECT c.org_id, c.digest FROM blob_chunks c
        WHERE c.touched_at < $1
          AND NOT EXISTS (SELECT 1 FROM snapshot_chunks s WHERE s.org_id = c.org_id AND s.digest = c.digest)
        LIMIT $2 FOR UPDATE SKIP LOCKED)
     RETURNING org_id, digest`,
    [touchedBefore, limit],
  );
  return rows;
}

/**
 * Deletes (in the caller's transaction) the marked chunk rows that are still garbage (not
 * referenced, not touched since `touchedBefore`); returns them so the blobs of those stored
 * before packs (no pack_key) are deleted before the transaction commits. A packed chunk's
 * bytes go with its pack, once no row names it (pack-repo.ts).
 */
export async function takeGarbageChunks(
  q: Queryable,
  marked: { org_id: string; digest: string }[],
  touchedBefore: Date,
): Promise<{ org_id: string; digest: string; pack_key: string | null }[]> {
  if (marked.length === 0) return [];
  const { rows } = await q.query<{ org_id: string; digest: string; pack_key: string | null }>(
    `DELETE FROM blob_chunks WHERE (org_id, digest) IN (
       SELECT c.org_id, c.digest FROM blob_chunks c
         JOIN unnest($1::text[], $2::text[]) AS m (org_id, digest) ON m.org_id = c.org_id AND m.digest = c.digest
        WHERE c.touched_at < $3
          AND NOT EXISTS (SELECT 1 FROM snapshot_chunks s WHERE s.org_id = c.org_id AND s.digest = c.digest)
        FOR UPDATE)
     RETURNING org_id, digest, pack_key`,
    [marked.map((row) => row.org_id), marked.map((row) => row.digest), touchedBefore],
  );
  return rows;
}

/** Queues the deletion of every blob under `prefix` (done by the collector, or at once by the caller). */
export async function queueBlobDeletion(q: Queryable, orgId: string, prefix: string, at: Date): Promise<void> {
  await q.query(
    "INSERT INTO blob_deletions (prefix, org_id, requested_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    [prefix, orgId, at],
  );
}

export async function pendingBlobDeletions(q: Queryable, limit: number): Promise<string[]> {
  const { rows } = await q.query<{ prefix: string }>(
    "SELECT prefix FROM blob_deletions ORDER BY requested_at LIMIT $1",
    [limit],
  );
  return rows.map((row) => row.prefix);
}

export async function blobDeletionDone(q: Queryable, prefix: string): Promise<void> {
  await q.query("DELETE FROM blob_deletions WHERE prefix = $1", [prefix]);
}
