// Run tail benchmarks against the real server process (the `make run` bundle, default
// settings), on the embedded store and on PostgreSQL:
//
//   idle:    the server's CPU (and PostgreSQL's) over a quiet window with no tail open, then
//            with 200 tails open on 200 runs (heartbeats at the default 15 s);
//            target: the 200 tails cost <= 5% of one core more than none.
//   latency: with those 200 tails still open, sequential POST /v1/annotations on one more
//            run, each timed from the request's start to its event arriving on a tail of
//            that run (and, side by side, to the Annotate answer);  target: p99 <= 50 ms.
//
//   node --import tsx bench/tail.ts [--stores pglite,postgres] [--tails 200] [--annotations 300]
//     [--idle-seconds 20] [--quiet-wait 120] [--output bench/results/tail.json]
import { execSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { api } from "./lib/api.js";
import { awaitQuiet, type CpuUsage, sampleCpu } from "./lib/cpu.js";
import { freePort, SERVER_METHOD, startServer } from "./lib/server.js";
import { installCleanup, prepareStore, runMain, type Store, stopCluster } from "./lib/store.js";
import { textTable } from "./lib/table.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const TARGET_P99_MS = 50;
const TARGET_IDLE_EXTRA_PCT = 5;

const { values: args } = parseArgs({
  options: {
    stores: { type: "string", default: "pglite,postgres" },
    tails: { type: "string", default: "200" },
    annotations: { type: "string", default: "300" },
    "idle-seconds": { type: "string", default: "20" },
    "quiet-wait": { type: "string", default: "120" },
    output: { type: "string", default: path.join(ROOT, "bench/results/tail.json") },
  },
});
const stores = args.stores.split(",") as Store[];
const tailCount = Number(args.tails);
const annotationCount = Number(args.annotations);
const idleSeconds = Number(args["idle-seconds"]);
const log = (line: string) => process.stderr.write(`[bench:tail] ${line}\n`);
installCleanup(log);

const SCHEMA = JSON.stringify({ type: "object", properties: { n: { type: "integer" } }, required: ["n"] });

/** A tail held open by this process; `onItem` sees each parsed data item. */
function openTail(base: string, key: string, runId: string, onItem: (data: Record<string, unknown>) => void) {
  const agent = new http.Agent({ keepAlive: false });
  return new Promise<{ close(): void }>((resolve, reject) => {
    const request = http.get(
      `${base}/v1/runs/${runId}/tail`,
      { agent, headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" } },
      (res) => {
        if (res.statusCode !== 200) return reject(new Error(`tail answered ${res.statusCode}`));
        res.setEncoding("utf8");
        let buffer = "";
        res.on("data", (chunk: string) => {
          buffer += chunk;
          for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
            const data = buffer
              .slice(0, end)
              .split("\n")
              .find((line) => line.startsWith("data: "));
            buffer = buffer.slice(end + 2);
            if (data) onItem(JSON.parse(data.slice(6)) as Record<string, unknown>);
          }
        });
        resolve({ close: () => request.destroy() });
      },
    );
    request.on("error", reject);
  });
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0;
const ms = (value: number) => value.toFixed(2);

interface StoreResult {
  store: Store;
  idle: { none: CpuUsage; withTails: CpuUsage; extraServerPct: number; extraDbPct: number };
  latency: { tailMs: number[]; answerMs: number[] };
  loadBefore: number[];
}

async function measure(store: Store): Promise<StoreResult> {
  const setup = await prepareStore(store, "warren-bench-tail", log);
  const server = await startServer({
    root: ROOT,
    port: await freePort(),
    env: setup.env,
    logFile: setup.logFile,
  });
  const { baseUrl: base } = server;
  const key = setup.key;
  try {
    await api(base, key, "POST", "/v1/annotation-schemas", { name: "tailbench", json_schema: SCHEMA });
    const runs: string[] = [];
    for (let i = 0; i <= tailCount; i++) {
      runs.push((await api<{ run: { id: string } }>(base, key, "POST", "/v1/runs", { label: `t${i}` })).run.id);
    }
    const groups = { server: server.child.pid ?? 0, loadgen: process.pid, db: setup.dbPids };
    const loadBefore = os.loadavg();

    log(`${store}: idle CPU, no tails (${idleSeconds} s)`);
    await awaitQuiet(Number(args["quiet-wait"]), log);
    let sampler = sampleCpu(groups);
    await new Promise((resolve) => setTimeout(resolve, idleSeconds * 1000));
    const none = sampler.stop();

    log(`${store}: opening ${tailCount} tails`);
    const tails = [];
    for (const runId of runs.slice(1)) tails.push(await openTail(base, key, runId, () => undefined));
    await new Promise((resolve) => setTimeout(resolve, 2000));
    log(`${store}: idle CPU, ${tailCount} tails (${idleSeconds} s)`);
    await awaitQuiet(Number(args["quiet-wait"]), log);
    sampler = sampleCpu(groups);
    await new Promise((resolve) => setTimeout(resolve, idleSeconds * 1000));
    const withTails = sampler.stop();

    log(`${store}: Annotate -> tail latency, ${annotationCount} annotations`);
    const runId = runs[0] as string;
    const arrived = new Map<number, number>();
    const waiting = new Map<number, () => void>();
    const tail = await openTail(base, key, runId, (data) => {
      const n = (data.payload as { n?: number } | undefined)?.n;
      if (typeof n !== "number") return;
      arrived.set(n, performance.now());
      waiting.get(n)?.();
    });
    const tailMs: number[] = [];
    const answerMs: number[] = [];
    for (let n = 0; n < annotationCount; n++) {
      const seen = new Promise<void>((resolve) => waiting.set(n, resolve));
      const started = performance.now();
      await api(base, key, "POST", "/v1/annotations", {
        schema_name: "tailbench",
        run_id: runId,
        payload_json: JSON.stringify({ n }),
      });
      const answered = performance.now();
      await seen;
      waiting.delete(n);
      // Warm-up: the first 20 are not counted.
      if (n >= 20) {
        answerMs.push(answered - started);
        tailMs.push((arrived.get(n) as number) - started);
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    tail.close();
    for (const open of tails) open.close();
    return {
      store,
      idle: {
        none,
        withTails,
        extraServerPct: withTails.serverPct - none.serverPct,
        extraDbPct: withTails.dbPct - none.dbPct,
      },
      latency: { tailMs: tailMs.sort((a, b) => a - b), answerMs: answerMs.sort((a, b) => a - b) },
      loadBefore,
    };
  } finally {
    await server.stop();
    stopCluster();
  }
}

async function main() {
  const results: StoreResult[] = [];
  for (const store of stores) results.push(await measure(store));
  const rows = [
    [
      "store",
      "annotate p50",
      "annotate p99",
      "tail p50",
      "tail p90",
      "tail p99",
      "tail max",
      "p99 target",
      "idle server CPU 0 tails",
      `idle server CPU ${tailCount} tails`,
      "extra server",
      "extra db",
      "other CPU",
      "idle target",
    ],
  ];
  for (const r of results) {
    const p99 = percentile(r.latency.tailMs, 99);
    const extra = r.idle.extraServerPct + Math.max(0, r.idle.extraDbPct);
    rows.push([
      r.store,
      ms(percentile(r.latency.answerMs, 50)),
      ms(percentile(r.latency.answerMs, 99)),
      ms(percentile(r.latency.tailMs, 50)),
      ms(percentile(r.latency.tailMs, 90)),
      ms(p99),
      ms(r.latency.tailMs.at(-1) ?? 0),
      p99 <= TARGET_P99_MS ? "PASS" : "MISS",
      `${r.idle.none.serverPct.toFixed(2)}%`,
      `${r.idle.withTails.serverPct.toFixed(2)}%`,
      `${r.idle.extraServerPct.toFixed(2)}%`,
      `${r.idle.extraDbPct.toFixed(2)}%`,
      `${r.idle.withTails.otherPct.toFixed(0)}%`,
      extra <= TARGET_IDLE_EXTRA_PCT ? "PASS" : "MISS",
    ]);
  }
  process.stdout.write(`${textTable(rows)}\n`);
  mkdirSync(path.dirname(args.output), { recursive: true });
  writeFileSync(
    args.output,
    `${JSON.stringify(
      {
        recordedAt: new Date().toISOString(),
        machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
        commit: execSync("git rev-parse HEAD", { cwd: ROOT, encoding: "utf8" }).trim(),
        server: SERVER_METHOD,
        results: results.map((r) => ({
          ...r,
          latency: {
            tailP50Ms: percentile(r.latency.tailMs, 50),
            tailP99Ms: percentile(r.latency.tailMs, 99),
            answerP50Ms: percentile(r.latency.answerMs, 50),
            answerP99Ms: percentile(r.latency.answerMs, 99),
            samples: r.latency.tailMs.length,
          },
        })),
      },
      null,
      2,
    )}\n`,
  );
  log(`results written to ${path.relative(ROOT, args.output)}`);
}

runMain(main, log);
