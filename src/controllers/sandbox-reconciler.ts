// The sandbox reconciler: a loop that observes a sandbox, asks the pure lifecycle
// (modules/sandboxes/lifecycle.ts) for the next action and applies it through the runtime
// driver and the checked state writes of SandboxTransitions. Work is serialized per sandbox
// by the ReconcileQueue, kicked by API mutations and driver exit events; a sweep every
// second kicks what time made due (deadlines, idle stops, expiry, retention). At start it
// adopts what the runtime still runs, removes what the store does not know, and marks execs
// of the previous process indeterminate. It acts only on its own host's sandboxes
// (docs/hosts.md): every query names the host, every write is conditional on (host_id,
// epoch), and nothing is done while the host cannot act (fenced, or its lease lapsed).
import type { HostStorage, RuntimeDriver, SandboxRuntime } from "../drivers/runtime/interface.js";
import { RuntimeError } from "../drivers/runtime/interface.js";
import type { Clock } from "../lib/clock.js";
import type { Logger } from "../lib/logger.js";
import { SpanStatusCode, type Tracing } from "../lib/tracing.js";
import { DEFAULT_GATEWAY_ADDRESS, gatewayEnv, otlpEnv } from "../modules/egress/env.js";
import { HOST_KICKS_CHANNEL, parseHostKick } from "../modules/hosts/kicks.js";
import type { HostMembership, HostOwner } from "../modules/hosts/membership.js";
import type { IdentityService } from "../modules/identity/service.js";
import type { WarrenMetrics } from "../modules/metrics/registry.js";
import { tenantFailureMessage, withoutHostPaths } from "../modules/sandboxes/host-changes.js";
import {
  decide,
  type LifecycleAction,
  type Observed,
  STATES,
  type StoredState,
  TRANSITIONAL_STATES,
} from "../modules/sandboxes/lifecycle.js";
import * as repo from "../modules/sandboxes/repo.js";
import type { SandboxService } from "../modules/sandboxes/service.js";
import {
  appendSandboxEvent,
  ownedBy,
  type SandboxTransitions,
  type TransitionOptions,
} from "../modules/sandboxes/transitions.js";
import type { SnapshotService } from "../modules/snapshots/service.js";
import { type VolumeCache, VolumeCacheError } from "../modules/volumes/cache.js";
import type { Db } from "../store/db.js";
import { type HandBackDeps, handBack } from "./hand-back.js";
import type { ReconcileQueue } from "./reconcile-queue.js";

const SWEEP_INTERVAL_MS = 1000;
export const PIDS_PER_SANDBOX_FLOOR = 64;
/** States other than `terminated` that a failure may still overwrite. */
const NOT_TERMINATED = (Object.keys(STATES) as StoredState[]).filter((state) => state !== "terminated");

export interface ReconcilerDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  sandboxes: SandboxService;
  identity: IdentityService;
  reconcileQueue: ReconcileQueue;
  sandboxTransitions: SandboxTransitions;
  snapshots: SnapshotService;
  volumeCache: VolumeCache;
  /** This server as a host: the reconciler acts on its sandboxes only. */
  host: HostMembership | null;
  /** Step durations, queue lag and create -> running (GET /metrics). */
  metrics?: WarrenMetrics | null;
  /** A span per reconcile step that did something, when tracing is on. */
  tracing?: Tracing | null;
}

/** How a sandbox's first start was made, kept from its materialize step to its first running. */
interface FirstStart {
  imageCache: "warm" | "cold" | "unknown";
  source: "image" | "snapshot";
}

export interface ReconcilerOptions {
  pids: number;
  retentionSeconds: number;
  /**
   * Unused since sandboxes reach the API through the egress gateway (WARREN_API_URL is the
   * gateway's virtual address); kept optional so existing callers compile.
   */
  publicApiUrl?: string;
  /** The egress gateway's virtual address, in every sandbox's environment (default 169.254.213.1). */
  gatewayAddress?: string;
  /** Placement's rules, for a sandbox this host refuses at its start (hand-back.ts); absent: it fails. */
  placement?: HandBackDeps["placement"];
}

