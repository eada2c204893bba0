// What the driver asks of storage: a sandbox's two filesystems (root layer and workspace,
// each an XFS image in the pool, see pool.ts), their growth, and local snapshots of them.
// Opening it undoes what a crash in the middle of a snapshot left on the host.
import {
  type LocalSnapshot,
  RuntimeError,
  type SandboxSpec,
  type SnapshotImages,
  type StorageMeasure,
  type StorageReport,
} from "../../interface.js";
import { childCgroups, thawCgroup } from "../cgroups.js";
import { isSandboxId, type Layout, type SandboxPaths } from "../layout.js";
import { readMounts, unmountUnder } from "../mounts.js";
import { assertSnapshotId, SnapshotStore, snapshotOf } from "../snapshots.js";
import { type AdmissionPolicy, decideStorage, promisedImageBytes, type StorageVerdict } from "./admission.js";
import { assertCapacity, GIB, growMountedImage, imageSizeGiB, thawFilesystem } from "./images.js";
import { copyLegacy, hasLegacyLayout, prepareLegacy } from "./legacy.js";
import { type SandboxImageSizes, StoragePool } from "./pool.js";

export interface SandboxStorageOptions {
  /** Size of every sandbox's root layer filesystem; default 10. */
  rootLayerGiB?: number;
  /** Size of a standard sandbox's /workspace; default 10. */
  standardWorkspaceGiB?: number;
  /** Size of the pool; default the size of the filesystem holding the root. */
  poolGiB?: number;
  /** Host bytes never promised to sandboxes (admission.ts); default 5 GiB. */
  reserveGiB?: number;
  /** How many times what the host can back may be promised to sandboxes; default 8 (1: none overcommitted). */
  overcommit?: number;
  /** A blank template unused for this long is removed; default 10 minutes. */
  templateIdleMs?: number;
}

/** Runs `take` under the sandbox's lifecycle lock, with its paths and whether it runs. */
export type SerializedSnapshot = (
  take: (paths: SandboxPaths, running: boolean) => Promise<LocalSnapshot>,
) => Promise<LocalSnapshot>;

/** A refusal's words for the operator's log (the host's numbers; the tenant gets the verdict only). */
function refusalDetail(bytes: number, verdict: StorageVerdict): string {
  const gib = (value: number) => `${Math.round((value / GIB) * 10) / 10} GiB`;
  return (
    `the host cannot back ${gib(bytes)} of storage for this sandbox: sandboxes may still write ` +
    `${gib(verdict.mayStillWriteBytes)} with it, and the host can back ${gib(verdict.backableBytes)}` +
    (verdict.couldEverFit ? "" : " (more than this host could back with no other sandbox)")
  );
}

/** How long, and how many, ended pending entries a later decision may still count. */
const SETTLED_KEPT_MS = 120_000;
const SETTLED_KEPT_MAX = 4096;

export class SandboxStorage {
  private readonly snapshots: SnapshotStore;
  /** Sandboxes with a snapshot being taken (a second one is refused, not queued). */
  private readonly snapshotting = new Set<string>();
  /** Image bytes admitted for creates, growths and pool members not yet on disk, by sandbox id. */
  private readonly pending = new Map<string, number>();
  /**
   * Pending entries that ended (their images on disk, or given up), newest last: a measure
   * taken before one ended may have read the pool before those images were there, so its
   * decision counts them (bounded: SETTLED_KEPT_MS, SETTLED_KEPT_MAX).
   */
  private readonly settled: { id: string; bytes: number; seq: number; at: number }[] = [];
  /** Counts the ends of pending entries (the order a measure compares with). */
  private seq = 0;
  /** The admission decision under way (they run one at a time). */
  private deciding: Promise<void> = Promise.resolve();
  /** Ids of the API's checks, which reserve nothing past the check itself. */
  private admissionProbes = 0;
  private readonly collector: NodeJS.Timeout;

