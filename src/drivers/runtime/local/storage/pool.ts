// The storage pool: one XFS (reflink) in a sparse file under the runtime root, loop-mounted
// at `<root>/storage/pool`. Every sandbox's two images (root layer, workspace) and every
// sealed local snapshot live in it, so a snapshot or a restore is a FICLONE of two files:
// a metadata operation costing the same at 1 MB and at 1 GiB. The host filesystem (ext4
// here) need not be copy-on-write. Layout in the pool:
//   templates/xfs-<n>g.img     blank images, made once per size by mkfs.xfs (removed when
//                              unused for a while: collectTemplates())
//   sandboxes/<id>/            root.img, workspace.img of sandbox <id>
//   snapshots/<snapshotId>/    root.img, workspace.img, snapshot.json (sealed)
//   staging/                   snapshots being made (removed at open: a crash's leftovers)
import { randomBytes } from "node:crypto";
import { chmod, mkdir, readdir, readFile, rename, rm, stat, statfs } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { exists } from "../../../../lib/fs.js";
import { RuntimeError, type SnapshotImages } from "../../interface.js";
import { run, TOOLS } from "../host.js";
import type { Layout, SandboxPaths } from "../layout.js";
import { awaitLoopReleased, isMounted, loopDeviceOf, readMounts } from "../mounts.js";
import type { PoolUsage } from "./admission.js";
import {
  assertCapacity,
  cloneImage,
  GIB,
  growMountedImage,
  imageSizeGiB,
  MAX_IMAGE_GIB,
  makeBlankImage,
  mountImage,
} from "./images.js";

export interface StoragePoolOptions {
  /** Size of the pool's filesystem (default: the size of the filesystem holding the root). */
  sizeGiB?: number;
  /** A template no create has cloned for this long is removed (default 10 minutes). */
  templateIdleMs?: number;
}

/** Templates to remove: those unused for `idleMs` with no clone of them under way. Pure. */
export function idleTemplates(
  templates: ReadonlyMap<number, { lastUsedMs: number; cloning: number }>,
  nowMs: number,
  idleMs: number,
): number[] {
  const idle: number[] = [];
  for (const [sizeGiB, use] of templates) if (use.cloning === 0 && nowMs - use.lastUsedMs >= idleMs) idle.push(sizeGiB);
  return idle.sort((a, b) => a - b);
}

const TEMPLATE_FILE = /^xfs-(\d+)g\.img$/;
const DEFAULT_TEMPLATE_IDLE_MS = 10 * 60_000;

/** What a sandbox's two filesystems are sized to. */
export interface SandboxImageSizes {
  rootGiB: number;
  workspaceGiB: number;
}

const POOL_MOUNT_OPTIONS = "loop,noatime,discard";
const LOOP_RELEASE_TIMEOUT_MS = 10_000;

interface LoopDevice {
  device: string;
  backingFile: string;
}

/** Loop devices whose backing file is below `dir` (a deleted file reads as its old path + " (deleted)"). */
export async function loopDevicesUnder(dir: string): Promise<LoopDevice[]> {
  const found: LoopDevice[] = [];
  for (const name of await readdir("/sys/block").catch(() => [] as string[])) {
    if (!name.startsWith("loop")) continue;
    const backing = (await readFile(`/sys/block/${name}/loop/backing_file`, "utf8").catch(() => "")).trim();
    if (backing.startsWith(`${dir}/`)) found.push({ device: `/dev/${name}`, backingFile: backing });
  }
  return found;
}

/** Unmounts every mount of `device`, then detaches it (a device still busy is left to autoclear). */
async function detachLoop(device: string): Promise<void> {
  for (const mount of await readMounts()) {
    if (mount.source !== device) continue;
    await run(TOOLS.umount, [mount.mountPoint]).catch(() => run(TOOLS.umount, ["-l", mount.mountPoint]));
  }
  await run(TOOLS.losetup, ["-d", device]).catch(() => undefined);
}

export class StoragePool {
  readonly dir: string;
  private readonly templates = new Map<number, Promise<string>>();
  /** Per template size: when a create last cloned it, and how many clones of it are under way. */
  private readonly templateUse = new Map<number, { lastUsedMs: number; cloning: number }>();
  /** Templates being removed: a create of that size waits for the removal, then makes one again. */
  private readonly removing = new Map<number, Promise<void>>();
  private mounted: Promise<void> | null = null;

  private constructor(
    readonly layout: Layout,
    private readonly options: StoragePoolOptions,
  ) {
    this.dir = layout.poolDir;
  }

