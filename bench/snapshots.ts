// Snapshot benchmarks through the API of a real server (the `make run` bundle) on real runc
// sandboxes with durable workspaces, each next to the raw storage operation underneath in
// the same run, alternated sample by sample (the order swapped every round):
//   snapshot of a running sandbox to `local` (POST :snapshot, no wait_remote), 100 MB and
//     1 GiB of workspace data: p50 <= 30 ms, the two p50s within 2x of each other.
//     Raw: the storage side alone, with the current clone helper: syncfs of the sandbox's two
//     filesystems (writers go on), then syncfs + FICLONE of its two image files (`sync-clone`:
//     the step the sandbox stays frozen for), then the seal (a record written and fsynced, the
//     dir renamed, its parent fsynced). With --baseline-helper REV, an older helper's
//     `freeze-clone` (FIFREEZE, FICLONE, FITHAW: a clean log) runs beside it.
//   restore (create from the snapshot) -> running: p50 <= 120 ms, 100 MB vs 1 GiB within 2x.
//     Raw: FICLONE of the snapshot's two images + `runc run -d` (bench/lib/raw-runc.ts);
//     also reported with the two loop mounts between them.
//   replication of a new 100 MB workspace to the fs blob store, from the snapshot's answer to
//     durability `replicated` (the same request repeated with its Idempotency-Key and
//     wait_remote): >= 300 MB/s; after changing 1 MB: <= 150 ms.
//     Raw: `cp --sparse=always` of the two images to the blob store's filesystem + fsync
//     (1 MB written and fsynced for the delta).
//   restore from the blob store only (a second server on the same data with
//     WARREN_SNAPSHOT_LOCAL_COPIES=drop; the host copy is gone once replicated) of 100 MB:
//     <= 1.5 s to running. Raw: `cp --sparse=always` of the same two images from the blob
//     store's filesystem into the pool + fsync + `runc run -d`.
// Usage: node --import tsx bench/snapshots.ts [--snapshots 15] [--restores 10] [--fresh 4]
//   [--deltas 7] [--blob-restores 4] [--sizes 100MB,1GiB] [--phases local,replication,blob]
//   [--server-log FILE] [--baseline-helper GIT_REV]
//   (local: snapshot and restore; replication: fresh and delta; blob: restore from the blob store)
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { copyFile, mkdir, mkdtemp, open, rename, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { TOOLS } from "../src/drivers/runtime/local/host.js";
import { Layout } from "../src/drivers/runtime/local/layout.js";
import { buildStaticBinary } from "../src/drivers/runtime/local/static-binary.js";
import { cloneHelper } from "../src/drivers/runtime/local/storage/images.js";
import { sweepRoot } from "../src/drivers/runtime/local/sweep.js";
import { pushTestImages, startTestRegistry } from "../test/support/registry.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { allocatedBytes, changeOneMB, fsyncFile, writeRandom } from "./lib/data-files.js";
import { openRawRunc, type RawRunc } from "./lib/raw-runc.js";
import { freePort, killAllServers, type RunningServer, startServer } from "./lib/server.js";
import { percentile } from "./lib/stats.js";

const exec = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const SNAPSHOTS = Number(args.get("snapshots") ?? 15);
const RESTORES = Number(args.get("restores") ?? 10);
const FRESH = Number(args.get("fresh") ?? 4);
const DELTAS = Number(args.get("deltas") ?? 7);
const BLOB_RESTORES = Number(args.get("blob-restores") ?? 4);
const SIZES: Record<string, number> = { "100MB": 100e6, "1GiB": 2 ** 30 };
const SIZE_NAMES = (args.get("sizes") ?? "100MB,1GiB").split(",");
/** Where the servers' log goes (default: the temp dir, removed at the end). */
const SERVER_LOG = args.get("server-log");
/** A git revision whose clone helper (its `freeze-clone`) runs beside the current one on the raw side. */
const BASELINE_HELPER = args.get("baseline-helper");
const PHASES = new Set((args.get("phases") ?? "local,replication,blob").split(","));
const WORKSPACE_GIB = 2;
const TARGETS = {
  snapshotP50Ms: 30,
  restoreP50Ms: 120,
  sizeSpread: 2,
  freshMBps: 300,
  deltaMs: 150,
  blobRestoreMs: 1500,
};
const DEFAULT_RESOURCES = { memoryMiB: 512, cpuMillis: 1000, pids: 512 };
const log = (line: string) => process.stderr.write(`[bench] ${line}\n`);

const r1 = (value: number) => Math.round(value * 10) / 10;
const summary = (values: number[]) => ({
  n: values.length,
  p50: r1(percentile(values, 50)),
  p90: r1(percentile(values, 90)),
  max: r1(Math.max(...values)),
});
const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;

async function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const started = performance.now();
  const value = await work();
  return { ms: performance.now() - started, value };
}

