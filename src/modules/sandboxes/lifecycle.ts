// The sandbox lifecycle as data and one pure function. Every stored state has one row in
// STATES (its deadline and what kind of state it is); `decide` turns a record, what was
// observed of it and the time into the one action the reconciler applies next. A new state
// or step touches this table and this function, and their tests need no host and no store.
import type { SandboxObservation } from "../../drivers/runtime/interface.js";
import type { DesiredState } from "./repo.js";
import type { SandboxState } from "./schemas.js";

/** `quarantined` is shown, never stored: it is a flag over the stored state. */
export type StoredState = Exclude<SandboxState, "quarantined">;

interface StateTraits {
  /**
   * How long the state may last before the sandbox fails (transitional states), or, for
   * `attention`, when the failed host cleanup is tried again. Null: no deadline.
   */
  deadlineSeconds: number | null;
  /** A state the sandbox leaves on its own; it fails when its deadline passes. */
  transitional: boolean;
  /** The end: nothing more happens but the purge after the retention period. */
  finished: boolean;
}

export const STATES: Record<StoredState, StateTraits> = {
  requested: { deadlineSeconds: 30, transitional: true, finished: false },
  reserved: { deadlineSeconds: 30, transitional: true, finished: false },
  materializing: { deadlineSeconds: 600, transitional: true, finished: false },
  ready: { deadlineSeconds: 60, transitional: true, finished: false },
  running: { deadlineSeconds: null, transitional: false, finished: false },
  stopped: { deadlineSeconds: null, transitional: false, finished: false },
  terminating: { deadlineSeconds: 120, transitional: true, finished: false },
  attention: { deadlineSeconds: 10, transitional: false, finished: false },
  failed: { deadlineSeconds: null, transitional: false, finished: true },
  terminated: { deadlineSeconds: null, transitional: false, finished: true },
};

const storedStates = Object.keys(STATES) as StoredState[];
export const TRANSITIONAL_STATES: StoredState[] = storedStates.filter((state) => STATES[state].transitional);
export const FINISHED_STATES: StoredState[] = storedStates.filter((state) => STATES[state].finished);
/** States in which the sandbox exists on the host and is not changing: host changes (grow, network) apply. */
export const STABLE_STATES: StoredState[] = ["ready", "running", "stopped"];

/** States whose sandbox is already on its way out (or waits for its cleanup): expiry adds nothing. */
const EXPIRY_EXEMPT: StoredState[] = ["terminating", "attention"];

/**
 * Whether the host's admission counts a sandbox's memory and CPU (host-admission.ts;
 * repo.committedCompute is this in SQL): it is to run (a create or a wake not yet on the
 * host included) or it still runs (a stop or a delete under way).
 */
export function holdsCompute(record: Pick<LifecycleRecord, "state" | "desired_state">): boolean {
  if (record.state === "running") return true;
  return record.desired_state === "running" && !STATES[record.state].finished && record.state !== "terminating";
}

/** Whether the host's admission counts a sandbox's storage (repo.storageReservations): until it is finished. */
export function holdsStorage(state: StoredState): boolean {
  return !STATES[state].finished;
}

export function isFinished(state: SandboxState): boolean {
  return state !== "quarantined" && STATES[state].finished;
}

/** The states a sandbox on its way out (terminating, or deleted) may still show. */
const ON_THE_WAY_OUT: SandboxState[] = ["terminating", "attention", "terminated", "failed"];

/**
 * Whether a sandbox now in `current` (shown state) with `desired` may still come to
 * `awaited`: a wait_state long-poll ends at once when it cannot (docs/api-decisions.md
 * "Waiting for a state"). The finished states lead nowhere; a sandbox being deleted or in
 * `attention` only toward its end; a quarantine may be released, so it waits on.
 */
export function canStillReach(current: SandboxState, desired: DesiredState, awaited: SandboxState): boolean {
  if (current === awaited) return true;
  if (current === "quarantined") return true;
  if (STATES[current].finished) return false;
  if (current === "terminating" || current === "attention" || desired === "deleted") {
    if (awaited === "terminating") return current !== "attention";
    return ON_THE_WAY_OUT.includes(awaited);
  }
  return true;
}

/** When a sandbox entering `state` at `now` must have left it (or be looked at again), or null. */
export function stateDeadline(state: StoredState, now: Date): Date | null {
  const seconds = STATES[state].deadlineSeconds;
  return seconds === null ? null : new Date(now.getTime() + seconds * 1000);
}

/** The fields of a sandbox record the lifecycle reads. */
export interface LifecycleRecord {
  state: StoredState;
  desired_state: DesiredState;
  quarantined: boolean;
  state_deadline: Date | null;
  expires_at: Date | null;
  idle_deadline: Date | null;
  finished_at: Date | null;
}

