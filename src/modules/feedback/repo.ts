// Stored feedback reports, unique per (organization, fingerprint).
import type { Queryable } from "../../store/db.js";

export interface NewFeedback {
  id: string;
  orgId: string;
  principalId: string;
  title: string;
  surface: string;
  body: string;
  expected: string;
  actual: string;
  repro: string;
  severity: string;
  fingerprint: string;
  svcVersion: string;
  evidence: string[];
  createdAt: Date;
}

/** Inserts the report; false when one with the same fingerprint already exists. */
export async function insertFeedback(q: Queryable, f: NewFeedback): Promise<boolean> {
  const { rows } = await q.query<{ id: string }>(
    `INSERT INTO feedback (id, org_id, principal_id, title, surface, body, expected, actual, repro, severity,
                           fingerprint, svc_version, evidence, relayed, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, false, $14)
     ON CONFLICT (org_id, fingerprint) DO NOTHING RETURNING id`,
    [
      f.id,
      f.orgId,
      f.principalId,
      f.title,
      f.surface,
      f.body,
      f.expected,
      f.actual,
      f.repro,
      f.severity,
      f.fingerprint,
      f.svcVersion,
      JSON.stringify(f.evidence),
      f.createdAt,
    ],
  );
  return rows.length > 0;
}

export async function markRelayed(q: Queryable, id: string): Promise<void> {
  await q.query("UPDATE feedback SET relayed = true WHERE id = $1", [id]);
}

export async function findByFingerprint(q: Queryable, orgId: string, fingerprint: string) {
  const { rows } = await q.query<{ id: string; relayed: boolean }>(
    "SELECT id, relayed FROM feedback WHERE org_id = $1 AND fingerprint = $2",
    [orgId, fingerprint],
  );
  return rows[0] ?? null;
}
