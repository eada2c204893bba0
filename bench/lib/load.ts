// Load generators, each run as a separate process: autocannon (the devDependency, via
// `node node_modules/autocannon/autocannon.js --json`) and, when available, Debian's wrk
// (a C load generator that needs far less CPU, which matters on a 2-core machine).
import { spawn, spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

export type Tool = "autocannon" | "wrk";

export interface LoadSpec {
  url: string;
  headers: Record<string, string>;
  connections: number;
  durationSec: number;
  /** Fixed overall request rate (open loop); absent = as fast as possible (closed loop). */
  rate?: number;
}

export interface LoadResult {
  tool: Tool;
  connections: number;
  /** The fixed request rate asked for, or null for a closed-loop (maximum) run. */
  rate: number | null;
  durationSec: number;
  /** Successful (2xx) responses per second over the whole run. */
  reqPerSec: number;
  requests: number;
  ok2xx: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  /** Latency percentiles in milliseconds (autocannon resolves to 1 ms, wrk to 1 µs). */
  latencyMs: { mean: number; p50: number; p90: number; p99: number; max: number };
}

export interface RunningLoad {
  pid: number;
  result: Promise<LoadResult>;
}

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "../..");
export const AUTOCANNON_JS = path.join(ROOT, "node_modules/autocannon/autocannon.js");
const WRK_REPORT_LUA = path.join(HERE, "wrk-report.lua");

/** Spawns a load generator, gathers its stdout and stderr, and parses its report on exit 0. */
export function collect(
  command: string,
  args: string[],
  parse: (stdout: string) => LoadResult,
  env: Record<string, string> = {},
): RunningLoad {
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  const result = new Promise<LoadResult>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => {
      if (code !== 0) {
        reject(new Error(`${command} exited with ${code}: ${stderr.slice(-2000)}`));
        return;
      }
      try {
        resolve(parse(stdout));
      } catch (error) {
        reject(new Error(`could not read the ${command} report: ${(error as Error).message}\n${stdout.slice(-2000)}`));
      }
    });
  });
  return { pid: child.pid ?? -1, result };
}

/** autocannon's report (the CLI's --json line, or the programmatic API's result). */
export interface AutocannonReport {
  duration: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  "2xx": number;
  requests: { total: number };
  latency: { average: number; p50: number; p90: number; p99: number; max: number };
}

/** An autocannon report as a LoadResult. */
export function autocannonResult(report: AutocannonReport, connections: number, rate: number | null): LoadResult {
  return {
    tool: "autocannon",
    connections,
    rate,
    durationSec: report.duration,
    reqPerSec: report["2xx"] / report.duration,
    requests: report.requests.total,
    ok2xx: report["2xx"],
    non2xx: report.non2xx,
    errors: report.errors,
    timeouts: report.timeouts,
    latencyMs: {
      mean: report.latency.average,
      p50: report.latency.p50,
      p90: report.latency.p90,
      p99: report.latency.p99,
      max: report.latency.max,
    },
  };
}

export function runAutocannon(spec: LoadSpec): RunningLoad {
  const args = [AUTOCANNON_JS, "--json", "-c", String(spec.connections), "-p", "1", "-d", String(spec.durationSec)];
  // autocannon's -R is a per-connection budget per second (each connection sends back to
  // back until its share is used, then waits for the next second) with coordinated-omission
  // correction at a 1 ms interval: bursty, and it inflates p99. Fixed-rate runs use wrk.
  if (spec.rate) args.push("-R", String(spec.rate));
  for (const [name, value] of Object.entries(spec.headers)) args.push("-H", `${name}=${value}`);
  args.push(spec.url);
  return collect(process.execPath, args, (stdout) => {
    const line = stdout.trim().split("\n").pop() ?? "";
    return autocannonResult(JSON.parse(line) as AutocannonReport, spec.connections, spec.rate ?? null);
  });
}

interface WrkReport {
  duration_us: number;
  requests: number;
  errors: { connect: number; read: number; write: number; status: number; timeout: number };
  latency_us: { mean: number; p50: number; p90: number; p99: number; max: number };
}

/** The WRK_JSON line that wrk-report.lua's done() prints, as a LoadResult. */
export function wrkResult(stdout: string, connections: number, rate: number | null): LoadResult {
  const line = stdout.split("\n").find((l) => l.startsWith("WRK_JSON "));
  if (!line) throw new Error("no WRK_JSON line");
  const report = JSON.parse(line.slice("WRK_JSON ".length)) as WrkReport;
  const durationSec = report.duration_us / 1e6;
  const e = report.errors;
  const ok2xx = report.requests - e.status;
  return {
    tool: "wrk",
    connections,
    rate,
    durationSec,
    reqPerSec: ok2xx / durationSec,
    requests: report.requests,
    ok2xx,
    non2xx: e.status,
    errors: e.connect + e.read + e.write,
    timeouts: e.timeout,
    latencyMs: {
      mean: report.latency_us.mean / 1000,
      p50: report.latency_us.p50 / 1000,
      p90: report.latency_us.p90 / 1000,
      p99: report.latency_us.p99 / 1000,
      max: report.latency_us.max / 1000,
    },
  };
}

export function wrkAvailable(): boolean {
  return spawnSync("wrk", ["--version"], { stdio: "ignore" }).error === undefined;
}

/** Installs Debian's wrk with apt-get when it is absent; false when that is not possible. */
export function ensureWrk(log: (line: string) => void): boolean {
  if (wrkAvailable()) return true;
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const install = () =>
    spawnSync("apt-get", ["install", "-y", "--no-install-recommends", "wrk"], { stdio: "ignore", env }).status === 0;
  log("wrk is not installed; installing it with apt-get");
  if (!install()) {
    spawnSync("apt-get", ["update", "-qq"], { stdio: "ignore", env });
    install();
  }
  return wrkAvailable();
}

export function runWrk(spec: LoadSpec): RunningLoad {
  const args = ["-t1", `-c${spec.connections}`, `-d${spec.durationSec}s`, "--timeout", "10s", "-s", WRK_REPORT_LUA];
  for (const [name, value] of Object.entries(spec.headers)) args.push("-H", `${name}: ${value}`);
  args.push(spec.url);
  // With a rate, wrk-report.lua paces the requests (see there).
  const env: Record<string, string> = spec.rate ? { WRK_RATE: String(spec.rate) } : {};
  return collect("wrk", args, (stdout) => wrkResult(stdout, spec.connections, spec.rate ?? null), env);
}

export function runLoad(tool: Tool, spec: LoadSpec): RunningLoad {
  return tool === "wrk" ? runWrk(spec) : runAutocannon(spec);
}

/** The tools named in a comma-separated list; wrk is dropped (with a note) when it cannot be installed. */
export function pickTools(names: string, log: (line: string) => void): Tool[] {
  const tools = names.split(",") as Tool[];
  if (tools.includes("wrk") && !ensureWrk(log)) {
    log("wrk is not available; running autocannon only");
    tools.splice(tools.indexOf("wrk"), 1);
  }
  return tools;
}