  /**
   * The pool of `layout`. It is mounted (and made, on first use) when first needed, so a
   * driver that never makes a sandbox leaves nothing mounted; one a previous process left
   * mounted is taken over, and what a crash left in it removed, at once.
   */
  static async open(layout: Layout, options: StoragePoolOptions = {}): Promise<StoragePool> {
    const size = options.sizeGiB;
    if (size !== undefined && (!Number.isInteger(size) || size < 1 || size > 1024 * MAX_IMAGE_GIB)) {
      throw new RuntimeError("invalid_spec", `storage pool size ${size} GiB is not a whole number of GiB`);
    }
    const pool = new StoragePool(layout, options);
    if (await isMounted(pool.dir)) await pool.ready();
    return pool;
  }

  /** Mounts the pool (making it first if there is none) and recovers it; once per instance. */
  ready(): Promise<void> {
    this.mounted ??= this.mountAndRecover().catch((error: unknown) => {
      this.mounted = null;
      throw error;
    });
    return this.mounted;
  }

  /** ready() when there is a pool to read; false (nothing made) when there is none. */
  async readyIfPresent(): Promise<boolean> {
    if (!this.mounted && !(await isMounted(this.dir)) && !(await exists(this.layout.poolImage))) return false;
    await this.ready();
    return true;
  }

  private async mountAndRecover(): Promise<void> {
    const layout = this.layout;
    const sizeGiB = this.options.sizeGiB ?? (await StoragePool.hostSizeGiB(layout.root));
    await mkdir(path.dirname(layout.poolImage), { recursive: true, mode: 0o700 });
    if (!(await isMounted(this.dir))) {
      if (!(await exists(layout.poolImage))) {
        const temp = `${layout.poolImage}.${randomBytes(4).toString("hex")}.tmp`;
        try {
          await makeBlankImage(temp, sizeGiB, "warren-pool");
          await rename(temp, layout.poolImage);
        } finally {
          await rm(temp, { force: true });
        }
      }
      await mountImage(layout.poolImage, this.dir, POOL_MOUNT_OPTIONS);
    }
    if (sizeGiB > (await imageSizeGiB(layout.poolImage))) await growMountedImage(layout.poolImage, this.dir, sizeGiB);
    await chmod(this.dir, 0o700);
    for (const sub of ["templates", "sandboxes", "snapshots", "staging"]) {
      await mkdir(path.join(this.dir, sub), { recursive: true, mode: 0o700 });
    }
    await this.recover();
  }

  private static async hostSizeGiB(root: string): Promise<number> {
    const stats = await statfs(root);
    return Math.max(1, Math.floor((stats.blocks * stats.bsize) / GIB));
  }

  get snapshotsDir(): string {
    return path.join(this.dir, "snapshots");
  }

  /** A fresh directory for a snapshot being made (removed by recover() after a crash). */
  async stagingDir(name: string): Promise<string> {
    await this.ready();
    const dir = path.join(this.dir, "staging", `${name}.${randomBytes(4).toString("hex")}`);
    await mkdir(dir, { mode: 0o700 });
    return dir;
  }

  /** The blank image of `sizeGiB`, made once (concurrent callers share the mkfs). */
  template(sizeGiB: number): Promise<string> {
    assertCapacity(sizeGiB);
    let made = this.templates.get(sizeGiB);
    if (!made) {
      made = this.makeTemplate(sizeGiB);
      this.templates.set(sizeGiB, made);
      made.catch(() => this.templates.delete(sizeGiB));
    }
    return made;
  }

  private async makeTemplate(sizeGiB: number): Promise<string> {
    await this.removing.get(sizeGiB);
    await this.ready();
    const file = path.join(this.dir, "templates", `xfs-${sizeGiB}g.img`);
    if (await exists(file)) return file;
    const temp = path.join(this.dir, "staging", `template-${sizeGiB}g.${randomBytes(4).toString("hex")}.img`);
    try {
      await makeBlankImage(temp, sizeGiB, "warren");
      await rename(temp, file);
    } finally {
      await rm(temp, { force: true });
    }
    return file;
  }

