// The /workspace of a sandbox. Standard: a plain directory. Durable: a sparse ext4 image
// file of the sandbox's capacity, loop-mounted on the host and bind-mounted into the
// sandbox, so the capacity is a hard limit. Growth extends the file and the filesystem;
// shrinking is refused.
import { chown, mkdir, open, readFile, rmdir, stat, truncate } from "node:fs/promises";
import { RuntimeError } from "../interface.js";
import { run, runOrFail, TOOLS } from "./host.js";
import { awaitLoopReleased, isMounted, loopDeviceOf, mountLoopExt4 } from "./mounts.js";

const GIB = 1024 ** 3;
export const MAX_WORKSPACE_GIB = 16 * 1024;

const CAP_SYS_RESOURCE = 24n;
const LOOP_RELEASE_TIMEOUT_MS = 5000;

/** Whether this process may grow a mounted ext4 (the kernel's online resize needs CAP_SYS_RESOURCE). */
export async function canResizeOnline(): Promise<boolean> {
  const status = await readFile("/proc/self/status", "utf8").catch(() => "");
  const effective = /^CapEff:\s+([0-9a-f]+)$/m.exec(status)?.[1];
  return effective !== undefined && (BigInt(`0x${effective}`) & (1n << CAP_SYS_RESOURCE)) !== 0n;
}

export function assertCapacity(capacityGiB: unknown): asserts capacityGiB is number {
  if (typeof capacityGiB !== "number" || !Number.isInteger(capacityGiB) || capacityGiB < 1) {
    throw new RuntimeError("invalid_spec", "a durable workspace needs a capacity of at least 1 whole GiB");
  }
  if (capacityGiB > MAX_WORKSPACE_GIB) {
    throw new RuntimeError("invalid_spec", `workspace capacity is at most ${MAX_WORKSPACE_GIB} GiB`);
  }
}

/** A plain directory owned by the sandbox's user. */
export async function createStandardWorkspace(dir: string, owner: { uid: number; gid: number }): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  await chown(dir, owner.uid, owner.gid);
}

/** Makes the sparse image and its filesystem (root dir owned by the sandbox's user) and mounts it. */
export async function createDurableWorkspace(input: {
  image: string;
  mountPoint: string;
  capacityGiB: number;
  owner: { uid: number; gid: number };
}): Promise<void> {
  assertCapacity(input.capacityGiB);
  const handle = await open(input.image, "w", 0o600);
  await handle.close();
  await truncate(input.image, input.capacityGiB * GIB);
  await runOrFail("making the workspace filesystem", TOOLS.mkfsExt4, [
    "-q",
    "-F",
    "-m",
    "0",
    "-L",
    "workspace",
    "-E",
    `lazy_itable_init=1,lazy_journal_init=1,root_owner=${input.owner.uid}:${input.owner.gid}`,
    input.image,
  ]);
  await mkdir(input.mountPoint, { recursive: true, mode: 0o755 });
  await mountLoopExt4(input.image, input.mountPoint);
  // An empty workspace should look empty; e2fsck makes lost+found again if it ever needs one.
  await rmdir(`${input.mountPoint}/lost+found`).catch(() => undefined);
}

export async function ensureDurableWorkspaceMounted(image: string, mountPoint: string): Promise<void> {
  await mountLoopExt4(image, mountPoint);
}

export async function workspaceCapacityGiB(image: string): Promise<number> {
  return Math.floor((await stat(image)).size / GIB);
}

/**
 * Grows the filesystem to `capacityGiB`. While the sandbox runs the filesystem is grown in
 * place (the kernel's online resize, which needs CAP_SYS_RESOURCE); otherwise it is
 * unmounted, checked, grown and mounted again, which needs no special capability.
 */
export async function growDurableWorkspace(input: {
  image: string;
  mountPoint: string;
  capacityGiB: number;
  online: boolean;
  /** How long to wait for a just-stopped sandbox's last mount of the workspace to go. */
  releaseTimeoutMs?: number;
}): Promise<void> {
  assertCapacity(input.capacityGiB);
  const current = await workspaceCapacityGiB(input.image);
  if (input.capacityGiB < current) {
    throw new RuntimeError(
      "workspace_shrink_unsupported",
      `the workspace has ${current} GiB; it can grow but never shrink (asked ${input.capacityGiB})`,
    );
  }
  if (input.online && !(await canResizeOnline())) {
    throw new RuntimeError(
      "host_failure",
      "this host withholds CAP_SYS_RESOURCE from Warren, which growing a running sandbox's workspace needs; stop the sandbox to grow it",
    );
  }
  // Run the resize even at the same size: it finishes a growth a crash interrupted, and is a no-op otherwise.
  if (input.online) {
    const device = await loopDeviceOf(input.image);
    if (!device) throw new RuntimeError("host_failure", "the running sandbox's workspace has no loop device");
    if (input.capacityGiB > current) await truncate(input.image, input.capacityGiB * GIB);
    await runOrFail("telling the loop device its new size", TOOLS.losetup, ["-c", device]);
    try {
      await run(TOOLS.resize2fs, [device]);
    } catch (error) {
      throw new RuntimeError(
        "host_failure",
        `growing a running sandbox's workspace failed: ${(error as Error).message}`,
        { cause: error },
      );
    }
    return;
  }
  if (await isMounted(input.mountPoint)) await runOrFail("unmounting the workspace", TOOLS.umount, [input.mountPoint]);
  // Checking or growing a filesystem that a dying sandbox still has mounted is not safe, and
  // the old loop device keeps the old size.
  try {
    await awaitLoopReleased(input.image, input.releaseTimeoutMs ?? LOOP_RELEASE_TIMEOUT_MS);
  } catch (error) {
    await mountLoopExt4(input.image, input.mountPoint).catch(() => undefined);
    throw error;
  }
  if (input.capacityGiB > current) await truncate(input.image, input.capacityGiB * GIB);
  try {
    await run(TOOLS.e2fsck, ["-f", "-p", input.image]);
  } catch (error) {
    // Exit 1 means "errors corrected": fine to go on; anything higher is not.
    const code = (error as { exitCode?: number | null }).exitCode;
    if (code !== 1)
      throw new RuntimeError("host_failure", `checking the workspace failed: ${(error as Error).message}`);
  }
  await runOrFail("growing the workspace filesystem", TOOLS.resize2fs, [input.image]);
  await mountLoopExt4(input.image, input.mountPoint);
}
