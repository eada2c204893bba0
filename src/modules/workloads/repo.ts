import type { Queryable } from "../../store/db.js";
import type { Cloud, FederationDescriptor } from "./federation.js";

export type LaunchPolicy = "WORKLOAD_LAUNCH_POLICY_MEMBERS" | "WORKLOAD_LAUNCH_POLICY_RESTRICTED";
export interface Launcher {
  kind: "user" | "service_account";
  principal_id: string;
}

export interface WorkloadRow {
  id: string;
  org_id: string;
  name: string;
  description: string;
  launch_policy: LaunchPolicy;
  launchers: Launcher[];
  created_by: string;
  created_at: Date;
  updated_at: Date;
}

export interface FederationRow {
  id: string;
  org_id: string;
  workload_id: string;
  cloud: Cloud;
  audience: string;
  descriptor: FederationDescriptor;
  created_by: string;
  created_at: Date;
  removed_at: Date | null;
}

const W = "id, org_id, name, description, launch_policy, launchers, created_by, created_at, updated_at";
const F = "id, org_id, workload_id, cloud, audience, descriptor, created_by, created_at, removed_at";

export async function insertWorkload(q: Queryable, w: WorkloadRow): Promise<boolean> {
  const { rows } = await q.query(
    `INSERT INTO workloads (${W}) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9)
     ON CONFLICT (org_id, name) DO NOTHING RETURNING id`,
    [
      w.id,
      w.org_id,
      w.name,
      w.description,
      w.launch_policy,
      JSON.stringify(w.launchers),
      w.created_by,
      w.created_at,
      w.updated_at,
    ],
  );
  return rows.length > 0;
}

export async function getWorkload(
  q: Queryable,
  orgId: string,
  name: string,
  forUpdate = false,
): Promise<WorkloadRow | null> {
  const { rows } = await q.query<WorkloadRow>(
    `SELECT ${W} FROM workloads WHERE org_id = $1 AND name = $2${forUpdate ? " FOR UPDATE" : ""}`,
    [orgId, name],
  );
  return rows[0] ?? null;
}

export async function getWorkloadById(q: Queryable, orgId: string, id: string): Promise<WorkloadRow | null> {
  const { rows } = await q.query<WorkloadRow>(`SELECT ${W} FROM workloads WHERE org_id = $1 AND id = $2`, [orgId, id]);
  return rows[0] ?? null;
}

export async function listWorkloads(q: Queryable, orgId: string, afterName: string | null, limit: number) {
  const { rows } = await q.query<WorkloadRow>(
    `SELECT ${W} FROM workloads WHERE org_id = $1 AND ($2::text IS NULL OR name COLLATE "C" > $2::text) ORDER BY name COLLATE "C" LIMIT $3`,
    [orgId, afterName, limit],
  );
  return rows;
}

export async function deleteWorkload(q: Queryable, orgId: string, name: string): Promise<boolean> {
  const { rows } = await q.query("DELETE FROM workloads WHERE org_id = $1 AND name = $2 RETURNING id", [orgId, name]);
  return rows.length > 0;
}

export async function setLaunchAcl(
  q: Queryable,
  id: string,
  policy: LaunchPolicy,
  launchers: Launcher[],
  at: Date,
): Promise<WorkloadRow> {
  const { rows } = await q.query<WorkloadRow>(
    `UPDATE workloads SET launch_policy = $2, launchers = $3::jsonb, updated_at = $4 WHERE id = $1 RETURNING ${W}`,
    [id, policy, JSON.stringify(launchers), at],
  );
  return rows[0] as WorkloadRow;
}

export async function insertFederation(q: Queryable, f: FederationRow): Promise<void> {
  await q.query(`INSERT INTO workload_federations (${F}) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, NULL)`, [
    f.id,
    f.org_id,
    f.workload_id,
    f.cloud,
    f.audience,
    JSON.stringify(f.descriptor),
    f.created_by,
    f.created_at,
  ]);
}

export async function listFederations(q: Queryable, workloadId: string): Promise<FederationRow[]> {
  const { rows } = await q.query<FederationRow>(
    `SELECT ${F} FROM workload_federations WHERE workload_id = $1 AND removed_at IS NULL ORDER BY created_at, id`,
    [workloadId],
  );
  return rows;
}

export async function getFederation(q: Queryable, orgId: string, id: string): Promise<FederationRow | null> {
  const { rows } = await q.query<FederationRow>(`SELECT ${F} FROM workload_federations WHERE org_id = $1 AND id = $2`, [
    orgId,
    id,
  ]);
  return rows[0] ?? null;
}

export async function removeFederation(q: Queryable, id: string, at: Date): Promise<void> {
  await q.query("UPDATE workload_federations SET removed_at = COALESCE(removed_at, $2) WHERE id = $1", [id, at]);
}

export async function userPrincipalExists(q: Queryable, orgId: string, principalId: string): Promise<boolean> {
  const { rows } = await q.query("SELECT 1 FROM principals WHERE org_id = $1 AND id = $2 AND kind = 'user'", [
    orgId,
    principalId,
  ]);
  return rows.length > 0;
}

export async function serviceAccountKeyExists(q: Queryable, orgId: string, keyId: string): Promise<boolean> {
  const { rows } = await q.query(
    `SELECT 1 FROM api_keys k JOIN principals p ON p.id = k.principal_id
      WHERE k.org_id = $1 AND k.id = $2 AND p.kind = 'service_account' AND k.sandbox_id IS NULL`,
    [orgId, keyId],
  );
  return rows.length > 0;
}
