// SQL of the volume collector (collector.ts): tombstones of deleted volumes, the pins that
// keep their references, and the verified blobs no reference holds.
import type { Queryable } from "../../store/db.js";

/** Sandbox states whose pins no longer hold anything (the sandbox is gone from its host). */
const ENDED = "('terminated', 'failed')";

export interface Tombstone {
  volume_id: string;
  org_id: string;
}

/**
 * Tombstones no live sandbox and no snapshot pins a version of (one statement, so a
 * snapshot taken from a sandbox that ends meanwhile is seen as one or the other).
 */
export async function releasableTombstones(q: Queryable, limit: number): Promise<Tombstone[]> {
  const { rows } = await q.query<Tombstone>(
    `SELECT t.volume_id, t.org_id FROM volume_tombstones t
      WHERE NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.org_id = t.org_id AND s.state NOT IN ${ENDED}
                          AND s.volumes @> jsonb_build_array(jsonb_build_object('volume_id', t.volume_id)))
        AND NOT EXISTS (SELECT 1 FROM sandbox_snapshots n WHERE n.org_id = t.org_id
                          AND n.volumes @> jsonb_build_array(jsonb_build_object('volume_id', t.volume_id)))
      ORDER BY t.deleted_at LIMIT $1`,
    [limit],
  );
  return rows;
}

/**
 * Serializes the publish of a version digest's manifest with its removal by the collector
 * (both hold it until they commit): a publish either records its version first (the
 * collector then sees it and keeps the manifest) or stores the manifest again after the
 * collector removed it.
 */
export async function lockManifest(q: Queryable, orgId: string, versionDigest: string): Promise<void> {
  await q.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`volume-manifest:${orgId}:${versionDigest}`]);
}

/**
 * Drops a deleted volume's references and its tombstone, and returns (locked, see
 * lockManifest) its version digests that no volume of the organization has any more, live
 * or deleted and not yet released: the manifests to remove before the caller commits.
 */
export async function releaseTombstone(q: Queryable, tombstone: Tombstone): Promise<string[]> {
  await q.query("DELETE FROM volume_blob_refs WHERE volume_id = $1", [tombstone.volume_id]);
  const { rows } = await q.query<{ version_digests: string[] }>(
    "DELETE FROM volume_tombstones WHERE volume_id = $1 RETURNING version_digests",
    [tombstone.volume_id],
  );
  const digests = [...new Set(rows[0]?.version_digests ?? [])].sort();
  const unused: string[] = [];
  for (const digest of digests) {
    await lockManifest(q, tombstone.org_id, digest);
    const { rows: held } = await q.query(
      `SELECT 1 FROM volume_versions v JOIN volumes o ON o.id = v.volume_id
        WHERE o.org_id = $1 AND v.version_digest = $2
       UNION ALL
       SELECT 1 FROM volume_tombstones t WHERE t.org_id = $1 AND $2 = ANY (t.version_digests)
       LIMIT 1`,
      [tombstone.org_id, digest],
    );
    if (held.length === 0) unused.push(digest);
  }
  return unused;
}

export interface GarbageBlob {
  org_id: string;
  digest: string;
}

/** Verified blobs untouched since `touchedBefore` that no volume references (candidates only). */
export async function markGarbageBlobs(q: Queryable, touchedBefore: Date, limit: number): Promise<GarbageBlob[]> {
  const { rows } = await q.query<GarbageBlob>(
    `SELECT b.org_id, b.digest FROM volume_blobs b
      WHERE b.touched_at < $1
        AND NOT EXISTS (SELECT 1 FROM volume_blob_refs r WHERE r.org_id = b.org_id AND r.digest = b.digest)
      LIMIT $2`,
    [touchedBefore, limit],
  );
  return rows;
}

/**
 * Deletes (in the caller's transaction) the marked rows that are still garbage, locking
 * them: a publish or an upload request touching one of them waits until the caller commits
 * (and then finds it gone); one that touched it first changed touched_at, which the lock's
 * re-check of the row sees, so it is left alone. Returns the rows whose blobs to delete
 * before the transaction commits.
 */
export async function takeGarbageBlobs(
  q: Queryable,
  marked: GarbageBlob[],
  touchedBefore: Date,
): Promise<GarbageBlob[]> {
  if (marked.length === 0) return [];
  const { rows } = await q.query<GarbageBlob>(
    `DELETE FROM volume_blobs WHERE (org_id, digest) IN (
       SELECT b.org_id, b.digest FROM volume_blobs b
         JOIN unnest($1::text[], $2::text[]) AS m (org_id, digest) ON m.org_id = b.org_id AND m.digest = b.digest
        WHERE b.touched_at < $3
          AND NOT EXISTS (SELECT 1 FROM volume_blob_refs r WHERE r.org_id = b.org_id AND r.digest = b.digest)
        FOR UPDATE)
     RETURNING org_id, digest`,
    [marked.map((row) => row.org_id), marked.map((row) => row.digest), touchedBefore],
  );
  return rows;
}

/** The versions (`<org>/<version>`) that sandboxes not yet ended pin: what a host's cache must keep. */
export async function pinnedVersions(q: Queryable, hostId: string | null = null): Promise<Set<string>> {
  const { rows } = await q.query<{ org_id: string; version: string }>(
    `SELECT DISTINCT s.org_id, v.value->>'version' AS version
       FROM sandboxes s, jsonb_array_elements(s.volumes) AS v
      WHERE s.state NOT IN ${ENDED} AND jsonb_array_length(s.volumes) > 0
        AND ($1::text IS NULL OR s.host_id = $1::text)`,
    [hostId],
  );
  return new Set(rows.map((row) => `${row.org_id}/${row.version}`));
}
