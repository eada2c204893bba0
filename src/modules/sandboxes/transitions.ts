// The one writer of a sandbox's observed state: a checked write (the sandbox must still be in
// the state the caller saw, so a racing delete or deadline wins), its telemetry event and
// the change notice long polls wait on.
import { EventEmitter } from "node:events";
import type { Clock } from "../../lib/clock.js";
import { newUlid } from "../../lib/ids.js";
import type { Db, Queryable } from "../../store/db.js";
import * as events from "../events/service.js";
import type { HostOwner } from "../hosts/membership.js";
import * as runs from "../runs/service.js";
import { isFinished, type StoredState, stateDeadline } from "./lifecycle.js";
import * as repo from "./repo.js";

export interface TransitionOptions {
  /** Write only when the sandbox is in one of these states; otherwise nothing changes. Default: any. */
  from?: readonly StoredState[];
  /** Other columns written with the state. */
  change?: Partial<repo.SandboxRow>;
  reason?: { code: string; message: string };
  /** Inside the caller's transaction (which must hold the row); default: one of its own. */
  q?: Queryable;
  /**
   * A host-scoped write (the owner's reconciler): applied only while the sandbox is still
   * this host's at this epoch, so a fenced process or a former owner changes nothing.
   */
  owner?: HostOwner;
}

export interface TransitionResult {
  /** The row after the call (unchanged when not applied), or null when the sandbox is gone. */
  row: repo.SandboxRow | null;
  applied: boolean;
}

export class SandboxTransitions {
  /** Emits `<sandbox id>` whenever this process changes a sandbox. */
  readonly changes = new EventEmitter();

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {
    this.changes.setMaxListeners(0);
  }

  /** Moves a sandbox to `to` (a checked write), with its event; notifies waiters once written. */
  async transition(id: string, to: StoredState, options: TransitionOptions = {}): Promise<TransitionResult> {
    const result = options.q
      ? await this.write(options.q, id, to, options)
      : await this.db.tx((q) => this.write(q, id, to, options));
    if (result.applied) this.notify(id);
    return result;
  }

  /** Several transitions in one transaction (states with nothing to do in between). */
  async chain(
    id: string,
    from: StoredState,
    path: readonly StoredState[],
    owner?: HostOwner,
  ): Promise<TransitionResult> {
    const result = await this.db.tx(async (q) => {
      let last: TransitionResult = { row: null, applied: false };
      let expected = from;
      for (const to of path) {
        last = await this.write(q, id, to, { from: [expected], ...(owner ? { owner } : {}) });
        if (!last.applied) return last;
        expected = to;
      }
      return last;
    });
    if (result.applied) this.notify(id);
    return result;
  }

  /** Tells long polls the sandbox changed (a write that was not a transition). */
  notify(id: string): void {
    this.changes.emit(id);
  }

  private async write(
    q: Queryable,
    id: string,
    to: StoredState,
    options: TransitionOptions,
  ): Promise<TransitionResult> {
    const fresh = await repo.getSandbox(q, id, true);
    if (!fresh) return { row: null, applied: false };
    if (options.from && !options.from.includes(fresh.state)) return { row: fresh, applied: false };
    if (options.owner && !ownedBy(fresh, options.owner)) return { row: fresh, applied: false };
    const now = this.clock.now();
    const reason = options.reason;
    const row = await repo.updateSandbox(q, id, {
      ...options.change,
      state: to,
      state_deadline: stateDeadline(to, now),
      ...(reason ? { state_reason_code: reason.code, state_reason_message: reason.message } : {}),
      ...(isFinished(to) ? { finished_at: now } : {}),
      updated_at: now,
    });
    if (isFinished(to) && !isFinished(fresh.state)) await completeSandboxRun(q, this.clock, fresh, to, now);
    if (fresh.state !== to) {
      await appendSandboxEvent(q, this.clock, fresh, "sandbox.state_changed", {
        from: fresh.state,
        to,
        ...(reason ? { reason: reason.code } : {}),
      });
    }
    return { row, applied: true };
  }
}

/** Whether the sandbox is the host's at its epoch (the condition of every host-scoped write). */
export function ownedBy(row: Pick<repo.SandboxRow, "host_id" | "host_epoch">, owner: HostOwner): boolean {
  return row.host_id === owner.hostId && row.host_epoch === owner.epoch;
}

/**
 * Completes the run a sandbox's create started once the sandbox is finished (docs/api-decisions.md):
 * `succeeded` when it was deleted (terminated), `failed` when it failed. A run already completed
 * (by CompleteRun) keeps its status.
 */
async function completeSandboxRun(
  q: Queryable,
  clock: Clock,
  row: repo.SandboxRow,
  to: StoredState,
  at: Date,
): Promise<void> {
  const status = to === "failed" ? "failed" : "succeeded";
  await runs.completeRunIfRunning(q, clock, row.run_id, status, at);
}

/** A telemetry event of the sandbox, in its ambient run. */
export async function appendSandboxEvent(
  q: Queryable,
  clock: Clock,
  row: Pick<repo.SandboxRow, "id" | "org_id" | "project_id" | "run_id" | "lineage_path">,
  name: string,
  payload: Record<string, unknown>,
): Promise<void> {
  await events.appendEvent(q, sandboxEventOf(clock, row, name, payload));
}

/** The event appendSandboxEvent writes, for a repo write that carries it in its own statement. */
export function sandboxEventOf(
  clock: Clock,
  row: Pick<repo.SandboxRow, "id" | "org_id" | "project_id" | "run_id" | "lineage_path">,
  name: string,
  payload: Record<string, unknown>,
): events.NewEvent {
  return {
    orgId: row.org_id,
    eventId: newUlid(),
    projectId: row.project_id,
    runId: row.run_id,
    lineagePath: row.lineage_path,
    tsWallNs: clock.nowNs(),
    name,
    principal: "",
    payload: { sandbox_id: row.id, ...payload },
  };
}
