// The snapshot replicator: copies sealed snapshots to the blob store (durability `local` to
// `replicated`), one at a time under a lease in the store so a crashed server's work is
// taken up again, retrying with backoff; collects chunks no snapshot references any more
// (mark and sweep with a grace period); and at start resolves the snapshots a previous
// process left pending (sealed when the host holds the sealed copy, failed otherwise) and
// resumes the replications it left under lease.
import { stat } from "node:fs/promises";
import type { BlobStore } from "../drivers/blobs/interface.js";
import type { LocalSnapshots, SnapshotImages } from "../drivers/runtime/interface.js";
import type { Clock } from "../lib/clock.js";
import { sha256Hex } from "../lib/hash.js";
import type { Logger } from "../lib/logger.js";
import type { HostMembership } from "../modules/hosts/membership.js";
import type { WarrenMetrics } from "../modules/metrics/registry.js";
import { appendSandboxEvent } from "../modules/sandboxes/transitions.js";
import {
  manifestDigests,
  readSnapshotManifest,
  replicateSnapshotInWorker,
  type SnapshotManifest,
} from "../modules/snapshots/manifest.js";
import { trackedPackOptions } from "../modules/snapshots/packed-chunks.js";
import { ReplicationWorker } from "../modules/snapshots/replication/threaded.js";
import * as repo from "../modules/snapshots/repo.js";
import {
  deleteBlobPrefix,
  manifestPrefix,
  type ReplicationRelay,
  type SnapshotService,
} from "../modules/snapshots/service.js";
import type { Db } from "../store/db.js";
import {
  collectionCutoff,
  collectUnreferencedChunks,
  repackSparsePacks,
  sweepDeadPacks,
} from "./snapshot-collector.js";

const GIB = 1024 ** 3;
const LEASE_SECONDS = 600;
const MAX_ATTEMPTS = 12;
const MAX_BACKOFF_SECONDS = 300;
const POLL_MS = 2000;
const GC_BATCH = 200;

export interface ReplicatorOptions {
  /** How often unreferenced chunks are collected. */
  gcIntervalSeconds: number;
  /** A chunk touched by a replication within this long is never collected. */
  gcGraceSeconds: number;
  /** Whether this server collects now (the collection lease's holder); always, without one. */
  collects?: () => boolean;
}

export interface ReplicatorDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  blobs: BlobStore;
  snapshots: SnapshotService;
  snapshotReplication: ReplicationRelay;
  /** This server as a host: it replicates, and resolves at start, only the snapshots it holds. */
  host: HostMembership | null;
  /** Replication durations and uploaded bytes (GET /metrics). */
  metrics?: WarrenMetrics | null;
}

export class SnapshotReplicator {
  private timer: NodeJS.Timeout | null = null;
  private gcTimer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private readonly db: Db;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly blobs: BlobStore;
  private readonly snapshots: SnapshotService;
  private readonly relay: ReplicationRelay;
  private readonly metrics: WarrenMetrics | null;
  private readonly worker = new ReplicationWorker();
  private readonly host: HostMembership;

  constructor(
    deps: ReplicatorDeps,
    private readonly driver: LocalSnapshots,
    private readonly options: ReplicatorOptions,
  ) {
    this.db = deps.db;
    this.clock = deps.clock;
    this.log = deps.log;
    this.blobs = deps.blobs;
    this.snapshots = deps.snapshots;
    this.relay = deps.snapshotReplication;
    this.metrics = deps.metrics ?? null;
    if (!deps.host) throw new Error("the snapshot replicator runs on a host (a server with a runtime)");
    this.host = deps.host;
  }

  async start(): Promise<void> {
    this.relay.connect(() => this.kick());
    await this.resolveInterrupted();
    await this.releaseInterruptedReplications();
    await this.dropOrphanCopies();
    this.timer = setInterval(() => this.kick(), POLL_MS);
    this.timer.unref();
    this.gcTimer = setInterval(() => {
      if (this.options.collects?.() === false) return;
      void this.collectGarbage().catch((error: unknown) =>
        this.log.warn({ err: (error as Error).message }, "snapshot garbage collection failed"),
      );
    }, this.options.gcIntervalSeconds * 1000);
    this.gcTimer.unref();
    this.kick();
  }

  /** After the host re-joined with a new epoch: what its earlier epoch left pending is resolved. */
  async rejoined(): Promise<void> {
    await this.resolveInterrupted();
    await this.releaseInterruptedReplications();
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.relay.connect(null);
    if (this.timer) clearInterval(this.timer);
    if (this.gcTimer) clearInterval(this.gcTimer);
    await this.running;
    await this.worker.close();
  }

