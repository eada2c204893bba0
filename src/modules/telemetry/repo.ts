// Telemetry SQL storage and layer 2: saved data views, the live annotation schemas the
// catalog is built from, and the executor that runs a (rewritten) query in a READ ONLY
// transaction as warren_telemetry_reader, with the organization bound by a row of
// telemetry_bindings (migration 0026), under the row-level security of migration 0012. The
// transaction always rolls back.
import type { Queryable, RawResult } from "../../store/db.js";
import type { LiveSchema } from "./sql/catalog.js";

export interface DataViewRow {
  name: string;
  description: string;
  spec: unknown;
  spec_version: number;
  created_at: Date;
  updated_at: Date;
}

const VIEW_COLUMNS = "name, description, spec, spec_version, created_at, updated_at";

export async function liveSchemas(db: Queryable, orgId: string): Promise<LiveSchema[]> {
  const { rows } = await db.query<{
    name: string;
    json_schema: string;
    promoted_fields: { field: string; slot: string }[];
  }>(
    `SELECT DISTINCT ON (name) name, json_schema, promoted_fields FROM annotation_schemas
      WHERE org_id = $1 AND archived_at IS NULL ORDER BY name, version DESC`,
    [orgId],
  );
  return rows.map((r) => ({ name: r.name, jsonSchema: r.json_schema, promoted: r.promoted_fields ?? [] }));
}

export async function putView(
  db: Queryable,
  v: { orgId: string; name: string; description: string; spec: unknown; createdBy: string; now: Date },
): Promise<DataViewRow> {
  const { rows } = await db.query<DataViewRow>(
    `INSERT INTO data_views (org_id, name, description, spec, spec_version, created_by, created_at, updated_at)
     VALUES ($1, $2, $3, $4::jsonb, 1, $5, $6, $6)
     ON CONFLICT (org_id, name) DO UPDATE
       SET description = EXCLUDED.description, spec = EXCLUDED.spec,
           spec_version = data_views.spec_version + 1, updated_at = EXCLUDED.updated_at
     RETURNING ${VIEW_COLUMNS}`,
    [v.orgId, v.name, v.description, JSON.stringify(v.spec), v.createdBy, v.now],
  );
  return rows[0] as DataViewRow;
}

export async function listViews(db: Queryable, orgId: string): Promise<DataViewRow[]> {
  const { rows } = await db.query<DataViewRow>(
    `SELECT ${VIEW_COLUMNS} FROM data_views WHERE org_id = $1 ORDER BY name`,
    [orgId],
  );
  return rows;
}

export async function getView(db: Queryable, orgId: string, name: string): Promise<DataViewRow | null> {
  const { rows } = await db.query<DataViewRow>(
    `SELECT ${VIEW_COLUMNS} FROM data_views WHERE org_id = $1 AND name = $2`,
    [orgId, name],
  );
  return rows[0] ?? null;
}

export async function deleteView(db: Queryable, orgId: string, name: string): Promise<boolean> {
  const { rows } = await db.query("DELETE FROM data_views WHERE org_id = $1 AND name = $2 RETURNING name", [
    orgId,
    name,
  ]);
  return rows.length > 0;
}

/** True when the reader role can still call set_config (the superuser REVOKE of migration 0012 is missing). */
export async function readerCanSetConfig(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ can: boolean }>(
    `SELECT has_function_privilege('warren_telemetry_reader', 'pg_catalog.set_config(text, text, boolean)', 'EXECUTE') AS can`,
  );
  return rows[0]?.can !== false;
}

const typeNames = new Map<number, string>();

/** PostgreSQL's names of type oids (cached: built-in and published types do not change). */
export async function typeNamesOf(db: Queryable, oids: number[]): Promise<Map<number, string>> {
  const missing = [...new Set(oids)].filter((oid) => !typeNames.has(oid));
  if (missing.length > 0) {
    const { rows } = await db.query<{ oid: number; name: string }>(
      "SELECT oid::int AS oid, format_type(oid, NULL) AS name FROM pg_type WHERE oid = ANY($1::oid[])",
      [missing],
    );
    for (const row of rows) typeNames.set(row.oid, row.name);
  }
  return typeNames;
}

