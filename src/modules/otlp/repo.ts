// The traces an organization has sent (migration 0039): the run each goes to and its
// trace-level values. The spans themselves are events (the events repo writes them).
import type { Queryable } from "../../store/db.js";

export async function traceRuns(q: Queryable, orgId: string, traceIds: string[]): Promise<Map<string, string>> {
  const { rows } = await q.query<{ trace_id: string; run_id: string }>(
    "SELECT trace_id, run_id FROM otlp_traces WHERE org_id = $1 AND trace_id = ANY($2::text[])",
    [orgId, traceIds],
  );
  return new Map(rows.map((r) => [r.trace_id, r.run_id]));
}

/** Inserts the traces not there yet; returns the ids of those this statement wrote. */
export async function insertTraces(
  q: Queryable,
  orgId: string,
  traces: { traceId: string; runId: string }[],
  at: Date,
): Promise<Set<string>> {
  const { rows } = await q.query<{ trace_id: string }>(
    `INSERT INTO otlp_traces (org_id, trace_id, run_id, created_at)
     SELECT $1, x.trace_id, x.run_id, $3 FROM jsonb_to_recordset($2::jsonb) AS x(trace_id text, run_id text)
      ORDER BY x.trace_id
     ON CONFLICT (org_id, trace_id) DO NOTHING RETURNING trace_id`,
    [orgId, JSON.stringify(traces.map((t) => ({ trace_id: t.traceId, run_id: t.runId }))), at],
  );
  return new Set(rows.map((r) => r.trace_id));
}

export interface TraceValues {
  traceId: string;
  userId: string | null;
  sessionId: string | null;
  tags: string[] | null;
  /** From the trace's root span: these replace what earlier spans gave; else they only fill gaps. */
  root: boolean;
}

export async function mergeTraceValues(q: Queryable, orgId: string, values: TraceValues[]): Promise<void> {
  if (values.length === 0) return;
  await q.query(
    `UPDATE otlp_traces t
        SET user_id = CASE WHEN x.root THEN COALESCE(x.user_id, t.user_id) ELSE COALESCE(t.user_id, x.user_id) END,
            session_id = CASE WHEN x.root THEN COALESCE(x.session_id, t.session_id) ELSE COALESCE(t.session_id, x.session_id) END,
            tags = CASE WHEN x.root THEN COALESCE(x.tags, t.tags) ELSE COALESCE(t.tags, x.tags) END
       FROM jsonb_to_recordset($2::jsonb) AS x(trace_id text, user_id text, session_id text, tags jsonb, root boolean)
      WHERE t.org_id = $1 AND t.trace_id = x.trace_id`,
    [
      orgId,
      JSON.stringify(
        values.map((v) => ({
          trace_id: v.traceId,
          user_id: v.userId,
          session_id: v.sessionId,
          tags: v.tags,
          root: v.root,
        })),
      ),
    ],
  );
}
