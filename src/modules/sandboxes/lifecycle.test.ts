// The lifecycle decisions, exhaustively over every stored state, desired state, quarantine,
// deadline, expiry, idle deadline, retention and observation: no host, no store.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { SandboxObservation } from "../../drivers/runtime/interface.js";
import {
  decide,
  FINISHED_STATES,
  isDue,
  type LifecycleAction,
  type LifecycleRecord,
  type Observed,
  STATES,
  type StoredState,
  stateDeadline,
  TRANSITIONAL_STATES,
} from "./lifecycle.js";
import type { DesiredState } from "./repo.js";

const NOW = new Date("2026-11-23T12:00:00.000Z");
const RETENTION_SECONDS = 3600;
const options = { retentionSeconds: RETENTION_SECONDS };
const at = (offsetSeconds: number) => new Date(NOW.getTime() + offsetSeconds * 1000);

type When = "none" | "past" | "future";
const WHENS: When[] = ["none", "past", "future"];
const when = (w: When): Date | null => (w === "none" ? null : w === "past" ? at(-1) : at(1));

const STORED = Object.keys(STATES) as StoredState[];
const DESIRED: DesiredState[] = ["running", "stopped", "deleted"];
const RUNTIMES: (SandboxObservation | undefined)[] = [
  undefined,
  { status: "running", pid: 42 },
  { status: "stopped", exitCode: 3 },
  { status: "stopped", exitCode: 137, oomKilled: true },
  { status: "absent" },
];

interface Case {
  record: LifecycleRecord;
  observed: Observed;
  label: string;
}

function* cases(): Generator<Case> {
  for (const state of STORED)
    for (const desired of DESIRED)
      for (const quarantined of [false, true])
        for (const deadline of WHENS)
          for (const expiry of WHENS)
            for (const idle of WHENS)
              for (const finished of ["none", "retained", "past retention"] as const)
                for (const runtime of RUNTIMES)
                  for (const execInFlight of [undefined, false, true]) {
                    const record: LifecycleRecord = {
                      state,
                      desired_state: desired,
                      quarantined,
                      state_deadline: when(deadline),
                      expires_at: when(expiry),
                      idle_deadline: when(idle),
                      finished_at:
                        finished === "none" ? null : at(finished === "retained" ? -10 : -RETENTION_SECONDS - 1),
                    };
                    const observed: Observed = {
                      ...(runtime ? { runtime } : {}),
                      ...(execInFlight !== undefined ? { execInFlight } : {}),
                    };
                    const label = JSON.stringify({
                      state,
                      desired,
                      quarantined,
                      deadline,
                      expiry,
                      idle,
                      finished,
                      runtime,
                      execInFlight,
                    });
                    yield { record, observed, label };
                  }
}

const pastNow = (d: Date | null) => d !== null && d < NOW;
const none: LifecycleAction = { kind: "none" };

/** Each stable step without host observation: [state, desired] -> action. */
const STEPS: Partial<Record<StoredState, Partial<Record<DesiredState, LifecycleAction>>>> = {
  requested: {
    running: { kind: "advance", to: ["reserved", "materializing"] },
    stopped: { kind: "advance", to: ["reserved", "materializing"] },
  },
  reserved: {
    running: { kind: "advance", to: ["materializing"] },
    stopped: { kind: "advance", to: ["materializing"] },
  },
  materializing: { running: { kind: "materialize" }, stopped: { kind: "materialize" } },
  ready: { running: { kind: "start" }, stopped: { kind: "advance", to: ["stopped"] } },
  stopped: { running: { kind: "start" }, stopped: none },
};

/** A running sandbox, by what was seen: runtime status, desired, idle due, exec in flight. */
function runningRule(record: LifecycleRecord, observed: Observed): LifecycleAction {
  const runtime = observed.runtime;
  const idleDue = pastNow(record.idle_deadline);
  const wantsRunning = record.desired_state === "running";
  if (runtime === undefined) return { kind: "observe", runtime: true, execs: idleDue && wantsRunning };
  const byStatus: Record<string, LifecycleAction | null> = {
    absent: { kind: "fail", code: "runtime_lost", message: "the runtime no longer has this sandbox" },
    stopped: {
      kind: "exited",
      ...(runtime.exitCode !== undefined ? { exitCode: runtime.exitCode } : {}),
      ...(runtime.oomKilled !== undefined ? { oomKilled: runtime.oomKilled } : {}),
    },
    running: null,
  };
  const byRuntime = byStatus[runtime.status];
  if (byRuntime) return byRuntime;
  if (!wantsRunning) return { kind: "stop", idle: false };
  if (!idleDue) return none;
  const exec = observed.execInFlight;
  return exec === undefined
    ? { kind: "observe", runtime: true, execs: true }
    : exec
      ? none
      : { kind: "stop", idle: true };
}