export interface Layer2Limits {
  statementTimeoutMs: number;
  workMemKiB: number;
  /** Rows fetched at most: the caller's cap plus one, so a cut is seen. */
  fetchRows: number;
  /** Refuse (CostOverCap) a plan whose estimated total cost exceeds this; null: no guard. */
  maxCost?: number | null;
  /**
   * Bytes of rows the database sends at most (their text form, counted by the database);
   * past them it sends each row's values as nulls and the result says `cut`. Default 4 MiB.
   */
  maxBytes?: number;
}

/** A reader's result: when `cut`, the database stopped sending values at the byte cap. */
export interface ReaderResult extends RawResult {
  cut: boolean;
}

const DEFAULT_MAX_BYTES = 4 * 1024 * 1024;

/**
 * The statement that runs `sql` with its n columns capped: the database counts each row's
 * size (its text form) as it goes, and a row past `maxBytes` in all carries nulls and a false
 * last column. A value larger than the cap never leaves the database, however large it is
 * there (one query's 600 MB string otherwise crashed the pg client's parser, above what a
 * Node string may hold). The window streams and LIMIT still stops the query early.
 */
function cappedStatement(sql: string, columns: number, maxBytes: number, fetchRows: number): string {
  const names = Array.from({ length: columns }, (_, i) => `c${i + 1}`);
  const values = names.map((c) => `CASE WHEN warren_capped.warren_fits THEN warren_capped.${c} END AS ${c}`);
  return `SELECT ${values.join(", ")}, warren_capped.warren_fits
  FROM (SELECT warren_result.*,
               sum(octet_length(warren_result::text)) OVER (ROWS UNBOUNDED PRECEDING) <= ${maxBytes} AS warren_fits
          FROM (
${sql}
) AS warren_result(${names.join(", ")})) AS warren_capped
 LIMIT ${fetchRows}`;
}

/** The planner's estimate for a query was over the cap: it was planned, never run. */
export class CostOverCap extends Error {
  constructor(
    readonly estimatedCost: number,
    readonly maxCost: number,
  ) {
    super(`estimated cost ${estimatedCost} exceeds ${maxCost}`);
  }
}

/** The total cost of the top node of an EXPLAIN (FORMAT JSON) answer (json parsed or not). */
export function planTotalCost(plan: unknown): number {
  const parsed = typeof plan === "string" ? (JSON.parse(plan) as unknown) : plan;
  const cost = (parsed as { Plan?: { "Total Cost"?: unknown } }[] | undefined)?.[0]?.Plan?.["Total Cost"];
  if (typeof cost !== "number" || !Number.isFinite(cost)) throw new Error("EXPLAIN gave no total cost");
  return cost;
}

class Rollback {
  constructor(readonly result: ReaderResult) {}
}

/** The capped statement's rows as the query's own: its column names, the rows before the cut. */
function uncap(raw: RawResult, fields: RawResult["fields"]): ReaderResult {
  const cutAt = raw.rows.findIndex((row) => row[row.length - 1] !== "t");
  const rows = (cutAt < 0 ? raw.rows : raw.rows.slice(0, cutAt)).map((row) => row.slice(0, -1));
  return {
    fields: raw.fields.slice(0, -1).map((field, i) => ({ name: fields[i]?.name ?? field.name, typeId: field.typeId })),
    rows,
    cut: cutAt >= 0,
  };
}

const ORG_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

/**
 * Where a reader transaction runs: Warren's own store (the transaction then takes the
 * reader's role with SET LOCAL ROLE), or a reader login's connection (reader-logins.ts),
 * whose session user already has nothing but the reader's grants.
 */
export interface ReaderSession {
  tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T>;
  /** False for a reader login: its session is the reader already. */
  readonly takesRole?: boolean;
}

/**
 * Binds the transaction's backend to an organization for the row-level security of layer 2
 * (migration 0026). The caller's transaction must roll back: the binding is never committed.
 */
