// What keeps the telemetry replica (replica.ts) current: on the embedded store, statement
// triggers on the tables the telemetry views read (REPLICATED_TABLES) note the key of every row a statement
// inserted, updated or deleted in `warren_replica.changes`; before each telemetry query the
// server reads the noted keys and those rows' current state in one transaction of the store,
// deletes the notes, and the replica (in its worker) replaces those keys' rows with that
// state. State, not operations: applying a key twice, or a key whose row changed again since
// it was noted, converges on the store's rows (docs/telemetry-sql.md, "PGlite: queries off the
// server's thread").
import type { Queryable } from "../../store/db.js";

/** The base tables under the telemetry views (migration 0012) and their primary keys. */
export const REPLICATED_TABLES = [
  { name: "runs", key: ["id"] },
  { name: "events", key: ["org_id", "event_id"] },
  { name: "sandboxes", key: ["id"] },
  { name: "sandbox_snapshots", key: ["id"] },
  { name: "otlp_traces", key: ["org_id", "trace_id"] },
] as const;

export type ReplicatedTable = (typeof REPLICATED_TABLES)[number]["name"];

/** Keys noted per batch: each batch's rows pass through the server's thread in one piece. */
const BATCH_CHANGES = 500;

/** The changed rows of one table: every noted key, and the rows those keys have now (JSON). */
export interface TableChanges {
  table: ReplicatedTable;
  /** Each key as its column values, in the order of REPLICATED_TABLES' `key`. */
  keys: string[][];
  /** row_to_json of each row that exists now: a noted key without one was deleted. */
  rows: string[];
}

const keyList = (key: readonly string[], alias: string) => key.map((c) => `${alias}.${c}`).join(", ");

/**
 * Installs the capture (idempotent) and forgets earlier notes: the replica about to be
 * made copies the store as it is after this, so only later changes matter.
 */
export async function installCapture(q: Queryable): Promise<void> {
  const statements = [
    "CREATE SCHEMA IF NOT EXISTS warren_replica",
    "CREATE TABLE IF NOT EXISTS warren_replica.changes (seq bigserial PRIMARY KEY, tbl text NOT NULL, key text[] NOT NULL)",
    "TRUNCATE warren_replica.changes",
  ];
  for (const { name, key } of REPLICATED_TABLES) {
    // One function per table reads the statement's transition table, named `changed` by
    // each trigger: the new rows of an INSERT or UPDATE, the old rows of an UPDATE or DELETE.
    statements.push(
      `CREATE OR REPLACE FUNCTION warren_replica.note_${name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO warren_replica.changes (tbl, key) SELECT '${name}', ARRAY[${keyList(key, "c")}] FROM changed c;
  RETURN NULL;
END $$`,
    );
    const triggers = [
      ["ins", "INSERT", "NEW"],
      ["upd_new", "UPDATE", "NEW"],
      ["upd_old", "UPDATE", "OLD"],
      ["del", "DELETE", "OLD"],
    ] as const;
    for (const [suffix, event, which] of triggers) {
      const trigger = `warren_replica_${suffix}`;
      statements.push(`DROP TRIGGER IF EXISTS ${trigger} ON public.${name}`);
      statements.push(
        `CREATE TRIGGER ${trigger} AFTER ${event} ON public.${name} REFERENCING ${which} TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION warren_replica.note_${name}()`,
      );
    }
  }
  await q.exec(statements.join(";\n"));
}

/** Removes the capture (its triggers go with the schema): nothing is noted any more. */
export async function dropCapture(q: Queryable): Promise<void> {
  await q.exec("DROP SCHEMA IF EXISTS warren_replica CASCADE");
}

/**
 * Takes the next batch of notes: the keys, the current rows of those keys, and the notes
 * deleted, all in the transaction the caller runs this in. Null when there are none.
 */
export async function takeChanges(q: Queryable): Promise<TableChanges[] | null> {
  const { rows } = await q.query<{ upto: string | null }>(
    `SELECT max(seq)::text AS upto FROM (SELECT seq FROM warren_replica.changes ORDER BY seq LIMIT ${BATCH_CHANGES}) s`,
  );
  const upto = rows[0]?.upto ?? null;
  if (upto === null) return null;
  const batch: TableChanges[] = [];
  for (const { name, key } of REPLICATED_TABLES) {
    const noted = await q.query<{ key: string[] }>(
      "SELECT DISTINCT key FROM warren_replica.changes WHERE tbl = $1 AND seq <= $2",
      [name, upto],
    );
    if (noted.rows.length === 0) continue;
    const columns = key.join(", ");
    const elements = key.map((_, i) => `k.key[${i + 1}]`).join(", ");
    const current = await q.query<{ row: string }>(
      `SELECT row_to_json(t)::text AS row FROM public.${name} t
        WHERE (${columns}) IN (SELECT ${elements} FROM warren_replica.changes k WHERE k.tbl = $1 AND k.seq <= $2)`,
      [name, upto],
    );
    batch.push({ table: name, keys: noted.rows.map((r) => r.key), rows: current.rows.map((r) => r.row) });
  }
  await q.query("DELETE FROM warren_replica.changes WHERE seq <= $1", [upto]);
  return batch;
}

/** Columns a row is inserted with: every stored column but the generated ones (events.ts). */
export async function insertableColumns(q: Queryable, table: ReplicatedTable): Promise<string[]> {
  const { rows } = await q.query<{ name: string }>(
    `SELECT a.attname AS name FROM pg_attribute a
      WHERE a.attrelid = ('public.' || $1)::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
      ORDER BY a.attnum`,
    [table],
  );
  return rows.map((r) => `"${r.name.replaceAll('"', '""')}"`);
}

/**
 * Applies a batch in the replica, in the caller's transaction: each noted key's row is
 * deleted, then the rows the store has now are inserted. Triggers and foreign keys are off
 * (session_replication_role = replica), as for any replica: the store checked them.
 */
export async function applyChanges(
  q: Queryable,
  batch: TableChanges[],
  columnsOf: (q: Queryable, table: ReplicatedTable) => Promise<string[]>,
): Promise<void> {
  await q.exec("SET LOCAL session_replication_role = replica");
  for (const { table, keys, rows } of batch) {
    const key = REPLICATED_TABLES.find((t) => t.name === table)?.key;
    if (!key) throw new Error(`not a replicated table: ${table}`);
    const elements = key.map((_, i) => `x->>${i}`).join(", ");
    await q.query(
      `DELETE FROM public.${table} WHERE (${key.join(", ")}) IN (SELECT ${elements} FROM jsonb_array_elements($1::jsonb) x)`,
      [JSON.stringify(keys)],
    );
    if (rows.length === 0) continue;
    const columns = (await columnsOf(q, table)).join(", ");
    await q.query(
      `INSERT INTO public.${table} (${columns}) SELECT ${columns} FROM jsonb_populate_recordset(NULL::public.${table}, $1::jsonb)`,
      [`[${rows.join(",")}]`],
    );
  }
}
