// What recording and scraping metrics cost (docs/metrics.md), in process, side by side with
// the raw operation each replaces: recording a request or an exec vs incrementing a plain
// Map counter under the same key; a scrape of a registry with every request series
// populated. The end-to-end check (exec `true` through the API before and after) is
// bench/sandboxes.ts run on both commits (bench/README.md "Metrics").
// Usage: node --import tsx bench/metrics.ts [--calls 1000000] [--scrapes 50]
import { writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { WarrenMetrics } from "../src/modules/metrics/registry.js";
import { benchArgs } from "./lib/args.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const CALLS = Number(args.get("calls") ?? 1_000_000);
const SCRAPES = Number(args.get("scrapes") ?? 50);
const ROUNDS = 5;

// 80 operations x 5 statuses: about the API's size, so lookups hit a realistic map.
const OPERATIONS = Array.from({ length: 80 }, (_, i) => `Operation${i}`);
const STATUSES = [200, 400, 404, 409, 500];

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

/** Nanoseconds per call of `op`, median of ROUNDS rounds of CALLS calls. */
function nsPerCall(op: (i: number) => void): number {
  const rounds: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < CALLS; i++) op(i);
    rounds.push(Number(process.hrtime.bigint() - start) / CALLS);
  }
  return Math.round(median(rounds) * 10) / 10;
}

const metrics = new WarrenMetrics({ stateCacheSeconds: 5, processMetrics: true });
metrics.countSandboxStatesWith(async () => ({ running: 10, stopped: 3 }));
const raw = new Map<string, number>();
const operation = (i: number) => OPERATIONS[i % OPERATIONS.length] as string;
const status = (i: number) => STATUSES[i % STATUSES.length] as number;

// Alternating raw and recorded, twice, so drift hits both.
const results: Record<string, number[]> = { rawRequest: [], request: [], rawExec: [], exec: [] };
for (let pass = 0; pass < 2; pass++) {
  results.rawRequest?.push(
    nsPerCall((i) => {
      const key = `${operation(i)}\u0000${status(i)}`;
      raw.set(key, (raw.get(key) ?? 0) + 1);
    }),
  );
  results.request?.push(nsPerCall((i) => metrics.requestAnswered(operation(i), status(i), 0.003)));
  results.rawExec?.push(
    nsPerCall(() => {
      raw.set("completed", (raw.get("completed") ?? 0) + 1);
    }),
  );
  results.exec?.push(nsPerCall(() => metrics.execEnded("completed", 0.0015)));
}

const scrapeMs: number[] = [];
let bytes = 0;
for (let i = 0; i < SCRAPES; i++) {
  const start = performance.now();
  const { body } = await metrics.scrape();
  scrapeMs.push(performance.now() - start);
  bytes = body.length;
}

const out = {
  calls: CALLS,
  rounds: ROUNDS,
  nsPerCall: Object.fromEntries(Object.entries(results).map(([k, v]) => [k, Math.min(...v)])),
  scrape: {
    n: SCRAPES,
    series: OPERATIONS.length * STATUSES.length,
    p50Ms: Math.round(median(scrapeMs) * 100) / 100,
    maxMs: Math.round(Math.max(...scrapeMs) * 100) / 100,
    bytes,
  },
  machine: { cpus: os.cpus().length, node: process.version, load: os.loadavg().map((l) => Math.round(l * 100) / 100) },
  at: new Date().toISOString(),
};
console.log(JSON.stringify(out, null, 2));
await writeFile(path.join(ROOT, "bench/results/metrics.json"), `${JSON.stringify(out, null, 2)}\n`);