export async function bindOrganization(q: Queryable, orgId: string): Promise<void> {
  await q.query("INSERT INTO public.telemetry_bindings (pid, org_id) VALUES (pg_backend_pid(), $1)", [orgId]);
}

/**
 * Runs `sql` (one statement; never several: the extended protocol and the wrapping
 * subquery refuse them) under layer 2 alone. The text is whatever it is given: layer 1's
 * output in production, unrewritten hostile text in the layer-2 tests.
 */
export async function runAsReader(
  session: ReaderSession,
  orgId: string,
  sql: string,
  params: unknown[],
  limits: Layer2Limits,
): Promise<ReaderResult> {
  if (!ORG_ID.test(orgId)) throw new Error("organization id with unexpected characters");
  try {
    await session.tx(async (q) => {
      // The binding is written while the transaction may still write; from the next
      // statement on it is READ ONLY, so nothing the query runs can add or change one.
      await bindOrganization(q, orgId);
      // One round trip: every value is an integer.
      await q.exec(
        [
          "SET TRANSACTION READ ONLY",
          `SET LOCAL statement_timeout = ${Math.max(1, Math.floor(limits.statementTimeoutMs))}`,
          `SET LOCAL work_mem = ${Math.max(64, Math.floor(limits.workMemKiB))}`,
          "SET LOCAL TimeZone = 'UTC'",
          "SET LOCAL search_path = telemetry_sql",
          ...(session.takesRole === false ? [] : ["SET LOCAL ROLE warren_telemetry_reader"]),
        ].join(";\n"),
      );
      const fetchRows = Math.max(0, Math.floor(limits.fetchRows));
      // statement_timeout bounds every statement on PostgreSQL; the embedded store ignores
      // it and stops a statement at timeoutMs instead (src/store/pglite-deadline.ts).
      const deadline = { timeoutMs: limits.statementTimeoutMs };
      // The result's columns first (LIMIT 0 runs nothing), to name them in the capped statement.
      const { fields } = await q.queryRaw(`SELECT * FROM (\n${sql}\n) AS warren_result LIMIT 0`, params, deadline);
      const capped = fields.length > 0;
      const text = capped
        ? cappedStatement(sql, fields.length, Math.floor(limits.maxBytes ?? DEFAULT_MAX_BYTES), fetchRows)
        : `SELECT * FROM (\n${sql}\n) AS warren_result LIMIT ${fetchRows}`;
      // The cost guard plans the exact statement, with the same role, settings and values,
      // and refuses before anything runs: on PGlite a statement stopped by its deadline
      // costs a reopen of the store, which the guard spares most expensive queries. Planning
      // is under the deadline too (the planner evaluates immutable functions of constants).
      if (limits.maxCost) {
        const { rows } = await q.query<{ "QUERY PLAN": unknown }>(`EXPLAIN (FORMAT JSON) ${text}`, params, deadline);
        const cost = planTotalCost(rows[0]?.["QUERY PLAN"]);
        if (cost > limits.maxCost) throw new CostOverCap(cost, limits.maxCost);
      }
      // Session-level advisory locks outlive the rollback. One taken by a query would stay
      // on the connection (a pooled one of Warren's, or a reader login's) for whatever runs
      // there next, so they are released whether the query succeeded or failed; the
      // savepoint lets the transaction run that release after an error.
      await q.query("SAVEPOINT warren_query");
      let result: ReaderResult;
      try {
        const raw = await q.queryRaw(text, params, deadline);
        result = capped ? uncap(raw, fields) : { ...raw, cut: false };
      } catch (error) {
        await q.query("ROLLBACK TO SAVEPOINT warren_query").catch(() => undefined);
        throw error;
      } finally {
        await q.query("SELECT pg_advisory_unlock_all()").catch(() => undefined);
      }
      throw new Rollback(result);
    });
  } catch (error) {
    if (error instanceof Rollback) return error.result;
    throw error;
  }
  throw new Error("unreachable: the reader transaction always rolls back");
}
