// What a telemetry SQL query may name: the published relations and their columns (the
// column allowlist), the functions, operators, casts and table functions. Everything not
// listed here is refused. docs/telemetry-sql.md documents the same lists.

export interface PublishedColumn {
  name: string;
  /** The SQL type the column has in the relation a query sees. */
  type: string;
  /** The expression over the layer-2 view; the column itself when absent. */
  expr?: string;
}

export interface PublishedRelation {
  name: string;
  /** The layer-2 view the relation reads (schema telemetry_sql). */
  view: string;
  columns: PublishedColumn[];
  /** A schema-name filter for annotation-schema relations (bound as a parameter). */
  schemaName?: string;
}

const col = (name: string, type: string): PublishedColumn => ({ name, type });

export const FIXED_RELATIONS: PublishedRelation[] = [
  {
    name: "runs",
    view: "runs",
    columns: [
      col("id", "text"),
      col("project_id", "text"),
      col("label", "text"),
      col("parent_run_id", "text"),
      col("root_run_id", "text"),
      col("lineage_path", "text"),
      col("depth", "integer"),
      col("status", "text"),
      col("started_at", "timestamptz"),
      col("ended_at", "timestamptz"),
      col("execute_as_workload", "text"),
    ],
  },
  {
    name: "events",
    view: "events",
    columns: [
      col("event_id", "text"),
      col("project_id", "text"),
      col("run_id", "text"),
      col("lineage_path", "text"),
      col("ts_wall_ns", "bigint"),
      col("ts", "timestamptz"),
      col("name", "text"),
      col("kind", "text"),
      col("principal", "text"),
      col("payload", "jsonb"),
    ],
  },
  {
    name: "annotations",
    view: "annotations",
    columns: ANNOTATION_COLUMNS(),
  },
  {
    name: "spans",
    view: "spans",
    columns: [
      col("event_id", "text"),
      col("run_id", "text"),
      col("project_id", "text"),
      col("lineage_path", "text"),
      col("trace_id", "text"),
      col("span_id", "text"),
      col("parent_span_id", "text"),
      col("name", "text"),
      col("kind", "text"),
      col("status_code", "text"),
      col("status_message", "text"),
      col("start_ns", "bigint"),
      col("end_ns", "bigint"),
      col("start_time", "timestamptz"),
      col("end_time", "timestamptz"),
      col("duration_ms", "numeric"),
      col("service_name", "text"),
      col("scope_name", "text"),
      col("span_type", "text"),
      col("gen_ai_operation", "text"),
      col("gen_ai_system", "text"),
      col("model", "text"),
      col("input_tokens", "bigint"),
      col("output_tokens", "bigint"),
      col("total_tokens", "bigint"),
      col("cost_usd", "double precision"),
      col("input", "text"),
      col("output", "text"),
      col("user_id", "text"),
      col("session_id", "text"),
      col("tags", "jsonb"),
      col("attributes", "jsonb"),
      col("span_events", "jsonb"),
      col("links", "jsonb"),
      col("resource_attributes", "jsonb"),
    ],
  },
  {
    name: "sandboxes",
    view: "sandboxes",
    columns: [
      col("id", "text"),
      col("project_id", "text"),
      col("name", "text"),
      col("state", "text"),
      col("desired_state", "text"),
      col("image", "text"),
      col("image_digest", "text"),
      col("lineage_path", "text"),
      col("storage_class", "text"),
      col("placement_class", "text"),
      col("network_access", "text"),
      col("run_id", "text"),
      col("snapshot_id", "text"),
      col("metadata", "jsonb"),
      col("created_at", "timestamptz"),
      col("updated_at", "timestamptz"),
      col("finished_at", "timestamptz"),
    ],
  },
  {
    name: "snapshots",
    view: "snapshots",
    columns: [
      col("id", "text"),
      col("project_id", "text"),
      col("source_sandbox_id", "text"),
      col("parent_snapshot_id", "text"),
      col("run_id", "text"),
      col("name", "text"),
      col("image", "text"),
      col("lineage_path", "text"),
      col("state", "text"),
      col("durability", "text"),
      col("size_bytes", "bigint"),
      col("created_at", "timestamptz"),
      col("sealed_at", "timestamptz"),
    ],
  },
];

