// Image files: each a sparse file in the storage pool holding its own XFS, loop-mounted on
// the host. The size of the file is the size of the filesystem, so a sandbox writing past
// it gets a real ENOSPC and `df` inside shows the size. Images are made by cloning
// (FICLONE: shared extents, no data copied) and grown online with xfs_growfs.
import { constants, copyFile, mkdir, open, stat, truncate } from "node:fs/promises";
import { projectFile } from "../../../../lib/paths.js";
import { RuntimeError } from "../../interface.js";
import { CommandError, run, runOrFail, TOOLS } from "../host.js";
import { isMounted, loopDeviceOf } from "../mounts.js";
import { buildStaticBinary } from "../static-binary.js";

export const GIB = 1024 ** 3;
export const MAX_IMAGE_GIB = 16 * 1024;

/**
 * Mount options of every sandbox image. `nouuid`: clones of one template (and of one
 * snapshot) share their filesystem's UUID. `discard`: space freed inside goes back to the
 * pool (punched out of the image file), so an image and its snapshots hold live data only.
 */
const IMAGE_MOUNT_OPTIONS = "loop,nouuid,noatime,nosuid,nodev,discard";

export function assertCapacity(capacityGiB: unknown): asserts capacityGiB is number {
  if (typeof capacityGiB !== "number" || !Number.isInteger(capacityGiB) || capacityGiB < 1) {
    throw new RuntimeError("invalid_spec", "a durable workspace needs a capacity of at least 1 whole GiB");
  }
  if (capacityGiB > MAX_IMAGE_GIB) {
    throw new RuntimeError("invalid_spec", `workspace capacity is at most ${MAX_IMAGE_GIB} GiB`);
  }
}

/** A copy-on-write clone of `source` at `target` (both in the pool); fails rather than copying data. */
export async function cloneImage(source: string, target: string): Promise<void> {
  try {
    await copyFile(source, target, constants.COPYFILE_FICLONE_FORCE | constants.COPYFILE_EXCL);
  } catch (error) {
    throw new RuntimeError("host_failure", `cloning ${source}: ${(error as Error).message}`, { cause: error });
  }
}

/** Makes a sparse file of `sizeGiB` holding a blank XFS. */
export async function makeBlankImage(file: string, sizeGiB: number, label: string): Promise<void> {
  const handle = await open(file, "wx", 0o600);
  await handle.close();
  await truncate(file, sizeGiB * GIB);
  await runOrFail("making an XFS filesystem", TOOLS.mkfsXfs, ["-q", "-f", "-L", label, file]);
}

/** Mounts an image at `target` (made if missing) unless something is mounted there. */
export async function mountImage(image: string, target: string, options = IMAGE_MOUNT_OPTIONS): Promise<void> {
  if (await isMounted(target)) return;
  await mkdir(target, { recursive: true, mode: 0o700 });
  await runOrFail("mounting an image", TOOLS.mount, ["-t", "xfs", "-o", options, image, target]);
}

export async function imageSizeGiB(image: string): Promise<number> {
  return Math.floor((await stat(image)).size / GIB);
}

/** Bytes the file has allocated (holes excluded; extents shared with clones counted). */
export async function allocatedBytes(file: string): Promise<number> {
  return (await stat(file)).blocks * 512;
}

/**
 * Grows the mounted image's filesystem to `sizeGiB` online: the file, the loop device's
 * idea of its size, then XFS. Run even at the same size, which finishes a growth a crash
 * interrupted and is a no-op otherwise. Never shrinks (the caller refuses that).
 */
export async function growMountedImage(image: string, mountPoint: string, sizeGiB: number): Promise<void> {
  const device = await loopDeviceOf(image);
  if (!device || !(await isMounted(mountPoint))) {
    throw new RuntimeError("host_failure", `${image} is not mounted at ${mountPoint}`);
  }
  if ((await stat(image)).size < sizeGiB * GIB) await truncate(image, sizeGiB * GIB);
  await runOrFail("telling the loop device its new size", TOOLS.losetup, ["-c", device]);
  await runOrFail("growing the filesystem", TOOLS.xfsGrowfs, [mountPoint]);
}

const CLONE_HELPER_SOURCE = projectFile("src/drivers/runtime/local/storage/clone-helper.c");

/** The clone helper binary (clone-helper.c), built on first use. */
export function cloneHelper(): Promise<string> {
  return buildStaticBinary(CLONE_HELPER_SOURCE, "warren-clone");
}

/** syncfs(2) of every mounted filesystem in one helper call, while writers go on. */
export async function syncFilesystems(mountPoints: readonly string[]): Promise<void> {
  if (mountPoints.length === 0) return;
  await runOrFail("flushing filesystems", await cloneHelper(), ["sync", ...mountPoints]);
}

/**
 * Flushes the mounted filesystems and clones each source into its new target, in one helper
 * call (clone-helper.c `sync-clone`): with the writers frozen, the clones hold everything
 * written before, their logs replayed at mount. On failure the helper removes what it cloned.
 */
export async function syncAndClone(
  mountPoints: readonly string[],
  pairs: readonly [source: string, target: string][],
): Promise<void> {
  await runOrFail("flushing and cloning the images", await cloneHelper(), [
    "sync-clone",
    ...mountPoints,
    "--",
    ...pairs.flat(),
  ]);
}

/** Freezes the filesystem: writes flushed, the log made clean, new writes block until thawed. */
export async function freezeFilesystem(mountPoint: string): Promise<void> {
  await runOrFail("freezing a filesystem", TOOLS.fsfreeze, ["-f", mountPoint]);
}

/** Thaws the filesystem; one that is not frozen (EINVAL) is fine. */
export async function thawFilesystem(mountPoint: string): Promise<void> {
  try {
    await run(TOOLS.fsfreeze, ["-u", mountPoint]);
  } catch (error) {
    if (error instanceof CommandError && /Invalid argument/.test(error.stderr)) return;
    throw new RuntimeError("host_failure", `thawing ${mountPoint}: ${(error as Error).message}`, { cause: error });
  }
}
