// Concurrent creates over three hosts (issue 25's benchmark "60 concurrent creates spread over
// three hosts: p95 to running within 1.5x of 20 on one"). Three hosts of
// test/support/multi-host.ts (each a `make run` bundle in its own network namespace, one
// PostgreSQL, one s3rver bucket), ALL ON THIS ONE MACHINE: 60 creates on three hosts are three
// times the CPU work of 20 on one, on the same cores (bench/README.md says what that means).
//
// Per round, interleaved (the order alternates between rounds):
// - `one`: 20 concurrent creates through one host, the two others cordoned (the host changes
//   each round, so three rounds are 20 on each host, one host at a time);
// - `three`: 60 concurrent creates sent round robin through the three hosts.
// Each create is timed from its POST to `running` (GetSandbox?wait_state=running, long polls,
// through the server it was sent to). Between bursts everything is deleted and the hosts are
// waited for to be empty (no live row, no container, no sandbox veth). Phases: the hosts run
// with WARREN_PLACEMENT=spread, then restarted with local_first (the round robin decides).
// Beside the times: where each sandbox landed, the CPU each host's processes spent, the
// machine's, advisory-lock waiters sampled in PostgreSQL, and what the hosts' own metrics saw
// (CreateSandbox's answer time, the reconcile queue's lag, each reconcile step).
// Results: bench/results/multi-host-creates.json.
// Usage: node --import tsx bench/multi-host-creates.ts [--rounds 3] [--one 20] [--many 60]
//   [--modes spread,local_first] [--host-cpu 0.5]
import assert from "node:assert/strict";
import { eventually } from "../test/support/eventually.js";
import { type Host, type MultiHost, startMultiHost } from "../test/support/multi-host.js";
import type { Exposition } from "../test/support/prometheus.js";
import { benchArgs } from "./lib/args.js";
import {
  type HistogramDelta,
  histogramDelta,
  hostCpuSeconds,
  hostIdOf,
  machineCpuSeconds,
  metricsOf,
  seconds,
  writeResults,
} from "./lib/multi-host.js";
import { percentile } from "./lib/stats.js";
import { textTable } from "./lib/table.js";

const args = benchArgs();
const ROUNDS = Number(args.get("rounds") ?? 3);
const ONE = Number(args.get("one") ?? 20);
const MANY = Number(args.get("many") ?? 60);
const MODES = (args.get("modes") ?? "spread,local_first").split(",") as Mode[];
/**
 * `--host-cpu 0.5`: each host's processes capped at that many cores (a CFS quota of its own,
 * test/support/multi-host.ts hostCpuCores), so 20 on one host and 60 on three run on hosts of
 * the same size, as three machines would be. Unset: no cap (the hosts share every core).
 */
const HOST_CPU = args.get("host-cpu") === undefined ? undefined : Number(args.get("host-cpu"));
type Mode = "spread" | "local_first";
/** A quarter of a core each: 20 on one host fit its CPU admission (2 cores x overcommit 8). */
const SANDBOX = { command: ["sleep", "3600"], network_access: "none", resources: { cpu_millis: 250 } };
const log = (line: string) => process.stderr.write(`[multi-host-creates] ${new Date().toISOString()} ${line}\n`);

interface Create {
  via: number;
  id?: string;
  status: number;
  error?: string;
  post_ms: number;
  running_ms?: number;
}

interface HostMetrics {
  create_post: HistogramDelta;
  create_to_running: HistogramDelta;
  reconcile_lag: HistogramDelta;
  steps: Record<string, HistogramDelta>;
}

interface Burst {
  mode: Mode;
  variant: "one" | "three";
  round: number;
  n: number;
  failures: Create[];
  running_ms: number[];
  post_ms: number[];
  p50_ms: number;
  p95_ms: number;
  wall_ms: number;
  landed: Record<string, number>;
  host_cpu_s: Record<string, number>;
  machine_busy_cores: number;
  advisory_waiters_max: number;
  metrics: Record<string, HostMetrics>;
}

