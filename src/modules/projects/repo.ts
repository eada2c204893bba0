import type { Cursor } from "../../lib/page-token.js";
import type { Queryable } from "../../store/db.js";

export interface ProjectRow {
  id: string;
  org_id: string;
  name: string;
  slug: string;
  description: string;
  is_default: boolean;
  created_at: Date;
  updated_at: Date;
  created_by: string;
  last_run_at: Date | null;
  run_count: string;
  version: string;
}

const COLUMNS =
  "id, org_id, name, slug, description, is_default, created_at, updated_at, created_by, last_run_at, run_count, version";

export async function insertProject(q: Queryable, p: Omit<ProjectRow, "run_count" | "version" | "last_run_at">) {
  const { rows } = await q.query<ProjectRow>(
    `INSERT INTO projects (id, org_id, name, slug, description, is_default, created_at, updated_at, created_by)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (org_id, slug) DO NOTHING
     RETURNING ${COLUMNS}`,
    [p.id, p.org_id, p.name, p.slug, p.description, p.is_default, p.created_at, p.updated_at, p.created_by],
  );
  return rows[0] ?? null;
}

export async function getProject(q: Queryable, orgId: string, id: string): Promise<ProjectRow | null> {
  const { rows } = await q.query<ProjectRow>(`SELECT ${COLUMNS} FROM projects WHERE org_id = $1 AND id = $2`, [
    orgId,
    id,
  ]);
  return rows[0] ?? null;
}

export async function getDefaultProject(q: Queryable, orgId: string): Promise<ProjectRow | null> {
  const { rows } = await q.query<ProjectRow>(`SELECT ${COLUMNS} FROM projects WHERE org_id = $1 AND is_default`, [
    orgId,
  ]);
  return rows[0] ?? null;
}

export async function listProjects(
  q: Queryable,
  orgId: string,
  after: Cursor | null,
  limit: number,
): Promise<ProjectRow[]> {
  const { rows } = after
    ? await q.query<ProjectRow>(
        `SELECT ${COLUMNS} FROM projects WHERE org_id = $1 AND (created_at, id) < ($2::timestamptz, $3::text)
          ORDER BY created_at DESC, id DESC LIMIT $4`,
        [orgId, after.at, after.id, limit],
      )
    : await q.query<ProjectRow>(
        `SELECT ${COLUMNS} FROM projects WHERE org_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2`,
        [orgId, limit],
      );
  return rows;
}

export async function countProjects(q: Queryable, orgId: string): Promise<number> {
  const { rows } = await q.query<{ n: string }>("SELECT count(*)::text AS n FROM projects WHERE org_id = $1", [orgId]);
  return Number(rows[0]?.n ?? 0);
}

/** Applies an update when the version matches (or no version is required); null when it did not. */
export async function updateProject(
  q: Queryable,
  orgId: string,
  id: string,
  change: { name?: string | undefined; description?: string | undefined },
  expectedVersion: string | null,
  at: Date,
): Promise<ProjectRow | null> {
  const { rows } = await q.query<ProjectRow>(
    `UPDATE projects
        SET name = COALESCE($3, name), description = COALESCE($4, description),
            updated_at = $5, version = version + 1
      WHERE org_id = $1 AND id = $2 AND ($6::bigint IS NULL OR version = $6::bigint)
      RETURNING ${COLUMNS}`,
    [orgId, id, change.name ?? null, change.description ?? null, at, expectedVersion],
  );
  return rows[0] ?? null;
}

export interface ProjectDependents {
  apiKeys: number;
  runs: number;
}

export async function countDependents(q: Queryable, projectId: string): Promise<ProjectDependents> {
  const { rows } = await q.query<{ keys: string; runs: string }>(
    `SELECT (SELECT count(*) FROM api_keys WHERE project_id = $1)::text AS keys,
            (SELECT count(*) FROM runs WHERE project_id = $1)::text AS runs`,
    [projectId],
  );
  return { apiKeys: Number(rows[0]?.keys ?? 0), runs: Number(rows[0]?.runs ?? 0) };
}

/**
 * Deletes the project and what belongs to it besides its events (the events module removes
 * those first, in the same transaction); the counts come from before.
 */
export async function deleteProjectCascade(q: Queryable, orgId: string, projectId: string): Promise<void> {
  await q.query("DELETE FROM annotation_heads WHERE org_id = $1 AND project_id = $2", [orgId, projectId]);
  await q.query("DELETE FROM api_keys WHERE project_id = $1", [projectId]);
  await q.query("DELETE FROM runs WHERE project_id = $1", [projectId]);
  await q.query("DELETE FROM projects WHERE org_id = $1 AND id = $2", [orgId, projectId]);
}

export async function lockProject(q: Queryable, orgId: string, id: string): Promise<ProjectRow | null> {
  const { rows } = await q.query<ProjectRow>(
    `SELECT ${COLUMNS} FROM projects WHERE org_id = $1 AND id = $2 FOR UPDATE`,
    [orgId, id],
  );
  return rows[0] ?? null;
}

export async function recordRunStarted(q: Queryable, projectId: string, at: Date): Promise<void> {
  await q.query(
    `UPDATE projects SET run_count = run_count + 1,
            last_run_at = GREATEST(COALESCE(last_run_at, $2), $2) WHERE id = $1`,
    [projectId, at],
  );
}
