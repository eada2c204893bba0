// What the benchmarks on a multi-host deployment (test/support/multi-host.ts) share: a host's
// id, the CPU its processes spent, its metrics, and the results file.
import { execFileSync } from "node:child_process";
import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { NETNS_DIR } from "../../src/drivers/runtime/local/network.js";
import type { Host } from "../../test/support/multi-host.js";
import { type Exposition, parseExposition } from "../../test/support/prometheus.js";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const CLOCK_TICKS_PER_SECOND = 100;

export const seconds = (ms: number) => Math.round(ms / 10) / 100;

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor((sorted.length - 1) / 2)] ?? Number.NaN;
}

/** The host's id (`h_...`), as it wrote it in its data dir on its first start. */
export async function hostIdOf(host: Host): Promise<string> {
  return (await readFile(path.join(host.dataDir, "host-id"), "utf8")).trim();
}

/**
 * CPU seconds spent so far by the processes of the host's network namespace: the server, its
 * spawner and, once reaped, the host tools they ran (runc, ip, nft: a child's time reaches its
 * parent's cutime/cstime when it is waited for). A sandbox's own processes are in a namespace of
 * their own and not counted. Differences of two readings are what the host spent in between.
 */
export async function hostCpuSeconds(host: Host): Promise<number> {
  const pin = await stat(path.join(NETNS_DIR, host.netns));
  let ticks = 0;
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const ns = await stat(`/proc/${pid}/ns/net`).catch(() => null);
    if (!ns || ns.ino !== pin.ino || ns.dev !== pin.dev) continue;
    const text = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
    // Fields after the command (which may hold spaces) start at ") "; utime is the 14th field.
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ");
    ticks += [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i] ?? 0), 0);
  }
  return ticks / CLOCK_TICKS_PER_SECOND;
}

/** The machine's busy and total CPU seconds so far (/proc/stat), every process of every agent counted. */
export async function machineCpuSeconds(): Promise<{ busy: number; total: number }> {
  const line = (await readFile("/proc/stat", "utf8")).split("\n")[0] ?? "";
  const values = line.trim().split(/\s+/).slice(1).map(Number);
  const total = values.reduce((a, b) => a + b, 0);
  const idle = (values[3] ?? 0) + (values[4] ?? 0);
  return { busy: (total - idle) / CLOCK_TICKS_PER_SECOND, total: total / CLOCK_TICKS_PER_SECOND };
}

/** GET /metrics of the host (the bootstrap key is an owner key of the operator organization). */
export async function metricsOf(host: Host): Promise<Exposition> {
  const res = await host.api("GET", "/metrics");
  if (res.status !== 200) throw new Error(`${host.name} /metrics: ${res.status} ${res.raw}`);
  return parseExposition(res.raw);
}

export interface HistogramDelta {
  count: number;
  /** Mean seconds of the observations in between. */
  mean_s: number;
  /** The upper bound of the bucket holding the 95th percentile of the observations in between. */
  p95_le_s: number;
}

/** What a histogram observed between two expositions, for the series with (at least) `labels`. */
export function histogramDelta(
  before: Exposition,
  after: Exposition,
  metric: string,
  labels: Record<string, string> = {},
): HistogramDelta {
  const pick = (e: Exposition, name: string) =>
    e.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  const total = (e: Exposition, name: string) => pick(e, name).reduce((sum, s) => sum + s.value, 0);
  const count = total(after, `${metric}_count`) - total(before, `${metric}_count`);
  const sum = total(after, `${metric}_sum`) - total(before, `${metric}_sum`);
  const buckets = new Map<number, number>();
  for (const [e, sign] of [
    [after, 1],
    [before, -1],
  ] as const) {
    for (const s of pick(e, `${metric}_bucket`)) {
      const le = s.labels.le === "+Inf" ? Number.POSITIVE_INFINITY : Number(s.labels.le);
      buckets.set(le, (buckets.get(le) ?? 0) + sign * s.value);
    }
  }
  const bounds = [...buckets.keys()].sort((a, b) => a - b);
  const p95 = bounds.find((le) => (buckets.get(le) ?? 0) >= 0.95 * count) ?? Number.NaN;
  return { count, mean_s: count ? sum / count : Number.NaN, p95_le_s: count ? p95 : Number.NaN };
}

/** Writes `bench/results/<name>.json` with the commit, the time and the machine beside `result`. */
export async function writeResults(name: string, result: Record<string, unknown>): Promise<void> {
  const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT }).toString().trim();
  const body = {
    at: new Date().toISOString(),
    commit,
    machine: { cpus: os.cpus().length, load: os.loadavg() },
    ...result,
  };
  await writeFile(path.join(ROOT, "bench/results", `${name}.json`), `${JSON.stringify(body, null, 2)}\n`);
}
