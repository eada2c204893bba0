import { createHash } from "node:crypto";
import type { Db, Queryable } from "../../store/db.js";
import { annotationEventInsert } from "../events/repo.js";
import type { SchemaRow } from "./schema-repo.js";

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
  payloadText: string;
  contentHash: string;
  supersessionKey: string;
  targetEventId: string | null;
  range: { startNs: string; endNs: string; startEventId: string | null; endEventId: string | null } | null;
  slots: Partial<Record<SlotColumn, string | null>>;
}

const NEWER_SLOTS = SLOT_COLUMNS.map(
  (c) =>
    `${c} = CASE WHEN EXCLUDED.ts_wall_ns > annotation_heads.ts_wall_ns THEN EXCLUDED.${c} ELSE annotation_heads.${c} END`,
).join(",\n         ");

/** A new version of a key bumps the head's count; the newest version (by time, then id) is the head. */
const HEAD_UPSERT = `ON CONFLICT (org_id, supersession_key) DO UPDATE SET
         superseded_count = annotation_heads.superseded_count + 1,
         event_id = CASE WHEN (EXCLUDED.ts_wall_ns, EXCLUDED.event_id) > (annotation_heads.ts_wall_ns, annotation_heads.event_id)
                         THEN EXCLUDED.event_id ELSE annotation_heads.event_id END,
         ts_wall_ns = GREATEST(EXCLUDED.ts_wall_ns, annotation_heads.ts_wall_ns),
         ${NEWER_SLOTS}`;

/** What the write re-checks in its own statement: the target as read, and the schema version validated against. */
export type WriteGuard = "run" | "run-event" | "project";

export interface GuardedWrite {
  row: AnnotationInsert;
  guard: WriteGuard;
  /** The schema version the payload was validated against; nothing is written unless it is still the latest live one. */
  schemaId: string;
}

/**
 * A write as WRITE_SQL takes it: its input row as JSON (built once, where it is prepared),
 * and the two keys no other write of the same statement may share.
 */
export interface EncodedWrite {
  json: string;
  /** Organization and event id. */
  eventKey: string;
  /** Organization and supersession key. */
  headKey: string;
}

export type WriteResult = "inserted" | "taken" | "stale";

const INPUT_COLUMNS = `guard text, schema_id text, org_id text, event_id text, project_id text, run_id text,
         lineage_path text, ts_wall_ns bigint, schema_name text, principal text, schema_version integer,
         target_event_id text, range_start_ns bigint, range_end_ns bigint, range_start_event_id text,
         range_end_event_id text, payload_text text, content_hash text, supersession_key text,
         p1 text, p2 text, p3 text, p4 text, p5 text, p6 text, p7 text, p8 text`;
const INPUT_NAMES = INPUT_COLUMNS.replace(/ (text|bigint|integer)(,|$)/g, "$2");

export function encodeWrite({ row: a, guard, schemaId }: GuardedWrite): EncodedWrite {
  return {
    json: JSON.stringify({
      guard,
      schema_id: schemaId,
      org_id: a.orgId,
      event_id: a.eventId,
      project_id: a.projectId,
      run_id: a.runId,
      lineage_path: a.lineagePath,
      ts_wall_ns: a.tsWallNs.toString(),
      schema_name: a.schemaName,
      principal: a.principal,
      schema_version: a.schemaVersion,
      target_event_id: a.targetEventId,
      range_start_ns: a.range?.startNs ?? null,
      range_end_ns: a.range?.endNs ?? null,
      range_start_event_id: a.range?.startEventId ?? null,
      range_end_event_id: a.range?.endEventId ?? null,
      payload_text: a.payloadText,
      content_hash: a.contentHash,
      supersession_key: a.supersessionKey,
      p1: a.slots.p1 ?? null,
      p2: a.slots.p2 ?? null,
      p3: a.slots.p3 ?? null,
      p4: a.slots.p4 ?? null,
      p5: a.slots.p5 ?? null,
      p6: a.slots.p6 ?? null,
      p7: a.slots.p7 ?? null,
      p8: a.slots.p8 ?? null,
    }),
    eventKey: `${a.orgId}\u0000${a.eventId}`,
    headKey: `${a.orgId}\u0001${a.supersessionKey}`,
  };
}