/** What the reconciler looked at before deciding; each part only when `observations` asked for it. */
export interface Observed {
  /** The runtime's view of the sandbox. */
  runtime?: SandboxObservation;
  /** Whether an exec is running in the sandbox (an idle stop waits for it). */
  execInFlight?: boolean;
  /** The host step just applied (materialize, start, stop) failed, with the reason a tenant may read. */
  stepFailed?: { code: string; message: string };
  /**
   * The sandbox is failing with this reason and its host state was just removed (destroy):
   * `cleanupError` null when that worked, else what went wrong (no host paths).
   */
  failing?: { code: string; message: string; cleanupError: string | null };
  /** The host cleanup of a terminating sandbox, or the retry of one in `attention`, just ran: `error` null when it worked. */
  cleanup?: { error: string | null };
}

export interface DecideOptions {
  /** How long finished sandboxes stay visible before they are purged. */
  retentionSeconds: number;
}

export type LifecycleAction =
  | { kind: "none" }
  /** Look first (the runtime, running execs), then decide again. */
  | { kind: "observe"; runtime: boolean; execs: boolean }
  /** The store does not know the sandbox: remove whatever the host still holds of it. */
  | { kind: "destroy_host" }
  /** Past its retention: the finished record goes. */
  | { kind: "purge" }
  /** Try the host cleanup of a sandbox in `attention` again. */
  | { kind: "retry_cleanup" }
  /** Deleted: through `terminating`, remove it from the host, end `terminated`. */
  | { kind: "terminate" }
  /** End `failed` (or `attention` when the host cleanup fails) with a reason. */
  | { kind: "fail"; code: string; message: string }
  /** Its time to live is over: it is deleted. */
  | { kind: "expire" }
  /** Record state changes that need no host work, in order, in one transaction. */
  | { kind: "advance"; to: StoredState[] }
  /** Create it on the host from its image (or snapshot); a transitional step. */
  | { kind: "materialize" }
  /** Start its first process; a transitional step when it starts from `ready`. */
  | { kind: "start" }
  /** Stop it: asked for (`idle` false) or idle past its deadline (`idle` true). */
  | { kind: "stop"; idle: boolean }
  /** Its first process ended on its own: it stays stopped. */
  | { kind: "exited"; exitCode?: number; oomKilled?: boolean }
  // The actions below answer host work the reconciler has just done (Observed's stepFailed,
  // failing, cleanup); the first decision of a pass never returns them.
  /** A wake failed: the sandbox stays stopped with its files and shows why; a later wake tries again. */
  | { kind: "wake_failed"; code: string; message: string }
  /** Record the end of a failure or a cleanup: `to` (with `desired` and `reason` when given). */
  | { kind: "settle"; to: StoredState; desired?: DesiredState; reason?: { code: string; message: string } }
  /** The host cleanup of a terminating sandbox failed before its deadline: the sweep tries again. */
  | { kind: "cleanup_later" };

const NONE: LifecycleAction = { kind: "none" };

function past(deadline: Date | null, now: Date): boolean {
  return deadline !== null && deadline < now;
}

/**
 * Whether time alone has made something due (a deadline, the expiry, the idle deadline, the
 * end of retention): what the sweep looks for. Everything else is kicked by the write or
 * the runtime event that causes it. `repo.dueIds` is this predicate in SQL.
 */
export function isDue(record: LifecycleRecord, now: Date, options: DecideOptions): boolean {
  if (STATES[record.state].finished) return decide(record, {}, now, options).kind === "purge";
  if (record.quarantined) return false;
  return (
    past(record.state_deadline, now) ||
    (past(record.expires_at, now) && record.desired_state !== "deleted" && !EXPIRY_EXEMPT.includes(record.state)) ||
    (record.state === "running" && past(record.idle_deadline, now))
  );
}

/**
 * The one next action for a sandbox. `record` null: the store does not know it. Order
 * matters and is the lifecycle's: retention, quarantine, the attention retry, deletion,
 * deadlines, expiry, then each state's own step.
 */
