// The annotation benchmark's data: the registered schemas, the bodies the load sends, and
// the SQL that bulk-loads a large annotation history directly into the store, writing
// exactly the rows AnnotationService writes (see annotation-service.ts write() and
// annotation-repo.ts WRITE_SQL):
//
//   events: kind 'annotation', name = schema_name, schema_version, principal, payload (jsonb)
//           and payload_text (the object as sent), content_hash = sha256(canonicalJson({schema,
//           payload, run, project, target, range})), supersession_key = sha256(canonicalJson(
//           [schema, run, "", "", "", [[identity field, value]...]])), the promoted values in
//           their slot columns, an upper-case ULID event id whose time part is ts_wall_ns in ms;
//   annotation_heads: one row per supersession key holding its newest version, with
//           superseded_count = versions - 1 (what WRITE_SQL leaves after every insert).
//
// Row n (0 <= n < rows) is version floor(n / keys) of key k = n % keys; keys spread over the
// schemas (k % schemas) and runs (k / schemas % runs); ts_wall_ns grows by 1 ms per row, so
// the heads are the newest `keys` rows. The statements run unchanged on PGlite and PostgreSQL.

export const SCHEMA_NAMES = ["bench.quality", "bench.safety", "bench.style", "bench.accuracy"];
export const LABELS = ["good", "bad", "unsure", "skip", "flag"];
export const REVIEWERS = 50;

export const JSON_SCHEMA = JSON.stringify({
  type: "object",
  properties: {
    item: { type: "string", minLength: 1, maxLength: 64 },
    label: { type: "string", enum: LABELS },
    reviewer: { type: "string", pattern: "^r[0-9]{2}$" },
    score: { type: "integer", minimum: 0, maximum: 10 },
    note: { type: "string", maxLength: 1000 },
  },
  required: ["item", "label"],
  additionalProperties: false,
});

/** item identifies the thing annotated (part of the supersession key); label and reviewer are filterable. */
export const PROMOTED_FIELDS = [
  { field: "item", identity: true, bloom: true },
  { field: "label", identity: false, bloom: true },
  { field: "reviewer", identity: false, bloom: true },
];

/** The slot column of each promoted field, as the server assigned it (the same for every bench schema). */
export type Slots = Record<"item" | "label" | "reviewer", string>;

export interface LoadContext {
  orgId: string;
  projectId: string;
  principal: string;
  runs: { id: string; lineagePath: string }[];
  slots: Slots;
  /** ts_wall_ns of row 0. */
  startNs: bigint;
  rows: number;
  keys: number;
}

/** A payload as a client would send it (the loaded rows and the ingest load use the same shape). */
export function payloadJson(item: string, label: string, reviewer: number, score: number): string {
  return JSON.stringify({ item, label, reviewer: `r${String(reviewer).padStart(2, "0")}`, score });
}

const lit = (value: string) => `'${value.replace(/'/g, "''")}'`;
const textArray = (values: string[]) => `ARRAY[${values.map(lit).join(", ")}]::text[]`;
const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/** SQL for `chars` Crockford base32 digits of the bigint expression `value`, most significant first. */
function base32(value: string, chars: number): string {
  const parts: string[] = [];
  for (let i = chars - 1; i >= 0; i--) {
    parts.push(`substr('${CROCKFORD}', ((${value} >> ${5 * i}) & 31)::int + 1, 1)`);
  }
  return parts.join(" || ");
}

const SHA = (text: string) => `encode(sha256(convert_to(${text}, 'UTF8')), 'hex')`;
const JS = (text: string) => `to_json(${text}::text)::text`; // JSON.stringify of a string

/**
 * The derived columns of row n, as a SELECT over `source` (which yields n); the same
 * expressions build the events rows and the heads, so a head always names its newest event.
 */
