import { PGlite, types } from "@electric-sql/pglite";
import type { Db, Queryable } from "./db.js";

/**
 * Opens the embedded store; dataDir undefined keeps it in memory (tests). A memory store
 * may start from a dumped data directory (a tarball), which skips the slow initdb.
 */
export interface PgliteDb extends Db {
  /** The data directory as a tarball, to start other memory stores from. */
  dump(): Promise<Blob>;
}

export async function openPglite(dataDir?: string, loadDataDir?: Blob): Promise<PgliteDb> {
  const pg = await PGlite.create({
    dataDir,
    ...(loadDataDir ? { loadDataDir } : {}),
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
    kind: "pglite" as const,
    query: root.query,
    exec: root.exec,
    tx: (fn) => pg.transaction((tx) => fn(wrap(tx))),
    close: () => pg.close(),
    dump: async () => (await pg.dumpDataDir("none")) as Blob,
  };
}
