// The telemetry event store, and the only module that writes the events table: rows are
// inserted (telemetry events here, annotations through annotationEventInsert) and removed
// only with their project.
import type { Queryable } from "../../store/db.js";

export interface NewEvent {
  orgId: string;
  eventId: string;
  projectId: string;
  runId: string | null;
  lineagePath: string;
  tsWallNs: bigint;
  name: string;
  principal: string;
  payload: Record<string, unknown>;
}

export async function appendEvent(q: Queryable, e: NewEvent): Promise<void> {
  const insert = eventInsert(e, 1);
  await q.query(insert.sql, insert.params);
}

/**
 * The insert of one telemetry event with its parameters numbered from `$first`: usable alone
 * or as the final statement after data-modifying CTEs, so a write and its event commit as one
 * statement (an exec's end: its activity, its record and its event).
 */
export function eventInsert(e: NewEvent, first: number): { sql: string; params: unknown[] } {
  return { sql: `${EVENT_INSERT} VALUES ${eventValues(first)}`, params: eventParams(e) };
}

const EVENT_INSERT =
  "INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload)";

/** One row's placeholders from `$first` on, in EVENT_INSERT's column order. */
function eventValues(first: number): string {
  const p = (i: number) => `$${first + i}`;
  return `(${p(0)}, ${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(5)}::bigint, ${p(6)}, ${p(7)}, ${p(8)}::jsonb)`;
}

function eventParams(e: NewEvent): unknown[] {
  return [
    e.orgId,
    e.eventId,
    e.projectId,
    e.runId,
    e.lineagePath,
    e.tsWallNs.toString(),
    e.name,
    e.principal,
    JSON.stringify(e.payload),
  ];
}

export interface EventRow {
  event_id: string;
  project_id: string;
  run_id: string | null;
  lineage_path: string;
  ts_wall_ns: string;
  name: string;
  principal: string;
  payload: Record<string, unknown>;
}

export async function listRunEvents(q: Queryable, orgId: string, runId: string): Promise<EventRow[]> {
  const { rows } = await q.query<EventRow>(
    `SELECT event_id, project_id, run_id, lineage_path, ts_wall_ns::text AS ts_wall_ns, name, principal, payload
       FROM events WHERE org_id = $1 AND run_id = $2 ORDER BY ts_wall_ns, event_id`,
    [orgId, runId],
  );
  return rows;
}

/**
 * The insert of annotation events, as a data-modifying CTE body for the annotation write
 * (annotation-repo.ts WRITE_SQL), which must stay one statement per batch. `from` names a
 * relation with the annotation input columns; a taken (org_id, event_id) writes nothing,
 * and the rows written are returned as (org_id, event_id).
 */
export function annotationEventInsert(from: string): string {
  return `INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload,
                           kind, schema_name, schema_version, target_event_id, range_start_ns, range_end_ns,
                           range_start_event_id, range_end_event_id, payload_text, content_hash, supersession_key,
                           p1, p2, p3, p4, p5, p6, p7, p8)
       SELECT org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, schema_name, principal, payload_text::jsonb,
              'annotation', schema_name, schema_version, target_event_id, range_start_ns, range_end_ns,
              range_start_event_id, range_end_event_id, payload_text, content_hash, supersession_key,
              p1, p2, p3, p4, p5, p6, p7, p8
         FROM ${from} ORDER BY org_id, event_id
       ON CONFLICT (org_id, event_id) DO NOTHING RETURNING org_id, event_id`;
}

/** Removes a project's events (telemetry and annotations), inside DeleteProject's transaction. */
export async function deleteProjectEvents(q: Queryable, orgId: string, projectId: string): Promise<void> {
  await q.query("DELETE FROM events WHERE org_id = $1 AND project_id = $2", [orgId, projectId]);
}

/** Telemetry events written together as one multi-row insert (the egress ledger's batches). */
export async function appendEvents(q: Queryable, list: NewEvent[]): Promise<void> {
  if (list.length === 0) return;
  const params: unknown[] = [];
  const values = list.map((e) => {
    const first = params.length + 1;
    params.push(...eventParams(e));
    return eventValues(first);
  });
  await q.query(`${EVENT_INSERT} VALUES ${values.join(", ")}`, params);
}