// Each annotation event and its supersession head, for any number of writes in one
// statement (one round trip; rows arrive as one JSON array, numbered by ord). Nothing is
// written for a write unless its target still exists and schema_id is still the latest live
// version of its schema ("fresh"), so a caller may validate against a cached schema; a head
// is written only when its event was (a taken event id writes nothing). The jsonb payload is
// parsed from the text as sent. The writes of one statement must not share an event id or a
// supersession key (one statement cannot upsert a head twice); heads are written in key
// order, so concurrent statements lock them in the same order.
const WRITE_SQL = `WITH input AS (
       SELECT * FROM ROWS FROM (json_to_recordset($1::json) AS (${INPUT_COLUMNS}))
         WITH ORDINALITY AS i(${INPUT_NAMES}, ord)
     ), fresh AS (
       SELECT i.* FROM input i
        WHERE CASE WHEN i.guard = 'project'
                   THEN EXISTS (SELECT 1 FROM projects p WHERE p.org_id = i.org_id AND p.id = i.project_id)
                   ELSE EXISTS (SELECT 1 FROM runs r WHERE r.org_id = i.org_id AND r.id = i.run_id
                                   AND r.project_id = i.project_id AND r.lineage_path = i.lineage_path)
                        AND (i.guard <> 'run-event'
                             OR COALESCE((SELECT e.run_id = i.run_id FROM events e
                                           WHERE e.org_id = i.org_id AND e.event_id = i.target_event_id), false))
              END
          AND (SELECT s.id FROM annotation_schemas s
                WHERE s.org_id = i.org_id AND s.name = i.schema_name AND s.archived_at IS NULL
                ORDER BY s.version DESC LIMIT 1) = i.schema_id
     ), inserted AS (
       ${annotationEventInsert("fresh")}
     ), head AS (
       INSERT INTO annotation_heads (org_id, supersession_key, event_id, ts_wall_ns, project_id, run_id, schema_name,
                                     target_event_id, superseded_count, p1, p2, p3, p4, p5, p6, p7, p8)
       SELECT f.org_id, f.supersession_key, f.event_id, f.ts_wall_ns, f.project_id, f.run_id, f.schema_name,
              f.target_event_id, 0, f.p1, f.p2, f.p3, f.p4, f.p5, f.p6, f.p7, f.p8
         FROM fresh f JOIN inserted n ON n.org_id = f.org_id AND n.event_id = f.event_id
        ORDER BY f.org_id, f.supersession_key
       ${HEAD_UPSERT}
     )
     SELECT i.ord,
            EXISTS (SELECT 1 FROM fresh f WHERE f.ord = i.ord) AS fresh,
            EXISTS (SELECT 1 FROM inserted n WHERE n.org_id = i.org_id AND n.event_id = i.event_id) AS inserted
       FROM input i`;

/**
 * Stores each write (see WRITE_SQL; they must share no event id and no supersession key):
 * "inserted", "stale" (nothing written: the target is gone or the schema version is no
 * longer the latest live one) or "taken" (nothing written: the event id is already used in
 * the organization).
 */
export async function insertAnnotations(q: Queryable, writes: EncodedWrite[]): Promise<WriteResult[]> {
  const { rows } = await q.query<{ ord: string; fresh: boolean; inserted: boolean }>(WRITE_SQL, [
    `[${writes.map((write) => write.json).join(",")}]`,
  ]);
  const results: WriteResult[] = writes.map(() => "stale");
  for (const row of rows) results[Number(row.ord) - 1] = !row.fresh ? "stale" : row.inserted ? "inserted" : "taken";
  return results;
}

/** insertAnnotations for one write. */
export async function insertAnnotation(q: Queryable, write: GuardedWrite): Promise<WriteResult> {
  const [result] = await insertAnnotations(q, [encodeWrite(write)]);
  return result ?? "stale";
}

