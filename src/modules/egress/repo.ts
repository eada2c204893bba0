// The egress module's SQL: the organization egress allowlist (migration 0018), the
// deployment CA's row and the lineage paths the ledger's events need (migration 0019).
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

export const CA_ROW_ID = "deployment";

export interface CaRow {
  id: string;
  certificate_pem: string;
  master_key_id: string;
  wrapped_key: Uint8Array;
}

export async function readCa(q: Queryable): Promise<CaRow | null> {
  const { rows } = await q.query<CaRow>(
    "SELECT id, certificate_pem, master_key_id, wrapped_key FROM egress_ca WHERE id = $1",
    [CA_ROW_ID],
  );
  return rows[0] ?? null;
}

/** Stores the CA unless another process stored one first (the caller reads back the winner). */
export async function insertCa(
  q: Queryable,
  ca: { certificatePem: string; masterKeyId: string; wrapped: Buffer; at: Date },
): Promise<void> {
  await q.query(
    `INSERT INTO egress_ca (id, certificate_pem, master_key_id, wrapped_key, created_at)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`,
    [CA_ROW_ID, ca.certificatePem, ca.masterKeyId, ca.wrapped, ca.at],
  );
}

export async function rewrapCa(q: Queryable, masterKeyId: string, wrapped: Buffer, at: Date): Promise<void> {
  await q.query("UPDATE egress_ca SET master_key_id = $2, wrapped_key = $3, rewrapped_at = $4 WHERE id = $1", [
    CA_ROW_ID,
    masterKeyId,
    wrapped,
    at,
  ]);
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