/** What the reconciler needs of this host's runtime: the sandbox lifecycle, image pulls, exits. */
export type ReconcilerRuntime = Pick<SandboxRuntime, "create" | "start" | "stop" | "destroy" | "observe" | "list"> &
  Pick<HostStorage, "prepareImage" | "measureStorage"> &
  Pick<RuntimeDriver, "onExit" | "servedFromPool">;

export class SandboxReconciler {
  /** Gives up on the transitional step now running for a sandbox (its deadline passed). */
  private readonly stepExpiries = new Map<string, { state: string; expire: () => void }>();
  private sweepTimer: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void) | null = null;
  private readonly db: Db;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly sandboxes: SandboxService;
  private readonly identity: IdentityService;
  private readonly queue: ReconcileQueue;
  private readonly transitions: SandboxTransitions;
  private readonly snapshots: SnapshotService;
  private readonly volumeCache: VolumeCache;
  private readonly metrics: WarrenMetrics | null;
  private readonly tracing: Tracing | null;
  /** Sandboxes materialized by this process and not yet running (create -> running histogram). */
  private readonly firstStarts = new Map<string, FirstStart>();
  private readonly host: HostMembership;
  /** Sandboxes kicked while the host could not act: kicked again once it can. */
  private readonly deferred = new Set<string>();
  private stopListening: (() => Promise<void>) | null = null;

  constructor(
    deps: ReconcilerDeps,
    private readonly driver: ReconcilerRuntime,
    private readonly options: ReconcilerOptions,
  ) {
    this.db = deps.db;
    this.clock = deps.clock;
    this.log = deps.log;
    this.sandboxes = deps.sandboxes;
    this.identity = deps.identity;
    this.queue = deps.reconcileQueue;
    this.transitions = deps.sandboxTransitions;
    this.snapshots = deps.snapshots;
    this.volumeCache = deps.volumeCache;
    this.metrics = deps.metrics ?? null;
    this.tracing = deps.tracing ?? null;
    if (!deps.host) throw new Error("the sandbox reconciler runs on a host (a server with a runtime)");
    this.host = deps.host;
    if (this.metrics) {
      const metrics = this.metrics;
      this.queue.observeLag((seconds) => metrics.reconcileWaited(seconds));
    }
  }

  async start(): Promise<void> {
    await this.startUpPass();
    this.unsubscribe = this.driver.onExit((id) => this.kick(id));
    this.queue.setWorker((id) =>
      this.reconcile(id).catch((error: unknown) =>
        this.log.error({ err: (error as Error).message, sandbox_id: id }, "reconcile failed"),
      ),
    );
    await this.listenForKicks();
    await this.kickLive();
    this.sweepTimer = setInterval(() => void this.sweep(), SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
  }

  /**
   * After the host re-joined with a new epoch (it was fenced: declared dead while cut off):
   * the start-up pass again, so what it no longer owns is removed from it, then every
   * sandbox it still owns is looked at.
   */
  async rejoined(): Promise<void> {
    await this.startUpPass();
    this.deferred.clear();
    await this.kickLive();
  }

  /** Execs of earlier epochs are indeterminate; what runs here that no live row of this host names goes. */
  private async startUpPass(): Promise<void> {
    const marked = await repo.markRunningExecsIndeterminate(
      this.db,
      this.clock.now(),
      this.owner(),
      this.sandboxes.execsInFlightIds(),
    );
    if (marked > 0) this.log.warn({ execs: marked }, "execs of a previous server process are indeterminate");
    // Whatever runs here that no row of this host names is removed: nothing runs unowned.
    const known = await repo.knownIds(this.db, this.host.id);
    for (const id of await this.driver.list()) {
      if (!known.has(id)) {
        this.log.warn({ sandbox_id: id }, "removing a sandbox the store does not know");
        await this.driver
          .destroy(id)
          .catch((error: unknown) =>
            this.log.error({ err: (error as Error).message, sandbox_id: id }, "orphan cleanup failed"),
          );
      }
    }
  }

  async stop(): Promise<void> {
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.unsubscribe?.();
    await this.stopListening?.();
    this.stopListening = null;
    await this.queue.stop();
  }

  /** The (host, epoch) every write of this reconciler is conditional on. */
  private owner(): HostOwner {
    return this.host.owner();
  }

  private async kickLive(): Promise<void> {
    for (const id of await repo.liveIds(this.db, this.host.id)) this.kick(id);
  }

  /**
   * Kicks from other servers (a stop, wake or delete requested through them) arrive as
   * notifications naming this host; when they may have been missed, every live sandbox of
   * the host is looked at again.
   */
  private async listenForKicks(): Promise<void> {
    if (!this.db.listen) return;
    this.stopListening = await this.db.listen(HOST_KICKS_CHANNEL, {
      onPayload: (payload) => {
        const kicked = parseHostKick(payload);
        if (kicked?.hostId === this.host.id) this.kick(kicked.sandboxId);
      },
      onGap: (down) => {
        if (!down) void this.kickLive().catch(() => undefined);
      },
    });
  }

  /** Once the host can act again (lease renewed), what was put off is looked at. */
  resumeDeferred(): void {
    const ids = [...this.deferred];
    this.deferred.clear();
    for (const id of ids) this.kick(id);
  }

  kick(id: string): void {
    this.queue.kick(id);
  }

  /** Resolves when no reconcile is running or queued (tests and benchmarks). */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  private async sweep(): Promise<void> {
    try {
      const now = this.clock.now();
      if (!this.host.canAct()) return;
      for (const due of await repo.dueIds(this.db, now, this.options.retentionSeconds, this.host.id)) {
        const step = this.stepExpiries.get(due.id);
        if (due.overdue && step?.state === due.state) step.expire();
        this.kick(due.id);
      }
    } catch (error) {
      this.log.warn({ err: (error as Error).message }, "sandbox sweep failed");
    }
  }

  /** Observe, decide, apply; kicks itself again while more steps remain. */
  private async reconcile(id: string): Promise<void> {
    const began = performance.now();
    const beganAt = Date.now();
    if (!this.host.canAct()) {
      this.deferred.add(id);
      return;
    }
    let row = await repo.getSandbox(this.db, id);
    const now = this.clock.now();
    if (!row) {
      this.firstStarts.delete(id);
      await this.driver.destroy(id);
      return;
    }
    // Another host's sandbox, or this host's under an epoch this process does not hold: not ours to act on.
    if (!ownedBy(row, this.owner())) return;
    const decideOptions = { retentionSeconds: this.options.retentionSeconds };
    const observed: Observed = {};
    let action = decide(row, observed, now, decideOptions);
    if (action.kind === "observe") {
      observed.runtime = await this.driver.observe(id);
      if (action.execs) {
        observed.execInFlight = this.sandboxes.hasExecInFlight(id);
        // An exec that ended after the row was read left the registry only once its end (the
        // activity that moves the idle deadline) was written: read the row again, or an idle
        // stop would act on the deadline from before that exec.
        if (!observed.execInFlight) row = (await repo.getSandbox(this.db, id)) ?? row;
      }
      action = decide(row, observed, now, decideOptions);
    }
    // A pass that found nothing to do is neither timed nor traced: the sweep makes many.
    if (action.kind === "none" || action.kind === "observe") {
      if (await this.apply(row, action)) this.kick(id);
      return;
    }
    const span = this.tracing?.start(
      `reconcile ${action.kind}`,
      { "warren.sandbox.id": row.id, "warren.sandbox.state": row.state, "warren.reconcile.action": action.kind },
      undefined,
      beganAt,
    );
    let again = false;
    try {
      again = await this.apply(row, action);
      this.metrics?.reconcileStepEnded(action.kind, "ok", (performance.now() - began) / 1000);
    } catch (error) {
      this.metrics?.reconcileStepEnded(action.kind, "error", (performance.now() - began) / 1000);
      span?.setStatus({ code: SpanStatusCode.ERROR });
      throw error;
    } finally {
      span?.end();
    }
    if (again) this.kick(id);
  }

  /** Applies one action; true when another step follows at once. */
  private async apply(row: repo.SandboxRow, action: LifecycleAction): Promise<boolean> {
    switch (action.kind) {
      case "none":
      case "observe":
      case "destroy_host":
        return false;
      case "purge":
        await repo.purgeFinishedSandbox(this.db, row.id, this.retainedAfter(), this.owner());
        return false;
      case "retry_cleanup":
        await this.retryCleanup(row);
        return false;
      case "terminate":
        await this.terminate(row);
        return false;
      case "fail":
        await this.fail(row, action.code, action.message);
        return false;
      case "expire":
        // Expiry deletes the sandbox (docs/api-decisions.md): its time is up.
        await this.transition(row.id, "terminating", {
          from: [row.state],
          change: { desired_state: "deleted" },
        });
        return true;
      case "advance":
        return (await this.transitions.chain(row.id, row.state, action.to, this.owner())).applied;
      case "materialize":
      case "start":
        return this.transitional(row, (live) =>
          action.kind === "materialize" ? this.materialize(row, live) : this.startProcess(row, live),
        );
      case "stop":
        return this.transitional(row, () => this.stopProcess(row, action.idle));
      case "exited":
        // The first process ended: the sandbox stops with it and stays stopped.
        // Why it stopped shows as its state_reason (docs/api-decisions.md), unless a stop was
        // asked for (the exit is then that stop's).
        await this.transition(row.id, "stopped", {
          from: [row.state],
          change: { desired_state: "stopped", idle_deadline: null },
          ...(row.desired_state === "running" ? { reason: exitReason(action.exitCode, action.oomKilled) } : {}),
        });
        this.log.info(
          { sandbox_id: row.id, exit_code: action.exitCode, oom_killed: action.oomKilled },
          "first process ended",
        );
        return false;
      case "wake_failed":
      case "settle":
      case "cleanup_later":
        // Answers to host work just done (stepFailed, failing, cleanup): applied where that work ran.
        return false;
    }
  }

  /** Decides again with what a step's host work found (lifecycle.ts: stepFailed, failing, cleanup). */
  private decideAfter(row: repo.SandboxRow, observed: Observed): LifecycleAction {
    return decide(row, observed, this.clock.now(), { retentionSeconds: this.options.retentionSeconds });
  }

  private retainedAfter(): Date {
    return new Date(this.clock.now().getTime() - this.options.retentionSeconds * 1000);
  }

  /**
   * A step with host work. From a transitional state it runs against that state's deadline:
   * a driver call that hangs (an image pull that never ends) must not keep the sandbox there
   * past it. The sweep expires the step once the deadline has passed; the step goes on in
   * the background and checks `live` before every side effect.
   */
  private async transitional(row: repo.SandboxRow, work: (live: () => boolean) => Promise<void>): Promise<boolean> {
    const run = async (live: () => boolean) => {
      try {
        await work(live);
        return true;
      } catch (error) {
        if (!live()) return false;
        const code = failureCode(error);
        this.log.warn({ sandbox_id: row.id, code, err: (error as Error).message }, "sandbox step failed");
        // Refused by this host's own admission: another host may take it (placed again).
        if (await this.handBack(row, code)) return false;
        await this.fail(row, code, tenantFailureMessage(error));
        return false;
      }
    };
    if (!TRANSITIONAL_STATES.includes(row.state) || !row.state_deadline) return run(() => true);
    let abandoned = false;
    const step = run(() => !abandoned);
    const expired = new Promise<"expired">((resolve) =>
      this.stepExpiries.set(row.id, { state: row.state, expire: () => resolve("expired") }),
    );
    const outcome = await Promise.race([step, expired]).finally(() => this.stepExpiries.delete(row.id));
    if (outcome !== "expired") return outcome;
    abandoned = true;
    step.catch(() => undefined);
    await this.fail(row, `${row.state}_timeout`, `the sandbox stayed ${row.state} past its deadline`);
    return false;
  }

  private async handBack(row: repo.SandboxRow, code: string): Promise<boolean> {
    if (!this.options.placement) return false;
    this.firstStarts.delete(row.id);
    const deps: HandBackDeps = {
      db: this.db,
      clock: this.clock,
      log: this.log,
      driver: this.driver,
      identity: this.identity,
      transitions: this.transitions,
      host: this.host,
      placement: this.options.placement,
    };
    // A hand-back that breaks (the store lost mid-way) fails the sandbox as on one host: its
    // transaction moved nothing, and this host's state of it is gone or goes with the failure.
    return handBack(deps, row, code).catch((error: unknown) => {
      this.log.warn({ sandbox_id: row.id, err: (error as Error).message }, "placing a refused sandbox again failed");
      return false;
    });
  }

  /** Writes the next observed state unless the sandbox left `row.state` meanwhile: that write wins. */
  private async set(row: repo.SandboxRow, state: StoredState, change: Partial<repo.SandboxRow> = {}) {
    return this.transition(row.id, state, { from: [row.state], change });
  }

  /** Every state write of the reconciler: conditional on this host still owning the sandbox at its epoch. */
  private transition(id: string, state: StoredState, options: TransitionOptions) {
    return this.transitions.transition(id, state, { ...options, owner: this.owner() });
  }

  private async terminate(row: repo.SandboxRow): Promise<void> {
    this.firstStarts.delete(row.id);
    if (row.state !== "terminating") {
      const moved = await this.set(row, "terminating");
      if (!moved.applied || !moved.row) return;
      row = moved.row;
    }
    const failure = await this.driver.destroy(row.id).then(
      () => null,
      (error: unknown) => error as Error,
    );
    // Retried on every sweep until the terminating deadline; then it ends failed, not stuck.
    const action = this.decideAfter(row, { cleanup: { error: failure ? failure.message : null } });
    if (action.kind === "cleanup_later") throw failure;
    if (action.kind === "fail") {
      await this.fail(row, action.code, action.message);
      return;
    }
    await this.identity.revokeSandboxKeys(row.id);
    if (action.kind === "settle") await this.set(row, action.to);
  }

  /**
   * Ends a sandbox as failed. When its host state cannot be removed (a cgroup still in use,
   * a busy mount), it is `attention` instead: it still holds host resources and an operator
   * may need to look. The cleanup is retried (retryCleanup); once it succeeds the sandbox
   * ends `failed` (or `terminated` when deleted) with the same reason.
   */
  private async fail(row: repo.SandboxRow, code: string, message: string): Promise<void> {
    this.firstStarts.delete(row.id);
    const cleanup = await this.driver.destroy(row.id).then(
      () => null,
      (error: unknown) => error as Error,
    );
    const action = this.decideAfter(row, {
      failing: { code, message, cleanupError: cleanup ? withoutHostPaths(cleanup.message) : null },
    });
    if (action.kind !== "settle") {
      await this.identity.revokeSandboxKeys(row.id);
      return;
    }
    const moved = await this.transition(row.id, action.to, {
      from: NOT_TERMINATED,
      // Read under the row lock: a delete that came meanwhile is kept.
      ...(action.desired ? { change: { desired_state: action.desired } } : {}),
      ...(action.reason ? { reason: action.reason } : {}),
    });
    // Only while the row is still this host's: one handed to another host meanwhile (a step
    // deadline that passed during a hand-back) keeps the keys its new owner issues.
    if (moved.applied) await this.identity.revokeSandboxKeys(row.id);
    if (cleanup) {
      this.log.error(
        { sandbox_id: row.id, code, err: cleanup.message },
        "sandbox needs attention: host cleanup failed",
      );
    }
  }

  /** Retries the host cleanup of a sandbox in `attention`. */
  private async retryCleanup(row: repo.SandboxRow): Promise<void> {
    const failure = await this.driver.destroy(row.id).then(
      () => null,
      (error: unknown) => error as Error,
    );
    const action = this.decideAfter(row, { cleanup: { error: failure ? failure.message : null } });
    if (action.kind !== "settle") return;
    if (failure) {
      // Still stuck: the same state with the next retry time, and no new event.
      await this.set(row, action.to);
      this.log.warn({ sandbox_id: row.id, err: failure.message }, "host cleanup still failing");
      return;
    }
    await this.identity.revokeSandboxKeys(row.id);
    await this.set(row, action.to);
  }

  private async materialize(row: repo.SandboxRow, live: () => boolean): Promise<void> {
    let image: Awaited<ReturnType<HostStorage["prepareImage"]>>;
    let observed: Awaited<ReturnType<SandboxRuntime["observe"]>>;
    try {
      [image, observed] = await Promise.all([
        this.driver.prepareImage(row.workload_image, {
          onProgress: (progress) => this.sandboxes.reportProgress(row.id, progress),
        }),
        this.driver.observe(row.id),
      ]);
    } finally {
      this.sandboxes.reportProgress(row.id, null);
    }
    if (!live()) return;
    if (observed.status !== "absent") {
      await this.set(row, "ready", { image_digest: image.digest });
      return;
    }
    // A create cut short by a crash leaves partial host state: clear it before trying again.
    if ((await this.driver.list()).includes(row.id)) await this.driver.destroy(row.id);
    await this.identity.revokeSandboxKeys(row.id);
    const key = await this.identity.issueKey({
      orgId: row.org_id,
      principalId: row.created_by,
      name: `sandbox ${row.id}`,
      sandbox: { sandboxId: row.id, lineagePath: row.lineage_path },
    });
    if (!live()) {
      // Given up on meanwhile: the failure revoked keys, maybe before this one existed.
      await this.identity.revokeSandboxKeys(row.id);
      return;
    }
    // A restore reads the snapshot's local copy, rebuilt from the blob store first when this
    // host has none (every chunk verified).
    const restoredFrom = row.snapshot_id ? await this.snapshots.ensureLocal(row.snapshot_id) : null;
    // Pinned volume versions from this host's cache (materialized from the blob store first when cold).
    const mounts = await Promise.all(
      row.volumes.map(async (volume) => ({
        source: await this.volumeCache.ensure(row.org_id, volume.version),
        target: volume.target_path,
        readOnly: true,
      })),
    );
    if (!live()) {
      await this.identity.revokeSandboxKeys(row.id);
      return;
    }
    // No await between the check above and this call: a failure that starts later queues
    // its destroy() behind this create() on the driver's per-sandbox lock.
    await this.driver.create({
      id: row.id,
      source: row.snapshot_id ? { kind: "snapshot", image, snapshotId: row.snapshot_id } : { kind: "image", image },
      mounts,
      ...(row.command ? { command: row.command } : {}),
      env: {
        ...gatewayEnv(this.options.gatewayAddress ?? DEFAULT_GATEWAY_ADDRESS),
        WARREN_SANDBOX_ID: row.id,
        WARREN_RUN_ID: row.run_id,
        WARREN_SANDBOX_TOKEN: key.api_key,
        ...otlpEnv(this.options.gatewayAddress ?? DEFAULT_GATEWAY_ADDRESS, key.api_key),
      },
      resources: {
        memoryMiB: row.resources.memory_mb,
        cpuMillis: row.resources.cpu_millis,
        pids: Math.max(PIDS_PER_SANDBOX_FLOOR, this.options.pids),
      },
      storageClass: row.storage_class,
      ...(row.workspace_capacity_gib ? { workspaceCapacityGiB: row.workspace_capacity_gib } : {}),
      network: row.network_access,
      cpuGroup: row.org_id,
    });
    if (!live()) return;
    this.firstStarts.set(row.id, {
      imageCache: image.downloaded === undefined ? "unknown" : image.downloaded ? "cold" : "warm",
      source: row.snapshot_id ? "snapshot" : "image",
    });
    await this.set(row, "ready", { image_digest: image.digest, credential_key_id: key.key_id });
    if (row.snapshot_id) {
      await this.db.tx((q) =>
        appendSandboxEvent(q, this.clock, row, "sandbox.restored", {
          snapshot_id: row.snapshot_id,
          from: restoredFrom,
          workload_image: row.workload_image,
        }),
      );
    }
  }

  private async startProcess(row: repo.SandboxRow, live: () => boolean): Promise<void> {
    if (!live()) return;
    const pool = this.driver.servedFromPool?.(row.id) ? "hit" : "miss";
    try {
      // The pinned versions are bound at every start: make sure each is whole in the cache (an
      // entry from before a reboot is written again now, never under a running sandbox). A
      // wake the cache cannot serve (its budget, a blob gone) keeps the sandbox stopped too.
      for (const volume of row.volumes) await this.volumeCache.ensure(row.org_id, volume.version);
      if (!live()) return;
      await this.driver.start(row.id);
    } catch (error) {
      if (!live()) throw error;
      // decide: a wake that fails keeps the sandbox stopped with its state (wake_failed; among
      // the causes a sandbox of the old layout the host cannot back yet, legacy.ts keeps its
      // state aside, and a transient host failure); any other failed start fails it (thrown
      // to transitional()). A later wake tries again.
      const code = failureCode(error);
      const action = this.decideAfter(row, { stepFailed: { code, message: tenantFailureMessage(error) } });
      if (action.kind !== "wake_failed") throw error;
      this.log.warn(
        { sandbox_id: row.id, code, err: (error as Error).message },
        "wake failed: the sandbox stays stopped",
      );
      await this.transition(row.id, "stopped", {
        from: ["stopped"],
        change: { desired_state: "stopped" },
        reason: { code: action.code, message: action.message },
      });
      return;
    }
    if (!live()) return;
    const now = this.clock.now();
    const moved = await this.set(row, "running", {
      idle_deadline: row.idle_timeout_seconds ? new Date(now.getTime() + row.idle_timeout_seconds * 1000) : null,
      // The failure of an earlier wake is over.
      ...(row.state === "stopped" && row.state_reason_code
        ? { state_reason_code: null, state_reason_message: null }
        : {}),
    });
    const first = this.firstStarts.get(row.id);
    this.firstStarts.delete(row.id);
    if (moved.applied && first && this.metrics) {
      // From the sandbox's created_at (minted when the API accepted the create), not from
      // materialize: waiting for the first step is part of what a caller waits for.
      const seconds = Math.max(0, this.clock.now().getTime() - row.created_at.getTime()) / 1000;
      this.metrics.sandboxReachedRunning(seconds, { imageCache: first.imageCache, pool, source: first.source });
    }
  }

  private async stopProcess(row: repo.SandboxRow, idle: boolean): Promise<void> {
    await this.driver.stop(row.id);
    // An idle stop changes what is desired; a requested stop leaves a racing wake in place.
    await this.set(
      row,
      "stopped",
      idle && row.desired_state === "running"
        ? { desired_state: "stopped", idle_deadline: null }
        : { idle_deadline: null },
    );
  }
}

/** A failed step's state_reason code: the driver's, or the volume cache's (`volume_cache_exhausted`). */
function failureCode(error: unknown): string {
  if (error instanceof RuntimeError || error instanceof VolumeCacheError) return error.code;
  return "runtime_error";
}

/** The state_reason of a sandbox whose first process ended on its own. */
export function exitReason(exitCode: number | undefined, oomKilled: boolean | undefined) {
  const code = exitCode === undefined ? "an unknown code" : `code ${exitCode}`;
  return {
    code: "process_exited",
    message: oomKilled
      ? `the first process was killed for lack of memory (exit ${code})`
      : `the first process exited with ${code}`,
  };
}
