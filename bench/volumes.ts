// Volume benchmarks against the real server (the `make run` bundle) with the fs blob store,
// real runc sandboxes and a throwaway local registry, each beside its raw operation in the
// same run:
//   push 1 GiB of new files through scripts/volume-push.ts (pushDirectory, the helper's
//     code, in this process; the server is a separate process) vs copying the same files
//     into a directory on the same filesystem with an fsync per file: target >= 300 MB/s
//   re-push of an unchanged tree of 10,000 files: no blob uploaded, target <= 300 ms
//   mount of the 1 GiB version into a new sandbox, Warren's cache cold (<= 1 s create ->
//     running) and warm (<= 10 ms over a create without volumes), interleaved with plain creates
// Usage: node --import tsx bench/volumes.ts [--rounds 3] [--repushes 5] [--mounts 5]
//   [--concurrency 8] (the helper's uploads at once) [--phases push,repush,mount]
import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CHUNK_BYTES, pushDirectory } from "../scripts/volume-push.js";
import { pushTestImages } from "../test/support/registry.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { machineLoad, sampleCpu } from "./lib/cpu.js";
import { openBenchRig } from "./lib/rig.js";
import { SERVER_METHOD } from "./lib/server.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const ROUNDS = Number(args.get("rounds") ?? 3);
const REPUSHES = Number(args.get("repushes") ?? 5);
const MOUNTS = Number(args.get("mounts") ?? 5);
const CONCURRENCY = Number(args.get("concurrency") ?? 8);
/** Which parts run (the mount phase needs the push phase's version). */
const PHASES = new Set((args.get("phases") ?? "push,repush,mount").split(","));
const MIB = 1_048_576;
const BIG_FILES = 64;
const BIG_FILE_BYTES = 16 * MIB;
const SMALL_FILES = 10_000;
const CHUNK = CHUNK_BYTES;
/** The raw copy's read size (as in earlier runs). */
const RAW_BUFFER = 4 * MIB;

const log = (line: string) => process.stderr.write(`${line}\n`);
const round1 = (n: number) => Math.round(n * 10) / 10;
const summary = (values: number[]) => ({
  n: values.length,
  p50: round1(percentile(values, 50)),
  min: round1(Math.min(...values)),
  max: round1(Math.max(...values)),
});

