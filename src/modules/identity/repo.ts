import type { Queryable } from "../../store/db.js";
import type { Credential, PrincipalKind, Role } from "./credential.js";

interface CredentialRow {
  org_id: string;
  org_slug: string;
  is_operator: boolean;
  principal_id: string;
  kind: PrincipalKind;
  role: Role;
  email: string;
  workload_name: string;
  key_id: string;
  key_name: string;
  project_id: string | null;
  sandbox_id: string | null;
  lineage_path: string | null;
  expires_at: Date | null;
  session_of_key_id: string | null;
  session_of_key_name: string | null;
}

/**
 * The live credential of a secret: a key, or a console session (its own row, acting as the key it
 * came from: that key's id and name, with the session's id beside them). An expired session is none.
 */
export async function findCredentialByHash(q: Queryable, keyHash: string, now: Date): Promise<Credential | null> {
  const { rows } = await q.query<CredentialRow>(
    `SELECT o.id AS org_id, o.slug AS org_slug, o.is_operator, p.id AS principal_id, p.kind, p.role,
            p.email, COALESCE(w.name, '') AS workload_name, k.id AS key_id, k.name AS key_name, k.project_id, k.sandbox_id, k.lineage_path,
            k.expires_at, k.session_of_key_id, pk.name AS session_of_key_name
       FROM api_keys k
       JOIN principals p ON p.id = k.principal_id
       JOIN organizations o ON o.id = k.org_id
       LEFT JOIN workloads w ON w.org_id = p.org_id AND w.name = p.workload_name AND p.kind = 'workload'
       LEFT JOIN api_keys pk ON pk.id = k.session_of_key_id
      WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > $2)
        AND (k.session_of_key_id IS NULL OR pk.revoked_at IS NULL)`,
    [keyHash, now],
  );
  const row = rows[0];
  if (!row) return null;
  const session = row.session_of_key_id ? { sessionId: row.key_id, expiresAt: row.expires_at ?? now } : null;
  return {
    orgId: row.org_id,
    orgSlug: row.org_slug,
    orgIsOperator: row.is_operator,
    principalId: row.principal_id,
    principalKind: row.kind,
    role: row.role,
    email: row.email,
    keyId: row.session_of_key_id ?? row.key_id,
    keyName: row.session_of_key_id ? (row.session_of_key_name ?? "") : row.key_name,
    workloadName: row.workload_name,
    projectId: row.project_id,
    sandbox: row.sandbox_id ? { sandboxId: row.sandbox_id, lineagePath: row.lineage_path ?? row.sandbox_id } : null,
    session,
  };
}

export interface OrganizationRow {
  id: string;
  slug: string;
  name: string;
  is_operator: boolean;
  created_at: Date;
}

export async function insertOrganization(q: Queryable, org: OrganizationRow): Promise<void> {
  await q.query("INSERT INTO organizations (id, slug, name, is_operator, created_at) VALUES ($1, $2, $3, $4, $5)", [
    org.id,
    org.slug,
    org.name,
    org.is_operator,
    org.created_at,
  ]);
}

export async function findOrganization(q: Queryable, idOrSlug: string): Promise<OrganizationRow | null> {
  const { rows } = await q.query<OrganizationRow>(
    "SELECT id, slug, name, is_operator, created_at FROM organizations WHERE id = $1 OR slug = $1",
    [idOrSlug],
  );
  return rows[0] ?? null;
}

export async function listOrganizations(q: Queryable): Promise<OrganizationRow[]> {
  const { rows } = await q.query<OrganizationRow>(
    "SELECT id, slug, name, is_operator, created_at FROM organizations ORDER BY created_at, id",
  );
  return rows;
}

export async function countOrganizations(q: Queryable): Promise<number> {
  const { rows } = await q.query<{ n: string }>("SELECT count(*)::text AS n FROM organizations");
  return Number(rows[0]?.n ?? 0);
}

export interface PrincipalRow {
  id: string;
  org_id: string;
  kind: PrincipalKind;
  role: Role;
  email: string;
  display_name: string;
  workload_name: string;
  created_at: Date;
}