export function decide(
  record: LifecycleRecord | null,
  observed: Observed,
  now: Date,
  options: DecideOptions,
): LifecycleAction {
  if (!record) return { kind: "destroy_host" };
  if (observed.failing) return settleFailure(record, observed.failing);
  if (observed.stepFailed) return afterStepFailure(record, observed.stepFailed);
  if (observed.cleanup) return afterCleanup(record, observed.cleanup, now);
  const traits = STATES[record.state];
  if (traits.finished) {
    const retainedUntil = record.finished_at && record.finished_at.getTime() + options.retentionSeconds * 1000;
    return retainedUntil !== null && retainedUntil < now.getTime() ? { kind: "purge" } : NONE;
  }
  if (record.quarantined) return NONE;
  if (record.state === "attention") return past(record.state_deadline, now) ? { kind: "retry_cleanup" } : NONE;
  if (record.desired_state === "deleted" || record.state === "terminating") return { kind: "terminate" };
  if (traits.transitional && past(record.state_deadline, now)) {
    return {
      kind: "fail",
      code: `${record.state}_timeout`,
      message: `the sandbox stayed ${record.state} past its deadline`,
    };
  }
  if (past(record.expires_at, now)) return { kind: "expire" };
  switch (record.state) {
    case "requested":
      // A single host reserves nothing beyond the quota admitted at create: reserved is
      // recorded and left at once; materializing runs against its own, longer deadline.
      return { kind: "advance", to: ["reserved", "materializing"] };
    case "reserved":
      return { kind: "advance", to: ["materializing"] };
    case "materializing":
      return { kind: "materialize" };
    case "ready":
      return record.desired_state === "running" ? { kind: "start" } : { kind: "advance", to: ["stopped"] };
    case "stopped":
      return record.desired_state === "running" ? { kind: "start" } : NONE;
    case "running":
      return decideRunning(record, observed, now);
    default:
      return NONE;
  }
}

function decideRunning(record: LifecycleRecord, observed: Observed, now: Date): LifecycleAction {
  const idleDue = past(record.idle_deadline, now);
  const runtime = observed.runtime;
  if (!runtime) return { kind: "observe", runtime: true, execs: idleDue && record.desired_state !== "stopped" };
  if (runtime.status === "absent") {
    return { kind: "fail", code: "runtime_lost", message: "the runtime no longer has this sandbox" };
  }
  if (runtime.status !== "running") {
    return {
      kind: "exited",
      ...(runtime.exitCode !== undefined ? { exitCode: runtime.exitCode } : {}),
      ...(runtime.oomKilled !== undefined ? { oomKilled: runtime.oomKilled } : {}),
    };
  }
  if (record.desired_state === "stopped") return { kind: "stop", idle: false };
  if (!idleDue) return NONE;
  if (observed.execInFlight === undefined) return { kind: "observe", runtime: true, execs: true };
  // A command still running is activity the idle deadline has not seen yet.
  return observed.execInFlight ? NONE : { kind: "stop", idle: true };
}

/**
 * A failing sandbox ends `failed`; when its host state could not be removed (a cgroup still
 * in use, a busy mount) it is `attention` instead: it still holds host resources and an
 * operator may need to look, and the cleanup is retried. A delete that came meanwhile is kept.
 */
function settleFailure(record: LifecycleRecord, failing: NonNullable<Observed["failing"]>): LifecycleAction {
  const desired: DesiredState = record.desired_state === "deleted" ? "deleted" : "stopped";
  const { code, message, cleanupError } = failing;
  if (cleanupError === null) return { kind: "settle", to: "failed", desired, reason: { code, message } };
  const retrySeconds = STATES.attention.deadlineSeconds;
  return {
    kind: "settle",
    to: "attention",
    desired,
    reason: {
      code,
      message: `${message}; removing it from the host failed and is retried every ${retrySeconds} s: ${cleanupError}`,
    },
  };
}

/**
 * A failed step fails the sandbox, except a wake: a stopped sandbox's root layer and
 * workspace are on the host, and failing it would destroy them (a sandbox of the old layout
 * the host cannot back yet, a transient host failure). It stays stopped and shows why.
 */
function afterStepFailure(record: LifecycleRecord, failure: { code: string; message: string }): LifecycleAction {
  if (record.state === "stopped") return { kind: "wake_failed", ...failure };
  return { kind: "fail", ...failure };
}

/**
 * After the host cleanup: a sandbox in `attention` ends (terminated when deleted, else failed)
 * or stays for the next retry; a terminating one ends terminated, or on a failure is tried
 * again until its deadline, then fails (and so ends in `attention` if the cleanup still fails).
 */
function afterCleanup(record: LifecycleRecord, cleanup: { error: string | null }, now: Date): LifecycleAction {
  if (record.state === "attention") {
    if (cleanup.error !== null) return { kind: "settle", to: "attention" };
    return { kind: "settle", to: record.desired_state === "deleted" ? "terminated" : "failed" };
  }
  if (cleanup.error === null) return { kind: "settle", to: "terminated" };
  if (!record.state_deadline || record.state_deadline >= now) return { kind: "cleanup_later" };
  return {
    kind: "fail",
    code: "terminating_timeout",
    message: `the sandbox could not be removed: ${cleanup.error}`,
  };
}