  /**
   * Gives sandbox `id` its two images, mounted: clones of the blank templates, or of a
   * sealed snapshot's images (`from`), grown to `sizes` where those are larger.
   */
  async provision(id: string, paths: SandboxPaths, sizes: SandboxImageSizes, from?: SnapshotImages): Promise<void> {
    await this.ready();
    const images = this.layout.sandboxImages(id);
    await mkdir(images.dir, { recursive: true, mode: 0o700 });
    const templateSizes = from ? [] : [sizes.rootGiB, sizes.workspaceGiB];
    // Marked before the template is asked for, so collectTemplates() never removes one a clone is about to read.
    for (const size of templateSizes) this.useTemplate(size, 1);
    try {
      const [rootSource, workspaceSource] = from
        ? [from.root, from.workspace]
        : await Promise.all([this.template(sizes.rootGiB), this.template(sizes.workspaceGiB)]);
      const cloned = await Promise.allSettled([
        cloneImage(rootSource, images.root),
        cloneImage(workspaceSource, images.workspace),
      ]);
      for (const result of cloned) if (result.status === "rejected") throw result.reason;
    } finally {
      for (const size of templateSizes) this.useTemplate(size, -1);
    }
    await this.mount(id, paths);
    if (from) {
      await this.growTo(images.root, paths.layer, sizes.rootGiB);
      await this.growTo(images.workspace, paths.workspace, sizes.workspaceGiB);
    } else {
      // The merged root takes the upper dir's mode: it must let every user in, as / does.
      await mkdir(paths.upper, { mode: 0o755 });
      await mkdir(paths.work, { mode: 0o700 });
    }
  }

  private useTemplate(sizeGiB: number, delta: 1 | -1): void {
    const use = this.templateUse.get(sizeGiB) ?? { lastUsedMs: Date.now(), cloning: 0 };
    this.templateUse.set(sizeGiB, { lastUsedMs: Date.now(), cloning: use.cloning + delta });
  }

