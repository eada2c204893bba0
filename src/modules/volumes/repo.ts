// SQL of volumes: the volume rows, their immutable versions, the verified blobs of an
// organization, the blobs each volume references (for used_bytes) and open pushes.
import type { Cursor } from "../../lib/page-token.js";
import type { Queryable } from "../../store/db.js";

export interface VolumeRow {
  id: string;
  org_id: string;
  project_id: string;
  name: string;
  description: string;
  quota_bytes: string;
  used_bytes: string;
  current_version_digest: string;
  created_at: Date;
  updated_at: Date;
  created_by: string;
}

export interface VersionRow {
  volume_id: string;
  version_digest: string;
  parent_version_digest: string;
  content_digest: string;
  file_count: string;
  size_bytes: string;
  created_at: Date;
  created_by: string;
}

export interface PushRow {
  id: string;
  org_id: string;
  volume_id: string;
  parent_version_digest: string;
  manifest_key: string;
  expires_at: Date;
  created_at: Date;
  created_by: string;
  published_digest: string | null;
}

const V = `id, org_id, project_id, name, description, quota_bytes::text, used_bytes::text, current_version_digest,
  created_at, updated_at, created_by`;
const VV = `volume_id, version_digest, parent_version_digest, content_digest, file_count::text, size_bytes::text,
  created_at, created_by`;
const P = `id, org_id, volume_id, parent_version_digest, manifest_key, expires_at, created_at, created_by, published_digest`;

export async function insertVolume(q: Queryable, v: VolumeRow): Promise<VolumeRow | null> {
  const { rows } = await q.query<VolumeRow>(
    `INSERT INTO volumes (id, org_id, project_id, name, description, quota_bytes, used_bytes, current_version_digest,
       created_at, updated_at, created_by)
     VALUES ($1, $2, $3, $4, $5, $6::bigint, 0, '', $7, $8, $9)
     ON CONFLICT (project_id, name) DO NOTHING RETURNING ${V}`,
    [v.id, v.org_id, v.project_id, v.name, v.description, v.quota_bytes, v.created_at, v.updated_at, v.created_by],
  );
  return rows[0] ?? null;
}

export async function getVolume(q: Queryable, orgId: string, id: string, forUpdate = false): Promise<VolumeRow | null> {
  const { rows } = await q.query<VolumeRow>(
    `SELECT ${V} FROM volumes WHERE org_id = $1 AND id = $2${forUpdate ? " FOR UPDATE" : ""}`,
    [orgId, id],
  );
  return rows[0] ?? null;
}

export async function listVolumes(
  q: Queryable,
  orgId: string,
  projectId: string,
  after: Cursor | null,
  limit: number,
): Promise<VolumeRow[]> {
  const { rows } = after
    ? await q.query<VolumeRow>(
        `SELECT ${V} FROM volumes WHERE org_id = $1 AND project_id = $2
           AND (created_at, id) < ($3::timestamptz, $4::text)
         ORDER BY created_at DESC, id DESC LIMIT $5`,
        [orgId, projectId, after.at, after.id, limit],
      )
    : await q.query<VolumeRow>(
        `SELECT ${V} FROM volumes WHERE org_id = $1 AND project_id = $2 ORDER BY created_at DESC, id DESC LIMIT $3`,
        [orgId, projectId, limit],
      );
  return rows;
}

// Every sub-statement of a WITH sees the snapshot from before the statement, so the
// versions are read before the volume's delete cascades to them.
const VERSIONS_OF_GONE =
  "COALESCE((SELECT array_agg(v.version_digest) FROM volume_versions v WHERE v.volume_id = gone.id), '{}')";

/**
 * Deletes the volume and leaves a tombstone naming its versions: the collector releases its
 * blob references and removes the manifests no other volume has.
 */
