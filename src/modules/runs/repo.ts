import type { Cursor } from "../../lib/page-token.js";
import type { Queryable } from "../../store/db.js";

export type RunStatus = "running" | "succeeded" | "failed" | "canceled";

export interface RunRow {
  id: string;
  org_id: string;
  project_id: string;
  label: string;
  parent_run_id: string | null;
  root_run_id: string;
  lineage_path: string;
  depth: number;
  status: RunStatus;
  started_at: Date;
  ended_at: Date | null;
  created_by: string;
  execute_as_workload: string;
}

const COLUMNS =
  "id, org_id, project_id, label, parent_run_id, root_run_id, lineage_path, depth, status, started_at, ended_at, created_by, execute_as_workload";

export async function insertRun(q: Queryable, r: RunRow): Promise<void> {
  await q.query(`INSERT INTO runs (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`, [
    r.id,
    r.org_id,
    r.project_id,
    r.label,
    r.parent_run_id,
    r.root_run_id,
    r.lineage_path,
    r.depth,
    r.status,
    r.started_at,
    r.ended_at,
    r.created_by,
    r.execute_as_workload,
  ]);
}

export async function getRun(q: Queryable, orgId: string, id: string, forUpdate = false): Promise<RunRow | null> {
  const { rows } = await q.query<RunRow>(
    `SELECT ${COLUMNS} FROM runs WHERE org_id = $1 AND id = $2${forUpdate ? " FOR UPDATE" : ""}`,
    [orgId, id],
  );
  return rows[0] ?? null;
}

export async function completeRun(q: Queryable, id: string, status: RunStatus, at: Date): Promise<RunRow> {
  const { rows } = await q.query<RunRow>(
    `UPDATE runs SET status = $2, ended_at = $3 WHERE id = $1 RETURNING ${COLUMNS}`,
    [id, status, at],
  );
  return rows[0] as RunRow;
}

/** Completes a run still running (null when it was already completed). */
export async function completeRunIfRunning(
  q: Queryable,
  id: string,
  status: RunStatus,
  at: Date,
): Promise<RunRow | null> {
  const { rows } = await q.query<RunRow>(
    `UPDATE runs SET status = $2, ended_at = $3 WHERE id = $1 AND status = 'running' RETURNING ${COLUMNS}`,
    [id, status, at],
  );
  return rows[0] ?? null;
}

export async function listRuns(
  q: Queryable,
  orgId: string,
  filter: { projectId?: string | undefined; parentRunId?: string | undefined },
  after: Cursor | null,
  limit: number,
): Promise<RunRow[]> {
  const where = ["org_id = $1"];
  const params: unknown[] = [orgId];
  if (filter.projectId) {
    params.push(filter.projectId);
    where.push(`project_id = $${params.length}`);
  }
  if (filter.parentRunId) {
    params.push(filter.parentRunId);
    where.push(`parent_run_id = $${params.length}`);
  }
  if (after) {
    params.push(after.at, after.id);
    where.push(`(started_at, id) < ($${params.length - 1}::timestamptz, $${params.length}::text)`);
  }
  params.push(limit);
  const { rows } = await q.query<RunRow>(
    `SELECT ${COLUMNS} FROM runs WHERE ${where.join(" AND ")} ORDER BY started_at DESC, id DESC LIMIT $${params.length}`,
    params,
  );
  return rows;
}