export async function insertPrincipal(q: Queryable, p: PrincipalRow): Promise<void> {
  await q.query(
    `INSERT INTO principals (id, org_id, kind, role, email, display_name, workload_name, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [p.id, p.org_id, p.kind, p.role, p.email, p.display_name, p.workload_name, p.created_at],
  );
}

export async function findPrincipal(q: Queryable, orgId: string, principalId: string): Promise<PrincipalRow | null> {
  const { rows } = await q.query<PrincipalRow>(
    `SELECT id, org_id, kind, role, email, display_name, workload_name, created_at
       FROM principals WHERE org_id = $1 AND id = $2`,
    [orgId, principalId],
  );
  return rows[0] ?? null;
}

export interface ApiKeyRow {
  id: string;
  org_id: string;
  principal_id: string;
  name: string;
  key_hash: string;
  project_id: string | null;
  sandbox_id: string | null;
  lineage_path: string | null;
  created_at: Date;
  revoked_at: Date | null;
  /** Console sessions only: when it stops working, and the key it was exchanged for. */
  expires_at?: Date | null;
  session_of_key_id?: string | null;
}

export async function insertApiKey(q: Queryable, k: ApiKeyRow): Promise<void> {
  await q.query(
    `INSERT INTO api_keys (id, org_id, principal_id, name, key_hash, project_id, sandbox_id, lineage_path, created_at,
                           expires_at, session_of_key_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
    [
      k.id,
      k.org_id,
      k.principal_id,
      k.name,
      k.key_hash,
      k.project_id,
      k.sandbox_id,
      k.lineage_path,
      k.created_at,
      k.expires_at ?? null,
      k.session_of_key_id ?? null,
    ],
  );
}

/**
 * Revokes a key and the console sessions exchanged for it; returns the hashes touched (empty:
 * no such key). `orgId` null: any organization's (the operator's route).
 */
export async function revokeApiKey(
  q: Queryable,
  keyId: string,
  at: Date,
  orgId: string | null = null,
): Promise<string[]> {
  const { rows } = await q.query<{ key_hash: string }>(
    `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2)
      WHERE (id = $1 OR session_of_key_id = $1) AND ($3::text IS NULL OR org_id = $3)
        AND EXISTS (SELECT 1 FROM api_keys t WHERE t.id = $1 AND ($3::text IS NULL OR t.org_id = $3))
      RETURNING key_hash`,
    [keyId, at, orgId],
  );
  return rows.map((row) => row.key_hash);
}

export interface ApiKeyListRow {
  id: string;
  org_id: string;
  principal_id: string;
  kind: PrincipalKind;
  role: Role;
  email: string;
  workload_name: string;
  name: string;
  project_id: string | null;
  created_at: Date;
  revoked_at: Date | null;
  expires_at: Date | null;
  session_of_key_id: string | null;
}

export async function listApiKeys(q: Queryable, orgId: string): Promise<ApiKeyListRow[]> {
  const { rows } = await q.query<ApiKeyListRow>(
    `SELECT k.id, k.org_id, k.principal_id, p.kind, p.role, p.email, p.workload_name, k.name, k.project_id,
            k.created_at, k.revoked_at, k.expires_at, k.session_of_key_id
       FROM api_keys k JOIN principals p ON p.id = k.principal_id
      WHERE k.org_id = $1 ORDER BY k.created_at, k.id`,
    [orgId],
  );
  return rows;
}

/** Revokes every key confined to the sandbox; returns the hashes of those it touched. */
export async function revokeSandboxKeys(q: Queryable, sandboxId: string, at: Date): Promise<string[]> {
  const { rows } = await q.query<{ key_hash: string }>(
    "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE sandbox_id = $1 RETURNING key_hash",
    [sandboxId, at],
  );
  return rows.map((row) => row.key_hash);
}

/** Deletes the key's console sessions that expired or were revoked before `before`. */
export async function deleteStaleSessions(q: Queryable, keyId: string, before: Date): Promise<void> {
  await q.query("DELETE FROM api_keys WHERE session_of_key_id = $1 AND (expires_at < $2 OR revoked_at < $2)", [
    keyId,
    before,
  ]);
}