  private constructor(
    private readonly layout: Layout,
    readonly pool: StoragePool,
    private readonly sizes: { rootLayerGiB: number; standardWorkspaceGiB: number },
    private readonly policy: AdmissionPolicy,
    templateIdleMs: number,
  ) {
    this.snapshots = new SnapshotStore(pool);
    this.collector = setInterval(
      () => void this.pool.collectTemplates().catch(() => undefined),
      Math.min(templateIdleMs, 60_000),
    );
    this.collector.unref();
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
    const policy: AdmissionPolicy = {
      reserveBytes: (options.reserveGiB ?? 5) * GIB,
      overcommit: options.overcommit ?? 8,
    };
    if (!(policy.reserveBytes >= 0) || !(policy.overcommit >= 1)) {
      throw new RuntimeError("invalid_spec", "the storage reserve must be >= 0 GiB and the overcommit ratio >= 1");
    }
    const templateIdleMs = options.templateIdleMs ?? 10 * 60_000;
    const pool = await StoragePool.open(layout, {
      ...(options.poolGiB !== undefined ? { sizeGiB: options.poolGiB } : {}),
      templateIdleMs,
    });
    const prefix = `${layout.sandboxesDir}/`;
    for (const mount of await readMounts()) {
      if (mount.fsType === "xfs" && mount.mountPoint.startsWith(prefix)) await thawFilesystem(mount.mountPoint);
    }
    for (const id of await childCgroups(layout.cgroupParent)) {
      if (isSandboxId(id)) await thawCgroup(layout.cgroupPath(id));
    }
    return new SandboxStorage(layout, pool, sizes, policy, templateIdleMs);
  }

  close(): void {
    clearInterval(this.collector);
  }

  /**
   * Refuses (`storage_exhausted`) giving sandbox `id` images of `sizes` in total when the
   * host could not back them (admission.ts); otherwise runs `work` with them counted as
   * promised, so concurrent admissions see each other.
   */
  async admitted<T>(id: string, sizes: SandboxImageSizes, work: () => Promise<T>): Promise<T> {
    const bytes = (sizes.rootGiB + sizes.workspaceGiB) * GIB;
    // One decision at a time (measuring is async): two admissions must not both count without the other.
    const turn = this.deciding;
    let release: () => void = () => {};
    this.deciding = new Promise<void>((resolve) => {
      release = resolve;
    });
    let previous: number | undefined;
    try {
      await turn;
      const verdict = decideStorage(await this.pool.usage(), this.pending, { id, bytes }, this.policy);
      if (!verdict.admitted) {
        throw new RuntimeError("storage_exhausted", refusalDetail(bytes, verdict), {
          permanent: !verdict.couldEverFit,
        });
      }
      previous = this.pending.get(id);
      this.pending.set(id, Math.max(bytes, previous ?? 0));
    } finally {
      release();
    }
    try {
      return await work();
    } finally {
      this.restorePending(id, bytes, previous);
    }
  }

