// A pool of started sandboxes in front of the local driver: members of the default shape
// (default image, resources and standard storage; one set per network mode) and, within one
// budget, members of the images this host's creates used most recently (pool-plan.ts: each
// recent image and network mode a shape, the least recently used image evicted). A create -> running
// through runc costs a `runc run` (30-40 ms) plus the filesystem and network set-up; a
// pooled sandbox has all of it done and its first process waiting in the launcher
// (pool-launch.ts), so a claim is a record rewrite and a FIFO write.
//
// The pool hands out ids, not sandboxes: the service gives a new sandbox of a pooled shape
// a pooled id (take()), so nothing on the host (directory, netns, veth rules, cgroup,
// hostname) is renamed. Until the reconciler creates that sandbox, the id reads as absent
// here and is left out of list(), so neither the start-up orphan cleanup nor materialize
// mistakes it for a leftover. create() then gives it the sandbox's command and environment
// (LocalRuntimeDriver.assign), start() sends them to the launcher. Anything that does not
// fit (another image digest: the tag moved; a program the launcher cannot run) takes the
// normal path. A member is organization-neutral until claimed (its placeholder command and
// environment name no organization), whichever image it runs.
//
// Pooled sandboxes are unknown to the store: a crash leaves them to the next start's orphan
// cleanup; a claimed sandbox still waiting for its launch is stopped at open() and then
// starts normally. close() destroys what is still pooled.

import { mkdir, rm, stat, writeFile } from "node:fs/promises";
import { exists } from "../../../lib/fs.js";
import type { Logger } from "../../../lib/logger.js";
import type {
  ExecOutcome,
  ExecRequest,
  ExitListener,
  LocalSnapshot,
  NetworkMode,
  NetworkReceipt,
  PoolRequest,
  PreparedImage,
  PrepareImageOptions,
  RuntimeDriver,
  SandboxIdPool,
  SandboxObservation,
  SandboxSession,
  SandboxSpec,
  SessionHandlers,
  SessionRequest,
  SnapshotImages,
  StorageMeasure,
  StorageReport,
} from "../interface.js";
import type { LocalRuntimeDriver } from "./driver.js";
import { run } from "./host.js";
import { isSandboxId } from "./layout.js";
import { executableInRoot, launchPaths, launchScript, POOL_BUSYBOX, sendLaunch } from "./pool-launch.js";
import { POOL_MODES, type PoolShape, planMembers, RecentImages, shapeKey } from "./pool-plan.js";

/** How long a member taken for another server's create waits for that create's row to arrive here. */
export const REMOTE_HOLD_MS = 120_000;
/** After a take, the refill waits this long so it does not compete with the claim itself. */
const REFILL_DELAY_MS = 50;
const RETRY_DELAY_MS = 5000;
/** A pool that keeps failing (an unreachable default image) backs off to one try in this long. */
const MAX_RETRY_DELAY_MS = 300_000;

export interface SandboxPoolOptions {
  /** Started sandboxes of the default image kept per network mode. */
  size: number;
  /** The default image: always pooled (`size` per mode). */
  image: string;
  /** Other images kept warm: the most recently created ones on this host (0: none). */
  recentImages?: number;
  /** Members per recent image and network mode it was created in. */
  recentSize?: number;
  /** Members in all (default ones first): the pool never reserves more storage than this many sandboxes. */
  maxMembers?: number;
  memoryMiB: number;
  cpuMillis: number;
  pids: number;
  /** Mints the ids (the API's sandbox ids: the pooled id becomes the sandbox's). */
  newId: () => string;
  log?: Logger;
}

/**
 * Admits a new member against the host as the API admits a create (host-admission.ts's
 * admitPoolMember: under the host's lock, beside the store's reservations) and reserves its
 * storage until the returned release; throws when the host cannot back it.
 */
export type PoolMemberAdmission = (
  id: string,
  shape: { storageClass: "standard"; workspaceCapacityGiB: null },
) => Promise<() => void>;

interface Entry extends PoolShape {
  digest: string;
}

/** What the pool counts (tests, benchmarks): creates it served, and members it destroyed as no longer planned. */
export interface PoolCounters {
  served: number;
  evicted: number;
}

export async function poolSupported(): Promise<boolean> {
  return stat(POOL_BUSYBOX).then(
    (info) => info.isFile(),
    () => false,
  );
}

