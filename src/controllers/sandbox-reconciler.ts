// The sandbox reconciler: drives each sandbox from its observed state towards its desired
// state through the runtime driver, one step at a time, serialized per sandbox. It is kicked
// by API mutations and driver exit events, and a sweep every second handles deadlines, idle
// stops, expiry and retention. At start it adopts what the runtime still runs, removes what
// the store does not know, and marks execs of the previous process indeterminate.
import type { RuntimeDriver } from "../drivers/runtime/interface.js";
import { RuntimeError } from "../drivers/runtime/interface.js";
import type { Clock } from "../lib/clock.js";
import type { Logger } from "../lib/logger.js";
import type { IdentityService } from "../modules/identity/service.js";
import * as repo from "../modules/sandboxes/repo.js";
import { type SandboxService, STATE_DEADLINE_SECONDS } from "../modules/sandboxes/service.js";
import { TRANSITIONAL_STATES } from "../modules/sandboxes/view.js";
import type { Db } from "../store/db.js";

const SWEEP_INTERVAL_MS = 1000;
const PIDS_PER_SANDBOX_FLOOR = 64;

export interface ReconcilerOptions {
  pids: number;
  retentionSeconds: number;
  publicApiUrl: string;
}

export class SandboxReconciler {
  private readonly chains = new Map<string, Promise<void>>();
  private readonly again = new Set<string>();
  /** Gives up on the transitional step now running for a sandbox (its deadline passed). */
  private readonly stepExpiries = new Map<string, { state: string; expire: () => void }>();
  private sweepTimer: NodeJS.Timeout | null = null;
  private unsubscribe: (() => void) | null = null;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly driver: RuntimeDriver,
    private readonly sandboxes: SandboxService,
    private readonly identity: IdentityService,
    private readonly options: ReconcilerOptions,
  ) {}

  async start(): Promise<void> {
    const marked = await repo.markRunningExecsIndeterminate(
      this.db,
      this.clock.now(),
      this.sandboxes.execsInFlightIds(),
    );
    if (marked > 0) this.log.warn({ execs: marked }, "execs of a previous server process are indeterminate");
    const known = await repo.knownIds(this.db);
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
    this.unsubscribe = this.driver.onExit((id) => this.kick(id));
    this.sandboxes.setTrigger(this);
    for (const id of await repo.liveIds(this.db)) this.kick(id);
    this.sweepTimer = setInterval(() => void this.sweep(), SWEEP_INTERVAL_MS);
    this.sweepTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.unsubscribe?.();
    await Promise.allSettled([...this.chains.values()]);
  }

  /** Schedules a reconcile of one sandbox; calls during a running one coalesce into one more pass. */
  kick(id: string): void {
    if (this.stopped) return;
    if (this.chains.has(id)) {
      this.again.add(id);
      return;
    }
    const run = async () => {
      do {
        this.again.delete(id);
        await this.reconcile(id).catch((error: unknown) =>
          this.log.error({ err: (error as Error).message, sandbox_id: id }, "reconcile failed"),
        );
      } while (this.again.has(id) && !this.stopped);
      this.chains.delete(id);
    };
    this.chains.set(id, run());
  }

  /** Resolves when no reconcile is running or queued (tests and benchmarks). */
  async idle(): Promise<void> {
    while (this.chains.size > 0) await Promise.allSettled([...this.chains.values()]);
  }

  private async sweep(): Promise<void> {
    try {
      const now = this.clock.now();
      const { rows } = await this.db.query<{ id: string; state: string; overdue: boolean }>(
        `SELECT id, state, (state_deadline IS NOT NULL AND state_deadline < $1) AS overdue FROM sandboxes
          WHERE state NOT IN ('terminated', 'failed') AND NOT quarantined AND (
           (state_deadline IS NOT NULL AND state_deadline < $1)
           OR (expires_at IS NOT NULL AND expires_at < $1 AND desired_state <> 'deleted')
           OR (state = 'running' AND idle_deadline IS NOT NULL AND idle_deadline < $1))`,
        [now],
      );
      for (const row of rows) {
        const step = this.stepExpiries.get(row.id);
        if (row.overdue && step?.state === row.state) step.expire();
        this.kick(row.id);
      }
      await repo.purgeFinished(this.db, new Date(now.getTime() - this.options.retentionSeconds * 1000));
    } catch (error) {
      this.log.warn({ err: (error as Error).message }, "sandbox sweep failed");
    }
  }

  /**
   * Ends a sandbox as failed. When its host state cannot be removed (a cgroup still in use,
   * a busy mount), it is `attention` instead: it still holds host resources and an operator
   * may need to look. The cleanup is retried (see reconcile); once it succeeds the sandbox
   * ends `failed` (or `terminated` when deleted) with the same reason.
   */
  private async fail(row: repo.SandboxRow, code: string, message: string): Promise<void> {
    const cleanup = await this.driver.destroy(row.id).then(
      () => null,
      (error: unknown) => error as Error,
    );
    await this.identity.revokeSandboxKeys(row.id);
    await this.db.tx(async (q) => {
      const fresh = await repo.getSandbox(q, row.id, true);
      if (!fresh || fresh.state === "terminated") return;
      const change = { desired_state: fresh.desired_state === "deleted" ? "deleted" : "stopped" } as const;
      if (!cleanup) {
        await this.sandboxes.writeState(q, fresh, "failed", change, { code, message });
        return;
      }
      await this.sandboxes.writeState(q, fresh, "attention", change, {
        code,
        message: `${message}; removing it from the host failed and is retried every ${STATE_DEADLINE_SECONDS.attention} s: ${cleanup.message}`,
      });
    });
    if (cleanup) {
      this.log.error(
        { sandbox_id: row.id, code, err: cleanup.message },
        "sandbox needs attention: host cleanup failed",
      );
    }
  }

  /** Retries the host cleanup of a sandbox in `attention` once its retry time has come. */
  private async retryCleanup(row: repo.SandboxRow, now: Date): Promise<void> {
    if (row.state_deadline && row.state_deadline > now) return;
    try {
      await this.driver.destroy(row.id);
    } catch (error) {
      // Still stuck: the same state with the next retry time, and no new event.
      await this.set(row, "attention");
      this.log.warn({ sandbox_id: row.id, err: (error as Error).message }, "host cleanup still failing");
      return;
    }
    await this.identity.revokeSandboxKeys(row.id);
    await this.set(row, row.desired_state === "deleted" ? "terminated" : "failed");
  }

  /**
   * Writes the next observed state, unless the sandbox left the state this step started
   * from meanwhile (a delete set terminating, a deadline failed it): that write wins.
   */
  private async set(row: repo.SandboxRow, state: repo.SandboxRow["state"], change: Partial<repo.SandboxRow> = {}) {
    return this.db.tx(async (q) => {
      const fresh = await repo.getSandbox(q, row.id, true);
      if (!fresh) return row;
      if (fresh.state !== row.state) return fresh;
      return this.sandboxes.writeState(q, fresh, state, change);
    });
  }

  /** One step towards the desired state; kicks itself again while more steps remain. */
  private async reconcile(id: string): Promise<void> {
    let row = await repo.getSandbox(this.db, id);
    if (!row) {
      await this.driver.destroy(id);
      return;
    }
    if (row.quarantined || row.state === "terminated") return;
    const now = this.clock.now();
    if (row.state === "attention") {
      await this.retryCleanup(row, now);
      return;
    }

    if (row.desired_state === "deleted") {
      if (row.state !== "terminating") row = await this.set(row, "terminating");
      try {
        await this.driver.destroy(id);
      } catch (error) {
        // Retried on every sweep until the terminating deadline; then it ends failed, not stuck.
        if (!row.state_deadline || row.state_deadline >= this.clock.now()) throw error;
        await this.fail(row, "terminating_timeout", `the sandbox could not be removed: ${(error as Error).message}`);
        return;
      }
      await this.identity.revokeSandboxKeys(id);
      await this.set(row, "terminated");
      return;
    }
    if (row.state === "failed") return;
    if (row.state_deadline && row.state_deadline < now && TRANSITIONAL_STATES.includes(row.state)) {
      await this.fail(row, `${row.state}_timeout`, `the sandbox stayed ${row.state} past its deadline`);
      return;
    }
    if (row.expires_at && row.expires_at < now) {
      // Expiry deletes the sandbox (docs/api-decisions.md): its time is up.
      await this.db.tx(async (q) => {
        const marked = await repo.updateSandbox(q, id, { desired_state: "deleted", updated_at: now });
        await this.sandboxes.writeState(q, marked, "terminating");
      });
      this.kick(id);
      return;
    }

    // A transitional step runs against its state's deadline: a driver call that hangs (an
    // image pull that never ends) must not keep the sandbox in that state past it. The sweep
    // expires the step once the deadline has passed (see sweep).
    if (!TRANSITIONAL_STATES.includes(row.state) || !row.state_deadline) {
      if (await this.step(row, now, () => true)) this.kick(id);
      return;
    }
    let abandoned = false;
    const step = this.step(row, now, () => !abandoned);
    const expired = new Promise<"expired">((resolve) =>
      this.stepExpiries.set(id, { state: row.state, expire: () => resolve("expired") }),
    );
    const outcome = await Promise.race([step, expired]).finally(() => this.stepExpiries.delete(id));
    if (outcome === "expired") {
      // The step goes on in the background; it checks `live` before every side effect.
      abandoned = true;
      step.catch(() => undefined);
      await this.fail(row, `${row.state}_timeout`, `the sandbox stayed ${row.state} past its deadline`);
      return;
    }
    if (outcome) this.kick(id);
  }

  /** One step from the observed state; true when another step follows at once. */
  private async step(row: repo.SandboxRow, now: Date, live: () => boolean): Promise<boolean> {
    try {
      switch (row.state) {
        case "requested": {
          // A single host reserves nothing beyond the quota admitted at create: reserved is
          // recorded and left in the same transaction. Materializing is a state of its own,
          // so it runs against its own (longer) deadline.
          await this.db.tx(async (q) => {
            const fresh = await repo.getSandbox(q, row.id, true);
            if (!fresh || fresh.state !== row.state) return;
            await this.sandboxes.writeState(q, await this.sandboxes.writeState(q, fresh, "reserved"), "materializing");
          });
          return true;
        }
        case "reserved":
          await this.set(row, "materializing");
          return true;
        case "materializing":
          await this.materialize(row, live);
          return true;
        case "ready":
          if (row.desired_state === "running") await this.startProcess(row, live);
          else await this.set(row, "stopped");
          return true;
        case "running":
          await this.whileRunning(row, now);
          return false;
        case "stopped":
          if (row.desired_state === "running") await this.startProcess(row, live);
          return false;
        default:
          return false;
      }
    } catch (error) {
      if (!live()) return false;
      const code = error instanceof RuntimeError ? error.code : "runtime_error";
      this.log.warn({ sandbox_id: row.id, code, err: (error as Error).message }, "sandbox step failed");
      await this.fail(row, code, (error as Error).message);
      return false;
    }
  }

  private async materialize(row: repo.SandboxRow, live: () => boolean): Promise<void> {
    const [image, observed] = await Promise.all([this.driver.prepareImage(row.image), this.driver.observe(row.id)]);
    if (!live()) return;
    if (observed.status === "absent") {
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
      // No await between the check above and this call: a failure that starts later queues
      // its destroy() behind this create() on the driver's per-sandbox lock.
      await this.driver.create({
        id: row.id,
        image,
        ...(row.command ? { command: row.command } : {}),
        env: {
          WARREN_SANDBOX_ID: row.id,
          WARREN_RUN_ID: row.run_id,
          WARREN_API_URL: this.options.publicApiUrl,
          WARREN_SANDBOX_TOKEN: key.api_key,
        },
        resources: {
          memoryMiB: row.resources.memory_mb,
          cpuMillis: row.resources.cpu_millis,
          pids: Math.max(PIDS_PER_SANDBOX_FLOOR, this.options.pids),
        },
        storageClass: row.storage_class,
        ...(row.workspace_capacity_gib ? { workspaceCapacityGiB: row.workspace_capacity_gib } : {}),
        network: row.network_access === "none" ? "none" : "public",
      });
      if (!live()) return;
      await this.set(row, "ready", { image_digest: image.digest, credential_key_id: key.key_id });
      return;
    }
    await this.set(row, "ready", { image_digest: image.digest });
  }

  private async startProcess(row: repo.SandboxRow, live: () => boolean): Promise<void> {
    if (!live()) return;
    await this.driver.start(row.id);
    if (!live()) return;
    const now = this.clock.now();
    await this.set(row, "running", {
      idle_deadline: row.idle_timeout_seconds ? new Date(now.getTime() + row.idle_timeout_seconds * 1000) : null,
    });
  }

  private async whileRunning(row: repo.SandboxRow, now: Date): Promise<void> {
    const observed = await this.driver.observe(row.id);
    if (observed.status === "absent") {
      await this.fail(row, "runtime_lost", "the runtime no longer has this sandbox");
      return;
    }
    if (observed.status !== "running") {
      // The first process ended: the sandbox stops with it and stays stopped.
      await this.db.tx(async (q) => {
        const fresh = await repo.getSandbox(q, row.id, true);
        if (!fresh) return;
        await this.sandboxes.writeState(q, fresh, "stopped", { desired_state: "stopped", idle_deadline: null });
      });
      this.log.info(
        { sandbox_id: row.id, exit_code: observed.exitCode, oom_killed: observed.oomKilled },
        "first process ended",
      );
      return;
    }
    const idleDue = row.idle_deadline && row.idle_deadline < now;
    if (row.desired_state === "stopped" || idleDue) {
      if (idleDue && this.sandboxes.execsInFlightIds().length > 0 && (await this.hasExecInFlight(row.id))) return;
      await this.driver.stop(row.id);
      // An idle stop changes what is desired; a requested stop leaves a racing wake in place.
      await this.set(
        row,
        "stopped",
        idleDue && row.desired_state === "running"
          ? { desired_state: "stopped", idle_deadline: null }
          : { idle_deadline: null },
      );
      this.kick(row.id);
    }
  }

  private async hasExecInFlight(sandboxId: string): Promise<boolean> {
    const { rows } = await this.db.query(
      "SELECT 1 FROM sandbox_execs WHERE sandbox_id = $1 AND outcome = 'running' LIMIT 1",
      [sandboxId],
    );
    return rows.length > 0;
  }
}
