import { PGlite, types } from "@electric-sql/pglite";
import type { Db, Queryable } from "./db.js";

/** Opens the embedded store; dataDir undefined keeps it in memory (tests). */
export async function openPglite(dataDir?: string): Promise<Db> {
  const pg = await PGlite.create({
    dataDir,
    parsers: { [types.INT8]: (value: string) => value },
  });
  const wrap = (q: Pick<PGlite, "query" | "exec">): Queryable => ({
    exec: async (sql: string) => {
      await q.exec(sql);
    },
    query: async <T>(sql: string, params?: unknown[]) => {
      const result = await q.query<T>(sql, params as unknown[] | undefined);
      return { rows: result.rows };
    },
  });
  const root = wrap(pg);
  return {
    kind: "pglite",
    query: root.query,
    exec: root.exec,
    tx: (fn) => pg.transaction((tx) => fn(wrap(tx))),
    close: () => pg.close(),
  };
}