let cluster: MultiHost | undefined;
const cleanup = async () => {
  await cluster?.cleanup();
};
process.once("SIGINT", () => void cleanup().then(() => process.exit(130)));

async function createOne(via: Host): Promise<Create> {
  const started = performance.now();
  const res = await via.api("POST", "/v1/sandboxes", SANDBOX, {}, 600_000);
  const post = performance.now() - started;
  if (res.status !== 200) return { via: via.index, status: res.status, error: res.raw.slice(0, 300), post_ms: post };
  const id = res.body.id as string;
  for (;;) {
    const sandbox = await via.sandbox(id, "?wait_state=running&wait_timeout_seconds=20");
    if (sandbox.state === "running") {
      return { via: via.index, id, status: 200, post_ms: post, running_ms: performance.now() - started };
    }
    if (sandbox.state === "failed" || sandbox.state === "terminated" || performance.now() - started > 600_000) {
      return { via: via.index, id, status: 200, error: JSON.stringify(sandbox), post_ms: post };
    }
  }
}

function hostMetrics(before: Exposition, after: Exposition): HostMetrics {
  const actions = new Set(
    after.samples
      .filter((s) => s.name === "warren_reconcile_step_duration_seconds_count" && s.labels.result === "ok")
      .map((s) => s.labels.action as string),
  );
  const steps: Record<string, HistogramDelta> = {};
  for (const action of actions) {
    const delta = histogramDelta(before, after, "warren_reconcile_step_duration_seconds", { action });
    if (delta.count > 0) steps[action] = delta;
  }
  return {
    create_post: histogramDelta(before, after, "warren_http_request_duration_seconds", {
      operation: "CreateSandbox",
    }),
    create_to_running: histogramDelta(before, after, "warren_sandbox_create_to_running_seconds"),
    reconcile_lag: histogramDelta(before, after, "warren_reconcile_lag_seconds"),
    steps,
  };
}

async function advisoryWaiters(c: MultiHost): Promise<number> {
  const rows = await c.query<{ n: string }>(
    "SELECT count(*)::text AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
  );
  return Number(rows[0]?.n ?? 0);
}

async function setCordoned(c: MultiHost, ids: string[], index: number, cordoned: boolean): Promise<void> {
  const via = c.hosts[0] as Host;
  const action = cordoned ? "cordon" : "uncordon";
  const res = await via.api("POST", `/v1/admin/hosts/${ids[index]}:${action}`);
  assert.equal(res.status, 200, res.raw);
}

/** Deletes every sandbox and waits until no host has a live row, a container or a sandbox veth. */
async function emptyHosts(c: MultiHost, creates: Create[]): Promise<void> {
  await Promise.all(
    creates
      .filter((x) => x.id)
      .map(async (x) => {
        const res = await (c.hosts[x.via] as Host).api("DELETE", `/v1/sandboxes/${x.id}`, undefined, {}, 300_000);
        assert.ok([200, 202, 404].includes(res.status), res.raw);
      }),
  );
  await eventually(
    "every host to be empty",
    async () => {
      const live = await c.query<{ n: string }>(
        "SELECT count(*)::text AS n FROM sandboxes WHERE state NOT IN ('failed', 'terminated')",
      );
      if (Number(live[0]?.n) !== 0) return false;
      for (const host of c.hosts) {
        if ((await host.containers()).length > 0) return false;
        if ((await host.links()).some((link) => link.startsWith("wr"))) return false;
      }
      return true;
    },
    900_000,
  );
}