export class PooledRuntime implements RuntimeDriver, SandboxIdPool {
  readonly kind = "local";
  /** Ready to hand out, oldest first. */
  private readonly available = new Map<string, Entry>();
  /** Handed to a create whose sandbox the reconciler has not created yet. */
  private readonly taken = new Map<string, Entry>();
  /** Taken ids held for another server's create (takeForRemote), with the timer that ends the hold. */
  private readonly remoteHolds = new Map<string, NodeJS.Timeout>();
  /** Being made by the refill. */
  private readonly making = new Map<string, Entry>();
  /** Images this host's creates of the pooled resources used, beside the default one. */
  private readonly recent: RecentImages;
  readonly counters: PoolCounters = { served: 0, evicted: 0 };
  /** Claimed: the launcher script start() sends. */
  private readonly launches = new Map<string, string>();
  /** Ids whose create a pooled sandbox served, until their first start (metrics). */
  private readonly served = new Set<string>();
  private filling: Promise<void> | null = null;
  private refillTimer: NodeJS.Timeout | null = null;
  /** Fills that failed in a row: the retry backs off. */
  private failures = 0;
  private started = false;
  private closed = false;
  /** The host drains: no refill, no take, and its idle members went. */
  private draining = false;
  /** Without one (until the container gives it), the driver's own check is all a refill gets. */
  private admitMember: PoolMemberAdmission | null = null;

  private constructor(
    readonly driver: LocalRuntimeDriver,
    private readonly options: SandboxPoolOptions,
  ) {
    this.recent = new RecentImages(options.recentImages ?? 0);
  }

  /**
   * Wraps `driver`. What a previous process pooled and never claimed goes; a claimed sandbox
   * whose first run still waits in its launcher (a crash between the claim and its start) is
   * stopped, so its next start is a normal one.
   */
  static async open(driver: LocalRuntimeDriver, options: SandboxPoolOptions): Promise<PooledRuntime> {
    for (const id of await driver.list()) {
      const launch = launchPaths(driver.layout.sandbox(id));
      // Never claimed: an orphan, or taken by a create whose sandbox the reconciler makes anew.
      if (await exists(launch.unclaimed)) await driver.destroy(id);
      else if (await exists(launch.waiting)) {
        await driver.stop(id).catch(() => undefined);
        await endLaunch(launch);
      }
    }
    return new PooledRuntime(driver, options);
  }

  /**
   * Admits every later refill through `admission` (the store's reservations are beyond the
   * driver: a create admitted but not yet made holds storage the driver cannot see).
   */
  admitMembersWith(admission: PoolMemberAdmission): void {
    this.admitMember = admission;
  }

  /** Starts filling; call after the reconciler's start-up cleanup, which would remove a fresh pool. */
  startFilling(): void {
    this.started = true;
    this.scheduleRefill(0);
  }

  /**
   * A draining host's pool empties: the refill stops, no create is served from it and every
   * idle member is destroyed (claimed ones belong to their sandboxes). Resolves once they are gone.
   */
  async drain(): Promise<void> {
    this.draining = true;
    if (this.refillTimer) clearTimeout(this.refillTimer);
    this.refillTimer = null;
    await this.filling;
    for (const id of [...this.available.keys()]) {
      await this.destroy(id).catch((error: unknown) => this.warn(id, error, "draining the sandbox pool"));
    }
  }

  /** The host is no longer draining: the pool fills again (once the controllers started it). */
  resume(): void {
    if (!this.draining) return;
    this.draining = false;
    this.failures = 0;
    this.scheduleRefill(0);
  }

  /** Members started or being made, not yet handed out (reported with the heartbeat). */
  memberCount(): number {
    return this.available.size + this.making.size;
  }

  /** Ids in the pool now (tests). */
  pooledIds(): string[] {
    return [...this.available.keys()];
  }

  /** Resolves when the pool is full (or the refill stopped on an error); tests and benchmarks. */
  async settled(): Promise<void> {
    while (this.filling || this.refillTimer) {
      await (this.filling ?? new Promise((resolve) => setTimeout(resolve, 10)));
    }
  }

  /** Ids in the pool now with their image and network mode (tests). */
  pooledShapes(): { id: string; image: string; mode: NetworkMode; digest: string }[] {
    return [...this.available].map(([id, entry]) => ({ id, ...entry }));
  }