function ANNOTATION_COLUMNS(): PublishedColumn[] {
  return [
    col("event_id", "text"),
    col("run_id", "text"),
    col("project_id", "text"),
    col("lineage_path", "text"),
    col("schema_name", "text"),
    col("schema_version", "integer"),
    col("ts_wall_ns", "bigint"),
    col("ts", "timestamptz"),
    col("principal", "text"),
    col("target_event_id", "text"),
    col("range_start_ns", "bigint"),
    col("range_end_ns", "bigint"),
    col("range_start_event_id", "text"),
    col("range_end_event_id", "text"),
    col("payload", "jsonb"),
    col("payload_json", "text"),
  ];
}

export const FIXED_NAMES = new Set(FIXED_RELATIONS.map((r) => r.name));

/** A live annotation schema as the catalog needs it: its name, JSON Schema and promoted slots. */
export interface LiveSchema {
  name: string;
  jsonSchema: string;
  promoted: { field: string; slot: string }[];
}

const SLOT = /^p[1-8]$/;

/** The typed column of a promoted field: its JSON Schema type decides the SQL type. */
function promotedColumn(field: string, slot: string, properties: Record<string, unknown>): PublishedColumn | null {
  if (!SLOT.test(slot)) return null;
  const declared = Object.hasOwn(properties, field)
    ? (properties[field] as { type?: unknown } | undefined)?.type
    : undefined;
  const types = (Array.isArray(declared) ? declared : [declared]).filter((t) => t !== "null");
  const type = types.length === 1 ? types[0] : "string";
  switch (type) {
    case "integer":
      return { name: field, type: "bigint", expr: `CASE WHEN ${slot} ~ '^-?[0-9]{1,18}$' THEN ${slot}::bigint END` };
    case "number":
      return {
        name: field,
        type: "double precision",
        expr: `CASE WHEN ${slot} ~ '^-?[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?$' THEN ${slot}::double precision END`,
      };
    case "boolean":
      return { name: field, type: "boolean", expr: `CASE ${slot} WHEN 'true' THEN true WHEN 'false' THEN false END` };
    default:
      return { name: field, type: "text", expr: slot };
  }
}

/**
 * The relations of one organization: the fixed ones, then one per live annotation schema
 * (named after it; a schema named like a fixed relation is not published) with the
 * annotation columns plus its promoted fields as typed columns.
 */
export function catalogOf(schemas: LiveSchema[]): Map<string, PublishedRelation> {
  const out = new Map<string, PublishedRelation>(FIXED_RELATIONS.map((r) => [r.name, r]));
  for (const schema of schemas) {
    if (out.has(schema.name) || schema.name.startsWith("pg_")) continue;
    let properties: Record<string, unknown> = {};
    try {
      const parsed = JSON.parse(schema.jsonSchema) as { properties?: Record<string, unknown> };
      properties = parsed.properties ?? {};
    } catch {
      properties = {};
    }
    const columns = ANNOTATION_COLUMNS();
    const taken = new Set(columns.map((c) => c.name));
    for (const p of schema.promoted) {
      const column = promotedColumn(p.field, p.slot, properties);
      if (column && !taken.has(column.name)) {
        columns.push(column);
        taken.add(column.name);
      }
    }
    out.set(schema.name, { name: schema.name, view: "annotations", columns, schemaName: schema.name });
  }
  return out;
}