export async function deleteVolume(q: Queryable, orgId: string, id: string, at: Date): Promise<boolean> {
  const { rows } = await q.query(
    `WITH gone AS (DELETE FROM volumes WHERE org_id = $1 AND id = $2 RETURNING id, org_id)
     INSERT INTO volume_tombstones (volume_id, org_id, deleted_at, version_digests)
     SELECT id, org_id, $3, ${VERSIONS_OF_GONE} FROM gone RETURNING volume_id`,
    [orgId, id, at],
  );
  return rows.length > 0;
}

export async function countProjectVolumes(q: Queryable, projectId: string): Promise<number> {
  const { rows } = await q.query<{ n: string }>("SELECT count(*)::text AS n FROM volumes WHERE project_id = $1", [
    projectId,
  ]);
  return Number(rows[0]?.n ?? 0);
}

export async function deleteProjectVolumes(q: Queryable, projectId: string, at: Date): Promise<void> {
  await q.query(
    `WITH gone AS (DELETE FROM volumes WHERE project_id = $1 RETURNING id, org_id)
     INSERT INTO volume_tombstones (volume_id, org_id, deleted_at, version_digests)
     SELECT id, org_id, $2, ${VERSIONS_OF_GONE} FROM gone`,
    [projectId, at],
  );
}

export async function getVersion(q: Queryable, volumeId: string, digest: string): Promise<VersionRow | null> {
  const { rows } = await q.query<VersionRow>(
    `SELECT ${VV} FROM volume_versions WHERE volume_id = $1 AND version_digest = $2`,
    [volumeId, digest],
  );
  return rows[0] ?? null;
}

export async function insertVersion(q: Queryable, v: VersionRow): Promise<void> {
  await q.query(
    `INSERT INTO volume_versions (volume_id, version_digest, parent_version_digest, content_digest, file_count,
       size_bytes, created_at, created_by)
     VALUES ($1, $2, $3, $4, $5::bigint, $6::bigint, $7, $8) ON CONFLICT DO NOTHING`,
    [
      v.volume_id,
      v.version_digest,
      v.parent_version_digest,
      v.content_digest,
      v.file_count,
      v.size_bytes,
      v.created_at,
      v.created_by,
    ],
  );
}

/** Total size of the given blobs the volume does not reference yet. */
export async function newRefBytes(q: Queryable, volumeId: string, digests: string[], sizes: number[]): Promise<number> {
  const { rows } = await q.query<{ n: string | null }>(
    `SELECT sum(b.size)::text AS n FROM unnest($2::text[], $3::bigint[]) AS b (digest, size)
      WHERE NOT EXISTS (SELECT 1 FROM volume_blob_refs r WHERE r.volume_id = $1 AND r.digest = b.digest)`,
    [volumeId, digests, sizes],
  );
  return Number(rows[0]?.n ?? 0);
}

export async function addRefs(
  q: Queryable,
  orgId: string,
  volumeId: string,
  digests: string[],
  sizes: number[],
): Promise<void> {
  await q.query(
    `INSERT INTO volume_blob_refs (volume_id, org_id, digest, size_bytes)
     SELECT $1, $2, b.digest, b.size FROM unnest($3::text[], $4::bigint[]) AS b (digest, size) ON CONFLICT DO NOTHING`,
    [volumeId, orgId, digests, sizes],
  );
}

export async function setCurrentVersion(
  q: Queryable,
  volumeId: string,
  digest: string,
  usedBytes: number,
  at: Date,
): Promise<void> {
  await q.query(
    "UPDATE volumes SET current_version_digest = $2, used_bytes = $3::bigint, updated_at = $4 WHERE id = $1",
    [volumeId, digest, String(usedBytes), at],
  );
}

/** The verified blobs among `digests`, with their sizes. */
export async function verifiedBlobs(q: Queryable, orgId: string, digests: string[]): Promise<Map<string, number>> {
  const { rows } = await q.query<{ digest: string; size_bytes: string }>(
    "SELECT digest, size_bytes::text FROM volume_blobs WHERE org_id = $1 AND digest = ANY($2::text[])",
    [orgId, digests],
  );
  return new Map(rows.map((row) => [row.digest, Number(row.size_bytes)]));
}