/** Runs raw then Warren, or Warren then raw, swapping the order every round. */
/** The clone helper of BASELINE_HELPER's tree, built like the current one; null without the option. */
async function baselineHelper(): Promise<string | null> {
  if (!BASELINE_HELPER) return null;
  const helperPath = "src/drivers/runtime/local/storage/clone-helper.c";
  const source = path.join(tmp, "clone-helper-baseline.c");
  await writeFile(source, (await exec("git", ["show", `${BASELINE_HELPER}:${helperPath}`], { cwd: ROOT })).stdout);
  return buildStaticBinary(source, "warren-clone-baseline");
}

async function alternate(rounds: number, raw: () => Promise<void>, warren: () => Promise<void>): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    if (i % 2 === 0) {
      await raw();
      await warren();
    } else {
      await warren();
      await raw();
    }
  }
}

const results: Record<string, unknown> = {};
const loadAtStart = os.loadavg().map((l) => Math.round(l * 100) / 100);
let raw: RawRunc | null = null;
const registry = await startTestRegistry();
const tmp = await mkdtemp(path.join(os.tmpdir(), "warren-bench-snap-"));
const runtimeRoot = path.join(tmp, "runtime");
const dataDir = path.join(tmp, "data");
const layout = new Layout(runtimeRoot);
const rawDir = path.join(layout.poolDir, "bench-raw");
const key = `bench-${randomBytes(12).toString("hex")}`;
let server = null as RunningServer | null;
const rawMounts = new Set<string>();
const cleanup = async () => {
  killAllServers();
  for (const point of rawMounts) await exec(TOOLS.umount, [point]).catch(() => undefined);
  await raw?.close().catch(() => undefined);
  await sweepRoot(runtimeRoot).catch(() => undefined);
  await registry.stop().catch(() => undefined);
  await rm(tmp, { recursive: true, force: true });
};
process.on("SIGINT", () => {
  void cleanup().finally(() => process.exit(130));
});

const serverEnv = (extra: Record<string, string> = {}) => ({
  WARREN_DATA_DIR: dataDir,
  WARREN_RUNTIME_ROOT: runtimeRoot,
  WARREN_BOOTSTRAP_API_KEY: key,
  WARREN_DEFAULT_IMAGE: `${registry.host}/test/busybox:latest`,
  WARREN_QUOTA_SANDBOXES_RUNNING: "100",
  WARREN_QUOTA_SANDBOXES_TOTAL: "200",
  WARREN_QUOTA_WORKSPACE_GIB: "10000",
  ...extra,
});

