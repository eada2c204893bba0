// Image pull + unpack through Warren's LayerCache beside the raw operation on the same blob:
// `curl -s <blob url> | tar -xzf -`. Builds one large single-layer gzip image from host
// directories (no internet), pushes it to a loopback docker-registry, then alternates the two
// (a fresh target each time) and reports medians and their ratio (target: Warren <= 1.5x raw).
// Writes bench/results/image-pull.json. See bench/README.md.
//
//   node --import tsx bench/image-pull.ts [--dirs /usr/include,/usr/share/doc] [--runs 3]
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createGunzip } from "node:zlib";
import { LayerCache } from "../src/drivers/runtime/image/layer-cache.js";
import { RegistryClient } from "../src/drivers/runtime/image/registry-client.js";
import { readTar } from "../src/drivers/runtime/image/tar.js";
import { pushBlob, pushManifest, startTestRegistry } from "../test/support/registry.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { values: args } = parseArgs({
  options: {
    dirs: { type: "string", default: "/usr/include,/usr/share/doc" },
    runs: { type: "string", default: "3" },
    output: { type: "string", default: path.join(ROOT, "bench/results/image-pull.json") },
  },
});
const log = (line: string) => process.stderr.write(`[bench] ${line}\n`);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;

interface Timed {
  ms: number;
  /** User + system CPU time: of the shell's children, or of this whole process (every thread). */
  cpuMs: number;
}

/** A shell command's wall time and the CPU time of everything it ran (GNU time). */
async function timedShell(command: string): Promise<Timed> {
  const times = path.join(work, "times");
  const start = performance.now();
  await sh(`/usr/bin/time -o ${times} -f "%U %S" sh -c '${command}'`);
  const ms = performance.now() - start;
  const [user, system] = readFileSync(times, "utf8").trim().split(/\s+/).map(Number) as [number, number];
  return { ms, cpuMs: (user + system) * 1000 };
}

/** Wall and CPU time (this process, all threads) of work done here. */
async function timedHere(fn: () => Promise<unknown>): Promise<Timed> {
  const start = performance.now();
  const cpu = process.cpuUsage();
  await fn();
  const used = process.cpuUsage(cpu);
  return { ms: performance.now() - start, cpuMs: (used.user + used.system) / 1000 };
}

function sh(command: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("sh", ["-c", command], { stdio: ["ignore", "ignore", "inherit"] });
    child.on("error", reject);
    child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`${command}: exit ${code}`))));
  });
}

