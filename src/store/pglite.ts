// The embedded store. The wrapper owns its PGlite instance and can replace it: a statement
// stopped by its deadline (pglite-deadline.ts) leaves the instance interrupted mid-statement,
// so the next operation drops it, closes its file descriptors and opens the data directory
// again (PostgreSQL's crash recovery: everything committed is there); a memory store opens
// a copy of the stopped instance's files, read from its file system without running it.
// Every root operation
// takes the wrapper's lock, a promise chain, and resolves the instance when it holds it;
// transactions are the wrapper's own (BEGIN, COMMIT, ROLLBACK), since PGlite's transaction()
// would run a ROLLBACK on an interrupted instance.
import { readdir, rm } from "node:fs/promises";
import path from "node:path";
import { messages, PGlite, TransactionAbortedError, types } from "@electric-sql/pglite";
import type { Db, NotificationHandlers, Queryable, StatementOptions } from "./db.js";
import { type ModuleHandles, PrivateNodeFS, TrackedMemoryFS } from "./pglite-private-fs.js";
import { PgliteWire } from "./pglite-wire.js";

/**
 * Opens the embedded store; dataDir undefined keeps it in memory (tests). A memory store
 * may start from a dumped data directory (a tarball), which skips the slow initdb.
 */
export interface PgliteDb extends Db {
  /** The data directory as a tarball, to start other memory stores from. */
  dump(): Promise<Blob>;
  /** Where the store keeps its files; null in memory. */
  readonly dataDir: string | null;
}

interface Instance {
  pg: PGlite;
  wire: PgliteWire;
  fs: PrivateNodeFS | TrackedMemoryFS;
  handles: ModuleHandles;
}

function databaseError(code: string, message: string): messages.DatabaseError {
  const error = new messages.DatabaseError(message, 0, "error");
  error.code = code;
  error.severity = "ERROR";
  return error;
}

const deadlineOf = (options: StatementOptions | undefined) =>
  options?.timeoutMs === undefined ? undefined : performance.now() + options.timeoutMs;

const quoted = (channel: string) => `"${channel.replaceAll('"', '""')}"`;

const noop = () => undefined;

