// Spawns the annotate load as a separate process: autocannon (annotate-load.ts) or wrk
// (annotate.lua), both sending the same body shape. Results have bench/lib/load.ts's shape.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { collect, type LoadResult, type RunningLoad, type Tool, wrkResult } from "../lib/load.js";
import type { IngestLoadSpec } from "./annotate-load.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));

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
  // annotate.lua takes its done() report from bench/lib/wrk-report.lua; an empty WRK_RATE
  // keeps that script's pacing off (this load is closed loop).
  return collect("wrk", args, (stdout) => wrkResult(stdout, spec.connections, null), { WRK_RATE: "" });
}
