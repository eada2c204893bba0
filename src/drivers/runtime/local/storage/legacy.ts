// Sandboxes made before the storage pool (commit 08419e7) kept their writable state in their
// own dir: the overlay's `upper/` and `work/`, and `/workspace` as a plain dir (standard) or
// the mount point of `workspace.img`, an ext4 image (durable). They have no images in the
// pool, so they could not start. At their next start their state is copied, once, into two
// new images (the root layer at the deployment's size, the workspace at its old capacity):
// the old files are first moved aside to `legacy-storage/` (the mark of a migration under way),
// and removed only once the copies are flushed, so a crash or a refusal loses nothing and the
// next start begins the copy again on fresh images.
import { mkdir, readdir, rename, rm, rmdir, stat } from "node:fs/promises";
import path from "node:path";
import { exists } from "../../../../lib/fs.js";
import { RuntimeError } from "../../interface.js";
import { runOrFail, TOOLS } from "../host.js";
import type { SandboxPaths } from "../layout.js";
import { isMounted, unmountUnder } from "../mounts.js";
import { GIB, syncFilesystems } from "./images.js";
import type { SandboxImageSizes } from "./pool.js";

/** Where the old layout kept things, and where a migration moves them. */
export function legacyPaths(paths: SandboxPaths) {
  const aside = path.join(paths.dir, "legacy-storage");
  return {
    upper: path.join(paths.dir, "upper"),
    work: path.join(paths.dir, "work"),
    workspaceImage: path.join(paths.dir, "workspace.img"),
    aside,
    asideUpper: path.join(aside, "upper"),
    asideWorkspace: path.join(aside, "workspace"),
    asideWorkspaceImage: path.join(aside, "workspace.img"),
    oldWorkspaceMount: path.join(aside, "workspace-mounted"),
  };
}

/** Whether the sandbox's state is (still) in the old layout, or a migration of it was under way. */
export async function hasLegacyLayout(paths: SandboxPaths): Promise<boolean> {
  const legacy = legacyPaths(paths);
  return (await exists(legacy.aside)) || (await exists(legacy.upper));
}

/** Moves `from` to `to` unless it is gone (moved by an earlier attempt). */
async function moveAside(from: string, to: string): Promise<void> {
  if (!(await exists(from)) || (await exists(to))) return;
  await rename(from, to);
}

export interface LegacyMigration {
  /** The sizes of the new images: the workspace's from the old ext4 image when there was one. */
  sizes: SandboxImageSizes;
  /** Moved aside; the images can be made. */
  legacy: ReturnType<typeof legacyPaths>;
}

/**
 * Moves the old layout aside (unmounting the old ext4 workspace) and says what the new
 * images must hold. `rootGiB` and `standardWorkspaceGiB` are the deployment's sizes.
 */
export async function prepareLegacy(
  paths: SandboxPaths,
  durable: boolean,
  defaults: { rootGiB: number; standardWorkspaceGiB: number },
): Promise<LegacyMigration> {
  const legacy = legacyPaths(paths);
  await mkdir(legacy.aside, { recursive: true, mode: 0o700 });
  // A durable workspace's ext4 is mounted at /workspace's host dir (until a reboot).
  if (await isMounted(paths.workspace)) await unmountUnder(paths.workspace);
  await moveAside(legacy.upper, legacy.asideUpper);
  await rm(legacy.work, { recursive: true, force: true });
  await moveAside(legacy.workspaceImage, legacy.asideWorkspaceImage);
  await moveAside(paths.workspace, legacy.asideWorkspace);
  // An earlier attempt's new workspace mount point (emptied by the caller) is made again.
  await rmdir(paths.workspace).catch(() => undefined);
  const imageBytes = await stat(legacy.asideWorkspaceImage).then(
    (info) => info.size,
    () => null,
  );
  const workspaceGiB =
    durable && imageBytes !== null ? Math.max(1, Math.ceil(imageBytes / GIB)) : defaults.standardWorkspaceGiB;
  return { legacy, sizes: { rootGiB: defaults.rootGiB, workspaceGiB } };
}

/** Copies the moved-aside state into the new, mounted images, flushes them, then removes the old. */
export async function copyLegacy(paths: SandboxPaths, legacy: LegacyMigration["legacy"]): Promise<void> {
  const copy = async (from: string, to: string, what: string) => {
    if (!(await exists(from))) return;
    try {
      // `from/.`: the contents and the dir's own owner and mode; xattrs too (the overlay's
      // whiteouts and opaque dirs are char devices and trusted.* attributes).
      await runOrFail(`copying the ${what}`, TOOLS.cp, ["-a", "--", `${from}/.`, `${to}/`]);
    } catch (error) {
      throw new RuntimeError(
        "host_failure",
        `this sandbox predates the storage pool and its ${what} could not be copied into its new ` +
          `filesystem (more data than its size?): ${(error as Error).message}`,
        { cause: error },
      );
    }
  };
  await copy(legacy.asideUpper, paths.upper, "root layer (changes to /)");
  if (await exists(legacy.asideWorkspaceImage)) {
    await mkdir(legacy.oldWorkspaceMount, { recursive: true, mode: 0o700 });
    await unmountUnder(legacy.oldWorkspaceMount);
    await runOrFail("mounting the old workspace", TOOLS.mount, [
      "-t",
      "ext4",
      "-o",
      "loop,ro,noload,nosuid,nodev",
      legacy.asideWorkspaceImage,
      legacy.oldWorkspaceMount,
    ]);
    try {
      await copy(legacy.oldWorkspaceMount, paths.workspace, "workspace");
    } finally {
      await unmountUnder(legacy.oldWorkspaceMount);
    }
    await rm(path.join(paths.workspace, "lost+found"), { recursive: true, force: true });
  } else {
    await copy(legacy.asideWorkspace, paths.workspace, "workspace");
  }
  await syncFilesystems([paths.layer, paths.workspace]);
  // Done: what is aside goes (its absence is what "migrated" means).
  for (const name of await readdir(legacy.aside).catch(() => [] as string[])) {
    await rm(path.join(legacy.aside, name), { recursive: true, force: true });
  }
  await rmdir(legacy.aside);
}