/** What an annotate reads before it writes: its target and the schema it validates against. */
export interface IngestContext {
  /** The run (run_id targets), or null when the organization has no such run. */
  run: { project_id: string; lineage_path: string } | null;
  /** The project exists in the organization (project_id targets). */
  projectFound: boolean;
  /** The target event exists in the run (target_event_id). */
  targetEventFound: boolean;
  /** The latest live version of the schema name, or null when there is none. */
  schema: Pick<SchemaRow, "id" | "name" | "version" | "json_schema" | "promoted_fields"> | null;
}

interface IngestContextRow {
  run_project_id: string | null;
  run_lineage_path: string | null;
  project_found: boolean;
  target_found: boolean;
  schema_id: string | null;
  schema_name: string | null;
  schema_version: number | null;
  json_schema: string | null;
  promoted_fields: SchemaRow["promoted_fields"] | null;
}

const LATEST_LIVE_SCHEMA = `LEFT JOIN LATERAL (SELECT id, name, version, json_schema, promoted_fields FROM annotation_schemas
                           WHERE org_id = $1 AND name = $2 AND archived_at IS NULL
                           ORDER BY version DESC LIMIT 1) s ON true`;
const SCHEMA_COLUMNS =
  "s.id AS schema_id, s.name AS schema_name, s.version AS schema_version, s.json_schema, s.promoted_fields";
// One text per target kind, so each prepared statement plans only the lookups it needs. The
// target event is found by its primary key, then compared on run_id: the same answer as
// `event_id = ? AND run_id = ?` without a plan that walks the run's events.
const RUN_CONTEXT = `SELECT r.project_id AS run_project_id, r.lineage_path AS run_lineage_path, false AS project_found,
       false AS target_found, ${SCHEMA_COLUMNS}
  FROM (SELECT 1) AS one
  LEFT JOIN runs r ON r.org_id = $1 AND r.id = $3
  ${LATEST_LIVE_SCHEMA}`;
const RUN_EVENT_CONTEXT = `SELECT r.project_id AS run_project_id, r.lineage_path AS run_lineage_path, false AS project_found,
       COALESCE((SELECT e.run_id = $3 FROM events e WHERE e.org_id = $1 AND e.event_id = $4), false) AS target_found,
       ${SCHEMA_COLUMNS}
  FROM (SELECT 1) AS one
  LEFT JOIN runs r ON r.org_id = $1 AND r.id = $3
  ${LATEST_LIVE_SCHEMA}`;
const PROJECT_CONTEXT = `SELECT NULL::text AS run_project_id, NULL::text AS run_lineage_path,
       EXISTS (SELECT 1 FROM projects p WHERE p.org_id = $1 AND p.id = $3) AS project_found, false AS target_found,
       ${SCHEMA_COLUMNS}
  FROM (SELECT 1) AS one
  ${LATEST_LIVE_SCHEMA}`;

/**
 * The target (a run and optionally one of its events, or a project) and the latest live
 * version of the schema name, read in one round trip; each part is the same lookup the
 * separate reads make (runs and projects by id in the organization, the event by id within
 * the run, the newest unarchived schema version).
 */
