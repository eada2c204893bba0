// Exec `true` through a non-owner vs through the owner (issue 25: routed at most +1 ms p50).
// Two hosts of the multi-host harness (test/support/multi-host.ts: real processes, each in
// its own network namespace, one PostgreSQL and s3rver); the sandbox is on A. The two paths
// are alternated, one exec at a time, after a warm-up. Run as root:
//   node --import tsx test/run.ts bench/exec-routed.ts   (the runner starts PostgreSQL)
// BENCH_OUTPUT names a JSON file to write the run's figures to.
import { writeFileSync } from "node:fs";
import os from "node:os";
import { after, it } from "node:test";
import { type Host, type MultiHost, startMultiHost } from "../test/support/multi-host.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 300);
const WARMUP = 30;

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
};

let cluster: MultiHost | undefined;
after(async () => {
  await cluster?.cleanup();
});

it("exec true: owner vs routed through a non-owner", async () => {
  cluster = await startMultiHost("bench-routed", { hosts: 2 });
  const [a, b] = cluster.hosts as [Host, Host];
  const id = await a.createSandbox();
  await a.waitFor(id, "running");
  const timed = async (host: Host) => {
    const began = performance.now();
    const res = await host.exec(id, ["true"]);
    if (res.status !== 200) throw new Error(res.raw);
    return performance.now() - began;
  };
  for (let i = 0; i < WARMUP; i++) {
    await timed(a);
    await timed(b);
  }
  const owner: number[] = [];
  const routed: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    owner.push(await timed(a));
    routed.push(await timed(b));
  }
  const row = (name: string, values: number[]) =>
    `${name.padEnd(8)} p50 ${percentile(values, 50).toFixed(2)} ms  p90 ${percentile(values, 90).toFixed(2)} ms  p99 ${percentile(values, 99).toFixed(2)} ms`;
  const delta = percentile(routed, 50) - percentile(owner, 50);
  process.stdout.write(
    `exec true, ${ROUNDS} rounds alternated\n${row("owner", owner)}\n${row("routed", routed)}\np50 delta ${delta.toFixed(2)} ms\n`,
  );
  const figures = (values: number[]) => ({
    p50: percentile(values, 50),
    p90: percentile(values, 90),
    p99: percentile(values, 99),
  });
  if (process.env.BENCH_OUTPUT) {
    const result = {
      rounds: ROUNDS,
      ownerMs: figures(owner),
      routedMs: figures(routed),
      p50DeltaMs: delta,
      loadavg: os.loadavg().map((v) => Math.round(v * 100) / 100),
    };
    writeFileSync(process.env.BENCH_OUTPUT, `${JSON.stringify(result, null, 2)}\n`);
  }
});