async function burst(
  c: MultiHost,
  ids: string[],
  targets: Host[],
  n: number,
): Promise<Omit<Burst, "mode" | "variant" | "round">> {
  const names = c.hosts.map((h) => h.name);
  const metricsBefore = await Promise.all(c.hosts.map((h) => metricsOf(h)));
  const cpuBefore = await Promise.all(c.hosts.map((h) => hostCpuSeconds(h)));
  const machineBefore = await machineCpuSeconds();
  let sampling = true;
  let waitersMax = 0;
  const sampler = (async () => {
    while (sampling) {
      waitersMax = Math.max(waitersMax, await advisoryWaiters(c).catch(() => 0));
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  })();
  const started = performance.now();
  const creates = await Promise.all(
    Array.from({ length: n }, (_, i) => createOne(targets[i % targets.length] as Host)),
  );
  const wall = performance.now() - started;
  sampling = false;
  await sampler;
  const machineAfter = await machineCpuSeconds();
  const cpuAfter = await Promise.all(c.hosts.map((h) => hostCpuSeconds(h)));
  const metricsAfter = await Promise.all(c.hosts.map((h) => metricsOf(h)));
  const landed: Record<string, number> = Object.fromEntries(names.map((name) => [name, 0]));
  const made = creates.filter((x) => x.id).map((x) => x.id as string);
  for (const row of await c.query<{ host_id: string }>("SELECT host_id FROM sandboxes WHERE id = ANY($1)", [made])) {
    const name = names[ids.indexOf(row.host_id)] ?? row.host_id;
    landed[name] = (landed[name] ?? 0) + 1;
  }
  const running = creates.filter((x) => x.running_ms !== undefined).map((x) => x.running_ms as number);
  const result = {
    n,
    failures: creates.filter((x) => x.running_ms === undefined),
    running_ms: running.map(Math.round),
    post_ms: creates.map((x) => Math.round(x.post_ms)),
    p50_ms: Math.round(percentile(running, 50)),
    p95_ms: Math.round(percentile(running, 95)),
    wall_ms: Math.round(wall),
    landed,
    host_cpu_s: Object.fromEntries(names.map((name, i) => [name, (cpuAfter[i] as number) - (cpuBefore[i] as number)])),
    machine_busy_cores: (machineAfter.busy - machineBefore.busy) / (wall / 1000),
    advisory_waiters_max: waitersMax,
    metrics: Object.fromEntries(
      names.map((name, i) => [name, hostMetrics(metricsBefore[i] as Exposition, metricsAfter[i] as Exposition)]),
    ),
  };
  await emptyHosts(c, creates);
  return result;
}

/** `n` creates through host `index` with the two others cordoned. */
async function onOneHost(c: MultiHost, ids: string[], index: number, n: number) {
  const others = c.hosts.map((_, i) => i).filter((i) => i !== index);
  for (const i of others) await setCordoned(c, ids, i, true);
  try {
    return await burst(c, ids, [c.hosts[index] as Host], n);
  } finally {
    for (const i of others) await setCordoned(c, ids, i, false);
  }
}

const bursts: Burst[] = [];
let failure: string | undefined;
try {
  cluster = await startMultiHost("bench-creates", {
    hosts: 3,
    ...(HOST_CPU === undefined ? {} : { hostCpuCores: HOST_CPU }),
    env: {
      WARREN_PLACEMENT: MODES[0] ?? "spread",
      WARREN_QUOTA_SANDBOXES_RUNNING: "500",
      WARREN_QUOTA_SANDBOXES_TOTAL: "5000",
    },
  });
  const c = cluster;
  const ids = await Promise.all(c.hosts.map((h) => hostIdOf(h)));
  for (const [phase, mode] of MODES.entries()) {
    if (phase > 0) {
      log(`restarting the hosts with WARREN_PLACEMENT=${mode}`);
      await Promise.all(c.hosts.map((h) => h.restart({ WARREN_PLACEMENT: mode })));
    }
    // Warm-up, not recorded: each host pulls the image and runs its first sandboxes.
    for (const [i] of c.hosts.entries()) await onOneHost(c, ids, i, 3);
    for (let round = 0; round < ROUNDS; round++) {
      const variants = round % 2 === 0 ? (["one", "three"] as const) : (["three", "one"] as const);
      for (const variant of variants) {
        log(`${mode} round ${round + 1}/${ROUNDS}: ${variant}`);
        const measured =
          variant === "one" ? await onOneHost(c, ids, round % c.hosts.length, ONE) : await burst(c, ids, c.hosts, MANY);
        bursts.push({ mode, variant, round, ...measured });
        log(
          `  p50 ${measured.p50_ms} ms p95 ${measured.p95_ms} ms, ${measured.failures.length} failed, landed ${JSON.stringify(measured.landed)}`,
        );
      }
    }
  }
} catch (error) {
  // What was measured is still written (with the failure), then the run fails.
  failure = (error as Error).stack ?? String(error);
  log(failure);
} finally {
  await cleanup();
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
const mean = (values: number[]) => sum(values) / values.length;
const summaries = MODES.map((mode) => {
  const of = (variant: Burst["variant"]) => bursts.filter((b) => b.mode === mode && b.variant === variant);
  const one = of("one");
  const three = of("three");
  const pooled = (list: Burst[]) => list.flatMap((b) => b.running_ms);
  const p95One = percentile(pooled(one), 95);
  const p95Three = percentile(pooled(three), 95);
  const hostCpu = (list: Burst[]) => mean(list.map((b) => sum(Object.values(b.host_cpu_s))));
  return {
    mode,
    one: {
      bursts: one.length,
      p50_ms: percentile(pooled(one), 50),
      p95_ms: p95One,
      wall_ms: mean(one.map((b) => b.wall_ms)),
    },
    three: {
      bursts: three.length,
      p50_ms: percentile(pooled(three), 50),
      p95_ms: p95Three,
      wall_ms: mean(three.map((b) => b.wall_ms)),
      landed: three.map((b) => b.landed),
    },
    failures: sum([...one, ...three].map((b) => b.failures.length)),
    p95_ratio: p95Three / p95One,
    per_round_p95_ratio: three.map((b, i) => b.p95_ms / (one[i]?.p95_ms ?? Number.NaN)),
    /** CPU seconds the hosts' processes spent per burst: what 60 creates cost against 20. */
    host_cpu_s: { one: hostCpu(one), three: hostCpu(three) },
    cpu_work_ratio: hostCpu(three) / hostCpu(one),
    /** 20 on each host one host at a time (3 one-host bursts in a row) against 60 at once. */
    sequential_wall_ms: 3 * mean(one.map((b) => b.wall_ms)),
    concurrent_wall_ms: mean(three.map((b) => b.wall_ms)),
    machine_busy_cores: {
      one: mean(one.map((b) => b.machine_busy_cores)),
      three: mean(three.map((b) => b.machine_busy_cores)),
    },
  };
});

const rows = [
  ["mode", "burst", "round", "p50", "p95", "wall", "landed", "host CPU", "machine busy", "lock waiters", "failed"],
  ...bursts.map((b) => [
    b.mode,
    `${b.n} ${b.variant === "one" ? "on one" : "on three"}`,
    String(b.round + 1),
    `${seconds(b.p50_ms)} s`,
    `${seconds(b.p95_ms)} s`,
    `${seconds(b.wall_ms)} s`,
    Object.values(b.landed).join("/"),
    `${sum(Object.values(b.host_cpu_s)).toFixed(1)} s`,
    `${b.machine_busy_cores.toFixed(2)} cores`,
    String(b.advisory_waiters_max),
    String(b.failures.length),
  ]),
];
console.log(textTable(rows));
for (const s of summaries) {
  console.log(
    `${s.mode}: p95 ${seconds(s.three.p95_ms)} s (${MANY} on three) / ${seconds(s.one.p95_ms)} s (${ONE} on one) = ${s.p95_ratio.toFixed(2)}x (target 1.5x); host CPU ${s.cpu_work_ratio.toFixed(2)}x; ${ONE} on each host one at a time ${seconds(s.sequential_wall_ms)} s vs all at once ${seconds(s.concurrent_wall_ms)} s`,
  );
}
await writeResults(HOST_CPU === undefined ? "multi-host-creates" : "multi-host-creates-capped", {
  rounds: ROUNDS,
  one: ONE,
  many: MANY,
  host_cpu_cores: HOST_CPU ?? null,
  failure,
  summaries,
  bursts,
});
if (failure) process.exitCode = 1;
