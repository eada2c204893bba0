import type { Cursor } from "../../lib/page-token.js";
import type { Queryable } from "../../store/db.js";

export interface SecretRow {
  id: string;
  org_id: string;
  name: string;
  delivery: string;
  dest_host: string;
  current_version: number;
  created_by: string;
  created_at: Date;
  rotated_at: Date | null;
  expires_at: Date | null;
  revoked_at: Date | null;
}

export interface GrantRow {
  secret_id: string;
  subject_kind: string;
  subject_id: string;
  created_at: Date;
}

export interface DataKeyRow {
  id: string;
  org_id: string;
  master_key_id: string;
  wrapped_key: Buffer | Uint8Array;
}

export interface VersionRow {
  version: number;
  data_key_id: string;
  nonce: Buffer | Uint8Array;
  ciphertext: Buffer | Uint8Array;
}

const S =
  "id, org_id, name, delivery, dest_host, current_version, created_by, created_at, rotated_at, expires_at, revoked_at";

export async function insertSecret(q: Queryable, s: SecretRow): Promise<boolean> {
  const { rows } = await q.query(
    `INSERT INTO sandbox_secrets (${S}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
     ON CONFLICT (org_id, name) DO NOTHING RETURNING id`,
    [
      s.id,
      s.org_id,
      s.name,
      s.delivery,
      s.dest_host,
      s.current_version,
      s.created_by,
      s.created_at,
      s.rotated_at,
      s.expires_at,
      s.revoked_at,
    ],
  );
  return rows.length > 0;
}

export async function getSecret(q: Queryable, orgId: string, id: string, forUpdate = false): Promise<SecretRow | null> {
  const { rows } = await q.query<SecretRow>(
    `SELECT ${S} FROM sandbox_secrets WHERE org_id = $1 AND id = $2${forUpdate ? " FOR UPDATE" : ""}`,
    [orgId, id],
  );
  return rows[0] ?? null;
}

export async function getSecretByName(q: Queryable, orgId: string, name: string): Promise<SecretRow | null> {
  const { rows } = await q.query<SecretRow>(`SELECT ${S} FROM sandbox_secrets WHERE org_id = $1 AND name = $2`, [
    orgId,
    name,
  ]);
  return rows[0] ?? null;
}

export async function listSecrets(q: Queryable, orgId: string, after: Cursor | null, limit: number) {
  const { rows } = await q.query<SecretRow>(
    `SELECT ${S} FROM sandbox_secrets
      WHERE org_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2::timestamptz, $3::text))
      ORDER BY created_at DESC, id DESC LIMIT $4`,
    [orgId, after?.at ?? null, after?.id ?? "", limit],
  );
  return rows;
}

export async function setRotated(q: Queryable, id: string, version: number, at: Date): Promise<SecretRow> {
  const { rows } = await q.query<SecretRow>(
    `UPDATE sandbox_secrets SET current_version = $2, rotated_at = $3 WHERE id = $1 RETURNING ${S}`,
    [id, version, at],
  );
  return rows[0] as SecretRow;
}

export async function setRevoked(q: Queryable, id: string, at: Date): Promise<SecretRow> {
  const { rows } = await q.query<SecretRow>(
    `UPDATE sandbox_secrets SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING ${S}`,
    [id, at],
  );
  return rows[0] as SecretRow;
}

export async function insertVersion(
  q: Queryable,
  v: { secretId: string; version: number; dataKeyId: string; nonce: Buffer; ciphertext: Buffer; at: Date },
): Promise<void> {
  await q.query(
    `INSERT INTO sandbox_secret_versions (secret_id, version, data_key_id, nonce, ciphertext, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)`,
    [v.secretId, v.version, v.dataKeyId, v.nonce, v.ciphertext, v.at],
  );
}

export async function getVersion(q: Queryable, secretId: string, version: number): Promise<VersionRow | null> {
  const { rows } = await q.query<VersionRow>(
    "SELECT version, data_key_id, nonce, ciphertext FROM sandbox_secret_versions WHERE secret_id = $1 AND version = $2",
    [secretId, version],
  );
  return rows[0] ?? null;
}

export async function getDataKeyForOrg(q: Queryable, orgId: string): Promise<DataKeyRow | null> {
  const { rows } = await q.query<DataKeyRow>(
    "SELECT id, org_id, master_key_id, wrapped_key FROM secret_data_keys WHERE org_id = $1",
    [orgId],
  );
  return rows[0] ?? null;
}

