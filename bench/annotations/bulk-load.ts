// Bulk-loads the annotation history straight into the store while the server is stopped:
// PGlite is opened on the server's data dir (PGlite admits one process), PostgreSQL through
// a plain client. The rows are exactly what AnnotationService writes (see data.ts).
import { PGlite } from "@electric-sql/pglite";
import pg from "pg";
import { checkSql, insertEventsSql, insertHeadsSql, type LoadContext } from "./data.js";

export interface SqlConn {
  exec(sql: string): Promise<void>;
  rows<T>(sql: string): Promise<T[]>;
  close(): Promise<void>;
}

export async function connect(target: { pgliteDir?: string; databaseUrl?: string }): Promise<SqlConn> {
  if (target.databaseUrl) {
    const client = new pg.Client({ connectionString: target.databaseUrl });
    await client.connect();
    return {
      exec: async (sql) => {
        await client.query(sql);
      },
      rows: async <T>(sql: string) => (await client.query(sql)).rows as T[],
      close: () => client.end(),
    };
  }
  const db = await PGlite.create({ dataDir: target.pgliteDir as string });
  return {
    exec: async (sql) => {
      await db.exec(sql);
    },
    rows: async <T>(sql: string) => (await db.query<T>(sql)).rows,
    close: () => db.close(),
  };
}

export interface LoadCheck {
  events: string;
  heads: string;
  superseded: string;
  consistent_heads: string;
}

export async function check(conn: SqlConn, orgId: string): Promise<LoadCheck> {
  const [row] = await conn.rows<LoadCheck>(checkSql(orgId));
  if (!row) throw new Error("check returned no row");
  return row;
}

/** Loads ctx.rows events in batches and the heads; returns the seconds each part took. */
export async function bulkLoad(
  conn: SqlConn,
  ctx: LoadContext,
  log: (line: string) => void,
  batch = 100_000,
): Promise<{ eventsSec: number; headsSec: number }> {
  const started = performance.now();
  for (let from = 0; from < ctx.rows; from += batch) {
    const to = Math.min(ctx.rows, from + batch);
    await conn.exec(insertEventsSql(ctx, from, to));
    log(`  ${to} / ${ctx.rows} events (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
  const eventsSec = (performance.now() - started) / 1000;
  const headsStarted = performance.now();
  await conn.exec(insertHeadsSql(ctx));
  const headsSec = (performance.now() - headsStarted) / 1000;
  return { eventsSec, headsSec };
}
