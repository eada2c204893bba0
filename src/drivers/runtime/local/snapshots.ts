// Local snapshots: sealed copy-on-write clones of a sandbox's two images (root layer and
// workspace) in the storage pool. A snapshot is made in a staging dir and renamed to
// `<pool>/snapshots/<snapshotId>/` with its record, snapshot.json: the record's presence is
// what "sealed" means, and a crash leaves only a staging dir (removed at open). Process
// memory is not captured: a restore boots the sandbox's command on the captured files.
import { open, readdir, readFile, rename, rm } from "node:fs/promises";
import path from "node:path";
import { exists, fsyncPath } from "../../../lib/fs.js";
import { type LocalSnapshot, RuntimeError, type SnapshotImages } from "../interface.js";
import { freezeCgroup, thawCgroup } from "./cgroups.js";
import { isSandboxId } from "./layout.js";
import { allocatedBytes, imageSizeGiB, syncAndClone, syncFilesystems } from "./storage/images.js";
import type { StoragePool } from "./storage/pool.js";

/** `<snapshot>/snapshot.json`. */
export interface SnapshotRecord extends LocalSnapshot {
  version: 1;
  /** The sandbox it was taken of; null for a copy imported from elsewhere. */
  sandboxId: string | null;
  createdAt: string;
}

/** What snapshot() clones. */
export interface SnapshotSource {
  sandboxId: string;
  images: SnapshotImages;
  /** Host mount points of the images (flushed before and during the clone, never frozen); empty when unmounted. */
  mountPoints: string[];
  /** The sandbox's cgroup, frozen around the clone, when it runs; null otherwise. */
  cgroup: string | null;
}

const RECORD = "snapshot.json";

export function assertSnapshotId(snapshotId: string): void {
  if (!isSandboxId(snapshotId)) {
    throw new RuntimeError("invalid_spec", `invalid snapshot id "${snapshotId}" (lowercase letters, digits, "-")`);
  }
}

function imagesIn(dir: string): SnapshotImages {
  return { root: path.join(dir, "root.img"), workspace: path.join(dir, "workspace.img") };
}

export class SnapshotStore {
  constructor(private readonly pool: StoragePool) {}

  private sealedDir(snapshotId: string): string {
    assertSnapshotId(snapshotId);
    return path.join(this.pool.snapshotsDir, snapshotId);
  }

  /** The sealed snapshot's record, or null. */
  async sealed(snapshotId: string): Promise<SnapshotRecord | null> {
    const dir = this.sealedDir(snapshotId);
    if (!(await this.pool.readyIfPresent())) return null;
    const text = await readFile(path.join(dir, RECORD), "utf8").catch(() => null);
    return text === null ? null : (JSON.parse(text) as SnapshotRecord);
  }

  /**
   * Clones the source's images into a sealed snapshot. A running sandbox's processes are
   * frozen (cgroup freezer) only around the flush and the clones, and thawed whatever
   * happens; the filesystems stay mounted and are not frozen: with nothing writing, a syncfs
   * puts everything written so far into the images, and each clone is a crash-consistent
   * image whose log the restore's mount replays (clone-helper.c). What is dirty is flushed
   * before the processes are frozen, so the frozen window does not grow with the data
   * written before the call.
   */
  async take(snapshotId: string, source: SnapshotSource): Promise<LocalSnapshot> {
    const staging = await this.pool.stagingDir(snapshotId);
    try {
      await syncFilesystems(source.mountPoints);
      const target = imagesIn(staging);
      const started = process.hrtime.bigint();
      try {
        if (source.cgroup) await freezeCgroup(source.cgroup);
        // One helper process: flush both filesystems, clone both images.
        await syncAndClone(source.mountPoints, [
          [source.images.root, target.root],
          [source.images.workspace, target.workspace],
        ]);
      } finally {
        if (source.cgroup) await thawCgroup(source.cgroup);
      }
      const frozenMs = source.cgroup ? Number(process.hrtime.bigint() - started) / 1e6 : 0;
      return await this.seal(snapshotId, staging, { sandboxId: source.sandboxId, frozenMs, cloned: true });
    } catch (error) {
      await rm(staging, { recursive: true, force: true });
      throw error;
    }
  }