  /** Replicates whatever is due, soon; repeated kicks coalesce. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.drain().finally(() => {
      this.running = null;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  /** Resolves once nothing is being replicated (tests). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    try {
      for (;;) {
        if (this.stopped || !this.host.canAct()) return;
        const now = this.clock.now();
        const row = await repo.claimReplication(
          this.db,
          now,
          new Date(now.getTime() + LEASE_SECONDS * 1000),
          this.host.id,
        );
        if (!row) return;
        await this.replicateOne(row);
      }
    } catch (error) {
      this.log.warn({ err: (error as Error).message }, "snapshot replication pass failed");
    }
  }

  private async replicateOne(row: repo.SnapshotRow): Promise<void> {
    const started = Date.now();
    const cpuBefore = process.cpuUsage();
    try {
      const images = await this.driver.localSnapshot(row.id);
      if (!images) {
        await this.giveUp(row, "the snapshot's local copy is gone before it was replicated");
        return;
      }
      // A retry reads everything again: the base may be what failed.
      const base = row.replication_attempts > 1 ? null : await this.baseFor(row);
      // The CPU of it in the worker thread; has() and the packs' puts and records here.
      const tracked = trackedPackOptions(this.storeDeps(), row.org_id);
      let packs = 0;
      const store = {
        ...tracked,
        writePack: async (pack: Parameters<typeof tracked.writePack>[0]) => {
          await tracked.writePack(pack);
          packs++;
        },
      };
      const result = await replicateSnapshotInWorker({ snapshotId: row.id, images, base, worker: this.worker, store });
      const storedMs = Date.now() - started;
      const digests = manifestDigests(result.manifest);
      const gone = await repo.touchChunks(this.db, row.org_id, digests, this.clock.now());
      if (gone.size > 0) throw new Error(`${gone.size} chunks the base shared were collected meanwhile`);
      const body = Buffer.from(JSON.stringify(result.manifest));
      const manifestKey = `${manifestPrefix(row.org_id, row.id)}manifest-${row.replication_attempts}.json`;
      await this.blobs.putIfAbsent(manifestKey, body, { sha256: sha256Hex(body.toString("utf8")) });
      const recorded = await this.db.tx(async (q) => {
        await repo.insertSnapshotChunks(q, row.id, row.org_id, digests);
        const recorded = await repo.recordReplicated(q, row.id, this.clock.now(), {
          manifestKey,
          chunks: result.stats.chunks,
          newChunks: result.stats.newChunks,
          plainBytes: result.stats.bytes,
          uploadedBytes: result.stats.uploadedBytes,
        });
        if (recorded) {
          await appendSandboxEvent(q, this.clock, sandboxOf(row), "sandbox.snapshot_replicated", {
            snapshot_id: row.id,
            durability: "replicated",
            chunks: result.stats.chunks,
            new_chunks: result.stats.newChunks,
            uploaded_bytes: result.stats.uploadedBytes,
          });
        }
        return recorded;
      });
      this.snapshots.changes.emit(row.id);
      this.metrics?.replicationEnded("replicated", (Date.now() - started) / 1000, result.stats.uploadedBytes);
      this.log.info(
        {
          snapshot_id: row.id,
          ms: Date.now() - started,
          // Reading, chunking, compressing and storing the packs; the rest is the manifest and the records.
          stored_ms: storedMs,
          // The whole process's (every thread's) CPU over the same time: what it cost the host.
          process_cpu_ms: Math.round(cpuMs(process.cpuUsage(cpuBefore))),
          packs,
          chunks: result.stats.chunks,
          new_chunks: result.stats.newChunks,
          uploaded_bytes: result.stats.uploadedBytes,
          delta: base !== null,
        },
        "snapshot replicated",
      );
      if (recorded && !this.snapshots.keepLocalCopies) await this.dropIfUnused(row.id);
    } catch (error) {
      const message = (error as Error).message;
      this.metrics?.replicationEnded("failed", (Date.now() - started) / 1000);
      this.log.warn({ snapshot_id: row.id, attempt: row.replication_attempts, err: message }, "replication failed");
      if (row.replication_attempts >= MAX_ATTEMPTS) {
        await this.giveUp(row, message);
        return;
      }
      const delay = Math.min(MAX_BACKOFF_SECONDS, 2 ** row.replication_attempts);
      await repo.replicationFailed(this.db, row.id, message, new Date(this.clock.now().getTime() + delay * 1000));
      this.snapshots.changes.emit(row.id);
    }
  }

  private storeDeps() {
    return { db: this.db, clock: this.clock, blobs: this.blobs, log: this.log };
  }

  private async giveUp(row: repo.SnapshotRow, message: string): Promise<void> {
    await repo.replicationFailed(this.db, row.id, message, null);
    this.log.error({ snapshot_id: row.id, err: message }, "replication given up: the snapshot stays local");
    this.snapshots.changes.emit(row.id);
  }

  /** An earlier replicated snapshot whose local copy shares extents with this one: this sandbox's latest, or its parent. */
  private async baseFor(row: repo.SnapshotRow): Promise<{ images: SnapshotImages; manifest: SnapshotManifest } | null> {
    const candidates = [await repo.latestReplicatedOf(this.db, row.source_sandbox_id, row.id)];
    if (row.parent_snapshot_id) candidates.push(await repo.getSnapshot(this.db, row.parent_snapshot_id));
    for (const candidate of candidates) {
      if (!candidate?.manifest_key || candidate.replication !== "replicated") continue;
      const images = await this.driver.localSnapshot(candidate.id);
      if (!images) continue;
      const manifest = await readSnapshotManifest(this.blobs, candidate.manifest_key, candidate.id).catch(() => null);
      if (manifest) return { images, manifest };
    }
    return null;
  }