async function mapLimit<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>) {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** Makes every chunk of the big files new: a round marker at each chunk's start. */
async function freshen(dir: string, round: number) {
  const marker = Buffer.from(`round ${round} ${randomBytes(8).toString("hex")}`);
  for (let i = 0; i < BIG_FILES; i++) {
    const handle = await open(path.join(dir, `f${String(i).padStart(2, "0")}.bin`), "r+");
    for (let at = 0; at < BIG_FILE_BYTES; at += CHUNK) await handle.write(marker, 0, marker.length, at);
    await handle.close();
  }
}

/** The raw operation: copy every file into `target` on the same filesystem, fsync each (8 at a time). */
async function rawCopy(source: string, target: string) {
  await mkdir(target, { recursive: true });
  const names = await readdir(source);
  await mapLimit(names, 8, async (name) => {
    const from = await open(path.join(source, name), "r");
    const to = await open(path.join(target, name), "w");
    const buffer = Buffer.allocUnsafe(RAW_BUFFER);
    for (let at = 0; ; at += RAW_BUFFER) {
      const { bytesRead } = await from.read(buffer, 0, RAW_BUFFER, at);
      if (bytesRead === 0) break;
      await to.write(buffer, 0, bytesRead, at);
    }
    await to.sync();
    await Promise.all([from.close(), to.close()]);
  });
  const dir = await open(target, "r");
  await dir.sync();
  await dir.close();
}

const results: Record<string, unknown> = {};
const rig = await openBenchRig("vol", ROOT);
const tmp = rig.tmp;
const dataDir = path.join(tmp, "data");
try {
  await pushTestImages(rig.registry);
  const server = await rig.start({
    WARREN_LOG_LEVEL: "warn",
    // Creates with volumes are never served from the pool: plain creates are not either, to compare like with like.
    WARREN_SANDBOX_POOL_SIZE: "0",
  });
  const key = rig.key;
  const api = async (method: string, url: string, body?: unknown) => {
    const response = await call<Record<string, unknown>>(server.baseUrl, key, method, url, body);
    if (response.status >= 300)
      throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const newVolume = async (name: string) =>
    ((await api("POST", "/v1/volumes", { name, quota_bytes: String(64 * 1024 * MIB) })) as { volume: { id: string } })
      .volume.id;
  // As the CLI does by default (a hash cache per directory), in the temp dir.
  const push = async (
    volumeId: string,
    dir: string,
    hashCache: string | null = path.join(tmp, "hash-cache", path.basename(dir)),
  ) => {
    const started = performance.now();
    const marks: Record<string, number> = {};
    const result = await pushDirectory({
      apiUrl: server.baseUrl,
      apiKey: key,
      volumeId,
      dir,
      concurrency: CONCURRENCY,
      ...(hashCache ? { hashCache } : {}),
      onProgress: (line) => {
        const at = performance.now() - started;
        if (line.startsWith("hashed ")) marks.hashed = at;
        else if (line.includes(" blobs present")) marks.asked = at;
        else if (/^uploaded \d+ blobs$/.test(line)) marks.uploaded = at;
        else if (line.startsWith("published ")) marks.published = at;
      },
    });
    return { ms: performance.now() - started, marks, result };
  };

  let bigVolume = "";
  let bigVersion = "";
  // 1. 1 GiB of new files: the helper vs a raw fsynced copy, alternating, fresh chunks each round.
  if (PHASES.has("push")) {
    const big = path.join(tmp, "big");
    await mkdir(big);
    for (let i = 0; i < BIG_FILES; i++) {
      await writeFile(path.join(big, `f${String(i).padStart(2, "0")}.bin`), randomBytes(BIG_FILE_BYTES));
    }
    const totalBytes = BIG_FILES * BIG_FILE_BYTES;
    const pushRuns: {
      ms: number;
      mbps: number;
      marks: Record<string, number>;
      uploadedBytes: number;
      cpu: Record<string, number>;
    }[] = [];
    const rawRuns: { ms: number; mbps: number }[] = [];
    results.machineBusyBeforePushPct = Math.round(await machineLoad(1000));
    for (let round = 0; round < ROUNDS; round++) {
      await freshen(big, round);
      const order = round % 2 === 0 ? ["raw", "push"] : ["push", "raw"];
      for (const which of order) {
        if (which === "raw") {
          const target = path.join(tmp, `raw-${round}`);
          const started = performance.now();
          await rawCopy(big, target);
          const ms = performance.now() - started;
          rawRuns.push({ ms: Math.round(ms), mbps: Math.round(totalBytes / MIB / (ms / 1000)) });
          await rm(target, { recursive: true, force: true });
        } else {
          const volumeId = await newVolume(`big-${round}`);
          const sampler = sampleCpu({ server: server.child.pid ?? 0, loadgen: process.pid, db: () => [] });
          const run = await push(volumeId, big);
          const cpu = sampler.stop();
          if (run.result.uploadedBytes !== totalBytes)
            throw new Error(`round ${round} uploaded ${run.result.uploadedBytes}`);
          pushRuns.push({
            ms: Math.round(run.ms),
            mbps: Math.round(totalBytes / MIB / (run.ms / 1000)),
            marks: Object.fromEntries(Object.entries(run.marks).map(([k, v]) => [k, Math.round(v)])),
            uploadedBytes: run.result.uploadedBytes,
            // Cores' worth of CPU during the push: the server, the helper (this process), the rest of the machine.
            cpu: {
              serverPct: Math.round(cpu.serverPct),
              helperPct: Math.round(cpu.loadgenPct),
              otherPct: Math.round(cpu.otherPct),
            },
          });
          bigVolume = volumeId;
          bigVersion = String(run.result.version.version_digest);
        }
        log(`round ${round} ${which}: ${JSON.stringify(which === "raw" ? rawRuns.at(-1) : pushRuns.at(-1))}`);
      }
    }
    const pushMbps = percentile(
      pushRuns.map((r) => r.mbps),
      50,
    );
    results.push1GiB = {
      bytes: totalBytes,
      files: BIG_FILES,
      helper: pushRuns,
      raw: rawRuns,
      helperMBpsP50: pushMbps,
      rawMBpsP50: percentile(
        rawRuns.map((r) => r.mbps),
        50,
      ),
      target: ">= 300 MB/s end to end (MiB/s here)",
      pass: pushMbps >= 300,
    };
  }
  // 2. Re-push of an unchanged tree of 10,000 files.
  if (PHASES.has("repush")) {
    const small = path.join(tmp, "small");
    for (let d = 0; d < 100; d++) {
      await mkdir(path.join(small, `d${d}`), { recursive: true });
      for (let f = 0; f < SMALL_FILES / 100; f++) {
        await writeFile(path.join(small, `d${d}`, `f${f}.txt`), randomBytes(512).toString("hex"));
      }
    }
    const smallVolume = await newVolume("small");
    const first = await push(smallVolume, small);
    const repushes: { ms: number; marks: Record<string, number>; uploadedBlobs: number }[] = [];
    for (let i = 0; i < REPUSHES; i++) {
      const run = await push(smallVolume, small);
      repushes.push({
        ms: Math.round(run.ms),
        marks: Object.fromEntries(Object.entries(run.marks).map(([k, v]) => [k, Math.round(v)])),
        uploadedBlobs: run.result.uploadedBlobs,
      });
      log(`re-push ${i}: ${JSON.stringify(repushes.at(-1))}`);
    }
    // The same without the hash cache (--no-hash-cache): every file read and hashed again.
    const uncached: { ms: number; marks: Record<string, number>; uploadedBlobs: number }[] = [];
    for (let i = 0; i < Math.min(3, REPUSHES); i++) {
      const run = await push(smallVolume, small, null);
      uncached.push({
        ms: Math.round(run.ms),
        marks: Object.fromEntries(Object.entries(run.marks).map(([k, v]) => [k, Math.round(v)])),
        uploadedBlobs: run.result.uploadedBlobs,
      });
      log(`re-push without hash cache ${i}: ${JSON.stringify(uncached.at(-1))}`);
    }
    const repushP50 = percentile(
      repushes.map((r) => r.ms),
      50,
    );
    results.repush10k = {
      files: SMALL_FILES,
      firstPushMs: Math.round(first.ms),
      runs: repushes,
      p50Ms: repushP50,
      withoutHashCache: uncached,
      withoutHashCacheP50Ms: percentile(
        uncached.map((r) => r.ms),
        50,
      ),
      target: "<= 300 ms, no blob uploaded",
      pass: repushP50 <= 300 && repushes.every((r) => r.uploadedBlobs === 0),
    };
  }
  // 3. Mounts: plain create, warm create, cold create (cache entry removed first), interleaved.
  if (PHASES.has("mount") && bigVolume) {
    const waitState = async (id: string, state: string) => {
      const got = (await api("GET", `/v1/sandboxes/${id}?wait_state=${state}&wait_timeout_seconds=25`)) as {
        sandbox: { state: string };
      };
      if (got.sandbox.state !== state) throw new Error(`${id} is ${got.sandbox.state}, not ${state}`);
    };
    const createRunning = async (volumes: unknown[]) => {
      const started = performance.now();
      const created = (await api("POST", "/v1/sandboxes", { command: ["sleep", "3600"], volumes })) as { id: string };
      await waitState(created.id, "running");
      return { id: created.id, ms: performance.now() - started };
    };
    const remove = async (id: string) => {
      await api("DELETE", `/v1/sandboxes/${id}`);
      await waitState(id, "terminated");
    };
    const cacheRoot = path.join(dataDir, "volume-cache");
    const mountSpec = [{ volume_id: bigVolume, target_path: "/data" }];
    // The image is pulled and cached once, outside the measurements.
    await remove((await createRunning([])).id);
    const plain: number[] = [];
    const warm: number[] = [];
    const cold: number[] = [];
    let checked = false;
    for (let i = 0; i < MOUNTS; i++) {
      const kinds = ["cold", "plain", "warm"];
      const order = [...kinds.slice(i % 3), ...kinds.slice(0, i % 3)];
      for (const kind of order) {
        if (kind === "cold") await rm(cacheRoot, { recursive: true, force: true });
        // warm after cold in the rotation is warm; a warm first in a round uses the previous round's entry.
        if (kind === "warm" && (await readdir(cacheRoot).catch(() => [])).length === 0) {
          await remove((await createRunning(mountSpec)).id);
        }
        const run = await createRunning(kind === "plain" ? [] : mountSpec);
        (kind === "plain" ? plain : kind === "warm" ? warm : cold).push(run.ms);
        if (kind !== "plain" && !checked) {
          const read = (await api("POST", `/v1/sandboxes/${run.id}:exec`, {
            cmd: ["sh", "-c", "wc -c < /data/f00.bin; ls /data | wc -l; touch /data/x 2>&1; echo rc=$?"],
          })) as { stdout?: string; output?: string };
          results.mountCheck = read;
          checked = true;
        }
        await remove(run.id);
      }
      log(
        `mount round ${i}: plain ${round1(plain.at(-1) ?? 0)} warm ${round1(warm.at(-1) ?? 0)} cold ${round1(cold.at(-1) ?? 0)}`,
      );
    }
    const plainS = summary(plain);
    const warmS = summary(warm);
    const coldS = summary(cold);
    results.mount1GiB = {
      version: bigVersion,
      plain: plainS,
      warm: warmS,
      cold: coldS,
      warmOverPlainP50Ms: round1(warmS.p50 - plainS.p50),
      targets: "cold p50 <= 1000 ms create -> running; warm p50 - plain p50 <= 10 ms",
      pass: { cold: coldS.p50 <= 1000, warm: warmS.p50 - plainS.p50 <= 10 },
    };
  }
  results.machine = {
    cpus: os.cpus().length,
    model: os.cpus()[0]?.model,
    loadAtEnd: os.loadavg().map((l) => Math.round(l * 100) / 100),
    busyAtEndPct: Math.round(await machineLoad(1000)),
    filesystem: "the data dir, the source tree and the raw copy share one filesystem (os.tmpdir())",
  };
  results.server = SERVER_METHOD.replace("WARREN_LOG_LEVEL=info", "WARREN_LOG_LEVEL=warn");
  results.at = new Date().toISOString();
  await writeFile(path.join(ROOT, "bench/results/volumes.json"), `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
} finally {
  await rig.close();
}
