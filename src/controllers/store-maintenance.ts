// VACUUM (ANALYZE) for the embedded store. PGlite has no autovacuum, so tables that are
// updated (annotation_heads: every new version of a key rewrites its head) keep their dead
// rows and the planner never gets statistics.
//
// PGlite runs one statement at a time, so a vacuum stalls every request behind it. On a
// store of 100,000 annotations one VACUUM (ANALYZE) of the whole database took 0.8-1.3 s,
// annotation_heads alone (20,000 heads, 80,000 dead versions) 65 ms; so each pass vacuums
// one table per statement, only tables changed since their last vacuum, and before each
// waits until the store answers a probe promptly (no burst of writes queued), up to a cap.
//
// A pass that vacuumed anything ends with a CHECKPOINT. PGlite runs PostgreSQL as a single
// backend with no checkpointer, so without one every write since the start stays to be
// replayed when the data directory is opened again: after a crash, and after a statement
// stopped by its deadline (src/store/pglite.ts reopens the store then). On a data dir of
// 1,000,000 events that reopen took 7.2 s with the seed's WAL to replay, 0.7 s without.
import type { Logger } from "../lib/logger.js";
import type { Db } from "../store/db.js";

/** A probe slower than this means requests are queued on the store: wait. */
const BUSY_PROBE_MS = 5;
const BUSY_BACKOFF_MS = 1000;
/** After this many busy probes the table is vacuumed anyway, so a steady load cannot starve it. */
const MAX_BUSY_WAITS = 30;

export interface StoreMaintenanceOptions {
  intervalMs: number;
  busyBackoffMs?: number;
  /** Whether this server runs the passes now (the collection lease's holder); always, without one. */
  runs?: () => boolean;
}

export class StoreMaintenance {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly options: StoreMaintenanceOptions,
  ) {}

  /** Schedules passes; does nothing on PostgreSQL (autovacuum) or when the interval is 0. */
  start(): void {
    if (this.db.kind !== "pglite" || this.options.intervalMs <= 0) return;
    this.schedule();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.running;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = (this.options.runs?.() === false ? Promise.resolve([]) : this.pass())
        .then(() => undefined)
        .catch((error: unknown) => this.log.warn({ err: (error as Error).message }, "store maintenance failed"))
        .finally(() => {
          this.running = null;
          this.schedule();
        });
    }, this.options.intervalMs);
    this.timer.unref();
  }

  /** Vacuums and analyzes each table changed since its last vacuum, then checkpoints; returns their names. */
  async pass(): Promise<string[]> {
    const { rows } = await this.db.query<{ table: string }>(
      `SELECT format('%I.%I', schemaname, relname) AS table FROM pg_stat_user_tables
        WHERE n_dead_tup > 0 OR n_mod_since_analyze > 0 OR last_vacuum IS NULL
        ORDER BY n_dead_tup DESC`,
    );
    const done: string[] = [];
    for (const { table } of rows) {
      if (this.stopped) break;
      await this.waitUntilQuiet();
      if (this.stopped) break;
      const startedMs = Date.now();
      await this.db.exec(`VACUUM (ANALYZE) ${table}`);
      const tookMs = Date.now() - startedMs;
      if (tookMs > 200) this.log.info({ table, tookMs }, "vacuumed a table of the embedded store");
      done.push(table);
    }
    if (done.length > 0 && !this.stopped) {
      await this.waitUntilQuiet();
      if (!this.stopped) await this.db.exec("CHECKPOINT");
    }
    return done;
  }

  private async waitUntilQuiet(): Promise<void> {
    for (let waits = 0; waits < MAX_BUSY_WAITS && !this.stopped; waits++) {
      const startedMs = performance.now();
      await this.db.query("SELECT 1");
      if (performance.now() - startedMs < BUSY_PROBE_MS) return;
      await new Promise((resolve) => setTimeout(resolve, this.options.busyBackoffMs ?? BUSY_BACKOFF_MS).unref());
    }
  }
}