const work = mkdtempSync(path.join(os.tmpdir(), "warren-bench-image-pull-"));
const registry = await startTestRegistry();
try {
  const dirs = args.dirs.split(",").map((dir) => dir.replace(/^\//, ""));
  const tarPath = path.join(work, "layer.tar");
  log(`building the layer from ${args.dirs}`);
  execFileSync("tar", ["-cf", tarPath, "--ignore-failed-read", "-C", "/", ...dirs], { stdio: "inherit" });
  const tar = readFileSync(tarPath);
  const diffId = `sha256:${createHash("sha256").update(tar).digest("hex")}`;
  const entries = Number(
    execFileSync("sh", ["-c", `tar -tf ${tarPath} | wc -l`])
      .toString()
      .trim(),
  );
  execFileSync("gzip", ["-6", tarPath]);
  const blob = readFileSync(`${tarPath}.gz`);
  const repository = "bench/big";
  const layerDigest = await pushBlob(registry.url, repository, blob);
  const config = Buffer.from(
    JSON.stringify({
      architecture: "amd64",
      os: "linux",
      config: { Cmd: ["/bin/sh"] },
      rootfs: { type: "layers", diff_ids: [diffId] },
    }),
  );
  const configDigest = await pushBlob(registry.url, repository, config);
  const mediaType = "application/vnd.docker.distribution.manifest.v2+json";
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType,
      config: {
        mediaType: "application/vnd.docker.container.image.v1+json",
        digest: configDigest,
        size: config.length,
      },
      layers: [
        { mediaType: "application/vnd.docker.image.rootfs.diff.tar.gzip", digest: layerDigest, size: blob.length },
      ],
    }),
  );
  await pushManifest(registry.url, repository, "latest", mediaType, manifest);
  log(`layer: ${entries} entries, ${(tar.length / 1e6).toFixed(1)} MB tar, ${(blob.length / 1e6).toFixed(1)} MB gzip`);

  // Where the time goes, each part alone on the same blob (cpu: user + system of all threads).
  const phases: Record<string, { ms: number; cpuMs: number }> = {};
  const blobUrl = `${registry.url}/v2/${repository}/blobs/${layerDigest}`;
  const gzPath = `${tarPath}.gz`;
  phases["raw: curl > /dev/null"] = await timedShell(`curl -sf ${blobUrl} > /dev/null`);
  phases["raw: gzip -dc > /dev/null"] = await timedShell(`gzip -dc < ${gzPath} > /dev/null`);
  phases["warren: download (streamBlob, sha256)"] = await timedHere(async () => {
    const client = new RegistryClient();
    for await (const _ of client.streamBlob({ registry: registry.host, repository }, layerDigest, blob.length)) {
      // drained
    }
  });
  phases["warren: gunzip (zlib, 256 KiB chunks)"] = await timedHere(async () => {
    for await (const _ of createReadStream(gzPath, { highWaterMark: 1 << 20 }).pipe(
      createGunzip({ chunkSize: 256 * 1024 }),
    )) {
      // drained
    }
  });
  phases["warren: tar reader + sha256 (no fs)"] = await timedHere(async () => {
    const hash = createHash("sha256");
    async function* hashed() {
      for await (const chunk of createReadStream(gzPath, { highWaterMark: 1 << 20 }).pipe(
        createGunzip({ chunkSize: 256 * 1024 }),
      )) {
        hash.update(chunk as Buffer);
        yield chunk as Buffer;
      }
    }
    for await (const entry of readTar(hashed()))
      for await (const _ of entry.body()) {
        // drained
      }
  });
  for (const [name, phase] of Object.entries(phases)) {
    log(`${name}: ${phase.ms.toFixed(0)} ms wall, ${phase.cpuMs.toFixed(0)} ms cpu`);
  }

  const raw: Timed[] = [];
  const warren: Timed[] = [];
  const runs = Number(args.runs);
  const rawRun = async (run: number) => {
    const rawDir = path.join(work, `raw${run}`);
    mkdirSync(rawDir);
    // Both start with no dirty pages of the previous run left to write back (on ext4 the
    // writeback of one run's 200+ MB otherwise lands in the next one's time).
    await sh("sync");
    raw.push(await timedShell(`curl -sf ${blobUrl} | tar -xzf - -C ${rawDir}`));
  };
  const warrenRun = async (run: number) => {
    const cacheRoot = path.join(work, `cache${run}`);
    const cache = new LayerCache({ root: cacheRoot, client: new RegistryClient() });
    await cache.opened;
    await sh("sync");
    warren.push(await timedHere(() => cache.pull(`${registry.host}/${repository}:latest`)));
  };
  // Every run's tree is kept until the end: the root fs here is mounted with `discard`, and
  // removing one run's 14k files (its discards) slowed the runs after it 2-5x.
  for (let run = 0; run < runs; run++) {
    // The order alternates: on this ext4 each extraction of a run tends to be slower than
    // the one before it, which would otherwise always count against the second.
    if (run % 2 === 0) {
      await rawRun(run);
      await warrenRun(run);
    } else {
      await warrenRun(run);
      await rawRun(run);
    }
    const [r, w] = [raw.at(-1) as Timed, warren.at(-1) as Timed];
    log(
      `run ${run + 1} (${run % 2 === 0 ? "raw first" : "warren first"}): raw ${r.ms.toFixed(0)} ms (cpu ${r.cpuMs.toFixed(0)}), warren ${w.ms.toFixed(0)} ms (cpu ${w.cpuMs.toFixed(0)}), ratio ${(w.ms / r.ms).toFixed(2)}`,
    );
  }
  const result = {
    at: new Date().toISOString(),
    commit: execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT }).toString().trim(),
    machine: { cpus: os.cpus().length, load1: os.loadavg()[0] },
    filesystem: execFileSync("stat", ["-f", "-c", "%T", work]).toString().trim(),
    layer: { entries, tarBytes: tar.length, gzipBytes: statSync(gzPath).size, dirs: args.dirs },
    phases,
    rawMs: raw.map((r) => r.ms),
    rawCpuMs: raw.map((r) => r.cpuMs),
    warrenMs: warren.map((w) => w.ms),
    warrenCpuMs: warren.map((w) => w.cpuMs),
    rawMedianMs: median(raw.map((r) => r.ms)),
    warrenMedianMs: median(warren.map((w) => w.ms)),
    ratio: median(warren.map((w) => w.ms)) / median(raw.map((r) => r.ms)),
    pairRatios: warren.map((w, i) => w.ms / (raw[i] as Timed).ms),
    cpuRatio: median(warren.map((w) => w.cpuMs)) / median(raw.map((r) => r.cpuMs)),
  };
  log(
    `median: raw ${result.rawMedianMs.toFixed(0)} ms, warren ${result.warrenMedianMs.toFixed(0)} ms, ratio ${result.ratio.toFixed(2)} (target <= 1.5); cpu ratio ${result.cpuRatio.toFixed(2)}`,
  );
  writeFileSync(args.output, `${JSON.stringify(result, null, 2)}\n`);
} finally {
  await registry.stop();
  rmSync(work, { recursive: true, force: true });
}
