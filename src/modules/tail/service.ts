// The run tail: one run's telemetry events in commit-safe order (repo.ts), replayed from a
// cursor and then followed live, ending once the run has completed and every event it had
// by then is delivered. Streams are counted per organization and per server.
import type { TailSettings } from "../../config.js";
import { AppError, invalid, notFound } from "../../lib/errors.js";
import type { Db } from "../../store/db.js";
import type { Credential } from "../identity/credential.js";
import type { RunService } from "../runs/service.js";
import type { SandboxService } from "../sandboxes/service.js";
import { formatCursor, parseCursor, START, type TailCursor } from "./cursor.js";
import type { TailHub } from "./hub.js";
import * as repo from "./repo.js";
import type { TailEnd, TailEvent } from "./schemas.js";

/** One item of the stream, as the contract describes it (6.3). */
export interface TailItem {
  data: TailEvent | TailEnd;
  event?: string;
  id?: string;
  retry?: number;
}

/** What the stream carries: items, and heartbeats while nothing happens. */
export type TailFrame = { item: TailItem } | { heartbeat: true };

export interface TailOptions {
  runId: string;
  /** The resume point (the SSE id of the last item received); absent: from the run's start. */
  cursor?: string | undefined;
  lineagePath?: string | undefined;
}

/** Rows one read scans at most; its payloads are bounded in bytes too (settings.pageBytes). */
const PAGE_ROWS = 200;
/** Waits while rows are committed above the horizon (an older transaction still open). */
const PENDING_MIN_MS = 5;
const PENDING_MAX_MS = 200;

/** A page read for one or more tails; its bytes stay charged to the organization until the last lets go. */
export interface SharedPage {
  page: repo.TailPage;
  release(): void;
}

export class OpenTail {
  private released = false;

  constructor(
    private readonly service: TailService,
    readonly orgId: string,
    readonly runId: string,
    private readonly after: TailCursor,
    private readonly lineagePath: string,
  ) {}

  /** Frees the stream's slot; idempotent. */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.service.releaseSlot(this.orgId);
  }

  /**
   * The stream's frames until the run ends or `signal` aborts; listeners and timers go with it.
   * The next page is read only once the consumer has taken every frame of the last one (the
   * route takes the next frame once the socket has drained), so a client that stops reading
   * stops the reads and holds one bounded page.
   */
  async *frames(signal: AbortSignal): AsyncGenerator<TailFrame> {
    const { hub, settings } = this.service;
    let position = this.after;
    let woken = true;
    let wakeUp: (() => void) | null = null;
    const wake = () => {
      woken = true;
      wakeUp?.();
    };
    const unsubscribe = hub.subscribe(this.runId, wake);
    const onAbort = () => wake();
    signal.addEventListener("abort", onAbort);
    let pendingMs = PENDING_MIN_MS;
    let heartbeatDue = Date.now() + settings.heartbeatMs;
    try {
      while (!signal.aborted) {
        woken = false;
        const shared = await untilAborted(
          this.service.read(this.orgId, this.runId, position, this.lineagePath),
          signal,
        );
        if (!shared) break;
        const { page } = shared;
        try {
          for (const row of page.rows) {
            position = { txid: row.txid, seq: row.seq };
            yield { item: itemOf(row) };
          }
        } finally {
          shared.release();
        }
        if (page.rows.length > 0) heartbeatDue = Date.now() + settings.heartbeatMs;
        if (page.more) continue;
        if (page.status !== "running" && !page.pending) {
          const data: TailEnd =
            page.status === null
              ? { run_id: this.runId, reason: "run_deleted" }
              : { run_id: this.runId, status: page.status, reason: "run_completed" };
          yield { item: { event: "end", data } };
          return;
        }
        pendingMs = page.pending ? Math.min(pendingMs * 2, PENDING_MAX_MS) : PENDING_MIN_MS;
        if (!woken && !signal.aborted) {
          const waitMs = Math.max(
            0,
            Math.min(
              heartbeatDue - Date.now(),
              page.pending ? pendingMs : Number.POSITIVE_INFINITY,
              hub.live ? Number.POSITIVE_INFINITY : settings.fallbackPollMs,
            ),
          );
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, waitMs);
            wakeUp = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          wakeUp = null;
        }
        if (Date.now() >= heartbeatDue && !signal.aborted) {
          heartbeatDue = Date.now() + settings.heartbeatMs;
          yield { heartbeat: true };
        }
      }
    } finally {
      unsubscribe();
      signal.removeEventListener("abort", onAbort);
      this.release();
    }
  }
}

