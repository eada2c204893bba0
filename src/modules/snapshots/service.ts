// SnapshotService: CreateSandboxSnapshot, ListSandboxSnapshots, DeleteSandboxSnapshot, and
// what a restore needs (the snapshot a create names, its local copy). The host takes the
// copy-on-write snapshot (SnapshotRuntime.snapshot); replication to the blob store is the
// SnapshotReplicator's (controllers/snapshot-replicator.ts), which this service kicks.

import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import type { BlobStore } from "../../drivers/blobs/interface.js";
import {
  type LocalSnapshot,
  type LocalSnapshots,
  RuntimeError,
  type SandboxRuntime,
} from "../../drivers/runtime/interface.js";
import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { canonicalJson, sha256Hex } from "../../lib/hash.js";
import type { Logger } from "../../lib/logger.js";
import { decodeCursor, pageOf } from "../../lib/page-token.js";
import type { Db, Queryable } from "../../store/db.js";
import type { GrantClaims } from "../hosts/grants.js";
import { hostUnavailable } from "../hosts/membership.js";
import { NodeUnreachable } from "../hosts/node-client.js";
import type { HostRouter } from "../hosts/router.js";
import { type Credential, requireOrgScoped } from "../identity/credential.js";
import type { WarrenMetrics } from "../metrics/registry.js";
import type { ProjectService } from "../projects/service.js";
import { localRuntime } from "../sandboxes/local-runtime.js";
import type { SandboxService } from "../sandboxes/service.js";
import { appendSandboxEvent } from "../sandboxes/transitions.js";
import type { QuotaService } from "../usage/service.js";
import { readSnapshotManifest, rebuildSnapshot } from "./manifest.js";
import * as repo from "./repo.js";
import type {
  CreateSnapshotBody,
  CreateSnapshotResult,
  ListSnapshotsQueryJson,
  ListSnapshotsResult,
} from "./schemas.js";
import { snapshotView } from "./view.js";

const SNAPSHOT_ID = /^snp-[0-9a-f]{40}$/;
const SNAPSHOT_STATES = ["ready", "running", "stopped"];
const DEFAULT_WAIT_SECONDS = 25;

export function newSnapshotId(): string {
  return `snp-${randomBytes(20).toString("hex")}`;
}

/** What the replicator is told: a snapshot may be due. The replicator connects itself when it starts. */
export class ReplicationRelay {
  private target: (() => void) | null = null;

  connect(kick: (() => void) | null): void {
    this.target = kick;
  }

  kick(): void {
    this.target?.();
  }
}

export interface SnapshotOptions {
  /** Keep the host's copy after replication (false drops it: restores then read the blob store). */
  keepLocalCopies: boolean;
}

/** What a create from a snapshot takes from it. */
export interface RestoreSource {
  id: string;
  image: string;
  lineagePath: string;
  workspaceCapacityGiB: number | null;
  volumes: repo.SnapshotRow["volumes"];
  /** The host that took it, which holds its local copy (placement prefers it). */
  hostId: string | null;
}

/** What snapshots need of this host's runtime: take a snapshot, and its local copies. */
type SnapshotRuntime = Pick<SandboxRuntime, "snapshot"> & LocalSnapshots;

