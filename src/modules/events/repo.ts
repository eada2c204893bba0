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