try {
  await pushTestImages(registry);
  const port = await freePort();
  const start = async (extra: Record<string, string> = {}) => {
    server = await startServer({
      root: ROOT,
      port,
      logFile: SERVER_LOG ?? path.join(tmp, "server.log"),
      env: serverEnv(extra),
    });
    return server;
  };
  await start();
  const base = () => (server as RunningServer).baseUrl;
  const api = async (method: string, url: string, body?: unknown, headers: Record<string, string> = {}) => {
    const response = await call<Record<string, unknown>>(base(), key, method, url, body, headers);
    if (response.status >= 300)
      throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const waitState = async (id: string, state: string) => {
    const got = (await api("GET", `/v1/sandboxes/${id}?wait_state=${state}&wait_timeout_seconds=25`)) as {
      sandbox: { state: string };
    };
    if (got.sandbox.state !== state)
      throw new Error(`${id} is ${got.sandbox.state}, not ${state}: ${JSON.stringify(got.sandbox)}`);
  };
  const createRunning = async (body: Record<string, unknown>) => {
    const started = performance.now();
    const created = (await api("POST", "/v1/sandboxes", {
      command: ["sleep", "3600"],
      network_access: "none",
      ...body,
    })) as { id: string };
    await waitState(created.id, "running");
    return { id: created.id, ms: performance.now() - started };
  };
  const remove = async (id: string) => {
    await api("DELETE", `/v1/sandboxes/${id}`);
    await waitState(id, "terminated");
  };
  /** POST :snapshot without wait_remote; the answer (durability local) and how long it took. */
  const snapshot = async (sandboxId: string, idempotencyKey: string) => {
    const { ms, value } = await timed(
      () =>
        api("POST", `/v1/sandboxes/${sandboxId}:snapshot`, {}, { "idempotency-key": idempotencyKey }) as Promise<{
          snapshot_id: string;
          durability: string;
        }>,
    );
    return { ms, id: value.snapshot_id, durability: value.durability };
  };
  /** The same request again with wait_remote until the snapshot is replicated. */
  const awaitReplicated = async (sandboxId: string, idempotencyKey: string) => {
    for (let i = 0; i < 20; i++) {
      const answer = (await api(
        "POST",
        `/v1/sandboxes/${sandboxId}:snapshot`,
        { wait_remote: true, wait_timeout_seconds: 25 },
        { "idempotency-key": idempotencyKey },
      )) as { durability: string };
      if (answer.durability === "replicated") return;
    }
    throw new Error(`snapshot of ${sandboxId} (key ${idempotencyKey}) not replicated`);
  };
  const newKey = () => `bench-${randomBytes(8).toString("hex")}`;
  const snapshotDir = (snapshotId: string) => path.join(layout.poolDir, "snapshots", snapshotId);

  // Warm the image cache (the first create pulls and unpacks the image).
  const warm = await createRunning({});
  await remove(warm.id);
  const plain = await openRawRunc(DEFAULT_RESOURCES);
  raw = plain;
  await plain.remove((await plain.run()).id);
  await mkdir(rawDir, { recursive: true });
  let rawSeq = 0;

  // ---- 1 and 2: snapshot to local, restore to running; 100 MB and 1 GiB -------------------
  const bySize: Record<string, { snapshot: unknown; restore: unknown; dataBytes: number; imageBytes: number }> = {};
  const durableBody = { storage_class: "durable", workspace_capacity_gib: WORKSPACE_GIB };
  for (const sizeName of PHASES.has("local") ? SIZE_NAMES : []) {
    const bytes = SIZES[sizeName];
    if (bytes === undefined) throw new Error(`unknown size ${sizeName}`);
    const source = await createRunning(durableBody);
    const paths = layout.sandbox(source.id);
    const images = layout.sandboxImages(source.id);
    await writeRandom(path.join(paths.workspace, "data"), bytes);
    // The first snapshot replicates everything; later ones (nothing changed) are deltas. Each
    // sample waits (untimed) for its replication, so none runs under the next sample.
    const first = newKey();
    const firstSnap = await snapshot(source.id, first);
    await awaitReplicated(source.id, first);
    const imageBytes = await allocatedBytes([images.root, images.workspace]);
    log(`${sizeName}: source ${source.id}, images ${(imageBytes / 1e6).toFixed(0)} MB allocated`);

    const warrenSnap: number[] = [];
    const rawSnap: number[] = [];
    const rawCloneStep: number[] = [];
    const baselineSnap: number[] = [];
    const baselineFreezeCloneThaw: number[] = [];
    let lastSnapshotId = firstSnap.id;
    const mounts = [paths.layer, paths.workspace];
    const helper = await cloneHelper();
    const baseline = await baselineHelper();
    /**
     * The storage side of a snapshot without the API, the store and the cgroup freeze: the
     * helper's syncfs, then its clone step (timed apart: the frozen window's floor), current
     * `sync-clone` (syncfs, FICLONE x2) or an older helper's `freeze-clone` (FIFREEZE,
     * FICLONE x2, FITHAW), then Warren's seal (a record written and fsynced, the dir renamed,
     * its parent fsynced).
     */
    const rawSnapshot = async (binary: string, step: "sync-clone" | "freeze-clone") => {
      const dir = path.join(rawDir, `s${rawSeq++}`);
      await mkdir(dir);
      const targets = [path.join(dir, "root.img"), path.join(dir, "workspace.img")];
      let cloneMs = 0;
      const { ms } = await timed(async () => {
        await exec(binary, ["sync", ...mounts]);
        cloneMs = (
          await timed(() =>
            exec(binary, [
              step,
              ...mounts,
              "--",
              images.root,
              targets[0] as string,
              images.workspace,
              targets[1] as string,
            ]),
          )
        ).ms;
        const record = await open(path.join(dir, "snapshot.json"), "wx");
        await record.writeFile("{}\n");
        await record.sync();
        await record.close();
        await rename(dir, `${dir}.sealed`);
        await fsyncFile(rawDir);
      });
      await rm(`${dir}.sealed`, { recursive: true });
      return { ms, cloneMs };
    };
    await alternate(
      SNAPSHOTS,
      async () => {
        // Baseline and current helper in turn (the order swapped every round), then Warren.
        const runs: [string, "sync-clone" | "freeze-clone", number[], number[]][] = [
          [helper, "sync-clone", rawSnap, rawCloneStep],
        ];
        if (baseline) runs.push([baseline, "freeze-clone", baselineSnap, baselineFreezeCloneThaw]);
        if (rawSeq % 2 === 1) runs.reverse();
        for (const [binary, step, total, window] of runs) {
          const sample = await rawSnapshot(binary, step);
          total.push(sample.ms);
          window.push(sample.cloneMs);
        }
      },
      async () => {
        const idempotencyKey = newKey();
        const taken = await snapshot(source.id, idempotencyKey);
        if (taken.durability !== "local") throw new Error(`snapshot answered ${taken.durability}`);
        warrenSnap.push(taken.ms);
        lastSnapshotId = taken.id;
        await awaitReplicated(source.id, idempotencyKey);
      },
    );

    const warrenRestore: number[] = [];
    const rawRestore: number[] = [];
    const rawRestoreParts: { cloneMs: number[]; mountMs: number[]; runMs: number[] } = {
      cloneMs: [],
      mountMs: [],
      runMs: [],
    };
    const sealed = { root: path.join(snapshotDir(lastSnapshotId), "root.img") };
    const sealedWorkspace = path.join(snapshotDir(lastSnapshotId), "workspace.img");
    await alternate(
      RESTORES,
      async () => {
        const dir = path.join(rawDir, `r${rawSeq++}`);
        await mkdir(dir);
        const targets = [path.join(dir, "root.img"), path.join(dir, "workspace.img")];
        const points = [path.join(dir, "layer"), path.join(dir, "workspace")];
        const clone = await timed(() =>
          Promise.all([
            copyFile(sealed.root, targets[0] as string, constants.COPYFILE_FICLONE_FORCE),
            copyFile(sealedWorkspace, targets[1] as string, constants.COPYFILE_FICLONE_FORCE),
          ]),
        );
        const mount = await timed(() =>
          Promise.all(
            targets.map(async (image, i) => {
              const point = points[i] as string;
              await mkdir(point);
              await exec(TOOLS.mount, ["-t", "xfs", "-o", "loop,nouuid,noatime", image, point]);
              rawMounts.add(point);
            }),
          ),
        );
        const run = await plain.run();
        rawRestoreParts.cloneMs.push(clone.ms);
        rawRestoreParts.mountMs.push(mount.ms);
        rawRestoreParts.runMs.push(run.ms);
        rawRestore.push(clone.ms + run.ms);
        await plain.remove(run.id);
        for (const point of points) {
          await exec(TOOLS.umount, [point]);
          rawMounts.delete(point);
        }
        await rm(dir, { recursive: true });
      },
      async () => {
        const restored = await createRunning({ snapshot_id: lastSnapshotId });
        warrenRestore.push(restored.ms);
        await remove(restored.id);
      },
    );
    const withMounts = rawRestoreParts.cloneMs.map(
      (ms, i) => ms + (rawRestoreParts.mountMs[i] as number) + (rawRestoreParts.runMs[i] as number),
    );
    const snapP50 = percentile(warrenSnap, 50);
    const restoreP50 = percentile(warrenRestore, 50);
    bySize[sizeName] = {
      dataBytes: bytes,
      imageBytes,
      snapshot: {
        warren: summary(warrenSnap),
        rawSyncCloneSeal: summary(rawSnap),
        rawSyncClone: summary(rawCloneStep),
        ...(baseline
          ? {
              baselineHelper: BASELINE_HELPER,
              baselineFreezeCloneSeal: summary(baselineSnap),
              baselineFreezeCloneThaw: summary(baselineFreezeCloneThaw),
            }
          : {}),
        ratioToRawP50: ratio(snapP50, percentile(rawSnap, 50)),
        ratioToSyncCloneP50: ratio(snapP50, percentile(rawCloneStep, 50)),
        firstSnapshotMs: r1(firstSnap.ms),
      },
      restore: {
        warren: summary(warrenRestore),
        rawCloneRun: summary(rawRestore),
        rawCloneMountRun: summary(withMounts),
        rawParts: {
          cloneP50: r1(percentile(rawRestoreParts.cloneMs, 50)),
          mountP50: r1(percentile(rawRestoreParts.mountMs, 50)),
          runcRunP50: r1(percentile(rawRestoreParts.runMs, 50)),
        },
        ratioToCloneRunP50: ratio(restoreP50, percentile(rawRestore, 50)),
        ratioToCloneMountRunP50: ratio(restoreP50, percentile(withMounts, 50)),
      },
    };
    log(
      `${sizeName}: snapshot p50 ${r1(snapP50)} ms (raw ${r1(percentile(rawSnap, 50))}), restore p50 ${r1(restoreP50)} ms (raw clone+run ${r1(percentile(rawRestore, 50))})`,
    );
    await remove(source.id);
  }
  if (PHASES.has("local")) results.bySize = bySize;
  const p50Of = (size: string, what: "snapshot" | "restore") =>
    (bySize[size]?.[what] as { warren: { p50: number } } | undefined)?.warren.p50 ?? Number.NaN;
  const spread = (what: "snapshot" | "restore") => {
    const values = SIZE_NAMES.map((size) => p50Of(size, what));
    return ratio(Math.max(...values), Math.min(...values));
  };
  if (PHASES.has("local"))
    results.snapshotToLocal = {
      target: `p50 <= ${TARGETS.snapshotP50Ms} ms at each size, sizes within ${TARGETS.sizeSpread}x`,
      p50Ms: Object.fromEntries(SIZE_NAMES.map((size) => [size, p50Of(size, "snapshot")])),
      sizeSpread: spread("snapshot"),
      pass:
        SIZE_NAMES.every((size) => p50Of(size, "snapshot") <= TARGETS.snapshotP50Ms) &&
        spread("snapshot") <= TARGETS.sizeSpread,
    };
  if (PHASES.has("local"))
    results.restoreToRunning = {
      target: `p50 <= ${TARGETS.restoreP50Ms} ms at each size, sizes within ${TARGETS.sizeSpread}x`,
      p50Ms: Object.fromEntries(SIZE_NAMES.map((size) => [size, p50Of(size, "restore")])),
      sizeSpread: spread("restore"),
      pass:
        SIZE_NAMES.every((size) => p50Of(size, "restore") <= TARGETS.restoreP50Ms) &&
        spread("restore") <= TARGETS.sizeSpread,
    };

  // ---- 3: replication of a new 100 MB workspace, then of 1 MB changed -----------------------
  const FRESH_BYTES = 100e6;
  const freshWarren: number[] = [];
  const freshRaw: number[] = [];
  const hostCopies = {
    root: path.join(dataDir, "bench-raw-root.img"),
    workspace: path.join(dataDir, "bench-raw-ws.img"),
  };
  if (PHASES.has("replication")) {
    let deltaSource = "";
    const sources: string[] = [];
    await alternate(
      FRESH,
      async () => {
        // The source: the images of the latest new sandbox (or the first one's, made now).
        if (sources.length === 0) {
          const made = await createRunning(durableBody);
          sources.push(made.id);
          await writeRandom(path.join(layout.sandbox(made.id).workspace, "data"), FRESH_BYTES);
        }
        const images = layout.sandboxImages(sources[sources.length - 1] as string);
        await rm(hostCopies.root, { force: true });
        await rm(hostCopies.workspace, { force: true });
        const { ms } = await timed(async () => {
          await Promise.all([
            exec("cp", ["--reflink=never", "--sparse=always", images.root, hostCopies.root]),
            exec("cp", ["--reflink=never", "--sparse=always", images.workspace, hostCopies.workspace]),
          ]);
          await Promise.all([fsyncFile(hostCopies.root), fsyncFile(hostCopies.workspace)]);
        });
        freshRaw.push(ms);
      },
      async () => {
        const made = await createRunning(durableBody);
        sources.push(made.id);
        await writeRandom(path.join(layout.sandbox(made.id).workspace, "data"), FRESH_BYTES);
        const idempotencyKey = newKey();
        await snapshot(made.id, idempotencyKey);
        const { ms } = await timed(() => awaitReplicated(made.id, idempotencyKey));
        freshWarren.push(ms);
        deltaSource = made.id;
      },
    );
    const freshImageBytes = await allocatedBytes([hostCopies.root, hostCopies.workspace]);

    const deltaWarren: number[] = [];
    const deltaRaw: number[] = [];
    const deltaFile = path.join(layout.sandbox(deltaSource).workspace, "data");
    await alternate(
      DELTAS,
      async () => {
        const target = path.join(dataDir, `bench-raw-delta-${rawSeq++}`);
        const { ms } = await timed(async () => {
          await writeFile(target, randomBytes(1e6));
          await fsyncFile(target);
        });
        deltaRaw.push(ms);
        await rm(target);
      },
      async () => {
        await changeOneMB(deltaFile);
        const idempotencyKey = newKey();
        await snapshot(deltaSource, idempotencyKey);
        const { ms } = await timed(() => awaitReplicated(deltaSource, idempotencyKey));
        deltaWarren.push(ms);
      },
    );
    for (const id of sources) await remove(id);
    const freshP50 = percentile(freshWarren, 50);
    const freshMBps = r1(FRESH_BYTES / 1e6 / (freshP50 / 1000));
    results.replicationFresh = {
      dataBytes: FRESH_BYTES,
      imagesAllocatedBytes: freshImageBytes,
      warrenMs: summary(freshWarren),
      warrenMBps: freshMBps,
      rawCpFsyncMs: summary(freshRaw),
      rawCpFsyncMBps: r1(FRESH_BYTES / 1e6 / (percentile(freshRaw, 50) / 1000)),
      ratioToRawP50: ratio(freshP50, percentile(freshRaw, 50)),
      target: `>= ${TARGETS.freshMBps} MB/s (100 MB of workspace data / time from the answer to replicated)`,
      pass: freshMBps >= TARGETS.freshMBps,
    };
    results.replicationDelta = {
      changedBytes: 1e6,
      warrenMs: summary(deltaWarren),
      rawWrite1MBFsyncMs: summary(deltaRaw),
      ratioToRawP50: ratio(percentile(deltaWarren, 50), percentile(deltaRaw, 50)),
      target: `p50 <= ${TARGETS.deltaMs} ms`,
      pass: percentile(deltaWarren, 50) <= TARGETS.deltaMs,
    };
    log(`replication: fresh ${freshMBps} MB/s, delta p50 ${r1(percentile(deltaWarren, 50))} ms`);
  }

  // ---- 4: restore from the blob store only ---------------------------------------------------
  if (PHASES.has("blob")) {
    await server?.stop();
    await start({ WARREN_SNAPSHOT_LOCAL_COPIES: "drop" });
    const blobSource = await createRunning(durableBody);
    const blobFile = path.join(layout.sandbox(blobSource.id).workspace, "data");
    await writeRandom(blobFile, FRESH_BYTES);
    if (!(await stat(hostCopies.workspace).catch(() => null))) {
      // The raw side's copies on the blob store's filesystem, when the replication phase did not make them.
      const images = layout.sandboxImages(blobSource.id);
      await exec("cp", ["--reflink=never", "--sparse=always", images.root, hostCopies.root]);
      await exec("cp", ["--reflink=never", "--sparse=always", images.workspace, hostCopies.workspace]);
    }
    const blobWarren: number[] = [];
    const blobRaw: number[] = [];
    await alternate(
      BLOB_RESTORES,
      async () => {
        const dir = path.join(rawDir, `b${rawSeq++}`);
        await mkdir(dir);
        const targets = [path.join(dir, "root.img"), path.join(dir, "workspace.img")];
        const copy = await timed(async () => {
          await Promise.all([
            exec("cp", ["--reflink=never", "--sparse=always", hostCopies.root, targets[0] as string]),
            exec("cp", ["--reflink=never", "--sparse=always", hostCopies.workspace, targets[1] as string]),
          ]);
          await Promise.all(targets.map((file) => fsyncFile(file)));
        });
        const run = await plain.run();
        blobRaw.push(copy.ms + run.ms);
        await plain.remove(run.id);
        await rm(dir, { recursive: true });
      },
      async () => {
        await changeOneMB(blobFile);
        const idempotencyKey = newKey();
        const taken = await snapshot(blobSource.id, idempotencyKey);
        await awaitReplicated(blobSource.id, idempotencyKey);
        // The host copy goes just after the snapshot is recorded replicated.
        for (let i = 0; i < 1000; i++) {
          if (!(await stat(snapshotDir(taken.id)).catch(() => null))) break;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        if (await stat(snapshotDir(taken.id)).catch(() => null)) throw new Error("the local copy was not dropped");
        const restored = await createRunning({ snapshot_id: taken.id });
        blobWarren.push(restored.ms);
        await remove(restored.id);
      },
    );
    await remove(blobSource.id);
    results.restoreFromBlobStore = {
      dataBytes: FRESH_BYTES,
      warrenMs: summary(blobWarren),
      rawCpFsyncRunMs: summary(blobRaw),
      ratioToRawP50: ratio(percentile(blobWarren, 50), percentile(blobRaw, 50)),
      target: `p50 <= ${TARGETS.blobRestoreMs} ms`,
      pass: percentile(blobWarren, 50) <= TARGETS.blobRestoreMs,
    };
  }

  results.verdicts = Object.entries(results)
    .filter(([, value]) => typeof value === "object" && value !== null && "pass" in value)
    .map(([name, value]) => `${name}: ${(value as { pass: boolean }).pass ? "PASS" : "FAIL"}`);
  results.machine = {
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? "unknown",
    node: process.version,
    loadAtStart,
    loadAtEnd: os.loadavg().map((l) => Math.round(l * 100) / 100),
  };
  results.at = new Date().toISOString();
  await writeFile(path.join(ROOT, "bench/results/snapshots.json"), `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
} catch (error) {
  process.stderr.write(`${(error as Error).stack}\n`);
  process.exitCode = 1;
} finally {
  await server?.stop().catch(() => undefined);
  await cleanup();
}
process.exit(process.exitCode ?? 0);