export async function ingestContext(
  q: Queryable,
  orgId: string,
  target: { runId: string; targetEventId: string | null } | { projectId: string },
  schemaName: string,
): Promise<IngestContext> {
  const { rows } = await q.query<IngestContextRow>(
    ...(("projectId" in target
      ? [PROJECT_CONTEXT, [orgId, schemaName, target.projectId]]
      : target.targetEventId
        ? [RUN_EVENT_CONTEXT, [orgId, schemaName, target.runId, target.targetEventId]]
        : [RUN_CONTEXT, [orgId, schemaName, target.runId]]) as [string, unknown[]]),
  );
  const row = rows[0] as IngestContextRow;
  return {
    run:
      row.run_project_id !== null
        ? { project_id: row.run_project_id, lineage_path: row.run_lineage_path as string }
        : null,
    projectFound: row.project_found,
    targetEventFound: row.target_found,
    schema:
      row.schema_id !== null
        ? {
            id: row.schema_id,
            name: row.schema_name as string,
            version: row.schema_version as number,
            json_schema: row.json_schema as string,
            promoted_fields: row.promoted_fields as SchemaRow["promoted_fields"],
          }
        : null,
  };
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

/** The keys migration 0007's GIN index on events holds for an annotation's promoted values. */
function promotedKeysOf(alias: string): string {
  const slots = SLOT_COLUMNS.map((column) => `${alias}.${column}`).join(", ");
  return `annotation_promoted_keys(${alias}.org_id, ${alias}.schema_name, ${slots})`;
}

/** Values longer than this many bytes are indexed by their md5 (migration 0028). */
const PROMOTED_VALUE_INDEXED_BYTES = 512;

/**
 * One key of the GIN index: organization, schema name, slot number and value joined by
 * U+001F, a value over PROMOTED_VALUE_INDEXED_BYTES as U+001E and its md5 (migration 0028's
 * annotation_promoted_value).
 */
function promotedKey(orgId: string, schemaName: string, column: SlotColumn, value: string): string {
  const indexed =
    Buffer.byteLength(value, "utf8") > PROMOTED_VALUE_INDEXED_BYTES
      ? `\u001e${createHash("md5").update(value, "utf8").digest("hex")}`
      : value;
  return [orgId, schemaName, column.slice(1), indexed].join("\u001f");
}

/** The filter's conditions on `alias`, their values appended to params (the organization is $1). */
function conditionsOf(alias: string, f: Omit<AnnotationFilter, "limit">, params: unknown[]): string[] {
  const where: string[] = [];
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
  return where;
}

/** The filter as a WHERE clause on `alias`; the organization is $1 and the limit the last parameter. */
function whereOf(alias: string, orgId: string, f: AnnotationFilter): { sql: string; params: unknown[] } {
  const params: unknown[] = [orgId];
  const where = [`${alias}.org_id = $1`, ...conditionsOf(alias, f, params)];
  params.push(f.limit);
  return { sql: where.join(" AND "), params };
}

/** Up to this many versions matching a history filter on promoted fields count as few. */
const FEW_MATCHES = 1000;

/**
 * The versions a filter on promoted fields matches, when they are few (at most
 * FEW_MATCHES), looked up in the GIN index on events (migration 0007); undefined when there
 * is no such filter or the matches are many.
 */
async function fewPromotedMatches(db: Db, orgId: string, f: AnnotationFilter): Promise<string[] | undefined> {
  if (!f.schemaName || f.slotEquals.length === 0) return undefined;
  const schemaName = f.schemaName;
  const keys = f.slotEquals.map(([column, value]) => promotedKey(orgId, schemaName, column, value));
  const matches = await db.tx(async (q) => {
    // The GIN condition is the only one an index can serve here; with plain index and
    // sequential scans off, the planner takes it.
    await q.exec("SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = off");
    const { rows } = await q.query<{ event_id: string }>(
      `SELECT e.event_id FROM events e WHERE e.kind = 'annotation' AND ${promotedKeysOf("e")} @> $1::text[]
        LIMIT ${FEW_MATCHES + 1}`,
      [keys],
    );
    return rows.map((row) => row.event_id);
  });
  return matches.length <= FEW_MATCHES ? matches : undefined;
}

/**
 * Every stored version, newest first. A filter on promoted fields is answered one of two
 * ways, chosen by looking the values up in the GIN index (fewPromotedMatches): few are then
 * read by primary key; many are found walking the organization's annotations newest first,
 * where a page fills quickly. Left to itself the planner chooses well on PostgreSQL after
 * ANALYZE, but PGlite never gets statistics, and without them it walked every annotation to
 * find the ten versions of one key (about a second over 1,000,000).
 */
export async function listHistory(db: Db, orgId: string, f: AnnotationFilter): Promise<AnnotationRow[]> {
  const few = await fewPromotedMatches(db, orgId, f);
  const { sql, params } = whereOf("e", orgId, f);
  let from = "events e";
  if (few) {
    // The few are read by primary key first, then filtered and sorted: planned together, the
    // planner without statistics took the filters for selective and walked the organization.
    params.splice(params.length - 1, 0, few);
    from = `(WITH few AS MATERIALIZED (SELECT e.* FROM unnest($${params.length - 1}::text[]) AS wanted(event_id)
               JOIN events e ON e.org_id = $1 AND e.event_id = wanted.event_id) SELECT * FROM few) e`;
  }
  const { rows } = await db.query<AnnotationRow>(
    `SELECT ${ROW_COLUMNS} FROM ${from} WHERE e.kind = 'annotation' AND ${sql}
      ORDER BY e.ts_wall_ns DESC, e.event_id DESC LIMIT $${params.length}`,
    params,
  );
  return rows;
}

/** Heads a latest-version list filtered on promoted fields reads newest first before it looks further. */
const WALK_FIRST = 2000;

const LATEST_SELECT = `SELECT ${ROW_COLUMNS}, h.superseded_count::text AS superseded_count`;
const LATEST_JOIN = `JOIN events e ON e.org_id = h.org_id AND e.event_id = h.event_id
      ORDER BY h.ts_wall_ns DESC, h.event_id DESC`;

/**
 * The latest version per supersession key, newest first, with how many versions each hides.
 * A filter on promoted fields has no index on annotation_heads (migration 0008). It first
 * reads the schema's newest WALK_FIRST heads, which fill a page of a common value; a rarer
 * one is looked up in the GIN index on events (fewPromotedMatches), and its versions that
 * are still their key's head are listed; a value with many versions but few heads among
 * the newest walks the schema's heads until the page is full.
 */
export async function listLatest(db: Db, orgId: string, f: AnnotationFilter): Promise<AnnotationRow[]> {
  if (f.schemaName && f.slotEquals.length > 0) {
    const params: unknown[] = [orgId];
    const walk = conditionsOf("h", { schemaName: f.schemaName, slotEquals: [], after: f.after }, params);
    const walkParams = params.length;
    const filter = conditionsOf("h", f, params);
    params.push(f.limit);
    const { rows } = await db.query<AnnotationRow & { walked: string }>(
      `WITH walked AS MATERIALIZED (
         SELECT * FROM annotation_heads h WHERE h.org_id = $1 AND ${walk.join(" AND ")}
          ORDER BY h.ts_wall_ns DESC, h.event_id DESC LIMIT ${WALK_FIRST})
       ${LATEST_SELECT}, (SELECT count(*) FROM walked)::text AS walked
         FROM (SELECT * FROM walked h WHERE ${filter.join(" AND ")}
                ORDER BY h.ts_wall_ns DESC, h.event_id DESC LIMIT $${params.length}) h
       ${LATEST_JOIN}`,
      params,
    );
    if (rows.length >= f.limit) return rows.map(({ walked: _, ...row }) => row);
    let walked = rows[0]?.walked;
    if (walked === undefined) {
      const counted = await db.query<{ walked: string }>(
        `SELECT count(*)::text AS walked FROM (SELECT 1 FROM annotation_heads h WHERE h.org_id = $1 AND ${walk.join(" AND ")}
          LIMIT ${WALK_FIRST}) h`,
        params.slice(0, walkParams),
      );
      walked = counted.rows[0]?.walked ?? "0";
    }
    // Fewer heads than WALK_FIRST: every one was read, so the page is complete.
    if (Number(walked) < WALK_FIRST) return rows.map(({ walked: _, ...row }) => row);
  }
  const few = await fewPromotedMatches(db, orgId, f);
  const { sql, params } = whereOf("h", orgId, f);
  let from = "annotation_heads h";
  if (few) {
    params.splice(params.length - 1, 0, few);
    from = `(WITH few AS MATERIALIZED (SELECT h.* FROM unnest($${params.length - 1}::text[]) AS wanted(event_id)
               JOIN events e ON e.org_id = $1 AND e.event_id = wanted.event_id
               JOIN annotation_heads h ON h.org_id = $1 AND h.supersession_key = e.supersession_key
                                      AND h.event_id = e.event_id) SELECT * FROM few) h`;
  }
  const { rows } = await db.query<AnnotationRow>(
    `${LATEST_SELECT}
       FROM (SELECT * FROM ${from} WHERE ${sql}
              ORDER BY h.ts_wall_ns DESC, h.event_id DESC LIMIT $${params.length}) h
       ${LATEST_JOIN}`,
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
