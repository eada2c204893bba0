// The snapshot floor on this storage stack, alone: no server, no sandbox, no cgroup freeze.
// A pool like Warren's (XFS with reflink in a sparse file on the host, loop-mounted) holding
// two 2 GiB XFS images (root layer and workspace, clones of one template, loop-mounted, 100 MB
// of data in the workspace), and per sample a line appended to each (a live sandbox writes),
// then one snapshot's storage side, variants alternated sample by sample (order reversed
// every round):
//   baseline    GIT_REV's clone helper (--baseline REV, default 59ec78d: flushes and freezes
//               one filesystem after the other) and its seal (both clones fsynced, the
//               record, the staging dir, the renamed dir's parent)
//   freeze      the helper before sync-clone (--freeze REV, default 0753edc): FIFREEZE both
//               filesystems at once (a thread each; a clean log), FICLONE, FITHAW; the
//               current seal (the record fsynced, the renamed dir's parent)
//   current     the current helper: syncfs both at once, FICLONE (a crash-consistent clone
//               whose log a restore's mount replays); the current seal
// Each sample's parts: sync (the helper's `sync`, writers going on), window (the clone step:
// what the sandbox stays frozen for), seal. Results: bench/results/snapshot-floor.json.
// Usage: node --import tsx bench/snapshot-floor.ts [--samples 40] [--baseline 59ec78d] [--freeze 0753edc]
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, open, rename, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { run, TOOLS } from "../src/drivers/runtime/local/host.js";
import { buildStaticBinary } from "../src/drivers/runtime/local/static-binary.js";
import { cloneHelper } from "../src/drivers/runtime/local/storage/images.js";
import { benchArgs } from "./lib/args.js";

const exec = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const SAMPLES = Number(args.get("samples") ?? 40);
const BASELINE = args.get("baseline") ?? "59ec78d";
const FREEZE = args.get("freeze") ?? "0753edc";
const IMAGE_OPTIONS = "loop,nouuid,noatime,nosuid,nodev,discard";

const dir = await mkdtemp(path.join(os.tmpdir(), "warren-bench-floor-"));
const pool = path.join(dir, "pool");
const mounts = [path.join(dir, "root"), path.join(dir, "workspace")];
const images = [path.join(pool, "root.img"), path.join(pool, "workspace.img")];
const load = () => os.loadavg().map((value) => Math.round(value * 100) / 100);

async function cleanup(): Promise<void> {
  for (const point of [...mounts, pool]) await run(TOOLS.umount, [point]).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
}

async function fsyncPath(file: string): Promise<void> {
  const handle = await open(file, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

type Seal = "images" | "record";
interface Variant {
  name: string;
  seal: Seal;
  /** Flush, then the clone step into `targets`. */
  snapshot(targets: string[]): Promise<{ syncMs: number; windowMs: number }>;
}

async function timed(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return performance.now() - started;
}

function helperVariant(name: string, helper: string, step: "freeze-clone" | "sync-clone", seal: Seal): Variant {
  return {
    name,
    seal,
    async snapshot(targets) {
      const syncMs = await timed(() => exec(helper, ["sync", ...mounts]));
      const pairs = images.flatMap((image, i) => [image, targets[i] as string]);
      const windowMs = await timed(() => exec(helper, [step, ...mounts, "--", ...pairs]));
      return { syncMs, windowMs };
    },
  };
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round((sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0) * 10) / 10;
};

try {
  const loadAtStart = load();
  await mkdir(pool);
  await run(TOOLS.sh, ["-c", `truncate -s 40G "$1" && ${TOOLS.mkfsXfs} -q -f "$1"`, "sh", `${dir}/pool.img`]);
  await run(TOOLS.mount, ["-o", "loop,noatime,discard", `${dir}/pool.img`, pool]);
  await run(TOOLS.sh, ["-c", `truncate -s 2G "$1" && ${TOOLS.mkfsXfs} -q -f "$1"`, "sh", `${pool}/template.img`]);
  for (const [i, image] of images.entries()) {
    await run(TOOLS.cp, ["--reflink=always", `${pool}/template.img`, image]);
    await mkdir(mounts[i] as string);
    await run(TOOLS.mount, ["-t", "xfs", "-o", IMAGE_OPTIONS, image, mounts[i] as string]);
  }
  await run(TOOLS.sh, ["-c", `head -c 100000000 /dev/urandom > "$1/data" && sync`, "sh", mounts[1] as string]);

  const helperPath = "src/drivers/runtime/local/storage/clone-helper.c";
  const helperAt = async (rev: string, name: string) => {
    const source = path.join(dir, `${name}.c`);
    await writeFile(source, (await exec("git", ["show", `${rev}:${helperPath}`], { cwd: ROOT })).stdout);
    return buildStaticBinary(source, name);
  };
  const variants: Variant[] = [
    helperVariant("baseline", await helperAt(BASELINE, "warren-clone-baseline"), "freeze-clone", "images"),
    helperVariant("freeze", await helperAt(FREEZE, "warren-clone-freeze"), "freeze-clone", "record"),
    helperVariant("current", await cloneHelper(), "sync-clone", "record"),
  ];
  const snapshots = path.join(pool, "snapshots");
  await mkdir(snapshots);
  const samples = new Map(
    variants.map((v) => [
      v.name,
      { total: [] as number[], sync: [] as number[], window: [] as number[], seal: [] as number[] },
    ]),
  );
  let seq = 0;
  for (let round = 0; round < SAMPLES; round++) {
    for (const variant of round % 2 === 0 ? variants : [...variants].reverse()) {
      for (const mount of mounts) await run(TOOLS.sh, ["-c", `echo ${seq} >> "$1/log"`, "sh", mount]);
      const staging = path.join(snapshots, `s${seq++}`);
      await mkdir(staging);
      const targets = [path.join(staging, "root.img"), path.join(staging, "workspace.img")];
      const started = performance.now();
      const { syncMs, windowMs } = await variant.snapshot(targets);
      const sealMs = await timed(async () => {
        if (variant.seal === "images") await Promise.all(targets.map(fsyncPath));
        const record = await open(path.join(staging, "snapshot.json"), "wx");
        await record.writeFile("{}\n");
        await record.sync();
        await record.close();
        if (variant.seal === "images") await fsyncPath(staging);
        await rename(staging, `${staging}.sealed`);
        await fsyncPath(snapshots);
      });
      const s = samples.get(variant.name);
      s?.total.push(performance.now() - started);
      s?.sync.push(syncMs);
      s?.window.push(windowMs);
      s?.seal.push(sealMs);
      await rm(`${staging}.sealed`, { recursive: true });
    }
  }
  const results = {
    samples: SAMPLES,
    baseline: BASELINE,
    freeze: FREEZE,
    variants: Object.fromEntries(
      [...samples].map(([name, s]) => [
        name,
        {
          totalP50: percentile(s.total, 50),
          totalP90: percentile(s.total, 90),
          syncP50: percentile(s.sync, 50),
          windowP50: percentile(s.window, 50),
          windowP90: percentile(s.window, 90),
          sealP50: percentile(s.seal, 50),
        },
      ]),
    ),
    machine: { cpus: os.cpus().length, node: process.version, loadAtStart, loadAtEnd: load() },
    at: new Date().toISOString(),
  };
  console.log(JSON.stringify(results, null, 2));
  await mkdir(path.join(ROOT, "bench/results"), { recursive: true });
  await writeFile(path.join(ROOT, "bench/results/snapshot-floor.json"), `${JSON.stringify(results, null, 2)}\n`);
} finally {
  await cleanup();
}
