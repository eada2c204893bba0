import { PGlite, types } from "@electric-sql/pglite";
import type { Db, NotificationHandlers, Queryable } from "./db.js";
import { PrivateNodeFS } from "./pglite-private-fs.js";
import { PgliteWire } from "./pglite-wire.js";

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
    ...(dataDir ? { fs: new PrivateNodeFS(dataDir) } : {}),
    ...(loadDataDir ? { loadDataDir } : {}),
    parsers: { [types.INT8]: (value: string) => value },
  });
  // Parameterised statements go through the prepared-statement path (see pglite-wire.ts),
  // under the same locks PGlite's query() takes; scripts still use PGlite's exec().
  const wire = new PgliteWire(pg);
  const listeners = new Map<string, Set<NotificationHandlers>>();
  const dispatch = (channel: string, payload: string) => {
    for (const handlers of listeners.get(channel) ?? []) handlers.onPayload(payload);
  };
  wire.onNotification = dispatch;
  pg.onNotification(dispatch);
  const root: Queryable = {
    exec: async (sql: string) => {
      await pg.exec(sql);
    },
    query: async <T>(sql: string, params?: unknown[]) => {
      await pg._checkReady();
      const rows = await pg._runExclusiveTransaction(() =>
        pg._runExclusiveQuery(async () => {
          const result = await wire.query<T>(sql, params ?? []);
          await pg.syncToFs();
          return result;
        }),
      );
      return { rows };
    },
    queryRaw: async (sql: string, params?: unknown[]) => {
      await pg._checkReady();
      return pg._runExclusiveTransaction(() => pg._runExclusiveQuery(() => wire.queryRaw(sql, params ?? [])));
    },
  };
  return {
    kind: "pglite" as const,
    query: root.query,
    exec: root.exec,
    queryRaw: root.queryRaw,
    tx: (fn) =>
      pg.transaction(async (tx) => {
        let open = true;
        const q: Queryable = {
          exec: async (sql: string) => {
            await tx.exec(sql);
          },
          query: async <T>(sql: string, params?: unknown[]) => {
            if (!open) throw new Error("Transaction is closed");
            return { rows: await pg._runExclusiveQuery(() => wire.query<T>(sql, params ?? [])) };
          },
          queryRaw: async (sql: string, params?: unknown[]) => {
            if (!open) throw new Error("Transaction is closed");
            return pg._runExclusiveQuery(() => wire.queryRaw(sql, params ?? []));
          },
        };
        try {
          return await fn(q);
        } finally {
          open = false;
        }
      }),
    // In-process: a NOTIFY comes back in the reply of the statement (or COMMIT) that
    // committed it, on whichever path ran that (PGlite's own, or the wire above).
    listen: async (channel, handlers) => {
      let set = listeners.get(channel);
      if (!set) {
        set = new Set();
        listeners.set(channel, set);
        await pg.exec(`LISTEN "${channel.replaceAll('"', '""')}"`);
      }
      set.add(handlers);
      return async () => {
        set.delete(handlers);
      };
    },
    close: () => pg.close(),
    dump: async () => (await pg.dumpDataDir("none")) as Blob,
  };
}