function rowsSelect(ctx: LoadContext, source: string): string {
  const r = ctx.runs.length;
  const s = SCHEMA_NAMES.length;
  return `
    SELECT n, k, v, ts, schema, run_id, lineage_path, item, label, reviewer, payload_text,
           ${base32("(ts / 1000000)", 10)} || ${base32("n", 16)} AS event_id
      FROM (
        SELECT n, k, v, ts, schema, run_id, lineage_path, item, label, reviewer,
               '{"item":' || ${JS("item")} || ',"label":' || ${JS("label")} || ',"reviewer":' || ${JS("reviewer")}
                 || ',"score":' || ((k + v) % 11)::text || '}' AS payload_text
          FROM (
            SELECT n, k, v,
                   ${ctx.startNs.toString()}::bigint + n * 1000000 AS ts,
                   (${textArray(SCHEMA_NAMES)})[(k % ${s})::int + 1] AS schema,
                   (${textArray(ctx.runs.map((x) => x.id))})[((k / ${s}) % ${r})::int + 1] AS run_id,
                   (${textArray(ctx.runs.map((x) => x.lineagePath))})[((k / ${s}) % ${r})::int + 1] AS lineage_path,
                   'item-' || lpad(k::text, 7, '0') AS item,
                   (${textArray(LABELS)})[((k + v) % ${LABELS.length})::int + 1] AS label,
                   'r' || lpad(((k * 7 + v) % ${REVIEWERS})::text, 2, '0') AS reviewer
              FROM (SELECT n, n % ${ctx.keys} AS k, n / ${ctx.keys} AS v FROM ${source}) i
          ) j
      ) x`;
}

/** Inserts events rows n in [from, to). */
export function insertEventsSql(ctx: LoadContext, from: number, to: number): string {
  const { slots } = ctx;
  const contentHash = SHA(
    `'{"payload":' || ${JS("payload_text")} || ',"project":' || ${JS(lit(ctx.projectId))} || ',"range":null,"run":' || ${JS("run_id")} || ',"schema":' || ${JS("schema")} || ',"target":null}'`,
  );
  const supersessionKey = SHA(
    `'[' || ${JS("schema")} || ',' || ${JS("run_id")} || ',"","","",[["item",' || ${JS("item")} || ']]]'`,
  );
  return `
    INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload,
                        kind, schema_name, schema_version, target_event_id, range_start_ns, range_end_ns,
                        range_start_event_id, range_end_event_id, payload_text, content_hash, supersession_key,
                        ${slots.item}, ${slots.label}, ${slots.reviewer})
    SELECT ${lit(ctx.orgId)}, event_id, ${lit(ctx.projectId)}, run_id, lineage_path, ts, schema, ${lit(ctx.principal)},
           payload_text::jsonb, 'annotation', schema, 1, NULL, NULL, NULL, NULL, NULL, payload_text,
           ${contentHash}, ${supersessionKey}, item, label, reviewer
      FROM (${rowsSelect(ctx, `generate_series(${from}::bigint, ${to - 1}::bigint) AS g(n)`)}) rows`;
}

/**
 * Inserts the heads: for each key k < min(keys, rows), its newest version is row
 * k + (versions - 1) * keys with versions = floor((rows - 1 - k) / keys) + 1.
 */
export function insertHeadsSql(ctx: LoadContext): string {
  const { slots } = ctx;
  const keys = Math.min(ctx.keys, ctx.rows);
  const newest = `k + ((${ctx.rows - 1} - k) / ${ctx.keys}) * ${ctx.keys}`;
  return `
    INSERT INTO annotation_heads (org_id, supersession_key, event_id, ts_wall_ns, project_id, run_id, schema_name,
                                  target_event_id, superseded_count, ${slots.item}, ${slots.label}, ${slots.reviewer})
    SELECT e.org_id, e.supersession_key, e.event_id, e.ts_wall_ns, e.project_id, e.run_id, e.schema_name, NULL,
           (rows.n / ${ctx.keys}), rows.item, rows.label, rows.reviewer
      FROM (${rowsSelect(ctx, `(SELECT ${newest} AS n FROM generate_series(0::bigint, ${keys - 1}::bigint) AS h(k)) AS g`)}) rows
      JOIN events e ON e.org_id = ${lit(ctx.orgId)} AND e.event_id = rows.event_id`;
}

/** Checks of the loaded store: every head names an event of its key, and the counts add up. */
export function checkSql(orgId: string): string {
  return `
    SELECT (SELECT count(*) FROM events WHERE org_id = ${lit(orgId)} AND kind = 'annotation')::text AS events,
           (SELECT count(*) FROM annotation_heads WHERE org_id = ${lit(orgId)})::text AS heads,
           (SELECT coalesce(sum(superseded_count), 0) FROM annotation_heads WHERE org_id = ${lit(orgId)})::text AS superseded,
           (SELECT count(*) FROM annotation_heads h JOIN events e ON e.org_id = h.org_id AND e.event_id = h.event_id
             WHERE h.org_id = ${lit(orgId)} AND e.supersession_key = h.supersession_key
               AND e.ts_wall_ns = h.ts_wall_ns)::text AS consistent_heads`;
}
