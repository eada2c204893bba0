// The append-only telemetry event store. Rows are only ever inserted; nothing here updates.
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
  await q.query(
    `INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload)
     VALUES ($1, $2, $3, $4, $5, $6::bigint, $7, $8, $9::jsonb)`,
    [
      e.orgId,
      e.eventId,
      e.projectId,
      e.runId,
      e.lineagePath,
      e.tsWallNs.toString(),
      e.name,
      e.principal,
      JSON.stringify(e.payload),
    ],
  );
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
