// Warren's Prometheus instruments (prom-client), one registry per server. Every metric is
// documented in docs/metrics.md; labels take values from small fixed sets (an operationId,
// a status code, an outcome kind), never from a URL, an id or a caller's text, so the
// number of series stays bounded. Recording is a map lookup and an add: cheap enough for exec.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import { droppedLogLines } from "../../lib/logger.js";
import { STATES } from "../sandboxes/lifecycle.js";

const SANDBOX_STATES = Object.keys(STATES);

/** Reads the count of sandboxes per stored state (the store, at scrape time). */
export type SandboxStateCounter = () => Promise<Record<string, number>>;

export interface MetricsOptions {
  /** Seconds the sandboxes-by-state count is reused between scrapes (0: every scrape reads). */
  stateCacheSeconds: number;
  /** Node.js process metrics (CPU, memory, event loop lag, GC); off in tests that make many servers. */
  processMetrics?: boolean;
}

/** Classes of telemetry SQL refusals (docs/metrics.md). */
export type SqlRefusalReason = "construct" | "cost" | "timeout" | "invalid" | "unavailable";

/** Servers that bound client connections at accept, and what they did to one (docs/metrics.md). */
export type ConnectionServer = "session_plane" | "ssh";
export type ConnectionRefusal = "refused" | "evicted";

/** The storage pool's numbers (the local driver's StorageReport). */
export interface StorageNumbers {
  hostFreeBytes: number;
  poolAllocatedBytes: number;
  promisedBytes: number;
  mayStillWriteBytes: number;
  backableBytes: number;
}

/** `warren_storage_bytes` kinds: a fixed set, each one field of the report. */
const STORAGE_KINDS: [string, keyof StorageNumbers][] = [
  ["host_free", "hostFreeBytes"],
  ["pool_allocated", "poolAllocatedBytes"],
  ["promised", "promisedBytes"],
  ["may_still_write", "mayStillWriteBytes"],
  ["backable", "backableBytes"],
];

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const START_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300];
const SNAPSHOT_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900];

