// The egress ledger: every injection and every refused egress becomes a telemetry event in
// the sandbox's ambient run (`egress.injected`, `egress.refused`), so the SQL gateway's
// `events` relation and the run tail show it. The proxy path only queues the entry: writes
// leave in batches (one multi-row insert per flush), and a full queue drops (and counts)
// entries rather than holding a request back. Never the secret value: entries carry ids,
// versions, the host, method, path (no query string), status, byte counts and duration.
import type { Clock } from "../../lib/clock.js";
import { newUlid } from "../../lib/ids.js";
import type { Logger } from "../../lib/logger.js";
import type { Db } from "../../store/db.js";
import * as events from "../events/service.js";
import * as repo from "./repo.js";
import type { EgressCaller, EgressLedger, EgressLedgerEntry } from "./types.js";

/** Entries waiting for the store; past this, new ones are dropped (and counted). */
export const MAX_QUEUED = 10_000;
/**
 * The last slots of the queue only injections take: a sandbox flooding the gateway with
 * refused requests must not push other sandboxes' (or its own) injections out of the ledger.
 */
export const INJECTED_RESERVE = 2_000;
/** Refusals one sandbox may have recorded per second; the rest of that second's are counted and logged. */
export const REFUSED_PER_SANDBOX_PER_SECOND = 100;
/** Most events one insert carries. */
const MAX_BATCH = 500;
/**
 * How long an entry may wait for others to join its batch. On PGlite an insert runs on the
 * server's thread, so each flush holds every request in flight for its length: at 20 ms the
 * benchmark's added p50 was ~3 ms, at 1 s 0.9 ms (bench/README.md, Secret egress).
 */
const FLUSH_DELAY_MS = 250;
const LINEAGE_CACHE_ENTRIES = 4096;

interface Queued {
  caller: EgressCaller;
  entry: EgressLedgerEntry;
  tsWallNs: bigint;
}

export class EventLedger implements EgressLedger {
  private queue: Queued[] = [];
  private timer: NodeJS.Timeout | null = null;
  private writing: Promise<void> | null = null;
  private readonly lineage = new Map<string, string>();
  /** Entries dropped because the queue was full (never silently: each drop burst is logged). */
  dropped = 0;
  /** Refusals over a sandbox's per-second budget, by sandbox (logged at the next flush). */
  private readonly overBudget = new Map<string, number>();
  private readonly refusedWindows = new Map<string, { startMs: number; count: number }>();

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {}

  record(caller: EgressCaller, entry: EgressLedgerEntry): void {
    if (entry.kind === "refused" && !this.refusalFits(caller.sandboxId)) return;
    if (this.queue.length >= (entry.kind === "refused" ? MAX_QUEUED - INJECTED_RESERVE : MAX_QUEUED)) {
      if (this.dropped++ === 0) this.log.warn("egress ledger queue full: entries are dropped");
      return;
    }
    this.queue.push({ caller, entry, tsWallNs: this.clock.nowNs() });
    if (this.queue.length >= MAX_BATCH && !this.writing) void this.flush();
    else if (!this.timer && !this.writing) this.timer = setTimeout(() => void this.flush(), FLUSH_DELAY_MS);
  }

  /** Whether a refusal of this sandbox is within its per-second budget (counted when not). */
  private refusalFits(sandboxId: string): boolean {
    const nowMs = Date.now();
    let window = this.refusedWindows.get(sandboxId);
    if (!window || nowMs - window.startMs >= 1000) {
      if (this.refusedWindows.size >= LINEAGE_CACHE_ENTRIES) this.refusedWindows.clear();
      window = { startMs: nowMs, count: 0 };
      this.refusedWindows.set(sandboxId, window);
    }
    window.count += 1;
    if (window.count <= REFUSED_PER_SANDBOX_PER_SECOND) return true;
    if (this.overBudget.size < LINEAGE_CACHE_ENTRIES || this.overBudget.has(sandboxId)) {
      this.overBudget.set(sandboxId, (this.overBudget.get(sandboxId) ?? 0) + 1);
    }
    if (!this.timer && !this.writing) this.timer = setTimeout(() => void this.flush(), FLUSH_DELAY_MS);
    return false;
  }

  /** Writes everything queued so far (tests and close call it; the timer does otherwise). */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    while (this.writing) await this.writing;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, MAX_BATCH);
      this.writing = this.write(batch).catch((error: Error) => {
        this.log.warn({ err: error.message, entries: batch.length }, "egress ledger: a batch could not be written");
      });
      await this.writing;
      this.writing = null;
    }
    for (const [sandboxId, count] of this.overBudget) {
      this.log.warn(
        { sandbox: sandboxId, refusals: count },
        "egress ledger: refusals over the sandbox's per-second budget were counted, not recorded",
      );
    }
    this.overBudget.clear();
    if (this.dropped > 0) {
      this.log.warn({ dropped: this.dropped }, "egress ledger: entries were dropped while the queue was full");
      this.dropped = 0;
    }
  }

  close(): Promise<void> {
    return this.flush();
  }

  private async lineageOf(sandboxIds: string[]): Promise<void> {
    const missing = [...new Set(sandboxIds)].filter((id) => !this.lineage.has(id));
    if (missing.length === 0) return;
    const rows = await repo.lineagePaths(this.db, missing);
    if (this.lineage.size + rows.length > LINEAGE_CACHE_ENTRIES) this.lineage.clear();
    for (const row of rows) this.lineage.set(row.id, row.lineage_path);
  }

  private async write(batch: Queued[]): Promise<void> {
    await this.lineageOf(batch.map((q) => q.caller.sandboxId));
    const list: events.NewEvent[] = batch.map(({ caller, entry, tsWallNs }) => ({
      orgId: caller.orgId,
      eventId: newUlid(),
      projectId: caller.projectId,
      runId: caller.runId,
      lineagePath: this.lineage.get(caller.sandboxId) ?? caller.sandboxId,
      tsWallNs,
      name: `egress.${entry.kind}`,
      principal: "",
      payload: ledgerPayload(caller, entry),
    }));
    await events.appendEvents(this.db, list);
  }
}

/** The event payload of one entry: snake_case, only the fields that were given. */
export function ledgerPayload(caller: EgressCaller, e: EgressLedgerEntry): Record<string, unknown> {
  const payload: Record<string, unknown> = {
    sandbox_id: caller.sandboxId,
    network_access: caller.mode,
    kind: e.kind,
    host: e.host,
    port: e.port,
  };
  const optional: [string, unknown][] = [
    ["method", e.method],
    ["path", e.path],
    ["status", e.status],
    ["bytes_in", e.bytesIn],
    ["bytes_out", e.bytesOut],
    ["duration_ms", e.durationMs],
    ["secret_id", e.secretId],
    ["secret_version", e.secretVersion],
    ["reason", e.reason],
  ];
  for (const [key, value] of optional) if (value !== undefined) payload[key] = value;
  return payload;
}