/** The lifecycle's rules as an ordered table: the first that matches gives the action. */
const RULES: [string, (r: LifecycleRecord) => boolean, (r: LifecycleRecord, o: Observed) => LifecycleAction][] = [
  [
    "finished: purge after retention",
    (r) => STATES[r.state].finished,
    (r) =>
      r.finished_at !== null && r.finished_at.getTime() + RETENTION_SECONDS * 1000 < NOW.getTime()
        ? { kind: "purge" }
        : none,
  ],
  ["quarantined: left alone", (r) => r.quarantined, () => none],
  [
    "attention: retry at its time",
    (r) => r.state === "attention",
    (r) => (pastNow(r.state_deadline) ? { kind: "retry_cleanup" } : none),
  ],
  [
    "deleted or terminating: terminate",
    (r) => r.desired_state === "deleted" || r.state === "terminating",
    () => ({ kind: "terminate" }),
  ],
  [
    "transitional past its deadline: fail",
    (r) => TRANSITIONAL_STATES.includes(r.state) && pastNow(r.state_deadline),
    (r) => ({ kind: "fail", code: `${r.state}_timeout`, message: `the sandbox stayed ${r.state} past its deadline` }),
  ],
  ["expired: expire", (r) => pastNow(r.expires_at), () => ({ kind: "expire" })],
  ["running: by observation", (r) => r.state === "running", runningRule],
  ["each state's step", () => true, (r) => STEPS[r.state]?.[r.desired_state] ?? assert.fail(`no step for ${r.state}`)],
];

function expected(record: LifecycleRecord, observed: Observed): LifecycleAction {
  const rule = RULES.find(([, applies]) => applies(record));
  assert.ok(rule);
  return rule[2](record, observed);
}

describe("sandbox lifecycle decide", () => {
  it("follows the lifecycle's rules in every combination", () => {
    let count = 0;
    for (const { record, observed, label } of cases()) {
      assert.deepEqual(decide(record, observed, NOW, options), expected(record, observed), label);
      count++;
    }
    // 10 states x 3 desired x 2 x 3^3 x 3 retention x 5 runtimes x 3 exec views.
    assert.equal(count, STORED.length * 3 * 2 * 27 * 3 * 5 * 3);
  });

  it("asks to observe only for running sandboxes, and decides once the observation is there", () => {
    for (const { record, label } of cases()) {
      const action = decide(record, {}, NOW, options);
      if (action.kind !== "observe") continue;
      assert.equal(record.state, "running", label);
      const full = decide(record, { runtime: { status: "running" }, execInFlight: false }, NOW, options);
      assert.notEqual(full.kind, "observe", label);
    }
  });

  it("never touches a quarantined sandbox before it is finished", () => {
    for (const { record, observed, label } of cases()) {
      if (!record.quarantined || STATES[record.state].finished) continue;
      assert.deepEqual(decide(record, observed, NOW, options), { kind: "none" }, label);
    }
  });

  it("leaves finished sandboxes alone until their retention ends, then purges them", () => {
    for (const state of FINISHED_STATES) {
      const base = {
        state,
        desired_state: "deleted" as const,
        quarantined: false,
        state_deadline: null,
        expires_at: at(-100),
        idle_deadline: null,
      };
      assert.equal(decide({ ...base, finished_at: at(-RETENTION_SECONDS + 1) }, {}, NOW, options).kind, "none");
      assert.equal(decide({ ...base, finished_at: at(-RETENTION_SECONDS - 1) }, {}, NOW, options).kind, "purge");
      assert.equal(decide({ ...base, finished_at: null }, {}, NOW, options).kind, "none");
    }
  });

  it("destroys what the store does not know", () => {
    assert.deepEqual(decide(null, {}, NOW, options), { kind: "destroy_host" });
  });

  it("gives every transitional state and attention a deadline, and no other state one", () => {
    for (const state of STORED) {
      const deadline = stateDeadline(state, NOW);
      const timed = TRANSITIONAL_STATES.includes(state) || state === "attention";
      assert.equal(deadline !== null, timed, state);
      if (deadline) assert.ok(deadline > NOW, state);
    }
    assert.ok(!TRANSITIONAL_STATES.some((state) => FINISHED_STATES.includes(state)));
  });
});