export class SnapshotService {
  /** Emits `<snapshot id>` whenever this process changes a snapshot (sealed, failed, replicated). */
  readonly changes = new EventEmitter();
  /** Snapshots this process is taking: a retry with the same key waits for the outcome. */
  private readonly taking = new Map<string, Promise<repo.SnapshotRow>>();
  private metrics: WarrenMetrics | null = null;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly driver: SnapshotRuntime | null,
    private readonly blobs: BlobStore,
    private readonly sandboxes: SandboxService,
    private readonly projects: ProjectService,
    private readonly options: SnapshotOptions,
    private readonly replication: ReplicationRelay,
    private readonly quotas: QuotaService,
    /** Routes a snapshot to the sandbox's owner, which takes and replicates it (null: this host's only). */
    private readonly router: HostRouter | null = null,
    /** An api replica (WARREN_ROLE=api): without a runtime, what needs one answers host_unavailable. */
    private readonly apiReplica = false,
  ) {
    this.changes.setMaxListeners(0);
    quotas.registerMeter("snapshots.total", (q, orgId) => repo.countKept(q, orgId));
  }

  private runtime(): SnapshotRuntime {
    // Without one, the refusal of a server without a runtime (an api replica's is host_unavailable).
    return localRuntime(this.driver, this.apiReplica);
  }

  /** The snapshot a credential may see, or not_found. */
  private async visible(q: Queryable, cred: Credential, id: string, lock: "" | "update" | "share" = "") {
    const row = SNAPSHOT_ID.test(id) ? await repo.getSnapshot(q, id, lock) : null;
    if (!row || row.org_id !== cred.orgId) throw notFound("snapshot");
    if (cred.sandbox && !inLineage(cred.sandbox.lineagePath, row.lineage_path)) throw notFound("snapshot");
    return row;
  }

  /** Host snapshot durations go to these metrics (GET /metrics). */
  useMetrics(metrics: WarrenMetrics): void {
    this.metrics = metrics;
  }

  async create(
    cred: Credential,
    sandboxId: string,
    body: CreateSnapshotBody,
    idempotencyKey: string | undefined,
  ): Promise<CreateSnapshotResult> {
    const requestHash = sha256Hex(canonicalJson({ sandbox_id: sandboxId, name: body.name ?? null }));
    const waitSeconds = body.wait_remote ? (body.wait_timeout_seconds ?? DEFAULT_WAIT_SECONDS) : 0;
    if (idempotencyKey !== undefined) {
      const sandbox = await this.sandboxes.load(this.db, cred, sandboxId);
      const earlier = await repo.findByKey(this.db, cred.orgId, sandbox.id, idempotencyKey);
      if (earlier) return this.outcome(earlier, requestHash, waitSeconds);
    }
    // Taken by the sandbox's own host, which then holds (and replicates) the local copy: this
    // server, or the owner through its internal API (docs/hosts.md "Routing").
    const target = this.router ? await this.sandboxes.load(this.db, cred, sandboxId) : null;
    const route = target && this.router ? await this.router.runtimeOf(target) : null;
    const driver = route?.remote ? null : this.runtime();
    const id = newSnapshotId();
    const pending = await this.db.tx(async (q) => {
      const sandbox = await this.sandboxes.load(q, cred, sandboxId, true);
      if (sandbox.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
      const moved = target && (sandbox.host_id !== target.host_id || sandbox.host_epoch !== target.host_epoch);
      if (moved || (!route?.remote && !this.sandboxes.actsHereOn(sandbox))) throw hostUnavailable();
      if (!SNAPSHOT_STATES.includes(sandbox.state) || sandbox.desired_state === "deleted") {
        throw new AppError(
          "sandbox_not_ready",
          `a snapshot is taken from ready, running or stopped; the sandbox is ${sandbox.desired_state === "deleted" ? "being deleted" : sandbox.state}`,
        );
      }
      // Every snapshot kept costs storage, whoever asks (a sandbox-scoped credential may snapshot its own sandbox).
      await this.quotas.admit(q, cred.orgId, "snapshots.total", 1);
      const row: repo.NewSnapshot = {
        id,
        org_id: sandbox.org_id,
        project_id: sandbox.project_id,
        source_sandbox_id: sandbox.id,
        parent_snapshot_id: sandbox.snapshot_id,
        run_id: sandbox.run_id,
        name: body.name ?? null,
        image: sandbox.workload_image,
        image_digest: sandbox.image_digest,
        lineage_path: sandbox.lineage_path,
        storage_class: sandbox.storage_class,
        idempotency_key: idempotencyKey ?? null,
        request_hash: requestHash,
        created_by: cred.principalId,
        created_at: this.clock.now(),
        volumes: sandbox.volumes,
        host_id: sandbox.host_id,
        host_epoch: sandbox.host_epoch,
      };
      if (await repo.insertPending(q, row)) return { row, sandbox };
      const sameKey = idempotencyKey ? await repo.findByKey(q, cred.orgId, sandbox.id, idempotencyKey) : null;
      if (sameKey) return { row: null, earlier: sameKey };
      throw new AppError("snapshot_in_progress", "a snapshot of this sandbox is already being taken", {
        retryAfterSeconds: 1,
      });
    });
    if (!pending.row) return this.outcome(pending.earlier as repo.SnapshotRow, requestHash, waitSeconds);
    const { sandbox } = pending as { sandbox: Awaited<ReturnType<SandboxService["load"]>> };
    if (route?.remote) {
      try {
        await route.remote.takeSnapshot(id);
      } catch (error) {
        if (!(error instanceof NodeUnreachable)) throw error;
        // Never reached the owner: nothing was taken, and the pending row must not hold the sandbox.
        if (!error.sent) {
          await this.recordFailure(null, id, sandbox, "host_failure");
          throw hostUnavailable();
        }
      }
      const routed = await repo.getSnapshot(this.db, id);
      if (!routed) throw new AppError("unavailable", "the snapshot's outcome is unknown", { retryAfterSeconds: 1 });
      return this.outcome(routed, requestHash, waitSeconds);
    }
    const taking = this.take(driver as SnapshotRuntime, id, sandbox);
    this.taking.set(id, taking);
    let sealed: repo.SnapshotRow;
    try {
      sealed = await taking;
    } finally {
      this.taking.delete(id);
    }
    return this.outcome(sealed, requestHash, waitSeconds);
  }

  /**
   * The owner's side of a snapshot routed to it (node-api.ts): the pending row the routing
   * server wrote is taken here, on this host's runtime, and sealed or failed as if its create
   * came in here. Another organization's or a finished row is not_found.
   */
  async takeForRoute(claims: GrantClaims, snapshotId: string): Promise<void> {
    const row = SNAPSHOT_ID.test(snapshotId) ? await repo.getSnapshot(this.db, snapshotId) : null;
    if (!row || row.org_id !== claims.orgId || row.source_sandbox_id !== claims.sandboxId || row.state !== "pending") {
      throw notFound("snapshot");
    }
    const sandbox = await this.sandboxes.rowForHost(claims.sandboxId);
    if (!sandbox || !this.sandboxes.actsHereOn(sandbox) || !this.driver) {
      if (sandbox) await this.recordFailure(null, snapshotId, sandbox, "host_failure");
      throw hostUnavailable();
    }
    const taking = this.take(this.driver, snapshotId, sandbox);
    this.taking.set(snapshotId, taking);
    try {
      await taking;
    } finally {
      this.taking.delete(snapshotId);
    }
  }

  /** Takes the host snapshot and records the result: sealed, or failed with its reason. */
  private async take(
    driver: SnapshotRuntime,
    id: string,
    sandbox: Awaited<ReturnType<SandboxService["load"]>>,
  ): Promise<repo.SnapshotRow> {
    let local: LocalSnapshot;
    const began = performance.now();
    try {
      local = await driver.snapshot(sandbox.id, id);
      this.metrics?.snapshotTaken("sealed", (performance.now() - began) / 1000);
    } catch (error) {
      this.metrics?.snapshotTaken("failed", (performance.now() - began) / 1000);
      const code = error instanceof RuntimeError ? error.code : "host_failure";
      this.log.warn(
        { sandbox_id: sandbox.id, snapshot_id: id, code, err: (error as Error).message },
        "snapshot failed",
      );
      return this.recordFailure(driver, id, sandbox, code);
    }
    try {
      const row = await this.db.tx(async (q) => {
        const row = await repo.seal(q, id, this.clock.now(), {
          capacityGiB: local.workspaceCapacityGiB,
          sizeBytes: local.sizeBytes,
          frozenMs: local.frozenMs,
          replicate: true,
        });
        await appendSandboxEvent(q, this.clock, sandbox, "sandbox.snapshot_created", {
          snapshot_id: id,
          durability: "local",
          frozen_ms: Math.round(local.frozenMs),
        });
        return row;
      });
      if (!row) throw new Error("the pending snapshot record was gone");
      this.changes.emit(id);
      this.replication.kick();
      return row;
    } catch (error) {
      this.log.error({ snapshot_id: id, err: (error as Error).message }, "recording a sealed snapshot failed");
      return this.recordFailure(driver, id, sandbox, "record_failed");
    }
  }

  /** Records the snapshot failed (dropping any host copy it left); never reports it as success. */
  private async recordFailure(
    driver: SnapshotRuntime | null,
    id: string,
    sandbox: Awaited<ReturnType<SandboxService["load"]>>,
    code: string,
  ): Promise<repo.SnapshotRow> {
    await driver?.dropLocalSnapshot(id).catch(() => undefined);
    const failed = await this.db.tx(async (q) => {
      const row = await repo.fail(q, id, code, failureMessage(code));
      if (row) {
        await appendSandboxEvent(q, this.clock, sandbox, "sandbox.snapshot_failed", { snapshot_id: id, reason: code });
      }
      return row;
    });
    this.changes.emit(id);
    if (!failed) throw new AppError("unavailable", "the snapshot's outcome is unknown", { retryAfterSeconds: 1 });
    return failed;
  }

  /** The answer for a snapshot row: its error if it failed, else its id and durability (after waiting, if asked). */
  private async outcome(
    row: repo.SnapshotRow,
    requestHash: string,
    waitSeconds: number,
  ): Promise<CreateSnapshotResult> {
    if (row.request_hash !== requestHash) {
      throw new AppError("idempotency_conflict", "this Idempotency-Key was used for a different snapshot request");
    }
    const deadline = Date.now() + waitSeconds * 1000;
    let current = row;
    if (current.state === "pending") {
      const taking = this.taking.get(current.id);
      if (taking) current = await taking.catch(() => current);
    }
    if (waitSeconds > 0) current = await this.waitReplicated(current, deadline);
    if (current.state === "failed") throw failureError(current.failure_code ?? "host_failure");
    if (current.state === "pending") {
      throw new AppError("snapshot_in_progress", "the snapshot is still being taken; repeat the request", {
        retryAfterSeconds: 1,
      });
    }
    return { snapshot_id: current.id, durability: current.durability === "replicated" ? "replicated" : "local" };
  }

  private async waitReplicated(row: repo.SnapshotRow, deadline: number): Promise<repo.SnapshotRow> {
    let current = row;
    while (current.state === "sealed" && current.replication === "pending" && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.changes.off(row.id, done);
          resolve();
        };
        const timer = setTimeout(done, Math.min(500, Math.max(0, deadline - Date.now())));
        this.changes.on(row.id, done);
      });
      current = (await repo.getSnapshot(this.db, row.id)) ?? current;
    }
    return current;
  }

  async list(cred: Credential, query: ListSnapshotsQueryJson): Promise<ListSnapshotsResult> {
    const project = cred.sandbox
      ? { id: (await this.sandboxes.load(this.db, cred, cred.sandbox.sandboxId)).project_id }
      : await this.projects.resolve(this.db, cred, query.project_id);
    if (query.sandbox_id !== undefined)
      await this.sandboxes.load(this.db, cred, query.sandbox_id).catch(() => {
        throw notFound("sandbox");
      });
    const pageSize = query.page_size ?? 50;
    const rows = await repo.listPage(this.db, {
      orgId: cred.orgId,
      projectId: project.id,
      name: query.name,
      sandboxId: query.sandbox_id,
      lineageOf: cred.sandbox?.lineagePath,
      after: decodeCursor("snapshots", query.page_token),
      limit: pageSize + 1,
    });
    const page = pageOf("snapshots", rows, pageSize, (row) => ({ at: row.created_at, id: row.id }));
    return {
      snapshots: page.items.map(snapshotView),
      edges: page.items
        .filter((row) => row.parent_snapshot_id)
        .map((row) => ({ snapshot_id: row.id, parent_snapshot_id: row.parent_snapshot_id as string })),
      next_page_token: page.nextPageToken,
    };
  }

  async delete(cred: Credential, id: string): Promise<Record<string, never>> {
    requireOrgScoped(cred, "delete snapshots");
    const row = await this.db.tx(async (q) => {
      const row = await this.visible(q, cred, id, "update");
      if (row.state === "pending" || (row.state === "sealed" && row.replication === "pending")) {
        throw new AppError(
          "snapshot_in_progress",
          "the snapshot is not durable yet (being taken or replicated); it can be deleted once that resolves",
          { retryAfterSeconds: 1 },
        );
      }
      if ((await repo.restoresReading(q, row.id)) > 0) {
        throw new AppError("snapshot_in_use", "a sandbox is being restored from this snapshot", {
          retryAfterSeconds: 1,
        });
      }
      await repo.deleteSnapshot(q, row.id);
      await repo.queueBlobDeletion(q, row.org_id, manifestPrefix(row.org_id, row.id), this.clock.now());
      return row;
    });
    await this.runtime()
      .dropLocalSnapshot(row.id)
      .catch((error: unknown) =>
        this.log.warn({ snapshot_id: row.id, err: (error as Error).message }, "could not drop a snapshot's local copy"),
      );
    // The manifests now; the collector finishes a deletion a failure or crash cuts short.
    await deleteBlobPrefix(this.db, this.blobs, manifestPrefix(row.org_id, row.id)).catch((error: unknown) =>
      this.log.warn({ snapshot_id: row.id, err: (error as Error).message }, "manifest deletion left to the collector"),
    );
    return {};
  }

  /**
   * The snapshot a create names, locked against a concurrent delete until the caller's
   * transaction ends (the new sandbox row then makes it in use).
   */
  async forRestore(q: Queryable, cred: Credential, id: string): Promise<RestoreSource> {
    const row = await this.visible(q, cred, id, "share");
    if (row.state !== "sealed") {
      throw new AppError(
        "snapshot_not_restorable",
        row.state === "pending" ? "the snapshot is still being taken" : "the snapshot failed and holds nothing",
      );
    }
    if (row.durability !== "replicated" && !(await this.runtime().localSnapshot(row.id))) {
      throw new AppError(
        "snapshot_not_restorable",
        "the snapshot has no copy on this host and is not replicated to the blob store",
      );
    }
    return {
      id: row.id,
      image: row.image,
      lineagePath: row.lineage_path,
      workspaceCapacityGiB: row.workspace_capacity_gib,
      volumes: row.volumes ?? [],
      hostId: row.host_id ?? null,
    };
  }

  /**
   * Makes sure this host holds a sealed copy of the snapshot, rebuilding it from the blob
   * store (every chunk verified) when it does not. Throws RuntimeError
   * snapshot_not_restorable with the reason when it cannot.
   */
  async ensureLocal(snapshotId: string): Promise<"local" | "blob_store"> {
    const driver = this.runtime();
    if (await driver.localSnapshot(snapshotId)) return "local";
    const row = await repo.getSnapshot(this.db, snapshotId);
    if (row?.state !== "sealed") {
      throw new RuntimeError("snapshot_not_restorable", "the snapshot no longer exists");
    }
    const manifestKey = row.manifest_key;
    if (row.durability !== "replicated" || !manifestKey) {
      throw new RuntimeError("snapshot_not_restorable", "the snapshot has no local copy and is not replicated");
    }
    const manifest = await readSnapshotManifest(this.blobs, manifestKey, row.id);
    await driver.importSnapshot(snapshotId, (staging) =>
      rebuildSnapshot({ db: this.db, blobs: this.blobs }, row.org_id, manifest, staging),
    );
    this.log.info({ snapshot_id: snapshotId }, "snapshot rebuilt from the blob store");
    return "blob_store";
  }

  /** Whether the sandbox has a snapshot that has not resolved (workspace growth waits for it). */
  hasUndurable(q: Queryable, sandboxId: string): Promise<boolean> {
    return repo.hasUndurable(q, sandboxId);
  }

  get keepLocalCopies(): boolean {
    return this.options.keepLocalCopies;
  }
}

