// Snapshot image replication (src/modules/snapshots/replication/) on a real loop-mounted XFS
// pool with reflink, next to the raw operation underneath in the same run, alternated:
//   fresh: replicate 100 MB of random data (in a sparse image) into an empty chunk store,
//     vs `cp --reflink=never` of the same image to a directory on the same disk as the store
//     (target: >= 300 MB/s)
//   delta: a reflink clone of that image with 1 MB changed, replicated against it
//     (target: <= 150 ms)
//   rebuild: the 100 MB image rebuilt from the store, vs `cp` of the replica back
//   pipeline: the same replication into a store that discards (read, chunk, hash, compress only)
//   file floor: the fs store's publish protocol alone (one fsynced file per chunk, linked, its
//     directory fsynced) for as many files as the image has chunks, with the CPU it took
//   zstd: levels 1 and 3 on the random image and on real files (node_modules' JS), per MB/s and ratio
// The chunk store is blobPackStore over the embedded fs blob store (test/support/blob-store.ts),
// the server's format: chunks appended into ~16 MiB packs, each pack written to a temp file,
// fsynced and linked into place. `perChunkObjects` is the format before packs (one object per
// chunk, blobChunkStore), run beside it.
// Usage: node --import tsx bench/replication.ts [--rounds 3] [--deltas 7] [--megabytes 100]
import { spawnSync } from "node:child_process";
import { randomBytes, randomInt } from "node:crypto";
import { constants } from "node:fs";
import { copyFile, link, mkdir, mkdtemp, open, readdir, readFile, rm, stat, unlink } from "node:fs/promises";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { blobChunkStore } from "../src/modules/snapshots/replication/chunk-store.js";
import { blobPackStore } from "../src/modules/snapshots/replication/packing.js";
import { rebuildImage } from "../src/modules/snapshots/replication/rebuild.js";
import { replicateImage } from "../src/modules/snapshots/replication/replicate.js";
import type { ChunkStore, ImageManifest } from "../src/modules/snapshots/replication/types.js";
import { openTestBlobStore } from "../test/support/blob-store.js";
import { benchArgs } from "./lib/args.js";

const args = benchArgs();
const ROUNDS = Number(args.get("rounds") ?? 3);
const DELTAS = Number(args.get("deltas") ?? 7);
const MEGABYTES = Number(args.get("megabytes") ?? 100);
const DATA_BYTES = MEGABYTES * 1000 * 1000;
const MiB = 1024 * 1024;
const FRESH_TARGET_MBPS = 300;
const DELTA_TARGET_MS = 150;

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)] as number;
};
const round = (value: number, digits = 1) => Math.round(value * 10 ** digits) / 10 ** digits;
const mbps = (bytes: number, ms: number) => round(bytes / 1e6 / (ms / 1000));

function sh(file: string, argv: string[]): void {
  const result = spawnSync(file, argv, { encoding: "utf8" });
  if (result.status !== 0) throw new Error(`${file} ${argv.join(" ")}: ${result.stderr}`);
}

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const started = performance.now();
  const value = await work();
  return { ms: performance.now() - started, value };
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true }))
    if (entry.isFile()) total += (await stat(path.join(entry.parentPath ?? entry.path, entry.name))).size;
  return total;
}

const tmp = await mkdtemp(path.join(os.tmpdir(), "warren-bench-repl-"));
const mountPoint = path.join(tmp, "pool");
let mounted = false;
const cleanup = async () => {
  if (mounted && spawnSync("umount", [mountPoint]).status !== 0) spawnSync("umount", ["-l", mountPoint]);
  mounted = false;
  await rm(tmp, { recursive: true, force: true });
};
process.on("SIGINT", () => {
  void cleanup().finally(() => process.exit(130));
});