export class WarrenMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<"operation" | "status">;
  private readonly requestSeconds: Histogram<"operation" | "status">;
  private readonly createToRunning: Histogram<"image_cache" | "pool" | "source">;
  private readonly execSeconds: Histogram<"outcome">;
  private readonly reconcileLag: Histogram;
  private readonly reconcileStepSeconds: Histogram<"action" | "result">;
  private readonly snapshotSeconds: Histogram<"outcome">;
  private readonly replicationSeconds: Histogram<"outcome">;
  private readonly replicationBytes: Counter;
  private readonly annotations: Counter<"kind">;
  private readonly sqlRefusals: Counter<"reason">;
  private readonly connectionRefusals: Counter<"server" | "reason">;
  private stateCounter: SandboxStateCounter | null = null;
  private pullBytesReader: (() => number) | null = null;
  private storageReader: (() => Promise<StorageNumbers | null>) | null = null;
  private pullBytesSeen = 0;
  private droppedLinesSeen = 0;
  private stateCache: { at: number; counts: Record<string, number> } | null = null;
  private stateRead: Promise<Record<string, number>> | null = null;

  constructor(private readonly options: MetricsOptions) {
    const registers = [this.registry];
    this.requests = new Counter({
      name: "warren_http_requests_total",
      help: "API requests answered, by operationId and HTTP status",
      labelNames: ["operation", "status"],
      registers,
    });
    this.requestSeconds = new Histogram({
      name: "warren_http_request_duration_seconds",
      help: "Time from a request's arrival to its answer, by operationId and HTTP status",
      labelNames: ["operation", "status"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.createToRunning = new Histogram({
      name: "warren_sandbox_create_to_running_seconds",
      help: "Time from a sandbox's creation to its first running state, by image cache, pool and source",
      labelNames: ["image_cache", "pool", "source"],
      buckets: START_BUCKETS,
      registers,
    });
    this.execSeconds = new Histogram({
      name: "warren_exec_duration_seconds",
      help: "Time a command ran in a sandbox, as the driver saw it, by outcome",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.reconcileLag = new Histogram({
      name: "warren_reconcile_lag_seconds",
      help: "Time a sandbox waited in the reconcile queue between being kicked and its reconcile starting",
      buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60],
      registers,
    });
    this.reconcileStepSeconds = new Histogram({
      name: "warren_reconcile_step_duration_seconds",
      help: "Time one reconcile pass (observe, decide, apply) took, by the action applied and its result",
      labelNames: ["action", "result"],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120],
      registers,
    });
    this.snapshotSeconds = new Histogram({
      name: "warren_snapshot_duration_seconds",
      help: "Time the host took to seal a sandbox snapshot (flush, freeze, clone, thaw), by outcome",
      labelNames: ["outcome"],
      buckets: SNAPSHOT_BUCKETS,
      registers,
    });
    this.replicationSeconds = new Histogram({
      name: "warren_snapshot_replication_duration_seconds",
      help: "Time one replication attempt of a snapshot to the blob store took, by outcome",
      labelNames: ["outcome"],
      buckets: SNAPSHOT_BUCKETS,
      registers,
    });
    this.replicationBytes = new Counter({
      name: "warren_snapshot_replication_uploaded_bytes_total",
      help: "Compressed chunk bytes uploaded to the blob store by snapshot replication",
      registers,
    });
    this.annotations = new Counter({
      name: "warren_annotations_ingested_total",
      help: "Annotations written (a replayed event id counts once), by kind",
      labelNames: ["kind"],
      registers,
    });
    this.sqlRefusals = new Counter({
      name: "warren_telemetry_sql_refusals_total",
      help: "Telemetry SQL queries and data view runs refused, by reason class",
      labelNames: ["reason"],
      registers,
    });
    this.connectionRefusals = new Counter({
      name: "warren_connections_refused_total",
      help: "Client connections closed at accept (a bound or a random early drop) or evicted unauthenticated, by server",
      labelNames: ["server", "reason"],
      registers,
    });
    const metrics = this;
    new Counter({
      name: "warren_image_pull_bytes_total",
      help: "Bytes received from image registries (manifests, configs and layers)",
      registers,
      collect() {
        const total = metrics.pullBytesReader?.() ?? 0;
        if (total > metrics.pullBytesSeen) this.inc(total - metrics.pullBytesSeen);
        metrics.pullBytesSeen = Math.max(total, metrics.pullBytesSeen);
      },
    });
    new Counter({
      name: "warren_log_lines_dropped_total",
      help: "Log lines the server dropped because stdout's reader fell behind (its queue was full)",
      registers,
      collect() {
        // The process's count: every server in one process (tests) shows the same number.
        const total = droppedLogLines();
        if (total > metrics.droppedLinesSeen) this.inc(total - metrics.droppedLinesSeen);
        metrics.droppedLinesSeen = Math.max(total, metrics.droppedLinesSeen);
      },
    });
    new Gauge({
      name: "warren_sandboxes",
      help: "Sandboxes by stored state, across organizations (read from the store, cached briefly)",
      labelNames: ["state"],
      registers,
      async collect() {
        const counts = await metrics.sandboxStates();
        // Every state is a series, zero included, so a state emptying shows as 0, not as a gap.
        for (const state of SANDBOX_STATES) this.set({ state }, counts[state] ?? 0);
      },
    });
    new Gauge({
      name: "warren_storage_bytes",
      help: "The local runtime's storage pool and its admission, in bytes, by kind (read at scrape time)",
      labelNames: ["kind"],
      registers,
      async collect() {
        const report = await metrics.storageReader?.().catch(() => null);
        if (!report) return;
        for (const [kind, key] of STORAGE_KINDS) this.set({ kind }, report[key]);
      },
    });
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry });
  }

  /** Where the storage gauge reads the pool's numbers (the local runtime driver). */
  readStorageFrom(reader: () => Promise<StorageNumbers | null>): void {
    this.storageReader = reader;
  }

  /** Where the sandboxes-by-state gauge reads its counts (the store). */
  countSandboxStatesWith(counter: SandboxStateCounter): void {
    this.stateCounter = counter;
  }

  /** Where the image pull byte counter reads its total (the runtime driver). */
  readPullBytesFrom(reader: () => number): void {
    this.pullBytesReader = reader;
  }

  requestAnswered(operation: string, status: number, seconds: number): void {
    const labels = { operation, status: String(status) };
    this.requests.inc(labels);
    this.requestSeconds.observe(labels, seconds);
  }

  sandboxReachedRunning(
    seconds: number,
    how: { imageCache: "warm" | "cold" | "unknown"; pool: "hit" | "miss"; source: "image" | "snapshot" },
  ): void {
    this.createToRunning.observe({ image_cache: how.imageCache, pool: how.pool, source: how.source }, seconds);
  }

  execEnded(outcome: string, seconds: number): void {
    this.execSeconds.observe({ outcome }, seconds);
  }

  reconcileWaited(seconds: number): void {
    this.reconcileLag.observe(seconds);
  }

  reconcileStepEnded(action: string, result: "ok" | "error", seconds: number): void {
    this.reconcileStepSeconds.observe({ action, result }, seconds);
  }

  snapshotTaken(outcome: "sealed" | "failed", seconds: number): void {
    this.snapshotSeconds.observe({ outcome }, seconds);
  }

  replicationEnded(outcome: "replicated" | "failed", seconds: number, uploadedBytes = 0): void {
    this.replicationSeconds.observe({ outcome }, seconds);
    if (uploadedBytes > 0) this.replicationBytes.inc(uploadedBytes);
  }

  annotationIngested(kind: "point" | "range"): void {
    this.annotations.inc({ kind });
  }

  sqlRefused(reason: SqlRefusalReason): void {
    this.sqlRefusals.inc({ reason });
  }

  connectionRefused(server: ConnectionServer, reason: ConnectionRefusal): void {
    this.connectionRefusals.inc({ server, reason });
  }

  /** The exposition text (Prometheus text format 0.0.4). */
  async scrape(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  /** The store's count, reused for `stateCacheSeconds`; concurrent scrapes share one read. */
  private async sandboxStates(): Promise<Record<string, number>> {
    if (!this.stateCounter) return {};
    const now = Date.now();
    if (this.stateCache && now - this.stateCache.at < this.options.stateCacheSeconds * 1000) {
      return this.stateCache.counts;
    }
    this.stateRead ??= this.stateCounter().finally(() => {
      this.stateRead = null;
    });
    const counts = await this.stateRead;
    this.stateCache = { at: Date.now(), counts };
    return counts;
  }
}