  /**
   * Removes the templates no create has cloned for the idle time (a template this process
   * has not seen used counts from when it first saw it). One a clone is about to read or
   * reading is kept; a create of a removed size makes it again (mkfs.xfs, ~10 ms). Each
   * removal renames the file into staging first, so a crash never leaves half of one.
   */
  async collectTemplates(nowMs = Date.now()): Promise<number[]> {
    // Only a pool this instance mounted and still finds mounted: the collector never mounts one.
    if (!this.mounted || !(await isMounted(this.dir))) return [];
    await this.mounted;
    const dir = path.join(this.dir, "templates");
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const size = Number(TEMPLATE_FILE.exec(name)?.[1] ?? 0);
      if (size > 0 && !this.templateUse.has(size)) this.templateUse.set(size, { lastUsedMs: nowMs, cloning: 0 });
    }
    const idle = idleTemplates(this.templateUse, nowMs, this.options.templateIdleMs ?? DEFAULT_TEMPLATE_IDLE_MS);
    for (const size of idle) {
      // Synchronously with the check above: a create from now on waits for this removal.
      this.templates.delete(size);
      this.templateUse.delete(size);
      const removal = this.removeTemplate(size);
      this.removing.set(size, removal);
      void removal.finally(() => {
        if (this.removing.get(size) === removal) this.removing.delete(size);
      });
    }
    await Promise.all(idle.map((size) => this.removing.get(size)));
    return idle;
  }

  private async removeTemplate(sizeGiB: number): Promise<void> {
    const file = path.join(this.dir, "templates", `xfs-${sizeGiB}g.img`);
    const doomed = path.join(this.dir, "staging", `template-${sizeGiB}g.${randomBytes(4).toString("hex")}.gone`);
    try {
      await rename(file, doomed);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      return;
    }
    await rm(doomed, { force: true });
  }

  /** What the pool holds and may still take from the host (admission.ts decides with it). */
  async usage(): Promise<PoolUsage> {
    await this.ready();
    const host = await statfs(path.dirname(this.layout.poolImage));
    const sizeOf = async (file: string) => (await stat(file).catch(() => null))?.size ?? 0;
    const allocatedOf = async (file: string) => ((await stat(file).catch(() => null))?.blocks ?? 0) * 512;
    const imageBytesById = new Map<string, number>();
    await Promise.all(
      (await this.imageIds()).map(async (id) => {
        const images = this.layout.sandboxImages(id);
        imageBytesById.set(id, (await sizeOf(images.root)) + (await sizeOf(images.workspace)));
      }),
    );
    let fixedBytes = 0;
    for (const name of await readdir(path.join(this.dir, "templates")).catch(() => [] as string[])) {
      fixedBytes += await allocatedOf(path.join(this.dir, "templates", name));
    }
    for (const name of await readdir(this.snapshotsDir).catch(() => [] as string[])) {
      for (const file of ["root.img", "workspace.img"]) {
        fixedBytes += await allocatedOf(path.join(this.snapshotsDir, name, file));
      }
    }
    let stagingBytes = 0;
    const staging = path.join(this.dir, "staging");
    for (const name of await readdir(staging).catch(() => [] as string[])) {
      for (const file of await readdir(path.join(staging, name)).catch(() => [] as string[])) {
        if (file.endsWith(".img")) stagingBytes += await sizeOf(path.join(staging, name, file));
      }
    }
    return {
      hostFreeBytes: host.bavail * host.bsize,
      poolAllocatedBytes: await allocatedOf(this.layout.poolImage),
      imageBytesById,
      fixedBytes,
      stagingBytes,
    };
  }

  /** Mounts the sandbox's images where they belong (after a reboot); a no-op when they are. */
  async mount(id: string, paths: SandboxPaths): Promise<void> {
    await this.ready();
    const images = this.layout.sandboxImages(id);
    for (const image of [images.root, images.workspace]) {
      if (!(await exists(image))) {
        throw new RuntimeError(
          "host_failure",
          `sandbox ${id} has no ${path.basename(image)} in the storage pool and no state of its own to make one from: its files are gone and it cannot start`,
        );
      }
    }
    // Both settle before a failure is thrown, so whoever undoes it finds every mount made.
    const mounted = await Promise.allSettled([
      mountImage(images.root, paths.layer),
      mountImage(images.workspace, paths.workspace),
    ]);
    for (const result of mounted) if (result.status === "rejected") throw result.reason;
  }

  /** Grows the mounted image to `sizeGiB` if it is smaller; never shrinks. */
  async growTo(image: string, mountPoint: string, sizeGiB: number): Promise<void> {
    if (sizeGiB > (await imageSizeGiB(image))) await growMountedImage(image, mountPoint, sizeGiB);
  }

  /** Removes the sandbox's images (unmounted by the caller first). */
  async removeImages(id: string): Promise<void> {
    if (!(await this.readyIfPresent())) return;
    await rm(this.layout.sandboxImages(id).dir, { recursive: true, force: true });
  }

  /** Sandbox ids with images in the pool (none while it is not mounted). */
  async imageIds(): Promise<string[]> {
    return readdir(path.join(this.dir, "sandboxes")).catch(() => [] as string[]);
  }

  /**
   * After a crash: staging dirs go, and loop devices of images whose sandbox is gone (or
   * whose file was deleted) are unmounted and detached.
   */
  private async recover(): Promise<void> {
    const staging = path.join(this.dir, "staging");
    for (const name of await readdir(staging).catch(() => [] as string[])) {
      await rm(path.join(staging, name), { recursive: true, force: true });
    }
    const sandboxesDir = path.join(this.dir, "sandboxes");
    for (const loop of await loopDevicesUnder(this.dir)) {
      const relative = path.relative(sandboxesDir, loop.backingFile.replace(/ \(deleted\)$/, ""));
      const owner = relative.startsWith("..") ? null : relative.split(path.sep)[0];
      const orphan =
        loop.backingFile.endsWith(" (deleted)") ||
        !owner ||
        !(await exists(this.layout.sandbox(owner).dir).catch(() => false));
      if (orphan) await detachLoop(loop.device);
    }
  }

  /**
   * Unmounts the pool and detaches its loop device (sweep, tests): waits for the images'
   * loop devices, which hold files of the pool, to go first.
   */
  static async detach(layout: Layout): Promise<void> {
    const deadline = Date.now() + LOOP_RELEASE_TIMEOUT_MS;
    for (const loop of await loopDevicesUnder(layout.poolDir)) {
      for (let delay = 5; (await loopDeviceOf(loop.backingFile)) === loop.device; delay = Math.min(200, delay * 2)) {
        if (Date.now() > deadline) {
          await detachLoop(loop.device);
          break;
        }
        await sleep(delay);
      }
    }
    if (await isMounted(layout.poolDir)) {
      for (let attempt = 0; ; attempt++) {
        try {
          await run(TOOLS.umount, [layout.poolDir]);
          break;
        } catch {
          if (attempt >= 20) {
            await run(TOOLS.umount, ["-l", layout.poolDir]).catch(() => undefined);
            break;
          }
          await sleep(100);
        }
      }
    }
    if (!(await stat(layout.poolImage).catch(() => null))) return;
    await awaitLoopReleased(layout.poolImage, LOOP_RELEASE_TIMEOUT_MS).catch(async () => {
      const device = await loopDeviceOf(layout.poolImage);
      if (device) await detachLoop(device);
    });
  }
}
