// The egress module's SQL: the organization egress allowlist (migration 0018), the
// lineage paths the ledger's events need (migration 0019).
import type { Queryable } from "../../store/db.js";

export async function listAllowlist(q: Queryable, orgId: string): Promise<string[]> {
  const { rows } = await q.query<{ host_pattern: string }>(
    "SELECT host_pattern FROM org_egress_allowlist WHERE org_id = $1 ORDER BY host_pattern",
    [orgId],
  );
  return rows.map((row) => row.host_pattern);
}

/** Replaces the organization's whole list (in the caller's transaction). */
export async function replaceAllowlist(q: Queryable, orgId: string, patterns: string[], now: Date): Promise<void> {
  await q.query("DELETE FROM org_egress_allowlist WHERE org_id = $1", [orgId]);
  if (patterns.length === 0) return;
  await q.query(
    `INSERT INTO org_egress_allowlist (org_id, host_pattern, created_at)
     SELECT $1, pattern, $3 FROM unnest($2::text[]) AS pattern`,
    [orgId, patterns, now],
  );
}

/** Lineage paths of these sandboxes (any organization: the ledger's callers were identified by the gateway). */
export async function lineagePaths(
  q: Queryable,
  sandboxIds: string[],
): Promise<{ id: string; lineage_path: string }[]> {
  const { rows } = await q.query<{ id: string; lineage_path: string }>(
    "SELECT id, lineage_path FROM sandboxes WHERE id = ANY($1::text[])",
    [sandboxIds],
  );
  return rows;
}
