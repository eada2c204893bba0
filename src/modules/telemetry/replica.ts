// Telemetry queries off the server's thread on the embedded store. PGlite is one backend in
// the server's own thread: a query runs there to its end or its deadline, and every other
// request waits (then waits for the reopen a deadline costs). So on PGlite telemetry queries
// run on a replica: a second PGlite instance in a worker thread (replica-worker.ts), made from
// a copy of the store's files when the first query comes, and brought up to date before each
// query with the rows changed since (replica-capture.ts). A query sees everything committed
// before it was sent; a slow one holds the worker alone. docs/telemetry-sql.md, "PGlite:
// queries off the server's thread".
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { AppError } from "../../lib/errors.js";
import { projectFile } from "../../lib/paths.js";
import type { Db } from "../../store/db.js";
import { dropCapture, installCapture, type TableChanges, takeChanges } from "./replica-capture.js";
import type { ReplicaReply, ReplicaRequest } from "./replica-protocol.js";
import { CostOverCap, type Layer2Limits, type ReaderResult } from "./repo.js";

/** The store the replica copies: its files as a tarball (PgliteDb.dump). */
export interface ReplicaSource {
  dump(): Promise<Blob>;
}

export interface ReplicaOptions {
  /** The store whose transactions read the changes (the server's, deferred writes waited for). */
  db: Db;
  /** The same store, whose files the replica starts from. */
  source: ReplicaSource;
  /** Where the replica keeps its files (made anew at each start); null keeps them in memory. */
  dataDir: string | null;
}

/**
 * Where the worker's module is. Under tsx (tests): a shim that registers tsx, then loads
 * replica-worker.ts. Bundled: the bundle's third entry, written beside it
 * (`<bundle>.telemetry-worker.mjs`, scripts/server-bundle.ts).
 */
function workerFile(): string {
  const self = fileURLToPath(import.meta.url);
  if (self.endsWith(".ts")) return projectFile("src", "modules", "telemetry", "replica-worker-tsx.mjs");
  return self.replace(/\.mjs$/, ".telemetry-worker.mjs");
}

type Request = ReplicaRequest extends infer R ? (R extends { id: number } ? Omit<R, "id"> : never) : never;

/** A request the worker refused: rebuilt as the error the service maps (SQLSTATE in `code`). */
function rebuilt(error: Extract<ReplicaReply, { ok: false }>["error"]): Error {
  if (error.name === "CostOverCap") return new CostOverCap(error.estimatedCost ?? 0, error.maxCost ?? 0);
  const rebuiltError = new Error(error.message);
  rebuiltError.name = error.name;
  if (error.code !== undefined) Object.assign(rebuiltError, { code: error.code });
  return rebuiltError;
}

class ReplicaThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  private nextId = 1;
  /** Set once the thread has failed or ended: the replica is then made anew. */
  broken: Error | null = null;

  constructor() {
    this.worker = new Worker(workerFile());
    // Idle, the thread does not keep the process alive; a request in flight does.
    this.worker.unref();
    this.worker.on("message", (reply: ReplicaReply) => {
      const waiter = this.pending.get(reply.id);
      if (!waiter) return;
      this.pending.delete(reply.id);
      if (this.pending.size === 0) this.worker.unref();
      if (reply.ok) waiter.resolve(reply.value);
      else waiter.reject(rebuilt(reply.error));
    });
    const fail = (error: Error) => {
      this.broken ??= error;
      for (const waiter of this.pending.values())
        waiter.reject(new AppError("unavailable", "the telemetry replica stopped"));
      this.pending.clear();
    };
    this.worker.on("error", fail);
    this.worker.on("exit", (code) => fail(new Error(`the telemetry replica's thread exited (${code})`)));
  }

  call<T>(request: Request, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.broken) return Promise.reject(new AppError("unavailable", "the telemetry replica stopped"));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.worker.ref();
      this.worker.postMessage({ ...request, id }, transfer);
    });
  }

  async close(): Promise<void> {
    if (!this.broken) await this.call({ type: "close" }).catch(() => undefined);
    await this.worker.terminate();
  }
}

export class TelemetryReplica {
  private thread: ReplicaThread | null = null;
  private opening: Promise<ReplicaThread> | null = null;
  /** Catch-ups run one at a time, so each batch reaches the worker once and in order. */
  private catchingUp: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(private readonly options: ReplicaOptions) {}

  /** Removes a capture an earlier server left (it would note every write until a replica is made). */
  static async forgetEarlier(db: Db): Promise<void> {
    await dropCapture(db);
  }

  /** Runs the query (runAsReader) on the replica, up to date with every commit before this call. */
  async run(orgId: string, sql: string, params: unknown[], limits: Layer2Limits): Promise<ReaderResult> {
    const thread = await this.current();
    await this.catchUp(thread);
    return thread.call<ReaderResult>({ type: "query", orgId, sql, params, limits });
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.opening?.catch(() => undefined);
    const thread = this.thread;
    this.thread = null;
    await thread?.close();
    await this.catchingUp.catch(() => undefined);
    // Nothing notes changes for a replica that is gone.
    await dropCapture(this.options.db).catch(() => undefined);
  }

  /** The replica's thread, made (again, when the last one failed) from a copy of the store. */
  private current(): Promise<ReplicaThread> {
    if (this.closed) return Promise.reject(new AppError("unavailable", "the server is stopping"));
    if (this.thread && !this.thread.broken) return Promise.resolve(this.thread);
    this.opening ??= this.open().finally(() => {
      this.opening = null;
    });
    return this.opening;
  }

  private async open(): Promise<ReplicaThread> {
    const stale = this.thread;
    this.thread = null;
    await stale?.close().catch(() => undefined);
    // Capture first, then the copy: a write between the two is in both, and applying it
    // again changes nothing (the replica takes each noted key's current row).
    await this.options.db.tx((q) => installCapture(q));
    const files = await (await this.options.source.dump()).arrayBuffer();
    const thread = new ReplicaThread();
    try {
      await thread.call({ type: "open", files, dataDir: this.options.dataDir }, [files]);
    } catch (error) {
      await thread.close().catch(() => undefined);
      throw new AppError("unavailable", "the telemetry replica could not be made", { cause: error });
    }
    this.thread = thread;
    return thread;
  }

  /** Sends the worker every change noted so far; resolves once it has applied them. */
  private catchUp(thread: ReplicaThread): Promise<void> {
    const run = this.catchingUp.then(async () => {
      for (;;) {
        const batch: TableChanges[] | null = await this.options.db.tx((q) => takeChanges(q));
        if (batch === null) return;
        try {
          await thread.call({ type: "apply", batch });
        } catch (error) {
          // The notes are gone from the store: a replica that missed them must be made anew.
          thread.broken ??= error as Error;
          throw new AppError("unavailable", "the telemetry replica fell behind; it is being made anew", {
            cause: error,
          });
        }
      }
    });
    this.catchingUp = run.catch(() => undefined);
    return run;
  }
}