  private async dropIfUnused(snapshotId: string): Promise<void> {
    if ((await repo.restoresReading(this.db, snapshotId)) > 0) return;
    await this.driver
      .dropLocalSnapshot(snapshotId)
      .catch((error: unknown) =>
        this.log.warn({ snapshot_id: snapshotId, err: (error as Error).message }, "could not drop a local copy"),
      );
  }

  /** Snapshots a previous process was taking: sealed if the host sealed them, else failed. */
  private async resolveInterrupted(): Promise<void> {
    for (const row of await repo.pendingOfEarlierEpochs(this.db, this.host.owner())) {
      const images = await this.driver.localSnapshot(row.id).catch(() => null);
      const sealed = images ? await sealedFacts(images).catch(() => null) : null;
      await this.db.tx(async (q) => {
        if (sealed) {
          await repo.seal(q, row.id, this.clock.now(), { ...sealed, frozenMs: 0, replicate: true });
          await appendSandboxEvent(q, this.clock, sandboxOf(row), "sandbox.snapshot_created", {
            snapshot_id: row.id,
            durability: "local",
            recovered: true,
          });
        } else {
          await repo.fail(q, row.id, "interrupted", "the server stopped while the snapshot was being taken");
          await appendSandboxEvent(q, this.clock, sandboxOf(row), "sandbox.snapshot_failed", {
            snapshot_id: row.id,
            reason: "interrupted",
          });
        }
      });
      this.log.warn({ snapshot_id: row.id, sealed: sealed !== null }, "resolved a snapshot interrupted by a restart");
    }
  }

  /**
   * Replications a previous process was running when it died: their leases are released so
   * they resume now rather than when the lease lapses (LEASE_SECONDS, ten minutes during
   * which the snapshot stays undurable: its source cannot grow, it cannot be deleted). Only
   * snapshots whose sealed copy is on this host: no other host can replicate them, and on
   * this one the lease holder was a previous process (one live driver per root).
   */
  private async releaseInterruptedReplications(): Promise<void> {
    for (const row of await repo.leasedReplications(this.db, this.clock.now(), this.host.id)) {
      if (!(await this.driver.localSnapshot(row.id).catch(() => null))) continue;
      await repo.releaseReplicationLease(this.db, row.id);
      this.log.warn({ snapshot_id: row.id }, "resuming a replication interrupted by a restart");
    }
  }

  /** Local copies no snapshot record names (deleted while the server was down). */
  private async dropOrphanCopies(): Promise<void> {
    for (const id of await this.driver.listLocalSnapshots()) {
      if (await repo.getSnapshot(this.db, id)) continue;
      this.log.warn({ snapshot_id: id }, "dropping a local snapshot copy the store does not know");
      await this.driver.dropLocalSnapshot(id).catch(() => undefined);
    }
  }

  /**
   * Collects what no snapshot needs any more (snapshot-collector.ts): unreferenced chunk rows
   * untouched within the grace period, then packs no chunk names, then repacks sparse ones.
   */
  async collectGarbage(): Promise<number> {
    for (const prefix of await repo.pendingBlobDeletions(this.db, GC_BATCH)) {
      await deleteBlobPrefix(this.db, this.blobs, prefix);
    }
    const cutoff = await collectionCutoff(this.db, this.clock.now(), this.options.gcGraceSeconds, LEASE_SECONDS);
    const deps = this.storeDeps();
    const collected = await collectUnreferencedChunks(deps, cutoff);
    const packs = await sweepDeadPacks(deps, cutoff);
    await repackSparsePacks(deps, cutoff);
    if (collected > 0 || packs > 0)
      this.log.info({ chunks: collected, packs }, "collected unreferenced snapshot chunks and packs");
    return collected;
  }
}

function sandboxOf(row: repo.SnapshotRow) {
  return {
    id: row.source_sandbox_id,
    org_id: row.org_id,
    project_id: row.project_id,
    run_id: row.run_id,
    lineage_path: row.lineage_path,
  };
}

/** What a sealed local copy holds, read from its files (a snapshot sealed just before a crash). */
async function sealedFacts(images: SnapshotImages): Promise<{ capacityGiB: number; sizeBytes: number }> {
  const [root, workspace] = await Promise.all([stat(images.root), stat(images.workspace)]);
  return { capacityGiB: Math.floor(workspace.size / GIB), sizeBytes: (root.blocks + workspace.blocks) * 512 };
}

function cpuMs(usage: NodeJS.CpuUsage): number {
  return (usage.user + usage.system) / 1000;
}