  /** A pooled id for a create of a pooled shape, or null (then the create mints its own). */
  take(request: PoolRequest): string | null {
    if (this.closed || this.draining) return null;
    const o = this.options;
    const fits =
      request.memoryMiB === o.memoryMiB &&
      request.cpuMillis === o.cpuMillis &&
      request.storageClass === "standard" &&
      request.workspaceCapacityGiB === null &&
      (POOL_MODES as string[]).includes(request.network);
    if (!fits) return null;
    for (const [id, entry] of this.available) {
      if (entry.mode !== request.network || entry.image !== request.image) continue;
      this.available.delete(id);
      this.taken.set(id, entry);
      this.scheduleRefill(REFILL_DELAY_MS);
      return id;
    }
    return null;
  }

  /**
   * take() for another server's create (node-api.ts pool-take): the member is held for that
   * create until its row reaches create() here, or for REMOTE_HOLD_MS at most (a server that
   * died between the take and its commit leaves nothing behind: the member then goes).
   */
  takeForRemote(request: PoolRequest): string | null {
    const id = this.take(request);
    if (!id) return null;
    const timer = setTimeout(() => {
      this.remoteHolds.delete(id);
      this.release(id);
    }, REMOTE_HOLD_MS);
    timer.unref();
    this.remoteHolds.set(id, timer);
    return id;
  }

  /** A member another server took and gives back (its create failed): it goes. */
  releaseRemote(id: string): void {
    if (!this.remoteHolds.has(id)) return;
    this.endRemoteHold(id);
    this.release(id);
  }

  private endRemoteHold(id: string): void {
    const timer = this.remoteHolds.get(id);
    if (timer) clearTimeout(timer);
    this.remoteHolds.delete(id);
  }

  /** A taken id whose sandbox was never recorded (the create failed in the store): it goes. */
  release(id: string): void {
    if (!this.taken.delete(id)) return;
    void this.driver.destroy(id).catch((error: unknown) => this.warn(id, error, "releasing a pooled sandbox"));
  }

  // ---- RuntimeDriver ----

  prepareImage(reference: string, options?: PrepareImageOptions): Promise<PreparedImage> {
    return this.driver.prepareImage(reference, options);
  }

  async create(spec: SandboxSpec): Promise<void> {
    this.noteUse(spec);
    this.endRemoteHold(spec.id);
    const entry = this.taken.get(spec.id);
    if (!entry) return this.driver.create(spec);
    this.taken.delete(spec.id);
    const assigned = await this.driver.assign(spec).catch(() => null);
    if (!assigned) {
      // Another digest (the tag moved) or shape: the pooled sandbox goes, the create is a normal one.
      if (entry.digest !== spec.source.image.digest) {
        this.dropDigest(entry.image, spec.source.image.digest);
        this.scheduleRefill(REFILL_DELAY_MS);
      }
      await this.driver.destroy(spec.id);
      return this.driver.create(spec);
    }
    this.served.add(spec.id);
    this.counters.served++;
    await rm(launchPaths(this.driver.layout.sandbox(spec.id)).unclaimed, { force: true });
    const script = launchScript(assigned.args, assigned.env);
    if (script && (await executableInRoot(assigned.rootfs, assigned.args[0] as string, assigned.env, assigned.cwd))) {
      this.launches.set(spec.id, script);
      return;
    }
    // runc refuses to start a missing program (start_failed); the launcher would run it and
    // exit 127. Its first run ends here and start() starts it as runc would.
    await this.endLauncher(spec.id);
  }

  servedFromPool(id: string): boolean {
    return this.served.has(id);
  }

  imagePullBytes(): number {
    return this.driver.imagePullBytes();
  }

  async start(id: string): Promise<void> {
    this.served.delete(id);
    const script = this.launches.get(id);
    if (script === undefined) return this.driver.start(id);
    this.launches.delete(id);
    const launch = launchPaths(this.driver.layout.sandbox(id));
    const sent = await sendLaunch(launch.spec, script).catch(() => false);
    await endLaunch(launch);
    if (sent) return;
    await this.driver.stop(id);
    return this.driver.start(id);
  }

  stop(id: string): Promise<void> {
    return this.driver.stop(id);
  }

  exec(id: string, request: ExecRequest): Promise<ExecOutcome> {
    return this.driver.exec(id, request);
  }

  openSession(id: string, request: SessionRequest, handlers: SessionHandlers): Promise<SandboxSession> {
    return this.driver.openSession(id, request, handlers);
  }

  async destroy(id: string): Promise<void> {
    this.available.delete(id);
    this.taken.delete(id);
    this.launches.delete(id);
    this.served.delete(id);
    return this.driver.destroy(id);
  }

  async observe(id: string): Promise<SandboxObservation> {
    if (this.isPooled(id)) return { status: "absent" };
    return this.driver.observe(id);
  }