  /**
   * Counts `bytes` of images for sandbox `id` as pending until the returned release is called:
   * the API's admission of a pool member reserves them under its lock (host-admission.ts), so
   * a create deciding after it counts them, even before the member's images are made.
   */
  reserve(id: string, bytes: number): () => void {
    const previous = this.pending.get(id);
    this.pending.set(id, Math.max(bytes, previous ?? 0));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.restorePending(id, bytes, previous);
    };
  }

  private restorePending(id: string, bytes: number, previous: number | undefined): void {
    if (previous === undefined) this.pending.delete(id);
    else this.pending.set(id, previous);
    const now = Date.now();
    this.settled.push({ id, bytes, seq: ++this.seq, at: now });
    while (
      this.settled.length > SETTLED_KEPT_MAX ||
      (this.settled.length > 0 && now - (this.settled[0] as { at: number }).at > SETTLED_KEPT_MS)
    ) {
      this.settled.shift();
    }
  }

  /**
   * The pool measured now, with the admissions under way here (see StorageMeasure): the API
   * decides with it under its lock, counting the store's live sandboxes as reservations.
   */
  async measure(): Promise<StorageMeasure> {
    // Before and after: an admission that ends while the pool is measured is in one of them or on disk.
    const pending = new Map(this.pending);
    const since = this.seq;
    const usage = await this.pool.usage();
    for (const [id, bytes] of this.pending) pending.set(id, Math.max(bytes, pending.get(id) ?? 0));
    return {
      bytesOf: (shape) => {
        // A durable shape without a capacity (a restore that inherits it) counts at its least.
        const sizes = this.sizesOf({ ...shape, workspaceCapacityGiB: shape.workspaceCapacityGiB ?? 1 });
        return (sizes.rootGiB + sizes.workspaceGiB) * GIB;
      },
      decide: (reserved, request) => {
        // Decided later than measured (under the API's lock): what was reserved since counts
        // (a pool member admitted meanwhile), and what ended since, which the usage may miss.
        const all = new Map(pending);
        const add = (id: string, bytes: number) => all.set(id, Math.max(bytes, all.get(id) ?? 0));
        for (const [id, bytes] of this.pending) add(id, bytes);
        for (const entry of this.settled) if (entry.seq > since) add(entry.id, entry.bytes);
        for (const [id, bytes] of reserved) add(id, bytes);
        const verdict = decideStorage(usage, all, request, this.policy);
        if (verdict.admitted) return { admitted: true };
        return { admitted: false, permanent: !verdict.couldEverFit, detail: refusalDetail(request.bytes, verdict) };
      },
    };
  }

  /** Whether a new sandbox of `spec` would be admitted now, beside nothing but the host's own state. */
  async admit(spec: Pick<SandboxSpec, "storageClass" | "workspaceCapacityGiB">): Promise<void> {
    const measure = await this.measure();
    const verdict = measure.decide(new Map(), {
      id: `admission-${++this.admissionProbes}`,
      bytes: measure.bytesOf({ ...spec, workspaceCapacityGiB: spec.workspaceCapacityGiB ?? null }),
    });
    if (!verdict.admitted) {
      throw new RuntimeError("storage_exhausted", verdict.detail, { permanent: verdict.permanent });
    }
  }

  /** The pool's numbers for operators (null when there is no pool yet). */
  async report(): Promise<StorageReport | null> {
    if (!(await this.pool.readyIfPresent())) return null;
    const usage = await this.pool.usage();
    const verdict = decideStorage(usage, this.pending, { id: "", bytes: 0 }, this.policy);
    return {
      hostFreeBytes: usage.hostFreeBytes,
      poolAllocatedBytes: usage.poolAllocatedBytes,
      promisedBytes: promisedImageBytes(usage, this.pending),
      mayStillWriteBytes: verdict.mayStillWriteBytes,
      backableBytes: verdict.backableBytes,
    };
  }

  /** The sizes of a new sandbox's filesystems. */
  sizesOf(spec: Pick<SandboxSpec, "storageClass" | "workspaceCapacityGiB">): SandboxImageSizes {
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

  /** Admits (see admitted()) and makes the sandbox's two images, mounted. */
  async provision(id: string, paths: SandboxPaths, sizes: SandboxImageSizes, from?: SnapshotImages): Promise<void> {
    // A restore's images are at least the snapshot's sizes.
    const effective = from
      ? {
          rootGiB: Math.max(sizes.rootGiB, await imageSizeGiB(from.root)),
          workspaceGiB: Math.max(sizes.workspaceGiB, await imageSizeGiB(from.workspace)),
        }
      : sizes;
    await this.admitted(id, effective, () => this.pool.provision(id, paths, sizes, from));
  }

  /**
   * Mounts the sandbox's images (after a reboot); a sandbox made before the storage pool
   * (legacy.ts) has its old state copied into new images first, once.
   */
  async mount(id: string, paths: SandboxPaths, storageClass: SandboxSpec["storageClass"]): Promise<void> {
    if (await hasLegacyLayout(paths)) await this.migrateLegacy(id, paths, storageClass === "durable");
    else await this.pool.mount(id, paths);
  }

  private async migrateLegacy(id: string, paths: SandboxPaths, durable: boolean): Promise<void> {
    // The old overlay (over the old upper dir) goes; so do the images of an attempt a crash cut short.
    for (const dir of [paths.rootfs, paths.layer, paths.workspace]) await unmountUnder(dir);
    await this.pool.removeImages(id);
    const { legacy, sizes } = await prepareLegacy(paths, durable, {
      rootGiB: this.sizes.rootLayerGiB,
      standardWorkspaceGiB: this.sizes.standardWorkspaceGiB,
    });
    await this.admitted(id, sizes, () => this.pool.provision(id, paths, sizes));
    try {
      await copyLegacy(paths, legacy);
    } catch (error) {
      for (const dir of [paths.layer, paths.workspace]) await unmountUnder(dir);
      await this.pool.removeImages(id);
      throw error;
    }
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
    const rootGiB = await imageSizeGiB(this.layout.sandboxImages(id).root);
    // Run even at the same size: it finishes a growth a crash interrupted, and is a no-op otherwise.
    await this.admitted(id, { rootGiB, workspaceGiB: capacityGiB }, () =>
      growMountedImage(image, paths.workspace, capacityGiB),
    );
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