export async function openPglite(dataDir?: string, loadDataDir?: Blob): Promise<PgliteDb> {
  const listeners = new Map<string, Set<NotificationHandlers>>();
  const dispatch = (channel: string, payload: string) => {
    for (const handlers of listeners.get(channel) ?? []) handlers.onPayload(payload);
  };
  const start = async (load?: Blob): Promise<Instance> => {
    const fs = dataDir ? new PrivateNodeFS(dataDir) : new TrackedMemoryFS();
    const pg = await PGlite.create({
      fs,
      ...(load ? { loadDataDir: load } : {}),
      parsers: { [types.INT8]: (value: string) => value },
    });
    // Parameterised statements go through the prepared-statement path (see pglite-wire.ts);
    // scripts still use PGlite's exec(). In-process, a NOTIFY comes back in the reply of
    // the statement (or COMMIT) that committed it, on whichever of the two ran that.
    const wire = new PgliteWire(pg);
    wire.onNotification = dispatch;
    pg.onNotification(dispatch);
    return { pg, wire, fs, handles: fs.handles };
  };

  let current = await start(loadDataDir);
  let closed = false;
  let tail: Promise<unknown> = Promise.resolve();

  /** Replaces an interrupted instance: its descriptors closed, the data directory opened again. */
  const reopen = async (): Promise<Instance> => {
    let next: Instance;
    if (dataDir) {
      current.handles.release();
      // The stopped statement's spill files (sorts, hashes past work_mem): a postmaster clears
      // them at start, a single-user backend does not. No instance is running now.
      const spill = path.join(dataDir, "base", "pgsql_tmp");
      for (const file of await readdir(spill).catch(() => [])) await rm(path.join(spill, file), { force: true });
      next = await start();
    } else {
      // A memory store's files live in the stopped module's file system (JavaScript objects,
      // not its WASM heap): copied out as a tarball without running any of its code, they are
      // what a crash would have left on disk, and the new instance recovers from them. The
      // spill files are removed first, as for a data directory.
      const memfs = current.pg.Module.FS;
      const spill = `${PGlite.paths.PGDATA}/base/pgsql_tmp`;
      const spilled = memfs.analyzePath(spill).exists ? memfs.readdir(spill) : [];
      for (const file of spilled) if (file !== "." && file !== "..") memfs.unlink(`${spill}/${file}`);
      const files = await current.fs.dumpTar("pgdata", "none");
      current.handles.release();
      next = await start(files);
    }
    for (const channel of listeners.keys()) await next.pg.exec(`LISTEN ${quoted(channel)}`);
    current = next;
    for (const set of listeners.values()) for (const handlers of set) handlers.onGap?.(false);
    return next;
  };

  /** The subscribers may miss notifications until the reopen; one queued no-op starts it. */
  const interrupted = () => {
    for (const set of listeners.values()) for (const handlers of set) handlers.onGap?.(true);
    void exclusive(async () => undefined).catch(noop);
  };

  const run = async <T>(fn: (instance: Instance) => Promise<T>): Promise<T> => {
    if (closed) throw new Error("PGlite is closed");
    const instance = current.wire.interrupted ? await reopen() : current;
    try {
      return await fn(instance);
    } finally {
      if (instance.wire.interrupted) interrupted();
    }
  };

  /** The wrapper's lock: operations run one at a time, in order, on the instance current then. */
  const exclusive = <T>(fn: (instance: Instance) => Promise<T>): Promise<T> => {
    const result = tail.then(() => run(fn));
    tail = result.then(noop, noop);
    return result;
  };

  return {
    kind: "pglite" as const,
    dataDir: dataDir ?? null,
    exec: (sql) =>
      exclusive(async ({ pg }) => {
        await pg.exec(sql);
      }),
    query: <T>(sql: string, params?: unknown[], options?: StatementOptions) =>
      exclusive(async ({ pg, wire }) => {
        const rows = await wire.query<T>(sql, params ?? [], deadlineOf(options));
        await pg.syncToFs();
        return { rows };
      }),
    queryRaw: (sql, params, options) => exclusive(({ wire }) => wire.queryRaw(sql, params ?? [], deadlineOf(options))),
    tx: (fn) =>
      exclusive(async ({ pg, wire }) => {
        await wire.command("BEGIN");
        let open = true;
        const usable = () => {
          if (!open) throw new Error("Transaction is closed");
          // As PostgreSQL answers every statement after a canceled one in the same transaction.
          if (wire.interrupted) {
            throw databaseError(
              "25P02",
              "current transaction is aborted, commands ignored until end of transaction block",
            );
          }
        };
        const q: Queryable = {
          exec: async (sql: string) => {
            usable();
            await pg.exec(sql);
          },
          query: async <T>(sql: string, params?: unknown[], options?: StatementOptions) => {
            usable();
            return { rows: await wire.query<T>(sql, params ?? [], deadlineOf(options)) };
          },
          queryRaw: async (sql: string, params?: unknown[], options?: StatementOptions) => {
            usable();
            return wire.queryRaw(sql, params ?? [], deadlineOf(options));
          },
        };
        try {
          const value = await fn(q);
          open = false;
          if ((await wire.command("COMMIT")) === "ROLLBACK") throw new TransactionAbortedError();
          return value;
        } catch (error) {
          if (open) {
            open = false;
            // An interrupted instance runs nothing more, a ROLLBACK included: it is dropped.
            if (!wire.interrupted) await wire.command("ROLLBACK");
          }
          throw error;
        }
      }),
    listen: (channel, handlers) =>
      exclusive(async ({ pg }) => {
        let set = listeners.get(channel);
        if (!set) {
          await pg.exec(`LISTEN ${quoted(channel)}`);
          set = new Set();
          listeners.set(channel, set);
        }
        set.add(handlers);
        const subscribed = set;
        return async () => {
          subscribed.delete(handlers);
        };
      }),
    close: () => {
      const result = tail.then(async () => {
        if (closed) return;
        closed = true;
        // An interrupted instance cannot run its shutdown; its descriptors are all it holds.
        if (current.wire.interrupted) current.handles.release();
        else await current.pg.close();
      });
      tail = result.then(noop, noop);
      return result;
    },
    dump: () => exclusive(async ({ pg }) => (await pg.dumpDataDir("none")) as Blob),
  };
}