  async list(): Promise<string[]> {
    return (await this.driver.list()).filter((id) => !this.isPooled(id));
  }

  setNetwork(id: string, mode: NetworkMode): Promise<NetworkReceipt> {
    return this.driver.setNetwork(id, mode);
  }

  /** A pooled sandbox not yet claimed is unknown to the store, so the gateway refuses it anyway. */
  sandboxAtAddress(address: string): Promise<{ id: string; mode: NetworkMode } | null> {
    return this.driver.sandboxAtAddress(address);
  }

  async portAddress(id: string): Promise<string | null> {
    return this.isPooled(id) ? null : this.driver.portAddress(id);
  }

  async listeningPorts(id: string): Promise<number[]> {
    return this.isPooled(id) ? [] : this.driver.listeningPorts(id);
  }

  growWorkspace(id: string, capacityGiB: number): Promise<void> {
    return this.driver.growWorkspace(id, capacityGiB);
  }

  measureStorage(): Promise<StorageMeasure> {
    return this.driver.measureStorage();
  }

  hostCompute(): { memoryMiB: number; cpuMillis: number } {
    return this.driver.hostCompute();
  }

  /** Every image with a member ready (the default one first), for placement's warm hint. */
  cacheHints(): { images: string[]; warmImages: string[] } {
    const warm = new Set([...this.available.values()].map((entry) => entry.image));
    const ordered = warm.has(this.options.image) ? [this.options.image, ...warm] : [...warm];
    return { images: this.driver.cacheHints().images, warmImages: [...new Set(ordered)] };
  }

  storageReport(): Promise<StorageReport | null> {
    return this.driver.storageReport();
  }

  snapshot(id: string, snapshotId: string): Promise<LocalSnapshot> {
    return this.driver.snapshot(id, snapshotId);
  }

  localSnapshot(snapshotId: string): Promise<SnapshotImages | null> {
    return this.driver.localSnapshot(snapshotId);
  }

  importSnapshot(snapshotId: string, fill: (staging: SnapshotImages) => Promise<void>): Promise<void> {
    return this.driver.importSnapshot(snapshotId, fill);
  }

  dropLocalSnapshot(snapshotId: string): Promise<void> {
    return this.driver.dropLocalSnapshot(snapshotId);
  }

  listLocalSnapshots(): Promise<string[]> {
    return this.driver.listLocalSnapshots();
  }

  onExit(listener: ExitListener): () => void {
    return this.driver.onExit(listener);
  }

  /** Destroys every pooled sandbox (claimed ones belong to their sandboxes), then closes the driver. */
  async close(): Promise<void> {
    this.closed = true;
    for (const timer of this.remoteHolds.values()) clearTimeout(timer);
    this.remoteHolds.clear();
    if (this.refillTimer) clearTimeout(this.refillTimer);
    this.refillTimer = null;
    await this.filling;
    for (const id of [...this.available.keys(), ...this.taken.keys()]) {
      await this.destroy(id).catch((error: unknown) => this.warn(id, error, "removing a pooled sandbox"));
    }
    await this.driver.close();
  }

  // ---- internals ----

  private isPooled(id: string): boolean {
    return this.available.has(id) || this.taken.has(id) || this.making.has(id);
  }

  /** Ends the launcher's run (its first run never started the command); a later start() is runc's. */
  private async endLauncher(id: string): Promise<void> {
    await this.driver.stop(id);
    await endLaunch(launchPaths(this.driver.layout.sandbox(id)));
  }

  private dropDigest(image: string, digest: string): void {
    for (const [id, entry] of this.available) {
      if (entry.image === image && entry.digest !== digest) {
        void this.destroy(id).catch((error: unknown) =>
          this.warn(id, error, "removing a pooled sandbox of an old digest"),
        );
      }
    }
  }

  /**
   * A create of the pooled resources and storage (pooled or not) makes its image recent on
   * this host; when that changes what the pool should hold, the refill makes (or evicts) members.
   */
  private noteUse(spec: SandboxSpec): void {
    const o = this.options;
    const fits =
      spec.source.kind === "image" &&
      spec.source.image.reference !== o.image &&
      (spec.mounts ?? []).length === 0 &&
      spec.storageClass === "standard" &&
      spec.workspaceCapacityGiB === undefined &&
      spec.resources.memoryMiB === o.memoryMiB &&
      spec.resources.cpuMillis === o.cpuMillis &&
      spec.resources.pids === o.pids &&
      POOL_MODES.includes(spec.network);
    if (fits && this.recent.touch(spec.source.image.reference, spec.network)) this.scheduleRefill(REFILL_DELAY_MS);
  }

