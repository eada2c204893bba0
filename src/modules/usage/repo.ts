// Per-organization quota overrides and the admission lock.
import type { Queryable } from "../../store/db.js";

/** The organization's override of a metric's limit, or null when the default applies. */
export async function getLimitOverride(q: Queryable, orgId: string, metric: string): Promise<number | null> {
  const { rows } = await q.query<{ limit_value: string }>(
    "SELECT limit_value FROM org_quotas WHERE org_id = $1 AND metric = $2",
    [orgId, metric],
  );
  return rows[0] ? Number(rows[0].limit_value) : null;
}

/** Serializes admissions of one (organization, metric) until the transaction ends. */
export async function lockMetric(q: Queryable, orgId: string, metric: string): Promise<void> {
  await q.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`quota:${orgId}:${metric}`]);
}

export async function setLimitOverride(q: Queryable, orgId: string, metric: string, limit: number): Promise<void> {
  await q.query(
    `INSERT INTO org_quotas (org_id, metric, limit_value) VALUES ($1, $2, $3)
     ON CONFLICT (org_id, metric) DO UPDATE SET limit_value = EXCLUDED.limit_value`,
    [orgId, metric, limit],
  );
}

export async function deleteLimitOverride(q: Queryable, orgId: string, metric: string): Promise<void> {
  await q.query("DELETE FROM org_quotas WHERE org_id = $1 AND metric = $2", [orgId, metric]);
}