/**
 * The verified blobs among `digests`, with their sizes, touched now: the collector leaves a
 * blob touched since its cutoff alone, and waits on this row lock when it is collecting one
 * of them (then the blob is gone, and not answered).
 */
export async function touchVerified(
  q: Queryable,
  orgId: string,
  digests: string[],
  now: Date,
): Promise<Map<string, number>> {
  const { rows } = await q.query<{ digest: string; size_bytes: string }>(
    `UPDATE volume_blobs SET touched_at = $3 WHERE org_id = $1 AND digest = ANY($2::text[])
     RETURNING digest, size_bytes::text`,
    [orgId, digests, now],
  );
  return new Map(rows.map((row) => [row.digest, Number(row.size_bytes)]));
}

export async function recordVerified(q: Queryable, orgId: string, digest: string, size: number, at: Date) {
  await q.query(
    `INSERT INTO volume_blobs (org_id, digest, size_bytes, verified_at, touched_at) VALUES ($1, $2, $3, $4, $4)
     ON CONFLICT (org_id, digest) DO UPDATE SET touched_at = EXCLUDED.touched_at`,
    [orgId, digest, size, at],
  );
}

export async function insertPush(q: Queryable, p: PushRow): Promise<void> {
  await q.query(`INSERT INTO volume_pushes (${P}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL)`, [
    p.id,
    p.org_id,
    p.volume_id,
    p.parent_version_digest,
    p.manifest_key,
    p.expires_at,
    p.created_at,
    p.created_by,
  ]);
}

export async function getPush(q: Queryable, orgId: string, id: string): Promise<PushRow | null> {
  const { rows } = await q.query<PushRow>(`SELECT ${P} FROM volume_pushes WHERE org_id = $1 AND id = $2`, [orgId, id]);
  return rows[0] ?? null;
}

export async function markPublished(q: Queryable, id: string, digest: string): Promise<void> {
  await q.query("UPDATE volume_pushes SET published_digest = $2 WHERE id = $1", [id, digest]);
}

export async function recordPushBlobs(q: Queryable, pushId: string, orgId: string, digests: string[]): Promise<void> {
  await q.query(
    `INSERT INTO volume_push_blobs (push_id, org_id, digest) SELECT $1, $2, d FROM unnest($3::text[]) AS d
     ON CONFLICT DO NOTHING`,
    [pushId, orgId, digests],
  );
}

export async function expiredPushes(q: Queryable, now: Date, limit: number): Promise<PushRow[]> {
  const { rows } = await q.query<PushRow>(
    `SELECT ${P} FROM volume_pushes WHERE expires_at < $1 ORDER BY expires_at LIMIT $2`,
    [now, limit],
  );
  return rows;
}

/**
 * Blobs the push asked to upload that were never verified (so nothing can reference them
 * without verifying them again) and that no other push asked for: what it leaves behind.
 * A verified blob is left to the collector of unreferenced blobs (collector.ts).
 */
export async function orphanedBlobsOf(q: Queryable, push: PushRow): Promise<string[]> {
  const { rows } = await q.query<{ digest: string }>(
    `SELECT pb.digest FROM volume_push_blobs pb
      WHERE pb.push_id = $1
        AND NOT EXISTS (SELECT 1 FROM volume_blobs b WHERE b.org_id = $2 AND b.digest = pb.digest)
        AND NOT EXISTS (SELECT 1 FROM volume_push_blobs o WHERE o.org_id = $2 AND o.digest = pb.digest
                         AND o.push_id <> $1)`,
    [push.id, push.org_id],
  );
  return rows.map((row) => row.digest);
}

export async function deletePush(q: Queryable, id: string): Promise<void> {
  await q.query("DELETE FROM volume_pushes WHERE id = $1", [id]);
}
