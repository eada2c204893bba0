// SDK and CLI benchmarks (bench/README.md "SDK and CLI"), against the real server (the
// `make run` bundle, PGlite, WARREN_LOG_LEVEL=warn) with busybox from a throwaway registry:
//
// 1. exec of `true` in one running sandbox: `sandbox.exec(["true"])` of the SDK vs the raw
//    operation, one `fetch` POST of the same body, interleaved call by call (order swapped
//    every pair). The SDK sends an Idempotency-Key on every exec (so a retry never runs the
//    command twice), which makes the server record the exec first; the raw calls are
//    measured both with the same header (the SDK's own overhead) and without (what the
//    exactly-once guarantee costs on the server).
// 2. push of 1 GiB of new files (64 x 16 MiB, every chunk new each round): `warren volume
//    push` as a process vs pushDirectory (the helper of the volumes issue, the same code the
//    CLI runs) in this process, alternating.
//
//   node --import tsx bench/sdk.ts [--execs 300] [--rounds 2] [--phases exec,push]
//     [--output bench/results/sdk.json]
import { spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { mkdir, open, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Warren } from "../packages/sdk/src/index.js";
import { pushDirectory } from "../scripts/volume-push.js";
import { pushTestImages } from "../test/support/registry.js";
import { benchArgs } from "./lib/args.js";
import { openBenchRig } from "./lib/rig.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const EXECS = Number(args.get("execs") ?? 300);
const ROUNDS = Number(args.get("rounds") ?? 2);
const PHASES = new Set((args.get("phases") ?? "exec,push").split(","));
const OUTPUT = args.get("output") ?? path.join(ROOT, "bench/results/sdk.json");
const MIB = 1_048_576;
const BIG_FILES = 64;
const BIG_FILE_BYTES = 16 * MIB;
const CHUNK = 4 * MIB;

const log = (line: string) => process.stderr.write(`${line}\n`);
const round2 = (n: number) => Math.round(n * 100) / 100;
const summary = (values: number[]) => ({
  n: values.length,
  p50: round2(percentile(values, 50)),
  p95: round2(percentile(values, 95)),
  min: round2(Math.min(...values)),
});
const loadAverage = () => os.loadavg().map((n) => round2(n));

async function freshen(dir: string, round: number) {
  const marker = Buffer.from(`round ${round} ${randomBytes(8).toString("hex")}`);
  for (let i = 0; i < BIG_FILES; i++) {
    const handle = await open(path.join(dir, `f${String(i).padStart(2, "0")}.bin`), "r+");
    for (let at = 0; at < BIG_FILE_BYTES; at += CHUNK) await handle.write(marker, 0, marker.length, at);
    await handle.close();
  }
}

function runCli(
  cliArgs: string[],
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(ROOT, "packages/cli/bin/warren.mjs"), ...cliArgs], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
    });
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
    });
    child.once("error", reject);
    child.once("close", (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}

const results: Record<string, unknown> = { started_at: new Date().toISOString(), load_average_before: loadAverage() };
const rig = await openBenchRig("sdk", ROOT);
const { registry, tmp, key } = rig;
try {
  await pushTestImages(registry);
  const server = await rig.start({ WARREN_LOG_LEVEL: "warn", WARREN_SANDBOX_POOL_SIZE: "0" });
  const warren = new Warren({ apiKey: key, baseUrl: server.baseUrl });

  if (PHASES.has("exec")) {
    const sbx = await warren.sandboxes.create({ command: ["sleep", "3600"], network_access: "none" });
    const url = `${server.baseUrl}/v1/sandboxes/${sbx.id}:exec`;
    const body = JSON.stringify({ cmd: ["true"] });
    const raw = async (withKey: boolean) => {
      const res = await fetch(url, {
        method: "POST",
        headers: {
          authorization: `Bearer ${key}`,
          "content-type": "application/json",
          ...(withKey ? { "idempotency-key": randomUUID() } : {}),
        },
        body,
      });
      const parsed = (await res.json()) as { exit?: number };
      if (parsed.exit !== 0) throw new Error(`raw exec: ${JSON.stringify(parsed)}`);
    };
    const viaSdk = async () => {
      const result = await sbx.exec(["true"]);
      if (result.kind !== "completed" || result.exit !== 0) throw new Error(`sdk exec: ${JSON.stringify(result)}`);
    };
    const variants: [string, () => Promise<void>][] = [
      ["sdk", viaSdk],
      ["raw_fetch_with_key", () => raw(true)],
      ["raw_fetch_no_key", () => raw(false)],
    ];
    for (let i = 0; i < 20; i++) for (const [, fn] of variants) await fn();
    const times = new Map<string, number[]>(variants.map(([name]) => [name, []]));
    const pairDiffs: number[] = [];
    for (let i = 0; i < EXECS; i++) {
      const order = i % 2 === 0 ? variants : [...variants].reverse();
      const took = new Map<string, number>();
      for (const [name, fn] of order) {
        const started = performance.now();
        await fn();
        const ms = performance.now() - started;
        took.set(name, ms);
        times.get(name)?.push(ms);
      }
      pairDiffs.push((took.get("sdk") as number) - (took.get("raw_fetch_with_key") as number));
    }
    const exec = Object.fromEntries([...times].map(([name, values]) => [name, summary(values)]));
    const sdkP50 = (exec.sdk as { p50: number }).p50;
    const rawP50 = (exec.raw_fetch_with_key as { p50: number }).p50;
    results.exec = {
      ...exec,
      sdk_overhead_p50_ms: round2(sdkP50 - rawP50),
      sdk_minus_raw_per_pair_p50_ms: round2(percentile(pairDiffs, 50)),
      idempotency_key_cost_p50_ms: round2(rawP50 - (exec.raw_fetch_no_key as { p50: number }).p50),
      load_average: loadAverage(),
    };
    log(`exec: ${JSON.stringify(results.exec)}`);
    await sbx.delete();
  }

  if (PHASES.has("push")) {
    const big = path.join(tmp, "big");
    await mkdir(big);
    for (let i = 0; i < BIG_FILES; i++) {
      await writeFile(path.join(big, `f${String(i).padStart(2, "0")}.bin`), randomBytes(BIG_FILE_BYTES));
    }
    const totalBytes = BIG_FILES * BIG_FILE_BYTES;
    const cliVolume = await warren.volumes.create({ name: "bench-cli", quota_bytes: String(64 * 1024 * MIB) });
    const helperVolume = await warren.volumes.create({ name: "bench-helper", quota_bytes: String(64 * 1024 * MIB) });
    const runs: Record<"cli" | "helper", { ms: number; mibps: number }[]> = { cli: [], helper: [] };
    const env = {
      HOME: tmp,
      XDG_CACHE_HOME: path.join(tmp, "cache"),
      WARREN_API_URL: server.baseUrl,
      WARREN_API_KEY: key,
    };
    for (let round = 0; round < ROUNDS; round++) {
      const order: ("cli" | "helper")[] = round % 2 === 0 ? ["cli", "helper"] : ["helper", "cli"];
      for (const which of order) {
        // Every chunk new for each push, so both upload the full 1 GiB.
        await freshen(big, round * 2 + order.indexOf(which));
        const started = performance.now();
        if (which === "cli") {
          const res = await runCli(["volume", "push", big, "--volume", cliVolume.id as string, "--json"], env);
          if (res.code !== 0) throw new Error(`warren volume push: ${res.stderr}`);
          const pushed = JSON.parse(res.stdout) as { uploadedBytes: number };
          if (pushed.uploadedBytes !== totalBytes) throw new Error(`cli uploaded ${pushed.uploadedBytes}`);
        } else {
          const pushed = await pushDirectory({
            apiUrl: server.baseUrl,
            apiKey: key,
            volumeId: helperVolume.id as string,
            dir: big,
            hashCache: path.join(tmp, "helper-cache.json"),
          });
          if (pushed.uploadedBytes !== totalBytes) throw new Error(`helper uploaded ${pushed.uploadedBytes}`);
        }
        const ms = performance.now() - started;
        runs[which].push({ ms: Math.round(ms), mibps: round2(totalBytes / MIB / (ms / 1000)) });
        log(`push ${which} round ${round}: ${Math.round(ms)} ms`);
      }
    }
    results.push_1gib = {
      cli: {
        runs: runs.cli,
        p50_mibps: round2(
          percentile(
            runs.cli.map((r) => r.mibps),
            50,
          ),
        ),
      },
      helper: {
        runs: runs.helper,
        p50_mibps: round2(
          percentile(
            runs.helper.map((r) => r.mibps),
            50,
          ),
        ),
      },
      load_average: loadAverage(),
    };
    log(`push: ${JSON.stringify(results.push_1gib)}`);
  }
  results.cpus = os.cpus().length;
  results.load_average_after = loadAverage();
  await writeFile(OUTPUT, `${JSON.stringify(results, null, 2)}\n`);
  log(`wrote ${OUTPUT}`);
} finally {
  await rig.close();
}