/** A span as a telemetry event (src/modules/otlp/): its event columns and its typed ones. */
export interface NewSpanEvent {
  orgId: string;
  eventId: string;
  projectId: string;
  runId: string;
  lineagePath: string;
  startNs: bigint;
  endNs: bigint;
  principal: string;
  /** The span as JSON text (built once, by the ingest). */
  payloadJson: string;
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  spanKind: string;
  statusCode: string;
  spanType: string | null;
  operation: string | null;
  system: string | null;
  model: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
  totalTokens: number | null;
  costUsd: number | null;
  input: string | null;
  output: string | null;
  userId: string | null;
  sessionId: string | null;
  tags: string[] | null;
}

/**
 * Spans written as one statement whatever their number. A span whose event id is taken (the same span sent again) writes nothing. Returns how many
 * rows were written.
 */
export async function appendSpanEvents(q: Queryable, list: NewSpanEvent[]): Promise<number> {
  if (list.length === 0) return 0;
  // One array per column, unnested: cheaper for the store than one JSON document of rows,
  // and the payloads go as the JSON text they already are.
  const column = <T>(get: (s: NewSpanEvent) => T) => list.map(get);
  const { rows: written } = await q.query<{ n: string }>(
    `WITH written AS (
       INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload, kind,
                           trace_id, span_id, parent_span_id, span_kind, status_code, end_ns, span_type,
                           gen_ai_operation, gen_ai_system, model, input_tokens, output_tokens, total_tokens, cost_usd,
                           input, output, user_id, session_id, tags)
       SELECT x.org_id, x.event_id, x.project_id, x.run_id, x.lineage_path, x.start_ns, 'span', x.principal, x.payload::jsonb,
              'span', x.trace_id, x.span_id, x.parent_span_id, x.span_kind, x.status_code, x.end_ns, x.span_type,
              x.gen_ai_operation, x.gen_ai_system, x.model, x.input_tokens, x.output_tokens, x.total_tokens, x.cost_usd,
              x.input, x.output, x.user_id, x.session_id, x.tags::jsonb
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::text[],
                     $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
                     $16::text[], $17::text[], $18::text[], $19::bigint[], $20::bigint[], $21::bigint[],
                     $22::float8[], $23::text[], $24::text[], $25::text[], $26::text[], $27::text[])
           AS x(org_id, event_id, project_id, run_id, lineage_path, start_ns, end_ns, principal, payload, trace_id,
                span_id, parent_span_id, span_kind, status_code, span_type, gen_ai_operation, gen_ai_system, model,
                input_tokens, output_tokens, total_tokens, cost_usd, input, output, user_id, session_id, tags)
        ORDER BY x.event_id
       ON CONFLICT DO NOTHING RETURNING 1
     )
     SELECT count(*)::text AS n FROM written`,
    [
      column((s) => s.orgId),
      column((s) => s.eventId),
      column((s) => s.projectId),
      column((s) => s.runId),
      column((s) => s.lineagePath),
      column((s) => s.startNs.toString()),
      column((s) => s.endNs.toString()),
      column((s) => s.principal),
      column((s) => s.payloadJson),
      column((s) => s.traceId),
      column((s) => s.spanId),
      column((s) => s.parentSpanId),
      column((s) => s.spanKind),
      column((s) => s.statusCode),
      column((s) => s.spanType),
      column((s) => s.operation),
      column((s) => s.system),
      column((s) => s.model),
      column((s) => s.inputTokens),
      column((s) => s.outputTokens),
      column((s) => s.totalTokens),
      column((s) => s.costUsd),
      column((s) => s.input),
      column((s) => s.output),
      column((s) => s.userId),
      column((s) => s.sessionId),
      column((s) => (s.tags === null ? null : JSON.stringify(s.tags))),
    ],
  );
  return Number(written[0]?.n ?? 0);
}