try {
  const poolFile = path.join(tmp, "pool.xfs");
  sh("truncate", ["-s", "4G", poolFile]);
  sh("mkfs.xfs", ["-q", "-m", "reflink=1", poolFile]);
  await mkdir(mountPoint);
  sh("mount", ["-o", "loop", poolFile, mountPoint]);
  mounted = true;

  // The image: sparse, 256 MiB long, DATA_BYTES of random data in 4 runs with holes between.
  const image = path.join(mountPoint, "root.img");
  {
    const handle = await open(image, "w");
    await handle.truncate(256 * MiB);
    const run = DATA_BYTES / 4;
    for (let i = 0; i < 4; i++) await handle.write(randomBytes(run), 0, run, i * 64 * MiB);
    await handle.sync();
    await handle.close();
  }

  const fresh: { warrenMs: number[]; cpuMs: number[]; rawCpMs: number[]; stats?: unknown } = {
    warrenMs: [],
    cpuMs: [],
    rawCpMs: [],
  };
  let store: { chunks: ChunkStore; root: string } | null = null;
  let manifest: ImageManifest | null = null;
  for (let r = 0; r < ROUNDS; r++) {
    const rawOnce = async () => {
      const target = path.join(tmp, `raw-${r}`);
      const { ms } = await timed(async () => sh("cp", ["--reflink=never", "--sparse=always", image, target]));
      fresh.rawCpMs.push(ms);
      await rm(target);
    };
    const warrenOnce = async () => {
      const root = path.join(tmp, `blobs-${r}`);
      const chunks = blobPackStore(await openTestBlobStore(root), "orgs/org_bench");
      const cpu = process.cpuUsage();
      const { ms, value } = await timed(() => replicateImage({ path: image, chunks }));
      const used = process.cpuUsage(cpu);
      fresh.warrenMs.push(ms);
      fresh.cpuMs.push((used.user + used.system) / 1000);
      fresh.stats = value.stats;
      if (store) await rm(store.root, { recursive: true, force: true });
      store = { chunks, root };
      manifest = value.manifest;
    };
    if (r % 2 === 0) {
      await rawOnce();
      await warrenOnce();
    } else {
      await warrenOnce();
      await rawOnce();
    }
  }
  if (!store || !manifest) throw new Error("no replication ran");
  const kept = store as { chunks: ChunkStore; root: string };
  const baseManifest = manifest as ImageManifest;

  // The same with the sha256 of every chunk passed to the store (verifyWrites, the default
  // for S3, off for the fs store): what hashing each chunk twice more costs.
  const verifiedMs: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const root = path.join(tmp, `blobs-v${r}`);
    const chunks = blobPackStore(await openTestBlobStore(root), "orgs/org_bench", { verifyWrites: true });
    verifiedMs.push((await timed(() => replicateImage({ path: image, chunks }))).ms);
    await rm(root, { recursive: true, force: true });
  }

  // The format before packs: one object per chunk.
  const perChunkMs: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const root = path.join(tmp, `blobs-o${r}`);
    const chunks = blobChunkStore(await openTestBlobStore(root), "orgs/org_bench");
    perChunkMs.push((await timed(() => replicateImage({ path: image, chunks }))).ms);
    await rm(root, { recursive: true, force: true });
  }

  // The store's floor without any of Warren's code: as many files as the image has chunks,
  // of the chunks' sizes (random bytes), each written the way the fs store publishes an
  // object (open O_EXCL in tmp/, write, fsync, close, link into a shard directory, unlink
  // the temp, fsync the shard directory), 8 at once; with the process's CPU (user + system,
  // the threadpool's included). One file per chunk costs this much whatever the pipeline does.
  const floor: { ms: number[]; cpuMs: number[] } = { ms: [], cpuMs: [] };
  const pieces = baseManifest.chunks.map((chunk) => randomBytes(chunk.size));
  for (let r = 0; r < ROUNDS; r++) {
    const root = path.join(tmp, `floor-${r}`);
    await mkdir(path.join(root, "tmp"), { recursive: true });
    for (let shard = 0; shard < 256; shard++) await mkdir(path.join(root, shard.toString(16).padStart(2, "0")));
    let next = 0;
    const cpu = process.cpuUsage();
    const { ms } = await timed(() =>
      Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < pieces.length) {
            const i = next++;
            const temp = path.join(root, "tmp", `${i}.tmp`);
            const handle = await open(temp, "wx");
            await handle.write(pieces[i] as Buffer);
            await handle.sync();
            await handle.close();
            const dir = path.join(root, (i % 256).toString(16).padStart(2, "0"));
            await link(temp, path.join(dir, String(i)));
            await unlink(temp);
            const dirHandle = await open(dir, "r");
            await dirHandle.sync();
            await dirHandle.close();
          }
        }),
      ),
    );
    const used = process.cpuUsage(cpu);
    floor.ms.push(ms);
    floor.cpuMs.push((used.user + used.system) / 1000);
    await rm(root, { recursive: true, force: true });
  }

  // The pipeline alone (read, chunk, hash, compress) into a store that keeps nothing: what
  // the chunk store's writes add is the difference.
  const discard: ChunkStore = {
    has: async () => false,
    put: async () => {},
    get: async () => null,
    flush: async () => {},
  };
  const pipelineMs: number[] = [];
  for (let r = 0; r < ROUNDS; r++)
    pipelineMs.push((await timed(() => replicateImage({ path: image, chunks: discard }))).ms);

  const concurrencySweep: Record<string, number> = {};
  for (const concurrency of [1, 2, 4, 8]) {
    const root = path.join(tmp, `blobs-c${concurrency}`);
    const chunks = blobPackStore(await openTestBlobStore(root), "orgs/org_bench");
    const { ms } = await timed(() => replicateImage({ path: image, chunks, concurrency }));
    concurrencySweep[`concurrency${concurrency}MBps`] = mbps(DATA_BYTES, ms);
    await rm(root, { recursive: true, force: true });
  }

  // Delta: each round a fresh clone of the base with 1 MB changed at a random place.
  const delta: { ms: number[]; uploadedBytes: number[]; newChunks: number[] } = {
    ms: [],
    uploadedBytes: [],
    newChunks: [],
  };
  for (let d = 0; d < DELTAS; d++) {
    const clone = path.join(mountPoint, `clone-${d}.img`);
    await copyFile(image, clone, constants.COPYFILE_FICLONE_FORCE);
    const handle = await open(clone, "r+");
    const run = randomInt(4);
    const offset = run * 64 * MiB + randomInt(Math.floor((DATA_BYTES / 4 - 1e6) / 4096)) * 4096;
    await handle.write(randomBytes(1e6), 0, 1e6, offset);
    await handle.sync();
    await handle.close();
    const { ms, value } = await timed(() =>
      replicateImage({ path: clone, base: { path: image, manifest: baseManifest }, chunks: kept.chunks }),
    );
    delta.ms.push(ms);
    delta.uploadedBytes.push(value.stats.uploadedBytes);
    delta.newChunks.push(value.stats.newChunks);
    await rm(clone);
  }
  // The same change without a base, for comparison (everything read, hashed, looked up).
  const noBase = await timed(() => replicateImage({ path: image, chunks: kept.chunks }));

  const rebuild: { warrenMs: number[]; rawCpMs: number[] } = { warrenMs: [], rawCpMs: [] };
  const storedCopy = path.join(tmp, "raw-store-copy");
  sh("cp", ["--reflink=never", "--sparse=always", image, storedCopy]);
  for (let r = 0; r < ROUNDS; r++) {
    const target = path.join(mountPoint, `rebuilt-${r}.img`);
    const { ms } = await timed(() => rebuildImage({ manifest: baseManifest, path: target, chunks: kept.chunks }));
    rebuild.warrenMs.push(ms);
    if (r === 0 && !(await readFile(target)).equals(await readFile(image))) throw new Error("rebuild differs");
    await rm(target);
    const rawTarget = path.join(mountPoint, `rawback-${r}.img`);
    const raw = await timed(async () => sh("cp", ["--reflink=never", "--sparse=always", storedCopy, rawTarget]));
    rebuild.rawCpMs.push(raw.ms);
    await rm(rawTarget);
  }

  // zstd levels through the native bindings (the package's index.js ignores the level).
  const zstd = createRequire(import.meta.url)("@mongodb-js/zstd/bindings.js") as {
    compress(data: Buffer, level?: number): Promise<Buffer>;
  };
  const corpora: Record<string, Buffer> = { random: randomBytes(32 * MiB) };
  {
    const parts: Buffer[] = [];
    let size = 0;
    for (const entry of await readdir(path.resolve("node_modules"), { recursive: true, withFileTypes: true })) {
      if (size >= 32 * MiB) break;
      if (!entry.isFile() || !entry.name.endsWith(".js")) continue;
      const data = await readFile(path.join(entry.parentPath ?? entry.path, entry.name));
      parts.push(data);
      size += data.length;
    }
    corpora.javascript = Buffer.concat(parts).subarray(0, 32 * MiB);
  }
  const zstdLevels: Record<string, { MBps: number; ratio: number }> = {};
  for (const [name, corpus] of Object.entries(corpora))
    for (const level of [1, 3]) {
      const pieces: Buffer[] = [];
      for (let at = 0; at < corpus.length; at += 256 * 1024) pieces.push(corpus.subarray(at, at + 256 * 1024));
      let out = 0;
      const { ms } = await timed(async () => {
        for (let i = 0; i < pieces.length; i += 4)
          for (const c of await Promise.all(pieces.slice(i, i + 4).map((piece) => zstd.compress(piece, level))))
            out += c.length;
      });
      zstdLevels[`${name}-level${level}`] = { MBps: mbps(corpus.length, ms), ratio: round(out / corpus.length, 3) };
    }

  const freshMs = median(fresh.warrenMs);
  const deltaMs = median(delta.ms);
  const result = {
    machine: { nproc: os.cpus().length, cpuModel: os.cpus()[0]?.model ?? "unknown", node: process.version },
    dataBytes: DATA_BYTES,
    fresh: {
      warrenMs: fresh.warrenMs.map((ms) => round(ms)),
      warrenMBps: mbps(DATA_BYTES, freshMs),
      warrenCpuMs: fresh.cpuMs.map((ms) => round(ms)),
      rawCpMs: fresh.rawCpMs.map((ms) => round(ms)),
      rawCpMBps: mbps(DATA_BYTES, median(fresh.rawCpMs)),
      ratioToCp: round(freshMs / median(fresh.rawCpMs), 2),
      storedBytes: await dirBytes(kept.root),
      stats: fresh.stats,
      target: `>= ${FRESH_TARGET_MBPS} MB/s`,
      pass: mbps(DATA_BYTES, freshMs) >= FRESH_TARGET_MBPS,
      verifiedWritesMs: verifiedMs.map((ms) => round(ms)),
      verifiedWritesMBps: mbps(DATA_BYTES, median(verifiedMs)),
      perChunkObjectsMs: perChunkMs.map((ms) => round(ms)),
      perChunkObjectsMBps: mbps(DATA_BYTES, median(perChunkMs)),
      pipelineWithoutStoreMs: pipelineMs.map((ms) => round(ms)),
      pipelineWithoutStoreMBps: mbps(DATA_BYTES, median(pipelineMs)),
      fileFloorMs: floor.ms.map((ms) => round(ms)),
      fileFloorMBps: mbps(DATA_BYTES, median(floor.ms)),
      fileFloorCpuMs: floor.cpuMs.map((ms) => round(ms)),
      threadpoolSize: Number(process.env.UV_THREADPOOL_SIZE || 4),
      ...concurrencySweep,
    },
    delta: {
      changedBytes: 1e6,
      ms: delta.ms.map((ms) => round(ms)),
      p50Ms: round(deltaMs),
      maxMs: round(Math.max(...delta.ms)),
      uploadedBytes: delta.uploadedBytes,
      newChunks: delta.newChunks,
      sameImageWithoutBaseMs: round(noBase.ms),
      target: `<= ${DELTA_TARGET_MS} ms`,
      pass: deltaMs <= DELTA_TARGET_MS,
    },
    rebuild: {
      warrenMs: rebuild.warrenMs.map((ms) => round(ms)),
      warrenMBps: mbps(DATA_BYTES, median(rebuild.warrenMs)),
      rawCpMs: rebuild.rawCpMs.map((ms) => round(ms)),
      rawCpMBps: mbps(DATA_BYTES, median(rebuild.rawCpMs)),
    },
    zstdLevels,
  };
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
} catch (error) {
  process.stderr.write(`${(error as Error).stack}\n`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