export async function getDataKey(q: Queryable, id: string): Promise<DataKeyRow | null> {
  const { rows } = await q.query<DataKeyRow>(
    "SELECT id, org_id, master_key_id, wrapped_key FROM secret_data_keys WHERE id = $1",
    [id],
  );
  return rows[0] ?? null;
}

export async function insertDataKey(
  q: Queryable,
  k: { id: string; orgId: string; masterKeyId: string; wrapped: Buffer; at: Date },
): Promise<boolean> {
  const { rows } = await q.query(
    `INSERT INTO secret_data_keys (id, org_id, master_key_id, wrapped_key, created_at) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (org_id) DO NOTHING RETURNING id`,
    [k.id, k.orgId, k.masterKeyId, k.wrapped, k.at],
  );
  return rows.length > 0;
}

export async function allDataKeys(q: Queryable): Promise<DataKeyRow[]> {
  const { rows } = await q.query<DataKeyRow>(
    "SELECT id, org_id, master_key_id, wrapped_key FROM secret_data_keys ORDER BY id FOR UPDATE",
  );
  return rows;
}

export async function rewrapDataKey(q: Queryable, id: string, masterKeyId: string, wrapped: Buffer, at: Date) {
  await q.query("UPDATE secret_data_keys SET master_key_id = $2, wrapped_key = $3, rewrapped_at = $4 WHERE id = $1", [
    id,
    masterKeyId,
    wrapped,
    at,
  ]);
}

export async function insertGrant(
  q: Queryable,
  g: { secretId: string; kind: string; subjectId: string; createdBy: string; at: Date },
): Promise<void> {
  await q.query(
    `INSERT INTO sandbox_secret_grants (secret_id, subject_kind, subject_id, created_by, created_at)
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
    [g.secretId, g.kind, g.subjectId, g.createdBy, g.at],
  );
}

export async function deleteGrant(q: Queryable, secretId: string, kind: string, subjectId: string): Promise<void> {
  await q.query("DELETE FROM sandbox_secret_grants WHERE secret_id = $1 AND subject_kind = $2 AND subject_id = $3", [
    secretId,
    kind,
    subjectId,
  ]);
}

export async function listGrants(q: Queryable, secretId: string): Promise<GrantRow[]> {
  const { rows } = await q.query<GrantRow>(
    "SELECT secret_id, subject_kind, subject_id, created_at FROM sandbox_secret_grants WHERE secret_id = $1",
    [secretId],
  );
  return rows;
}

export async function hasGrant(q: Queryable, secretId: string, kind: string, subjectId: string): Promise<boolean> {
  const { rows } = await q.query(
    "SELECT 1 FROM sandbox_secret_grants WHERE secret_id = $1 AND subject_kind = $2 AND subject_id = $3",
    [secretId, kind, subjectId],
  );
  return rows.length > 0;
}

/** What a delivery needs, read in one statement (the egress gateway resolves at every request). */
export interface DeliveryRow extends SecretRow {
  granted: boolean;
  /** The current version's sealed value and its data key; null when missing. */
  v_version: number | null;
  v_data_key_id: string | null;
  v_nonce: Buffer | Uint8Array | null;
  v_ciphertext: Buffer | Uint8Array | null;
  k_org_id: string | null;
  k_master_key_id: string | null;
  k_wrapped_key: Buffer | Uint8Array | null;
}

export async function getForDelivery(
  q: Queryable,
  orgId: string,
  name: string,
  kind: string,
  subjectId: string,
): Promise<DeliveryRow | null> {
  const { rows } = await q.query<DeliveryRow>(
    `SELECT ${S.split(", ")
      .map((c) => `s.${c}`)
      .join(", ")},
            EXISTS (SELECT 1 FROM sandbox_secret_grants g
                     WHERE g.secret_id = s.id AND g.subject_kind = $3 AND g.subject_id = $4) AS granted,
            v.version AS v_version, v.data_key_id AS v_data_key_id, v.nonce AS v_nonce, v.ciphertext AS v_ciphertext,
            k.org_id AS k_org_id, k.master_key_id AS k_master_key_id, k.wrapped_key AS k_wrapped_key
       FROM sandbox_secrets s
       LEFT JOIN sandbox_secret_versions v ON v.secret_id = s.id AND v.version = s.current_version
       LEFT JOIN secret_data_keys k ON k.id = v.data_key_id
      WHERE s.org_id = $1 AND s.name = $2`,
    [orgId, name, kind, subjectId],
  );
  return rows[0] ?? null;
}