  /** What the pool should hold now (pool-plan.ts). */
  private plan() {
    return planMembers({
      defaultImage: this.options.image,
      defaultSize: this.options.size,
      recent: this.recent.list(),
      recentSize: this.options.recentSize ?? 2,
      maxMembers: this.options.maxMembers ?? Number.POSITIVE_INFINITY,
    });
  }

  private scheduleRefill(delayMs: number): void {
    if (!this.started || this.closed || this.draining || this.refillTimer) return;
    this.refillTimer = setTimeout(() => {
      this.refillTimer = null;
      this.filling ??= this.fill().finally(() => {
        this.filling = null;
      });
    }, delayMs);
  }

  /**
   * Evicts members beyond the plan (an image no longer recent, a smaller share of the budget),
   * then makes what is missing, in the plan's order. A recent image whose member cannot be
   * made leaves the plan (it comes back with its next create); the default image backs off.
   */
  private async fill(): Promise<void> {
    while (!this.closed && !this.draining) {
      const plan = this.plan();
      const held = new Map<string, number>();
      for (const [id, entry] of this.available) {
        const key = shapeKey(entry);
        const count = (held.get(key) ?? 0) + 1;
        if (count > (plan.get(key)?.count ?? 0)) {
          this.counters.evicted++;
          await this.destroy(id).catch((error: unknown) => this.warn(id, error, "evicting a pooled sandbox"));
          continue;
        }
        held.set(key, count);
      }
      const missing = [...plan.values()].find(({ shape, count }) => (held.get(shapeKey(shape)) ?? 0) < count);
      if (!missing) return;
      try {
        await this.makeOne(missing.shape);
        if (missing.shape.image === this.options.image) this.failures = 0;
      } catch (error) {
        this.warn(null, error, `filling the sandbox pool (${missing.shape.image}, network ${missing.shape.mode})`);
        if (missing.shape.image !== this.options.image) {
          this.recent.forget(missing.shape.image);
          continue;
        }
        this.failures++;
        const delay = Math.min(MAX_RETRY_DELAY_MS, RETRY_DELAY_MS * 2 ** (this.failures - 1));
        if (!this.closed) this.scheduleRefill(delay);
        return;
      }
    }
  }

  private async makeOne(shape: PoolShape): Promise<void> {
    const image = await this.driver.prepareImage(shape.image);
    // The tag moved: what was made from the old digest would only be refused at claim.
    this.dropDigest(shape.image, image.digest);
    const id = this.options.newId();
    if (!isSandboxId(id)) throw new Error(`the pool was given an invalid id ${id}`);
    const release = await this.admitMember?.(id, { storageClass: "standard", workspaceCapacityGiB: null });
    const entry: Entry = { image: shape.image, mode: shape.mode, digest: image.digest };
    this.making.set(id, entry);
    try {
      await this.driver.create({
        id,
        source: { kind: "image", image },
        // Replaced at claim: the launcher runs instead of it.
        command: ["true"],
        env: { WARREN_SANDBOX_ID: id },
        resources: { memoryMiB: this.options.memoryMiB, cpuMillis: this.options.cpuMillis, pids: this.options.pids },
        storageClass: "standard",
        network: shape.mode,
      });
      const launch = launchPaths(this.driver.layout.sandbox(id));
      await mkdir(launch.dir, { mode: 0o700 });
      await mkdir(launch.bound, { mode: 0o755 });
      await run("/usr/bin/mkfifo", ["-m", "0644", launch.spec]);
      await writeFile(launch.busybox, "", { mode: 0o755 });
      await writeFile(launch.unclaimed, "");
      await writeFile(launch.waiting, "");
      await this.driver.start(id);
      if (this.closed) throw new Error("the pool closed");
      this.available.set(id, entry);
    } catch (error) {
      await this.driver.destroy(id).catch(() => undefined);
      throw error;
    } finally {
      this.making.delete(id);
      release?.();
    }
  }

  private warn(id: string | null, error: unknown, what: string): void {
    this.options.log?.warn({ ...(id ? { sandbox_id: id } : {}), err: (error as Error).message }, what);
  }
}

/** The first run is over (launched or not): later starts are runc's own. */
async function endLaunch(launch: ReturnType<typeof launchPaths>): Promise<void> {
  await rm(launch.waiting, { force: true });
  await rm(launch.spec, { force: true });
}
