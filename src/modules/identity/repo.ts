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
}

export async function findCredentialByHash(q: Queryable, keyHash: string): Promise<Credential | null> {
  const { rows } = await q.query<CredentialRow>(
    `SELECT o.id AS org_id, o.slug AS org_slug, o.is_operator, p.id AS principal_id, p.kind, p.role,
            p.email, COALESCE(w.name, '') AS workload_name, k.id AS key_id, k.name AS key_name, k.project_id, k.sandbox_id, k.lineage_path
       FROM api_keys k
       JOIN principals p ON p.id = k.principal_id
       JOIN organizations o ON o.id = k.org_id
       LEFT JOIN workloads w ON w.org_id = p.org_id AND w.name = p.workload_name AND p.kind = 'workload'
      WHERE k.key_hash = $1 AND k.revoked_at IS NULL`,
    [keyHash],
  );
  const row = rows[0];
  if (!row) return null;
  return {
    orgId: row.org_id,
    orgSlug: row.org_slug,
    orgIsOperator: row.is_operator,
    principalId: row.principal_id,
    principalKind: row.kind,
    role: row.role,
    email: row.email,
    keyId: row.key_id,
    keyName: row.key_name,
    workloadName: row.workload_name,
    projectId: row.project_id,
    sandbox: row.sandbox_id ? { sandboxId: row.sandbox_id, lineagePath: row.lineage_path ?? row.sandbox_id } : null,
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
}

export async function insertApiKey(q: Queryable, k: ApiKeyRow): Promise<void> {
  await q.query(
    `INSERT INTO api_keys (id, org_id, principal_id, name, key_hash, project_id, sandbox_id, lineage_path, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [k.id, k.org_id, k.principal_id, k.name, k.key_hash, k.project_id, k.sandbox_id, k.lineage_path, k.created_at],
  );
}

export async function revokeApiKey(q: Queryable, keyId: string, at: Date): Promise<string | null> {
  const { rows } = await q.query<{ key_hash: string }>(
    "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING key_hash",
    [keyId, at],
  );
  return rows[0]?.key_hash ?? null;
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
}

export async function listApiKeys(q: Queryable, orgId: string): Promise<ApiKeyListRow[]> {
  const { rows } = await q.query<ApiKeyListRow>(
    `SELECT k.id, k.org_id, k.principal_id, p.kind, p.role, p.email, p.workload_name, k.name, k.project_id,
            k.created_at, k.revoked_at
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