describe("sandbox lifecycle isDue (what the sweep kicks)", () => {
  it("is due exactly when time made an action due", () => {
    for (const { record, label } of cases()) {
      const past = (d: Date | null) => d !== null && d < NOW;
      const want = STATES[record.state].finished
        ? decide(record, {}, NOW, options).kind === "purge"
        : !record.quarantined &&
          (past(record.state_deadline) ||
            (past(record.expires_at) &&
              record.desired_state !== "deleted" &&
              record.state !== "terminating" &&
              record.state !== "attention") ||
            (record.state === "running" && past(record.idle_deadline)));
      assert.equal(isDue(record, NOW, options), want, label);
    }
  });

  it("a due sandbox always has something to do once observed", () => {
    for (const { record, label } of cases()) {
      // Only records the service writes: a state has a deadline exactly when its table row gives one.
      if ((record.state_deadline !== null) !== (STATES[record.state].deadlineSeconds !== null)) continue;
      if (!isDue(record, NOW, options)) continue;
      const action = decide(record, { runtime: { status: "running" }, execInFlight: false }, NOW, options);
      // An attention retry, a failure, an expiry, an idle stop, a purge, or the pending step.
      assert.notEqual(action.kind, "observe", label);
      if (record.state !== "running" && action.kind === "none") assert.fail(`due but nothing to do: ${label}`);
    }
  });
});

// The policy the reconciler once held in its apply code: what its host work found decides the end.
describe("sandbox lifecycle decide after host work", () => {
  const record = (state: StoredState, desired: DesiredState, deadline: Date | null = null): LifecycleRecord => ({
    state,
    desired_state: desired,
    quarantined: false,
    state_deadline: deadline,
    expires_at: null,
    idle_deadline: null,
    finished_at: null,
  });
  const reason = { code: "start_failed", message: "the first process could not be started" };

  it("a failed wake keeps a stopped sandbox stopped, with the reason", () => {
    for (const desired of DESIRED) {
      assert.deepEqual(decide(record("stopped", desired), { stepFailed: reason }, NOW, options), {
        kind: "wake_failed",
        ...reason,
      });
    }
  });

  it("any other failed step fails the sandbox, with the reason", () => {
    for (const state of ["materializing", "ready", "running"] as const) {
      assert.deepEqual(decide(record(state, "running", at(10)), { stepFailed: reason }, NOW, options), {
        kind: "fail",
        ...reason,
      });
    }
  });

  it("a failure whose host cleanup worked ends failed, keeping a delete", () => {
    const failing = { ...reason, cleanupError: null };
    for (const [desired, kept] of [
      ["running", "stopped"],
      ["stopped", "stopped"],
      ["deleted", "deleted"],
    ] as const) {
      assert.deepEqual(decide(record("materializing", desired), { failing }, NOW, options), {
        kind: "settle",
        to: "failed",
        desired: kept,
        reason,
      });
    }
  });

  it("a failure whose host cleanup failed needs attention, saying so and when it is retried", () => {
    const failing = { ...reason, cleanupError: "cgroup busy" };
    for (const desired of DESIRED) {
      assert.deepEqual(decide(record("running", desired), { failing }, NOW, options), {
        kind: "settle",
        to: "attention",
        desired: desired === "deleted" ? "deleted" : "stopped",
        reason: {
          code: reason.code,
          message: `${reason.message}; removing it from the host failed and is retried every ${STATES.attention.deadlineSeconds} s: cgroup busy`,
        },
      });
    }
  });

  it("the attention retry ends the sandbox once the cleanup works, and waits for the next retry while it fails", () => {
    assert.deepEqual(decide(record("attention", "deleted"), { cleanup: { error: null } }, NOW, options), {
      kind: "settle",
      to: "terminated",
    });
    for (const desired of ["running", "stopped"] as const) {
      assert.deepEqual(decide(record("attention", desired), { cleanup: { error: null } }, NOW, options), {
        kind: "settle",
        to: "failed",
      });
    }
    for (const desired of DESIRED) {
      assert.deepEqual(decide(record("attention", desired), { cleanup: { error: "busy" } }, NOW, options), {
        kind: "settle",
        to: "attention",
      });
    }
  });

  it("a terminating sandbox ends terminated, retries a failed cleanup until its deadline, then fails", () => {
    const terminating = (deadline: Date | null) => record("terminating", "deleted", deadline);
    assert.deepEqual(decide(terminating(at(10)), { cleanup: { error: null } }, NOW, options), {
      kind: "settle",
      to: "terminated",
    });
    for (const deadline of [null, at(10), NOW]) {
      assert.deepEqual(decide(terminating(deadline), { cleanup: { error: "busy" } }, NOW, options), {
        kind: "cleanup_later",
      });
    }
    assert.deepEqual(decide(terminating(at(-1)), { cleanup: { error: "busy" } }, NOW, options), {
      kind: "fail",
      code: "terminating_timeout",
      message: "the sandbox could not be removed: busy",
    });
  });
});
