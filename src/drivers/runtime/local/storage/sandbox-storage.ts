// What the driver asks of storage: a sandbox's two filesystems (root layer and workspace,
// each an XFS image in the pool, see pool.ts), their growth, and local snapshots of them.
// Opening it undoes what a crash in the middle of a snapshot left on the host.
import { type LocalSnapshot, RuntimeError, type SandboxSpec, type SnapshotImages } from "../../interface.js";
import { childCgroups, thawCgroup } from "../cgroups.js";
import { isSandboxId, type Layout, type SandboxPaths } from "../layout.js";
import { readMounts } from "../mounts.js";
import { assertSnapshotId, SnapshotStore, snapshotOf } from "../snapshots.js";
import { assertCapacity, growMountedImage, imageSizeGiB, thawFilesystem } from "./images.js";
import { type SandboxImageSizes, StoragePool } from "./pool.js";

export interface SandboxStorageOptions {
  /** Size of every sandbox's root layer filesystem; default 10. */
  rootLayerGiB?: number;
  /** Size of a standard sandbox's /workspace; default 10. */
  standardWorkspaceGiB?: number;
  /** Size of the pool; default the size of the filesystem holding the root. */
  poolGiB?: number;
}

/** Runs `take` under the sandbox's lifecycle lock, with its paths and whether it runs. */
export type SerializedSnapshot = (
  take: (paths: SandboxPaths, running: boolean) => Promise<LocalSnapshot>,
) => Promise<LocalSnapshot>;

export class SandboxStorage {
  private readonly snapshots: SnapshotStore;
  /** Sandboxes with a snapshot being taken (a second one is refused, not queued). */
  private readonly snapshotting = new Set<string>();

  private constructor(
    private readonly layout: Layout,
    readonly pool: StoragePool,
    private readonly sizes: { rootLayerGiB: number; standardWorkspaceGiB: number },
  ) {
    this.snapshots = new SnapshotStore(pool);
  }

  /**
   * Opens the pool (see StoragePool.open: staging dirs and loop devices of destroyed
   * sandboxes go when it is mounted) and thaws every filesystem and cgroup of this root a
   * snapshot may have left frozen. One live driver per root is assumed (the server's lock).
   */
  static async open(layout: Layout, options: SandboxStorageOptions): Promise<SandboxStorage> {
    const sizes = {
      rootLayerGiB: options.rootLayerGiB ?? 10,
      standardWorkspaceGiB: options.standardWorkspaceGiB ?? 10,
    };
    assertCapacity(sizes.rootLayerGiB);
    assertCapacity(sizes.standardWorkspaceGiB);
    const pool = await StoragePool.open(layout, options.poolGiB !== undefined ? { sizeGiB: options.poolGiB } : {});
    const prefix = `${layout.sandboxesDir}/`;
    for (const mount of await readMounts()) {
      if (mount.fsType === "xfs" && mount.mountPoint.startsWith(prefix)) await thawFilesystem(mount.mountPoint);
    }
    for (const id of await childCgroups(layout.cgroupParent)) {
      if (isSandboxId(id)) await thawCgroup(layout.cgroupPath(id));
    }
    return new SandboxStorage(layout, pool, sizes);
  }

  /** The sizes of a new sandbox's filesystems. */
  sizesOf(spec: SandboxSpec): SandboxImageSizes {
    const durable = spec.storageClass === "durable";
    return {
      rootGiB: this.sizes.rootLayerGiB,
      workspaceGiB: durable ? (spec.workspaceCapacityGiB as number) : this.sizes.standardWorkspaceGiB,
    };
  }

  /** The sealed images a create restores from (undefined for an image source); not_found without them. */
  async sourceImages(spec: SandboxSpec): Promise<SnapshotImages | undefined> {
    if (spec.source.kind !== "snapshot") return undefined;
    const images = await this.snapshots.local(spec.source.snapshotId);
    if (!images) throw new RuntimeError("not_found", `no sealed local copy of snapshot ${spec.source.snapshotId}`);
    return images;
  }

  provision(id: string, paths: SandboxPaths, sizes: SandboxImageSizes, from?: SnapshotImages): Promise<void> {
    return this.pool.provision(id, paths, sizes, from);
  }

  mount(id: string, paths: SandboxPaths): Promise<void> {
    return this.pool.mount(id, paths);
  }

  /** Removes the sandbox's images (the caller unmounted them). */
  remove(id: string): Promise<void> {
    return this.pool.removeImages(id);
  }

  /** Sandbox ids with images in the pool. */
  async ids(): Promise<string[]> {
    return (await this.pool.imageIds()).filter(isSandboxId);
  }

  /** Grows the workspace's XFS online, running or not (a stopped sandbox's images stay mounted). */
  async growWorkspace(id: string, paths: SandboxPaths, capacityGiB: number): Promise<void> {
    const image = this.layout.sandboxImages(id).workspace;
    const current = await imageSizeGiB(image).catch(() => {
      throw new RuntimeError("host_failure", `sandbox ${id} has no workspace image`);
    });
    if (capacityGiB < current) {
      throw new RuntimeError(
        "workspace_shrink_unsupported",
        `the workspace has ${current} GiB; it can grow but never shrink (asked ${capacityGiB})`,
      );
    }
    await this.pool.mount(id, paths);
    // Run even at the same size: it finishes a growth a crash interrupted, and is a no-op otherwise.
    await growMountedImage(image, paths.workspace, capacityGiB);
  }

  /** See RuntimeDriver.snapshot(); `serialized` runs the clone under the sandbox's lock. */
  async snapshot(id: string, snapshotId: string, serialized: SerializedSnapshot): Promise<LocalSnapshot> {
    assertSnapshotId(snapshotId);
    const sealed = await this.snapshots.sealed(snapshotId);
    if (sealed) return snapshotOf(sealed);
    if (this.snapshotting.has(id)) {
      throw new RuntimeError("snapshot_in_progress", `a snapshot of sandbox ${id} is being taken`);
    }
    this.snapshotting.add(id);
    try {
      return await serialized(async (paths, running) => {
        const sealedMeanwhile = await this.snapshots.sealed(snapshotId);
        if (sealedMeanwhile) return snapshotOf(sealedMeanwhile);
        // A stopped sandbox's images stay mounted (unless the host rebooted): flushed and frozen too.
        const mounted = new Set((await readMounts()).map((mount) => mount.mountPoint));
        return this.snapshots.take(snapshotId, {
          sandboxId: id,
          images: this.layout.sandboxImages(id),
          mountPoints: [paths.layer, paths.workspace].filter((point) => mounted.has(point)),
          cgroup: running ? this.layout.cgroupPath(id) : null,
        });
      });
    } finally {
      this.snapshotting.delete(id);
    }
  }

  localSnapshot(snapshotId: string): Promise<SnapshotImages | null> {
    return this.snapshots.local(snapshotId);
  }

  importSnapshot(snapshotId: string, fill: (staging: SnapshotImages) => Promise<void>): Promise<void> {
    return this.snapshots.import(snapshotId, fill);
  }

  dropLocalSnapshot(snapshotId: string): Promise<void> {
    return this.snapshots.drop(snapshotId);
  }

  listLocalSnapshots(): Promise<string[]> {
    return this.snapshots.list();
  }
}