/** The shared page, or null once `signal` aborted (a page that comes later is let go at once). */
function untilAborted(read: Promise<SharedPage>, signal: AbortSignal): Promise<SharedPage | null> {
  if (signal.aborted) {
    read.then(
      (shared) => shared.release(),
      () => undefined,
    );
    return Promise.resolve(null);
  }
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      read.then(
        (shared) => shared.release(),
        () => undefined,
      );
      resolve(null);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    read.then(
      (shared) => {
        signal.removeEventListener("abort", onAbort);
        if (signal.aborted) shared.release();
        else resolve(shared);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

/** A read not started yet: tails that ask for the same page before it starts share it. */
interface QueuedRead {
  refs: number;
  promise: Promise<repo.TailPage>;
}

export class TailService {
  private readonly perOrg = new Map<string, number>();
  private streams = 0;
  /** Payload bytes each organization's tails hold (read or reserved, not yet written). */
  private readonly heldBytes = new Map<string, number>();
  private readonly budgetWaiters = new Map<string, (() => void)[]>();
  private readonly queuedReads = new Map<string, QueuedRead>();

  constructor(
    readonly db: Db,
    readonly hub: TailHub,
    readonly settings: TailSettings,
    private readonly runs: RunService,
    private readonly sandboxes: SandboxService,
  ) {}

  /**
   * Checks the caller may tail the run and takes a stream slot; throws (before anything is
   * streamed) not_found for a run the caller may not see, 429 past the stream limits. A
   * sandbox-scoped credential may tail its own sandbox's run only.
   */
  async open(cred: Credential, options: TailOptions): Promise<OpenTail> {
    const after = options.cursor ? parseCursor(options.cursor) : START;
    if (!after) throw invalid("cursor is not a tail cursor (the SSE id of an item of this stream)");
    const run = await this.runs.find(this.db, cred.orgId, options.runId);
    if (!run) throw notFound("run");
    if (cred.sandbox) {
      const own = await this.sandboxes.load(this.db, cred, cred.sandbox.sandboxId).catch(() => null);
      if (!own || own.run_id !== run.id) throw notFound("run");
    }
    this.takeSlot(cred.orgId);
    return new OpenTail(this, cred.orgId, run.id, after, options.lineagePath ?? "");
  }

  /**
   * The page after `after`. Tails of one run that ask for the same page (every idle tail of
   * a run, woken by one commit) before its read starts share one store read and one copy of
   * its rows, so a commit costs one query per run, not one per tail. A read waits until its
   * page fits in the organization's byte budget (one page at a time always fits).
   */
  read(orgId: string, runId: string, after: TailCursor, lineagePath: string): Promise<SharedPage> {
    const key = `${orgId}\0${runId}\0${after.txid}\0${after.seq}\0${lineagePath}`;
    let queued = this.queuedReads.get(key);
    if (!queued) {
      const entry: QueuedRead = {
        refs: 0,
        promise: (async () => {
          // Every tail woken by the same notification asks within this turn of the loop.
          await new Promise((resolve) => setImmediate(resolve));
          this.queuedReads.delete(key);
          const reserved = this.settings.pageBytes;
          await this.reserve(orgId, reserved);
          try {
            const page = await repo.readTail(this.db, orgId, runId, after, lineagePath, PAGE_ROWS, reserved);
            this.charge(orgId, page.bytes - reserved);
            return page;
          } catch (error) {
            this.charge(orgId, -reserved);
            throw error;
          }
        })(),
      };
      // A failed read is each asker's to handle; this copy only keeps it from being unhandled.
      entry.promise.catch(() => undefined);
      this.queuedReads.set(key, entry);
      queued = entry;
    }
    const entry = queued;
    entry.refs += 1;
    return entry.promise.then(
      (page) => {
        let released = false;
        return {
          page,
          release: () => {
            if (released) return;
            released = true;
            entry.refs -= 1;
            if (entry.refs === 0) this.charge(orgId, -page.bytes);
          },
        };
      },
      (error: unknown) => {
        entry.refs -= 1;
        throw error;
      },
    );
  }

  /** Payload bytes the organization's tails hold on this server (read, not yet written). */
  bufferedBytes(orgId: string): number {
    return this.heldBytes.get(orgId) ?? 0;
  }

  private async reserve(orgId: string, bytes: number): Promise<void> {
    for (;;) {
      const held = this.heldBytes.get(orgId) ?? 0;
      if (held === 0 || held + bytes <= this.settings.maxBufferedBytesPerOrg) {
        this.heldBytes.set(orgId, held + bytes);
        return;
      }
      await new Promise<void>((resolve) => {
        const waiters = this.budgetWaiters.get(orgId) ?? [];
        waiters.push(resolve);
        this.budgetWaiters.set(orgId, waiters);
      });
    }
  }

  private charge(orgId: string, bytes: number): void {
    const held = (this.heldBytes.get(orgId) ?? 0) + bytes;
    if (held <= 0) this.heldBytes.delete(orgId);
    else this.heldBytes.set(orgId, held);
    if (bytes < 0) {
      const waiters = this.budgetWaiters.get(orgId);
      this.budgetWaiters.delete(orgId);
      for (const waiter of waiters ?? []) waiter();
    }
  }

  /** Open streams on this server (all organizations). */
  get openStreams(): number {
    return this.streams;
  }

  private takeSlot(orgId: string) {
    const org = this.perOrg.get(orgId) ?? 0;
    if (this.streams >= this.settings.maxStreamsPerServer) {
      throw new AppError("rate_limited", "this server has as many open run tails as it allows", {
        retryAfterSeconds: 5,
      });
    }
    if (org >= this.settings.maxStreamsPerOrg) {
      throw new AppError("rate_limited", "the organization has as many open run tails as it may", {
        retryAfterSeconds: 5,
      });
    }
    this.perOrg.set(orgId, org + 1);
    this.streams += 1;
  }

  releaseSlot(orgId: string) {
    const org = (this.perOrg.get(orgId) ?? 1) - 1;
    if (org <= 0) this.perOrg.delete(orgId);
    else this.perOrg.set(orgId, org);
    this.streams -= 1;
  }
}

/** Items of shared rows are built once, whatever the number of tails that send them. */
const items = new WeakMap<repo.TailRow, TailItem>();

function itemOf(row: repo.TailRow): TailItem {
  let item = items.get(row);
  if (!item) {
    item = { id: formatCursor({ txid: row.txid, seq: row.seq }), data: eventData(row) };
    items.set(row, item);
  }
  return item;
}

function eventData(row: repo.TailRow): TailEvent {
  return {
    event_id: row.event_id,
    name: row.name,
    kind: row.kind === "annotation" || row.kind === "span" ? row.kind : "event",
    project_id: row.project_id,
    run_id: row.run_id,
    lineage_path: row.lineage_path,
    ts_wall_ns: row.ts_wall_ns,
    ...(row.principal ? { principal: row.principal } : {}),
    payload: row.payload,
    ...(row.schema_name ? { schema_name: row.schema_name } : {}),
    ...(row.schema_version !== null ? { schema_version: row.schema_version } : {}),
    ...(row.target_event_id ? { target_event_id: row.target_event_id } : {}),
  };
}
