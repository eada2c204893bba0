import type { Queryable } from "../../store/db.js";

export const SLOT_COLUMNS = ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"] as const;
export type SlotColumn = (typeof SLOT_COLUMNS)[number];

export interface AnnotationInsert {
  orgId: string;
  eventId: string;
  projectId: string;
  runId: string | null;
  lineagePath: string;
  tsWallNs: bigint;
  schemaName: string;
  schemaVersion: number;
  principal: string;
  payload: Record<string, unknown>;
  payloadText: string;
  contentHash: string;
  supersessionKey: string;
  targetEventId: string | null;
  range: { startNs: string; endNs: string; startEventId: string | null; endEventId: string | null } | null;
  slots: Partial<Record<SlotColumn, string | null>>;
}

/** Inserts the annotation event; false when the event id is already taken in the organization. */
export async function insertAnnotation(q: Queryable, a: AnnotationInsert): Promise<boolean> {
  const slotValues = SLOT_COLUMNS.map((column) => a.slots[column] ?? null);
  const { rows } = await q.query(
    `INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload,
                         kind, schema_name, schema_version, target_event_id, range_start_ns, range_end_ns,
                         range_start_event_id, range_end_event_id, payload_text, content_hash, supersession_key,
                         p1, p2, p3, p4, p5, p6, p7, p8)
     VALUES ($1, $2, $3, $4, $5, $6::bigint, $7, $8, $9::jsonb, 'annotation', $7, $10, $11, $12::bigint, $13::bigint,
             $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)
     ON CONFLICT (org_id, event_id) DO NOTHING RETURNING event_id`,
    [
      a.orgId,
      a.eventId,
      a.projectId,
      a.runId,
      a.lineagePath,
      a.tsWallNs.toString(),
      a.schemaName,
      a.principal,
      JSON.stringify(a.payload),
      a.schemaVersion,
      a.targetEventId,
      a.range?.startNs ?? null,
      a.range?.endNs ?? null,
      a.range?.startEventId ?? null,
      a.range?.endEventId ?? null,
      a.payloadText,
      a.contentHash,
      a.supersessionKey,
      ...slotValues,
    ],
  );
  return rows.length > 0;
}

/** Makes the new annotation the head of its key when it is the newest, counting what it hides. */
export async function advanceHead(q: Queryable, a: AnnotationInsert): Promise<void> {
  const slotValues = SLOT_COLUMNS.map((column) => a.slots[column] ?? null);
  await q.query(
    `INSERT INTO annotation_heads (org_id, supersession_key, event_id, ts_wall_ns, project_id, run_id, schema_name,
                                   target_event_id, superseded_count, p1, p2, p3, p4, p5, p6, p7, p8)
     VALUES ($1, $2, $3, $4::bigint, $5, $6, $7, $8, 0, $9, $10, $11, $12, $13, $14, $15, $16)
     ON CONFLICT (org_id, supersession_key) DO UPDATE SET
       superseded_count = annotation_heads.superseded_count + 1,
       event_id = CASE WHEN (EXCLUDED.ts_wall_ns, EXCLUDED.event_id) > (annotation_heads.ts_wall_ns, annotation_heads.event_id)
                       THEN EXCLUDED.event_id ELSE annotation_heads.event_id END,
       ts_wall_ns = GREATEST(EXCLUDED.ts_wall_ns, annotation_heads.ts_wall_ns),
       p1 = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.p1 ELSE annotation_heads.p1 END,
       p2 = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.p2 ELSE annotation_heads.p2 END,
       p3 = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.p3 ELSE annotation_heads.p3 END,
       p4 = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.p4 ELSE annotation_heads.p4 END,
       p5 = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.p5 ELSE annotation_heads.p5 END,
       p6 = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.p6 ELSE annotation_heads.p6 END,
       p7 = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.p7 ELSE annotation_heads.p7 END,
       p8 = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.p8 ELSE annotation_heads.p8 END`,
    [
      a.orgId,
      a.supersessionKey,
      a.eventId,
      a.tsWallNs.toString(),
      a.projectId,
      a.runId,
      a.schemaName,
      a.targetEventId,
      ...slotValues,
    ],
  );
}

export interface StoredEvent {
  event_id: string;
  kind: string;
  run_id: string | null;
  project_id: string;
  lineage_path: string;
  ts_wall_ns: string;
  content_hash: string | null;
}

