// A store whose callers may finish a write after answering (an exec's end, so its answer
// does not wait for it) without anyone seeing the store without it: every later query,
// script or transaction of this process waits until the writes deferred before it are done, and
// close() waits for them too, so a normal shutdown loses none. Only a crash can.
import type { Db, NotificationHandlers, Queryable, RawResult, StatementOptions } from "./db.js";

export class DeferringDb implements Db {
  private readonly pending = new Set<Promise<void>>();

  /** Notifications need no waiting: they report commits, and the reads they prompt wait as any query does. */
  readonly listen?: (channel: string, handlers: NotificationHandlers) => Promise<() => Promise<void>>;

  constructor(private readonly inner: Db) {
    if (inner.listen) this.listen = inner.listen.bind(inner);
  }

  get kind(): Db["kind"] {
    return this.inner.kind;
  }

  /**
   * Runs `write` once the current turn of the event loop is over (the answer it belongs to is
   * sent by then). Settles as the write does; a store call made meanwhile waits for it.
   */
  defer(write: (q: Queryable) => Promise<void>): Promise<void> {
    const done: Promise<void> = new Promise<void>((resolve) => setImmediate(resolve))
      .then(() => write(this.inner))
      .finally(() => this.pending.delete(done));
    this.pending.add(done);
    return done;
  }

  /** Resolves when no deferred write is pending (failed ones included). */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  /**
   * The writes deferred before this call, settled. Only those: waiting for every write
   * pending (settled()) would starve a call behind a steady stream of execs' ends.
   */
  private deferredSoFar(): Promise<unknown> {
    return Promise.allSettled([...this.pending]);
  }

  // Not async: without a deferred write, a call costs nothing more than the inner store's.
  query<T = Record<string, unknown>>(
    sql: string,
    params?: unknown[],
    options?: StatementOptions,
  ): Promise<{ rows: T[] }> {
    if (this.pending.size > 0) return this.deferredSoFar().then(() => this.inner.query<T>(sql, params, options));
    return this.inner.query<T>(sql, params, options);
  }

  queryRaw(sql: string, params?: unknown[], options?: StatementOptions): Promise<RawResult> {
    if (this.pending.size > 0) return this.deferredSoFar().then(() => this.inner.queryRaw(sql, params, options));
    return this.inner.queryRaw(sql, params, options);
  }

  exec(sql: string): Promise<void> {
    if (this.pending.size > 0) return this.deferredSoFar().then(() => this.inner.exec(sql));
    return this.inner.exec(sql);
  }

  tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    if (this.pending.size > 0) return this.deferredSoFar().then(() => this.inner.tx(fn));
    return this.inner.tx(fn);
  }

  async close(): Promise<void> {
    await this.settled();
    await this.inner.close();
  }
}
