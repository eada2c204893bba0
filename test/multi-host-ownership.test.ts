// What a second host does to the first one's sandboxes (issue 25's "Why"), as tests of the
// CORRECT behaviour: two hosts (test/support/multi-host.ts) over one PostgreSQL and one S3
// bucket, A owns the sandboxes, B is the other server an operator added. Until the host
// boundary lands (hosts registry, owner-scoped controllers, routing, host failure) most of
// these fail, each with the damage the issue lists; none of them may be weakened to pass.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { eventually } from "./support/eventually.js";
import { type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";
import type { ShownSandbox } from "./support/server-process.js";

const TERMINAL = new Set(["failed", "terminated"]);

describe("a second host beside the first [postgres, s3]", () => {
  let cluster: MultiHost | undefined;
  let a: Host;
  let b: Host;

  before(async () => {
    cluster = await startMultiHost("ownership", { hosts: 2 });
    [a, b] = cluster.hosts as [Host, Host];
  });

  after(async () => {
    await cluster?.cleanup();
  });

  /** The sandbox as `host` shows it once its state is one of `wanted`, or failed/terminated, or gone (null). */
  const settle = (host: Host, id: string, wanted: string[], timeoutMs = 90_000) =>
    eventually(
      `${id} to be ${wanted.join(" or ")} (or end)`,
      async () => {
        const res = await host.api("GET", `/v1/sandboxes/${id}`);
        if (res.status === 404) return { gone: true as const };
        const sandbox = res.body.sandbox as ShownSandbox;
        return (wanted.includes(sandbox.state) || TERMINAL.has(sandbox.state)) && { gone: false as const, sandbox };
      },
      timeoutMs,
    );

  /** The state `id` is in, as shown through `host`: "gone" when deleted, else state/reason. */
  const describeState = async (host: Host, id: string) => {
    const res = await host.api("GET", `/v1/sandboxes/${id}`);
    if (res.status === 404) return "gone";
    const sandbox = res.body.sandbox as ShownSandbox;
    return sandbox.state_reason ? `${sandbox.state}/${sandbox.state_reason.code}` : sandbox.state;
  };

  const containerOf = async (host: Host, id: string) => (await host.containers()).find((c) => c.id === id);

  /**
   * Reconcile passes of `host` that did something and finished (warren_reconcile_step_duration_seconds
   * counts each when it ends, whatever its action), so far.
   */
  const reconcilePasses = async (host: Host) => {
    const res = await host.api("GET", "/metrics");
    assert.equal(res.status, 200, res.raw.slice(0, 500));
    let passes = 0;
    for (const match of res.raw.matchAll(/^warren_reconcile_step_duration_seconds_count(?:\{[^}]*\})? (\d+)$/gm)) {
      passes += Number(match[1]);
    }
    return passes;
  };

  /**
   * Waits (at most 20 s) for `host` to finish another reconcile pass that acted, after `before`
   * of them: the evidence that it had its chance to act. A host that rightly leaves the sandbox
   * alone makes none, so this resolves either way.
   */
  const passesAfter = async (host: Host, before: number) => {
    await eventually("another reconcile pass", async () => (await reconcilePasses(host)) > before, 20_000).catch(
      () => undefined,
    );
  };

  /** A running sandbox on A, created through A; resolves with its id. */
  const runningOnA = async (body = {}) => {
    const id = await a.createSandbox(body);
    await a.waitFor(id, "running");
    assert.equal((await containerOf(a, id))?.status, "running");
    return id;
  };

  it("B's start-up pass leaves A's running sandboxes and in-flight execs alone", async () => {
    await b.stop();
    const id = await runningOnA();
    // A keyed exec in flight on A while B starts (B's start-up marked such execs indeterminate).
    const exec = a.exec(
      id,
      ["sh", "-c", "echo run >> /tmp/startup-exec; sleep 15; echo finished"],
      { "idempotency-key": "in-flight-while-b-starts" },
      { timeout_seconds: 120 },
    );
    await eventually("the exec to start", async () => {
      const res = await a.exec(id, ["cat", "/tmp/startup-exec"]);
      return res.status === 200 && res.body.exit === 0;
    });
    await b.start();
    // B's own start-up has run once it serves; its reconcile passes (kicked by it) follow in
    // the seconds the exec still takes.
    const outcome = await exec;
    assert.equal(outcome.status, 200, outcome.raw);
    assert.equal(outcome.body.exit, 0, outcome.raw);
    assert.equal(outcome.body.stdout, "finished\n");
    const replay = await a.exec(
      id,
      ["sh", "-c", "echo run >> /tmp/startup-exec; sleep 15; echo finished"],
      { "idempotency-key": "in-flight-while-b-starts" },
      { timeout_seconds: 120 },
    );
    assert.equal(replay.status, 200, replay.raw);
    assert.equal(replay.body.indeterminate, undefined, `the keyed exec's replay: ${replay.raw}`);
    assert.equal(replay.body.stdout, "finished\n", replay.raw);
    // The evidence that B had its chance: a finished pass of B's reconciler that acted (B
    // rightly makes none when it kicks only its own sandboxes, and then this waits 20 s).
    await passesAfter(b, 0);
    assert.equal(await describeState(a, id), "running");
    assert.equal((await containerOf(a, id))?.status, "running", "A's container still runs");
  });

  it("stop, wake and delete through B act on A's container (the row and A's runc agree)", async () => {
    const id = await runningOnA();
    const stop = await b.api("PATCH", `/v1/sandboxes/${id}`, { state: "stopped" });
    assert.ok([200, 202].includes(stop.status), stop.raw);
    const stopped = await settle(a, id, ["stopped"]);
    assert.equal(stopped.gone ? "gone" : await describeState(a, id), "stopped");
    await eventually("A's container to stop", async () => (await containerOf(a, id))?.status !== "running", 60_000);

    const wake = await b.api("PATCH", `/v1/sandboxes/${id}`, { state: "running" });
    assert.ok([200, 202].includes(wake.status), wake.raw);
    await settle(a, id, ["running"]);
    assert.equal(await describeState(a, id), "running");
    assert.equal((await containerOf(a, id))?.status, "running", "the woken sandbox runs on A");
    const res = await a.exec(id, ["echo", "awake"]);
    assert.equal(res.body.stdout, "awake\n", res.raw);

    const removed = await b.api("DELETE", `/v1/sandboxes/${id}`);
    assert.ok([200, 202].includes(removed.status), removed.raw);
    await settle(a, id, ["terminated"]);
    await eventually("A's container to be removed", async () => !(await containerOf(a, id)), 60_000);
  });

  it("a TTL set through B ends the sandbox on A", async () => {
    const id = await runningOnA();
    const ttl = await b.api("PATCH", `/v1/sandboxes/${id}`, { ttl_seconds: 2 });
    assert.equal(ttl.status, 200, ttl.raw);
    const ended = await settle(a, id, ["terminated"]);
    if (!ended.gone) assert.equal(await describeState(a, id), "terminated");
    await eventually("A's expired container to be removed", async () => !(await containerOf(a, id)), 60_000);
  });

  it("A's idle deadline is A's to act on: B's sweeps never fail or terminate the sandbox", async () => {
    // The sweep of every host kicks every sandbox whose idle deadline has passed.
    const id = await runningOnA({ idle_timeout_seconds: 60 });
    const idle = await settle(a, id, ["stopped"], 180_000);
    assert.ok(!idle.gone, "the idle sandbox stays");
    assert.equal(await describeState(a, id), "stopped");
    await eventually(
      "A's idle container to stop",
      async () => (await containerOf(a, id))?.status !== "running",
      60_000,
    );
  });

  it("exec through B runs in A's sandbox, and a keyed retry through A never replays a non-owner's spawn_failed", async () => {
    const id = await runningOnA();
    const cmd = ["sh", "-c", "echo ran >> /tmp/keyed-runs; echo ok"];
    const key = { "idempotency-key": "through-b-then-a" };
    const throughB = await b.exec(id, cmd, key);
    // Routed to A, it ran; until routing lands, B may refuse, but never store that as the key's outcome.
    if (throughB.status === 200) assert.equal(throughB.body.stdout, "ok\n", throughB.raw);
    const throughA = await a.exec(id, cmd, key);
    assert.equal(throughA.status, 200, `the keyed retry through A: ${throughA.raw} (through B: ${throughB.raw})`);
    assert.equal(throughA.body.stdout, "ok\n", throughA.raw);
    const runs = await a.exec(id, ["cat", "/tmp/keyed-runs"]);
    assert.equal(runs.body.stdout, "ran\n", "the keyed command ran exactly once");
  });

  it("after many sweeps on both hosts, no container is without a row and every running row has its container", async () => {
    // Besides what the tests above left: a sandbox on each host, stopped and woken through its
    // own host, and a few sweeps of both.
    const onA = await runningOnA();
    const onB = await b.createSandbox();
    await b.waitFor(onB, "running");
    for (const [host, id] of [
      [a, onA],
      [b, onB],
    ] as const) {
      for (const state of ["stopped", "running"]) {
        const res = await host.api("PATCH", `/v1/sandboxes/${id}`, { state });
        assert.ok([200, 202].includes(res.status), res.raw);
        await settle(host, id, [state]);
      }
    }
    const passes = await Promise.all([reconcilePasses(a), reconcilePasses(b)]);
    await Promise.all([passesAfter(a, passes[0] + 3), passesAfter(b, passes[1] + 3)]);
    const lost = await eventually(
      "the store and both runtimes to agree",
      async () => {
        const rows = new Map(
          (await (cluster as MultiHost).query<{ id: string; state: string }>("SELECT id, state FROM sandboxes")).map(
            (row) => [row.id, row.state],
          ),
        );
        const problems: string[] = [];
        const runningSomewhere = new Set<string>();
        for (const host of [a, b]) {
          for (const container of await host.containers()) {
            if (container.status !== "running") continue;
            runningSomewhere.add(container.id);
            const state = rows.get(container.id);
            if (state !== "running")
              problems.push(`${container.id} runs on ${host.name}, its row is ${state ?? "gone"}`);
          }
        }
        for (const [id, state] of rows) {
          if (state === "running" && !runningSomewhere.has(id)) problems.push(`${id} is running in the store only`);
        }
        return problems.length === 0 ? "agree" : { problems };
      },
      60_000,
    ).catch((error: Error) => error);
    assert.equal(lost instanceof Error ? lost.message : lost, "agree");
  });

  it("kill -9 of A: its sandboxes show the host unreachable, then fail with host_lost and release their quota", async () => {
    const id = await runningOnA();
    const runningQuota = async () => {
      const res = await b.api("GET", "/v1/usage");
      assert.equal(res.status, 200, res.raw);
      const limits = (res.body.limits ?? []) as { metric: string; current?: number; used?: number }[];
      const entry = limits.find((limit) => limit.metric === "sandboxes.running");
      return Number(entry?.current ?? entry?.used);
    };
    const before = await runningQuota();
    assert.equal((await b.sandbox(id)).host_state, "ready");
    await a.kill("SIGKILL");
    // Unreachable: the sandbox keeps its state and shows its host's.
    await eventually(
      "the record to show its host unreachable",
      async () => {
        const shown = await b.sandbox(id);
        return shown.state === "running" && shown.host_state === "unreachable";
      },
      60_000,
    );
    // Unreachable: exec (and SSH, endpoints) answer 503 host_unavailable with Retry-After.
    const unreachable = await eventually(
      "exec through B to answer host_unavailable",
      async () => {
        const res = await b.api("POST", `/v1/sandboxes/${id}:exec`, { cmd: ["true"] }, {}, 30_000);
        return res.status === 503 && res;
      },
      60_000,
    ).catch(async (error: Error) => new Error(`${error.message}; last: ${(await b.exec(id, ["true"])).raw}`));
    assert.ok(!(unreachable instanceof Error), String(unreachable));
    assert.equal(unreachable.body.code, "host_unavailable", unreachable.raw);
    assert.ok(Number(unreachable.headers.get("retry-after")) > 0, "with Retry-After");
    const dead = await settle(b, id, ["failed"], 180_000);
    assert.ok(!dead.gone, "the sandbox stays readable");
    assert.equal(await describeState(b, id), "failed/host_lost");
    assert.equal(await runningQuota(), before - 1, "its running quota is released");
  });
});
