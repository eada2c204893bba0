// The `warren` command's start (bench/README.md "CLI start"), side by side with Node's own:
//
// - `node -e 0`: Node starting and exiting, the floor of any command;
// - `warren --help`: the compiled CLI (packages/cli/bin/warren.mjs -> dist/warren.mjs) from
//   spawn to exit (target < 300 ms);
// - `warren --help` from the TypeScript sources through tsx, as the command ran before it was
//   compiled (what issue 27 measured at 1.38 s);
// - `warren mcp` ready: spawn, an MCP `initialize` request on stdin, its answer on stdout
//   (target < 500 ms), beside the raw operation: `node -e` echoing one stdin line back (Node's
//   start and the same stdio round trip).
// Variants alternate run by run (order rotated), so the host's load falls on all of them.
//
//   node --import tsx bench/cli-startup.ts [--runs 20] [--output bench/results/cli-startup.json]
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildCliBundle, cliBundleIsStale } from "../scripts/cli-bundle.js";
import { benchArgs } from "./lib/args.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const RUNS = Number(args.get("runs") ?? 20);
const OUTPUT = args.get("output") ?? path.join(ROOT, "bench/results/cli-startup.json");
const BIN = path.join(ROOT, "packages/cli/bin/warren.mjs");
const TARGETS = { helpMs: 300, mcpReadyMs: 500 };
const round2 = (n: number) => Math.round(n * 100) / 100;
// No server is contacted: `--help` and MCP's initialize need none.
const ENV = {
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: os.tmpdir(),
  WARREN_API_KEY: "wrn_bench",
  WARREN_API_URL: "http://127.0.0.1:9",
};

/** Milliseconds from spawn to exit. */
function timeToExit(argv: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, argv, { cwd: ROOT, env: ENV, stdio: ["ignore", "ignore", "inherit"] });
    child.once("error", reject);
    child.once("exit", (code) =>
      code === 0 ? resolve(performance.now() - started) : reject(new Error(`${argv.join(" ")} exited ${code}`)),
    );
  });
}

const INITIALIZE = `${JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "bench", version: "1" } },
})}\n`;

/** Milliseconds from spawn to the first stdout line answering request 1 (then stdin is closed). */
function timeToAnswer(argv: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, argv, { cwd: ROOT, env: ENV, stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    let answered = 0;
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
      if (!answered && out.includes("\n") && out.includes('"id":1')) {
        answered = performance.now() - started;
        child.stdin.end();
      }
    });
    child.once("error", reject);
    child.once("exit", () =>
      answered ? resolve(answered) : reject(new Error(`${argv.join(" ")}: no answer: ${out}`)),
    );
    child.stdin.write(INITIALIZE);
  });
}

const variants: Record<string, () => Promise<number>> = {
  "node -e 0": () => timeToExit(["-e", "0"]),
  "warren --help (compiled)": () => timeToExit([BIN, "--help"]),
  "warren --help (sources through tsx)": () =>
    timeToExit(["--import", "tsx", path.join(ROOT, "packages/cli/src/main.ts"), "--help"]),
  "node -e: echo one stdin line": () =>
    timeToAnswer(["-e", 'process.stdin.once("data", (d) => { process.stdout.write(d); process.exit(0); })']),
  "warren mcp: initialize answered": () => timeToAnswer([BIN, "mcp"]),
};

if (await cliBundleIsStale()) await buildCliBundle();
const names = Object.keys(variants);
const samples = new Map<string, number[]>(names.map((name) => [name, []]));
for (const name of names) await variants[name]?.(); // one warm-up each (page cache, tsx's cache)
for (let run = 0; run < RUNS; run++) {
  const order = names.map((_, i) => names[(i + run) % names.length] as string);
  for (const name of order) samples.get(name)?.push(await (variants[name] as () => Promise<number>)());
}
const results = Object.fromEntries(
  names.map((name) => {
    const values = samples.get(name) ?? [];
    return [
      name,
      {
        n: values.length,
        p50: round2(percentile(values, 50)),
        p95: round2(percentile(values, 95)),
        min: round2(Math.min(...values)),
      },
    ];
  }),
);
const help = results["warren --help (compiled)"]?.p50 ?? Number.NaN;
const mcp = results["warren mcp: initialize answered"]?.p50 ?? Number.NaN;
const report = {
  at: new Date().toISOString(),
  runs: RUNS,
  load_average: os.loadavg().map(round2),
  cpus: os.cpus().length,
  results,
  targets: { ...TARGETS, help_met: help < TARGETS.helpMs, mcp_met: mcp < TARGETS.mcpReadyMs },
};
mkdirSync(path.dirname(OUTPUT), { recursive: true });
writeFileSync(OUTPUT, `${JSON.stringify(report, null, 2)}\n`);
for (const [name, r] of Object.entries(results)) {
  process.stdout.write(
    `${name.padEnd(40)} p50 ${String(r.p50).padStart(8)} ms  p95 ${String(r.p95).padStart(8)} ms  min ${r.min} ms\n`,
  );
}
process.stdout.write(
  `targets: --help < ${TARGETS.helpMs} ms ${report.targets.help_met ? "met" : "MISSED"}, mcp < ${TARGETS.mcpReadyMs} ms ${report.targets.mcp_met ? "met" : "MISSED"}\n`,
);