  /** The sealed snapshot's images, or null. */
  async local(snapshotId: string): Promise<SnapshotImages | null> {
    const dir = this.sealedDir(snapshotId);
    if (!(await this.pool.readyIfPresent())) return null;
    return (await exists(path.join(dir, RECORD))) ? imagesIn(dir) : null;
  }

  /** Seals what `fill` writes at the staging paths; nothing is left when it throws. */
  async import(snapshotId: string, fill: (staging: SnapshotImages) => Promise<void>): Promise<void> {
    if (await this.sealed(snapshotId)) return;
    const staging = await this.pool.stagingDir(snapshotId);
    try {
      const images = imagesIn(staging);
      await fill({ ...images });
      for (const file of [images.root, images.workspace]) {
        if (!(await exists(file))) throw new RuntimeError("host_failure", `the import did not write ${file}`);
      }
      await this.seal(snapshotId, staging, { sandboxId: null, frozenMs: 0, cloned: false });
    } catch (error) {
      await rm(staging, { recursive: true, force: true });
      throw error;
    }
  }

  /** Removes the sealed copy (renamed out of snapshots/ first, so a crash never leaves half of one). */
  async drop(snapshotId: string): Promise<void> {
    const dir = this.sealedDir(snapshotId);
    if (!(await this.pool.readyIfPresent())) return;
    if (!(await exists(dir))) return;
    const doomed = await this.pool.stagingDir(`${snapshotId}.drop`);
    await rename(dir, path.join(doomed, "sealed")).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "ENOENT") throw error;
    });
    await rm(doomed, { recursive: true, force: true });
  }

  async list(): Promise<string[]> {
    if (!(await this.pool.readyIfPresent())) return [];
    const ids: string[] = [];
    for (const name of await readdir(this.pool.snapshotsDir).catch(() => [] as string[])) {
      if (isSandboxId(name) && (await exists(path.join(this.pool.snapshotsDir, name, RECORD)))) ids.push(name);
    }
    return ids.sort();
  }

  /**
   * Writes the record durably and renames the dir into place, durably: two log forces of the
   * pool's XFS. Clones (`origin.cloned`) need no fsync of their own: FICLONE wrote the
   * source's dirty pages and committed the shared extents to the pool's log before the record
   * was made, XFS's log is one ordered sequence, and forcing it up to the record's creation
   * forces everything before it, with the device flush that makes those data blocks durable
   * too. Written images (an import) are fsynced first: a log force writes back no file data.
   * The staging dir's entry for the record is in the record's own creation transaction.
   */
  private async seal(
    snapshotId: string,
    staging: string,
    origin: { sandboxId: string | null; frozenMs: number; cloned: boolean },
  ): Promise<LocalSnapshot> {
    const images = imagesIn(staging);
    if (!origin.cloned) await Promise.all([fsyncPath(images.root), fsyncPath(images.workspace)]);
    const snapshot: LocalSnapshot = {
      snapshotId,
      workspaceCapacityGiB: await imageSizeGiB(images.workspace),
      sizeBytes: (await allocatedBytes(images.root)) + (await allocatedBytes(images.workspace)),
      frozenMs: Math.round(origin.frozenMs * 10) / 10,
    };
    const record: SnapshotRecord = {
      version: 1,
      ...snapshot,
      sandboxId: origin.sandboxId,
      createdAt: new Date().toISOString(),
    };
    const handle = await open(path.join(staging, RECORD), "wx", 0o600);
    try {
      await handle.writeFile(`${JSON.stringify(record, null, 2)}\n`);
      await handle.sync();
    } finally {
      await handle.close();
    }
    try {
      await rename(staging, this.sealedDir(snapshotId));
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const existing = code === "EEXIST" || code === "ENOTEMPTY" ? await this.sealed(snapshotId) : null;
      if (!existing) throw error;
      // Sealed meanwhile by another call: that copy stands.
      await rm(staging, { recursive: true, force: true });
      return { ...snapshotOf(existing) };
    }
    await fsyncPath(this.pool.snapshotsDir);
    return snapshot;
  }
}

/** The LocalSnapshot fields of a record. */
export function snapshotOf(record: SnapshotRecord): LocalSnapshot {
  const { snapshotId, workspaceCapacityGiB, sizeBytes, frozenMs } = record;
  return { snapshotId, workspaceCapacityGiB, sizeBytes, frozenMs };
}