export async function findEvent(q: Queryable, orgId: string, eventId: string): Promise<StoredEvent | null> {
  const { rows } = await q.query<StoredEvent>(
    `SELECT event_id, kind, run_id, project_id, lineage_path, ts_wall_ns::text AS ts_wall_ns, content_hash
       FROM events WHERE org_id = $1 AND event_id = $2`,
    [orgId, eventId],
  );
  return rows[0] ?? null;
}

export interface AnnotationRow {
  event_id: string;
  run_id: string | null;
  project_id: string;
  lineage_path: string;
  ts_wall_ns: string;
  principal: string;
  schema_name: string | null;
  schema_version: number | null;
  target_event_id: string | null;
  range_start_ns: string | null;
  range_end_ns: string | null;
  range_start_event_id: string | null;
  range_end_event_id: string | null;
  payload_text: string | null;
  superseded_count?: string;
}

export interface AnnotationFilter {
  runId?: string | undefined;
  projectId?: string | undefined;
  schemaName?: string | undefined;
  targetEventId?: string | undefined;
  slotEquals: [SlotColumn, string][];
  after: { tsNs: string; eventId: string } | null;
  limit: number;
}

const ROW_COLUMNS = `e.event_id, e.run_id, e.project_id, e.lineage_path, e.ts_wall_ns::text AS ts_wall_ns, e.principal,
  e.schema_name, e.schema_version, e.target_event_id, e.range_start_ns::text AS range_start_ns,
  e.range_end_ns::text AS range_end_ns, e.range_start_event_id, e.range_end_event_id, e.payload_text`;

function whereOf(alias: string, orgId: string, f: AnnotationFilter): { sql: string; params: unknown[] } {
  const params: unknown[] = [orgId];
  const where = [`${alias}.org_id = $1`];
  const add = (sql: string, value: unknown) => {
    params.push(value);
    where.push(sql.replace("?", `$${params.length}`));
  };
  if (f.runId) add(`${alias}.run_id = ?`, f.runId);
  if (f.projectId) add(`${alias}.project_id = ?`, f.projectId);
  if (f.schemaName) add(`${alias}.schema_name = ?`, f.schemaName);
  if (f.targetEventId) add(`${alias}.target_event_id = ?`, f.targetEventId);
  for (const [column, value] of f.slotEquals) add(`${alias}.${column} = ?`, value);
  if (f.after) {
    params.push(f.after.tsNs, f.after.eventId);
    where.push(`(${alias}.ts_wall_ns, ${alias}.event_id) < ($${params.length - 1}::bigint, $${params.length}::text)`);
  }
  params.push(f.limit);
  return { sql: where.join(" AND "), params };
}

/** Every stored version, newest first. */
export async function listHistory(q: Queryable, orgId: string, f: AnnotationFilter): Promise<AnnotationRow[]> {
  const { sql, params } = whereOf("e", orgId, f);
  const { rows } = await q.query<AnnotationRow>(
    `SELECT ${ROW_COLUMNS} FROM events e WHERE e.kind = 'annotation' AND ${sql}
      ORDER BY e.ts_wall_ns DESC, e.event_id DESC LIMIT $${params.length}`,
    params,
  );
  return rows;
}

/** The latest version per supersession key, newest first, with how many versions each hides. */
export async function listLatest(q: Queryable, orgId: string, f: AnnotationFilter): Promise<AnnotationRow[]> {
  const { sql, params } = whereOf("h", orgId, f);
  const { rows } = await q.query<AnnotationRow>(
    `SELECT ${ROW_COLUMNS}, h.superseded_count::text AS superseded_count
       FROM (SELECT * FROM annotation_heads h WHERE ${sql}
              ORDER BY h.ts_wall_ns DESC, h.event_id DESC LIMIT $${params.length}) h
       JOIN events e ON e.org_id = h.org_id AND e.event_id = h.event_id
      ORDER BY h.ts_wall_ns DESC, h.event_id DESC`,
    params,
  );
  return rows;
}

export async function runEventExists(q: Queryable, orgId: string, runId: string, eventId: string) {
  const { rows } = await q.query<{ ts_wall_ns: string }>(
    "SELECT ts_wall_ns::text AS ts_wall_ns FROM events WHERE org_id = $1 AND event_id = $2 AND run_id = $3",
    [orgId, eventId, runId],
  );
  return rows[0] ?? null;
}
