// Image pull + unpack through Warren's LayerCache beside the raw operation on the same blob:
// `curl -s <blob url> | tar -xzf -`. Builds one large single-layer gzip image from host
// directories (no internet), pushes it to a loopback docker-registry, then alternates the two
// (a fresh target each time) and reports medians and their ratio (target: Warren <= 1.5x raw).
// Writes bench/results/image-pull.json. See bench/README.md.
//
//   node --import tsx bench/image-pull.ts [--dirs /usr/include,/usr/share/doc] [--runs 3]
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { LayerCache } from "../src/drivers/runtime/image/layer-cache.js";
import { RegistryClient } from "../src/drivers/runtime/image/registry-client.js";
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

  const raw: number[] = [];
  const warren: number[] = [];
  const runs = Number(args.runs);
  for (let run = 0; run < runs; run++) {
    const rawDir = path.join(work, `raw${run}`);
    mkdirSync(rawDir);
    let start = performance.now();
    await sh(`curl -sf ${registry.url}/v2/${repository}/blobs/${layerDigest} | tar -xzf - -C ${rawDir}`);
    raw.push(performance.now() - start);
    rmSync(rawDir, { recursive: true, force: true });

    const cacheRoot = path.join(work, `cache${run}`);
    const cache = new LayerCache({ root: cacheRoot, client: new RegistryClient() });
    await cache.opened;
    start = performance.now();
    await cache.pull(`${registry.host}/${repository}:latest`);
    warren.push(performance.now() - start);
    rmSync(cacheRoot, { recursive: true, force: true });
    log(
      `run ${run + 1}: raw ${(raw.at(-1) as number).toFixed(0)} ms, warren ${(warren.at(-1) as number).toFixed(0)} ms`,
    );
  }
  const result = {
    at: new Date().toISOString(),
    commit: execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT }).toString().trim(),
    machine: { cpus: os.cpus().length, load1: os.loadavg()[0] },
    layer: { entries, tarBytes: tar.length, gzipBytes: statSync(`${tarPath}.gz`).size, dirs: args.dirs },
    rawMs: raw,
    warrenMs: warren,
    rawMedianMs: median(raw),
    warrenMedianMs: median(warren),
    ratio: median(warren) / median(raw),
  };
  log(
    `median: raw ${result.rawMedianMs.toFixed(0)} ms, warren ${result.warrenMedianMs.toFixed(0)} ms, ratio ${result.ratio.toFixed(2)} (target <= 1.5)`,
  );
  writeFileSync(args.output, `${JSON.stringify(result, null, 2)}\n`);
} finally {
  await registry.stop();
  rmSync(work, { recursive: true, force: true });
}