/** Plain functions and aggregates a query may call (unqualified). */
export const ALLOWED_FUNCTIONS = new Set([
  // aggregates
  "count",
  "sum",
  "avg",
  "min",
  "max",
  "bool_and",
  "bool_or",
  "every",
  "string_agg",
  "array_agg",
  "jsonb_agg",
  "jsonb_object_agg",
  "json_agg",
  "json_object_agg",
  "percentile_cont",
  "percentile_disc",
  "mode",
  "stddev",
  "stddev_pop",
  "stddev_samp",
  "variance",
  "var_pop",
  "var_samp",
  "corr",
  "covar_pop",
  "covar_samp",
  // window functions
  "row_number",
  "rank",
  "dense_rank",
  "percent_rank",
  "cume_dist",
  "ntile",
  "lag",
  "lead",
  "first_value",
  "last_value",
  "nth_value",
  // numbers
  "abs",
  "ceil",
  "ceiling",
  "floor",
  "round",
  "trunc",
  "sign",
  "sqrt",
  "cbrt",
  "power",
  "exp",
  "ln",
  "log",
  "log10",
  "mod",
  "div",
  "width_bucket",
  "random",
  // text
  "lower",
  "upper",
  "length",
  "char_length",
  "octet_length",
  "substr",
  "substring",
  "concat",
  "concat_ws",
  "replace",
  "split_part",
  "left",
  "right",
  "starts_with",
  "strpos",
  "btrim",
  "ltrim",
  "rtrim",
  "trim",
  "lpad",
  "rpad",
  "reverse",
  "md5",
  "initcap",
  "translate",
  "regexp_replace",
  "regexp_match",
  "regexp_like",
  "format",
  "to_char",
  "to_number",
  "string_to_array",
  "array_to_string",
  "position",
  // time
  "now",
  "date_trunc",
  "date_part",
  "date_bin",
  "extract",
  "age",
  "to_timestamp",
  "to_date",
  "make_interval",
  "make_timestamptz",
  "make_date",
  "timezone",
  "justify_interval",
  "isfinite",
  // arrays
  "array_length",
  "cardinality",
  "array_position",
  "array_remove",
  "array_append",
  "array_cat",
  // json
  "to_json",
  "to_jsonb",
  "jsonb_build_object",
  "jsonb_build_array",
  "json_build_object",
  "json_build_array",
  "jsonb_typeof",
  "jsonb_array_length",
  "jsonb_extract_path",
  "jsonb_extract_path_text",
  "jsonb_strip_nulls",
  "jsonb_pretty",
  "jsonb_set",
  "jsonb_insert",
  "jsonb_path_exists",
  "jsonb_path_match",
  "jsonb_path_query_first",
  // misc
  "coalesce",
  "nullif",
  "greatest",
  "least",
  "num_nulls",
  "num_nonnulls",
]);

/** Set-returning functions allowed in FROM (and in the target list). */
export const TABLE_FUNCTIONS = new Set([
  "generate_series",
  "unnest",
  "jsonb_array_elements",
  "jsonb_array_elements_text",
  "jsonb_each",
  "jsonb_each_text",
  "jsonb_object_keys",
  "jsonb_path_query",
]);

/** generate_series may produce at most this many rows, with constant arguments. */
export const MAX_SERIES_ROWS = 1_000_000;

/** Functions written in SQL syntax that parse as pg_catalog-qualified calls. */
export const SQL_SYNTAX_FUNCTIONS = new Set([
  "extract",
  "substring",
  "position",
  "btrim",
  "ltrim",
  "rtrim",
  "overlay",
  "timezone",
  "date_part",
  "like_escape",
  "similar_to_escape",
  "trim",
  "normalize",
  "is_normalized",
]);

export const ALLOWED_OPERATORS = new Set([
  "=",
  "<>",
  "!=",
  "<",
  ">",
  "<=",
  ">=",
  "+",
  "-",
  "*",
  "/",
  "%",
  "^",
  "||",
  "~~",
  "~~*",
  "!~~",
  "!~~*",
  "~",
  "~*",
  "!~",
  "!~*",
  "->",
  "->>",
  "#>",
  "#>>",
  "@>",
  "<@",
  "?",
  "?|",
  "?&",
  "&&",
  "#-",
  "|/",
  "@",
]);

/** Type names a cast may name (after a leading pg_catalog is dropped). */
export const ALLOWED_TYPES = new Set([
  "text",
  "varchar",
  "char",
  "bpchar",
  "int2",
  "int4",
  "int8",
  "int",
  "integer",
  "smallint",
  "bigint",
  "numeric",
  "decimal",
  "float4",
  "float8",
  "real",
  "double precision",
  "bool",
  "boolean",
  "date",
  "time",
  "timetz",
  "timestamp",
  "timestamptz",
  "interval",
  "json",
  "jsonb",
  "uuid",
]);

/** Parameter types a data view may declare. */
export const PARAM_TYPES = [
  "text",
  "bigint",
  "double precision",
  "numeric",
  "boolean",
  "timestamptz",
  "jsonb",
] as const;
export type ParamType = (typeof PARAM_TYPES)[number];

/** SQL value functions (CURRENT_DATE ...) allowed; CURRENT_USER and friends are not. */
export const ALLOWED_SQL_VALUE_FUNCTIONS = new Set([
  "SVFOP_CURRENT_DATE",
  "SVFOP_CURRENT_TIME",
  "SVFOP_CURRENT_TIME_N",
  "SVFOP_CURRENT_TIMESTAMP",
  "SVFOP_CURRENT_TIMESTAMP_N",
  "SVFOP_LOCALTIME",
  "SVFOP_LOCALTIME_N",
  "SVFOP_LOCALTIMESTAMP",
  "SVFOP_LOCALTIMESTAMP_N",
]);