/** Whether a snapshot of `snapshotLineage` is in the lineage of the sandbox at `sandboxLineage` (its own or an ancestor's). */
function inLineage(sandboxLineage: string, snapshotLineage: string): boolean {
  return sandboxLineage === snapshotLineage || sandboxLineage.startsWith(`${snapshotLineage}.`);
}

/** Deletes every blob under a queued prefix, then the queue entry. */
export async function deleteBlobPrefix(db: Db, blobs: BlobStore, prefix: string): Promise<void> {
  for await (const blob of blobs.list(prefix)) await blobs.delete(blob.key);
  await repo.blobDeletionDone(db, prefix);
}

export function manifestPrefix(orgId: string, snapshotId: string): string {
  return `orgs/${orgId}/snapshots/${snapshotId}/`;
}

/** The words recorded and answered for a failed snapshot: the code, never host paths. */
function failureMessage(code: string): string {
  switch (code) {
    case "snapshot_in_progress":
      return "another snapshot of the sandbox was being taken";
    case "not_found":
      return "the sandbox no longer exists on its host";
    case "interrupted":
      return "the server stopped while the snapshot was being taken";
    default:
      return "the host could not take the snapshot";
  }
}

function failureError(code: string): AppError {
  if (code === "snapshot_in_progress") {
    return new AppError("snapshot_in_progress", failureMessage(code), { retryAfterSeconds: 1 });
  }
  if (code === "not_found") return new AppError("sandbox_not_ready", failureMessage(code));
  return new AppError("unavailable", `the snapshot failed: ${failureMessage(code)}`, { retryAfterSeconds: 5 });
}
