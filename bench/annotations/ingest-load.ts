// Spawns the annotate load as a separate process: autocannon (annotate-load.ts) or wrk
// (annotate.lua), both sending the same body shape. Results have bench/lib/load.ts's shape.
import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { LoadResult, RunningLoad, Tool } from "../lib/load.js";
import type { IngestLoadSpec } from "./annotate-load.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));

function collect(command: string, args: string[], parse: (stdout: string) => LoadResult): RunningLoad {
  const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
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

interface WrkReport {
  duration_us: number;
  requests: number;
  errors: { connect: number; read: number; write: number; status: number; timeout: number };
  latency_us: { mean: number; p50: number; p90: number; p99: number; max: number };
}

export function runIngestLoad(tool: Tool, spec: IngestLoadSpec): RunningLoad {
  if (tool === "autocannon") {
    return collect(
      process.execPath,
      ["--import", "tsx", path.join(HERE, "annotate-load.ts"), JSON.stringify(spec)],
      (stdout) => JSON.parse(stdout.trim().split("\n").pop() ?? "") as LoadResult,
    );
  }
  const args = [
    "-t1",
    `-c${spec.connections}`,
    `-d${spec.durationSec}s`,
    "--timeout",
    "10s",
    "-s",
    path.join(HERE, "annotate.lua"),
    "-H",
    `authorization: Bearer ${spec.key}`,
    spec.url,
    "--",
    String(spec.keys),
    spec.prefix,
    spec.schemas.join(","),
    spec.runs.join(","),
  ];
  return collect("wrk", args, (stdout) => {
    const line = stdout.split("\n").find((l) => l.startsWith("WRK_JSON "));
    if (!line) throw new Error("no WRK_JSON line");
    const report = JSON.parse(line.slice("WRK_JSON ".length)) as WrkReport;
    const durationSec = report.duration_us / 1e6;
    const e = report.errors;
    const ok2xx = report.requests - e.status;
    return {
      tool: "wrk",
      connections: spec.connections,
      rate: null,
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
  });
}
