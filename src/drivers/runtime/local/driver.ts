// The local RuntimeDriver: sandboxes on this Linux host through runc, overlayfs, cgroups,
// network namespaces and nftables. Module map:
//   options.ts     what a deployment configures of the driver
//   image-source.ts pulls through the layer cache; an image's layer dirs
//   layout.ts      where things live under the root; host-global names
//   oci-config.ts  config.json and exec process specs (pure), seccomp.ts its filter
//   spec.ts        checks of a SandboxSpec
//   mounts.ts      overlay rootfs, mountinfo
//   storage/       the XFS storage pool (pool.ts) and its image files (images.ts): every
//                  sandbox's root layer and /workspace, each a filesystem of its own;
//                  admission.ts (what the host can back), legacy.ts (the pre-pool layout)
//   snapshots.ts   sealed copy-on-write snapshots of a sandbox's two images
//   cgroups.ts     finding and removing cgroups, OOM counters, the freezer
//   cpu-fairness.ts each running sandbox's CPU weight, so organizations weigh alike
//   network.ts     netns, veth, nftables (network-plan.ts: the pure slots and rule text)
//   supervisor.ts  the shim that runs `runc run` and records the exit; stopping a run
//   records.ts     the on-disk records of a sandbox (sandbox.json, network.json)
//   exit-watch.ts  a run's end (the shim's exit.json) as exit events
//   exec-runner.ts exec and sessions: the run's agent, or (exec only) the fallback
//   exec.ts        `runc exec` with caps and timeouts (the fallback)
//   exec-agent.ts  the resident exec agent per running sandbox, started once by runc exec;
//                  exec-frames.ts its wire protocol, exec-session.ts its streaming sessions
//   pool.ts        started sandboxes of the default shape, handed out by id (pool-launch.ts)
//   runc.ts        runc state from disk
// State on disk is the truth: a second driver on the same root (a restarted server) sees
// and adopts everything the first one made.
import { chown, mkdir, readdir, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { exists } from "../../../lib/fs.js";
import {
  type ExecOutcome,
  type ExecRequest,
  type ExitListener,
  type KeptProcess,
  type LocalSnapshot,
  type NetworkMode,
  type NetworkReceipt,
  type PreparedImage,
  type PrepareImageOptions,
  type ProcessReader,
  type ProcessRef,
  type ProcessStartRequest,
  type RuntimeDriver,
  RuntimeError,
  type SandboxObservation,
  type SandboxProcesses,
  type SandboxSession,
  type SandboxSpec,
  type SessionHandlers,
  type SessionRequest,
  type SnapshotImages,
  type StorageMeasure,
  type StorageReport,
} from "../interface.js";
import { childCgroups, oomCounterFile, removeCgroup } from "./cgroups.js";
import { CpuFairness, recordShares } from "./cpu-fairness.js";
import { ExecRunner } from "./exec-runner.js";
import { ExitWatch } from "./exit-watch.js";
import { ensureHostPackages, runOrFail, TOOLS } from "./host.js";
import {
  DEFAULT_MAPPED_TREE,
  type MappedPaths,
  mappedPaths,
  mappedRanges,
  mountMappedOverlay,
  prepareMappedTree,
  removeMappedTree,
} from "./id-mapping.js";
import { ImageSource } from "./image-source.js";
import { raiseMemcgAccountedLimits, raisePidMax } from "./kernel-limits.js";
import { assertSandboxId, isSandboxId, Layout, type SandboxPaths } from "./layout.js";
import { listeningPortsOfSandbox } from "./listening.js";
import { mountOverlay, mountViews, unmountUnder } from "./mounts.js";
import { NamespaceOwners } from "./namespace-owners.js";
import { SandboxNetwork } from "./network.js";
import { buildBundleConfig, hostsFile, type ProcessIdentity, resolveArgv, sandboxEnv } from "./oci-config.js";
import type { LocalRuntimeDriverOptions } from "./options.js";
import { launchPaths, POOL_BUSYBOX } from "./pool-launch.js";
import {
  loadRecord,
  type NetworkRecord,
  readNetworkRecord,
  recordIds,
  type SandboxRecord,
  writeJson,
  writeNetworkRecord,
} from "./records.js";
import { isInitAlive, readRuncState, runcDeleteForce } from "./runc.js";
import { spawner } from "./spawner.js";
import { assertMountSources, hostMaxOpenFiles, readRootfsFile, validateSpec } from "./spec.js";
import { assertCapacity } from "./storage/images.js";
import { SandboxStorage } from "./storage/sandbox-storage.js";
import { settledExitRecord, startShim, stoppedObservation, stopRun } from "./supervisor.js";
import { prepareTrust, trustedEnv } from "./trust.js";
import { makeSandboxNamespaces, pinsNamespace, userNamespacePin } from "./user-namespace.js";
import { resolveUser } from "./users.js";

export type { LocalRuntimeDriverOptions } from "./options.js";

const DEFAULT_POOL = "10.213.0.0/16";

/** The CPUs this process may use (its affinity), in millis. */
let busyboxFound: Promise<string | null> | null = null;

/** The host's static busybox (bound into every sandbox for the file API), once looked up; null when absent. */
function hostBusybox(): Promise<string | null> {
  busyboxFound ??= stat(POOL_BUSYBOX).then(
    (info) => (info.isFile() ? POOL_BUSYBOX : null),
    () => null,
  );
  return busyboxFound;
}

function hostCpuMillis(): number {
  return os.availableParallelism() * 1000;
}

export class LocalRuntimeDriver implements RuntimeDriver, SandboxProcesses {
  readonly kind = "local";
  readonly layout: Layout;
  readonly network: SandboxNetwork;
  private readonly images: ImageSource;
  private readonly startTimeoutMs: number;
  private readonly stopTimeoutMs: number;
  private readonly swapAccounting: boolean;
  private readonly maxOpenFiles: number;
  private readonly userNamespaces: boolean;
  /** Who owns each sandbox's user namespace: a host uid claimed machine-wide (namespace-owners.ts). */
  readonly namespaceOwners: NamespaceOwners;
  private readonly idMapping: boolean;
  /** The blocks of host ids mapped sandboxes hold (id-mapping.ts), claimed machine-wide. */
  readonly mappedRanges: NamespaceOwners;
  private readonly mappedTreeDir: string;
  private trustedCaPem: string | undefined;
  private readonly locks = new Map<string, Promise<unknown>>();
  /**
   * Sandboxes whose bundle create() wrote and nothing changed since (no assign, no start):
   * their first start runs it as it is instead of writing it again, which with id mapping
   * makes the tool binds of the mapped tree afresh (several host tools: 100+ ms on a loaded host).
   */
  private readonly freshBundles = new Set<string>();
  private readonly exits: ExitWatch;
  private readonly execs: ExecRunner;
  readonly storage: SandboxStorage;
  /** Rebalanced after every start, stop, exit and claim (cpu-fairness.ts). */
  readonly cpuFairness: CpuFairness;

  private constructor(
    options: LocalRuntimeDriverOptions,
    host: { swapAccounting: boolean; maxOpenFiles: number },
    layout: Layout,
    storage: SandboxStorage,
  ) {
    this.layout = layout;
    this.storage = storage;
    this.network = new SandboxNetwork(layout, options.subnetPool ?? DEFAULT_POOL, {
      ...(options.extraBlockedRanges ? { extraBlocked: options.extraBlockedRanges } : {}),
      gateway: options.gateway ?? null,
    });
    this.images = new ImageSource({
      imagesDir: layout.imagesDir,
      layerCache: options.layerCache,
      registry: options.registry,
      tagTtlMs: options.imageTagTtlMs,
    });
    this.startTimeoutMs = options.startTimeoutMs ?? 15_000;
    this.stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
    this.execs = new ExecRunner(layout, {
      enabled: options.execAgent !== false,
      cacheDir: options.execAgentCacheDir,
      prestart: options.prestartExecAgent !== false,
    });
    this.exits = new ExitWatch(layout, async (_id, paths) => ({
      ...(await stoppedObservation(paths)),
      network: (await readNetworkRecord(paths).catch(() => null))?.mode,
    }));
    this.swapAccounting = host.swapAccounting;
    this.maxOpenFiles = host.maxOpenFiles;
    this.trustedCaPem = options.trustedCaPem;
    this.userNamespaces = options.userNamespaces !== false;
    this.cpuFairness = new CpuFairness(layout.cgroupParent, recordShares(layout, hostCpuMillis), (error) =>
      options.log?.warn({ err: (error as Error).message }, "balancing CPU weights between organizations"),
    );
    // A run that ends by itself gives its organization's other sandboxes their share back.
    this.exits.onExit(() => void this.cpuFairness.rebalance());
    this.namespaceOwners = new NamespaceOwners(layout, options.namespaceOwnerUids, options.namespaceOwnerClaimsDir);
    this.idMapping = this.userNamespaces && options.idMapping !== false;
    this.mappedRanges = mappedRanges(layout, options.idMappingBlocks, options.namespaceOwnerClaimsDir);
    this.mappedTreeDir = options.idMappingTreeDir ?? DEFAULT_MAPPED_TREE;
  }

  /** A mapped sandbox's idmapped layers and search-only tree (id-mapping.ts). */
  mappedPaths(id: string): MappedPaths {
    return mappedPaths(this.layout, this.layout.sandbox(id), this.mappedTreeDir, id);
  }

  /** The host uid of root in a mapped sandbox (the first of its block), or null. */
  mappedRoot(id: string): Promise<number | null> {
    return this.mappedRanges.recorded(this.layout.sandbox(id));
  }

  /**
   * Prepares the host (packages, dirs, the storage pool), undoes what a crash in the middle
   * of a snapshot left (frozen cgroups, filesystems a helper before sync-clone froze, staging dirs, loop devices of
   * destroyed sandboxes) and adopts the sandboxes already running under `root`. One live
   * driver per root is assumed (the server's lock).
   */
  static async open(options: LocalRuntimeDriverOptions): Promise<LocalRuntimeDriver> {
    spawner.warm();
    if (options.installPackages !== false) await ensureHostPackages();
    const layout = new Layout(options.root);
    for (const dir of [layout.root, layout.runcRoot, layout.sandboxesDir]) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
    }
    await raiseMemcgAccountedLimits();
    await raisePidMax();
    const host = {
      swapAccounting: await exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
      maxOpenFiles: await hostMaxOpenFiles(),
    };
    const storage = await SandboxStorage.open(layout, {
      ...(options.rootLayerGiB !== undefined ? { rootLayerGiB: options.rootLayerGiB } : {}),
      ...(options.standardWorkspaceGiB !== undefined ? { standardWorkspaceGiB: options.standardWorkspaceGiB } : {}),
      ...(options.storagePoolGiB !== undefined ? { poolGiB: options.storagePoolGiB } : {}),
      ...(options.storageReserveGiB !== undefined ? { reserveGiB: options.storageReserveGiB } : {}),
      ...(options.storageOvercommit !== undefined ? { overcommit: options.storageOvercommit } : {}),
      ...(options.storageTemplateIdleMs !== undefined ? { templateIdleMs: options.storageTemplateIdleMs } : {}),
    });
    const driver = new LocalRuntimeDriver(options, host, layout, storage);
    await driver.namespaceOwners.reconcile((id) => pinsNamespace(userNamespacePin(layout.sandbox(id))));
    await driver.mappedRanges.reconcile(async () => false);
    await driver.execs.agentBinary();
    for (const id of await recordIds(layout)) {
      const state = await readRuncState(layout.runcRoot, id);
      if (state && (await isInitAlive(state))) driver.exits.watch(id);
    }
    await driver.cpuFairness.rebalance();
    driver.cpuFairness.start();
    return driver;
  }

  // ---- images ----

  prepareImage(reference: string, options?: PrepareImageOptions): Promise<PreparedImage> {
    return this.images.prepare(reference, options);
  }

  imagePullBytes(): number {
    return this.images.pulledBytes();
  }

  // ---- lifecycle ----

  /** Sandboxes created from now on trust this CA (the option at open, given later: tests). */
  useTrustedCa(caPem: string): void {
    this.trustedCaPem = caPem;
  }

  async create(spec: SandboxSpec): Promise<void> {
    validateSpec(spec);
    const image = spec.source.image;
    const mounts = spec.mounts ?? [];
    const args = resolveArgv(image.config, spec.command);
    const hostname = this.layout.hostnameOf(spec.id);
    const sizes = this.storage.sizesOf(spec);
    await this.withLock(spec.id, async () => {
      const paths = this.layout.sandbox(spec.id);
      if (await exists(paths.record)) throw new RuntimeError("already_exists", `sandbox ${spec.id} exists`);
      const from = await this.storage.sourceImages(spec);
      if (await this.hasHostState(spec.id)) await this.teardown(spec.id);
      let networkDone: Promise<void> = Promise.resolve();
      try {
        await mkdir(paths.dir, { recursive: true, mode: 0o700 });
        for (const dir of [paths.rootfs, paths.runDir, paths.execDir]) await mkdir(dir, { mode: 0o700 });
        const network: NetworkRecord = { mode: spec.network, slot: null };
        await writeNetworkRecord(paths, network);

        // The network (namespace, and for `public` and `gateway_only` veth, addresses and
        // rules) is made while the root filesystem and workspace are: separate host tools, no
        // shared state. create() began by clearing what an earlier attempt left, so an
        // attachment makes the namespace itself and has nothing to remove first.
        const mapped = this.idMapping;
        let userReady: Promise<number | null> = Promise.resolve(null);
        const networkReady = this.userNamespaces
          ? (async () => {
              // The network namespace is made with the user namespace that owns it.
              userReady = (async () => {
                if (mapped) {
                  const first = await this.mappedRanges.claim(spec.id, paths);
                  await makeSandboxNamespaces(first, userNamespacePin(paths), this.network.netnsPath(spec.id), true);
                  return first;
                }
                const owner = await this.namespaceOwners.claim(spec.id, paths);
                await makeSandboxNamespaces(owner, userNamespacePin(paths), this.network.netnsPath(spec.id));
                return null;
              })();
              await userReady;
              await this.network.createNamespace(spec.id);
              if (spec.network !== "none") await this.network.apply(spec.id, paths, spec.network, null);
            })()
          : spec.network === "none"
            ? this.network.createNamespace(spec.id)
            : this.network.apply(spec.id, paths, spec.network, null, true);
        networkDone = networkReady.then(
          () => undefined,
          () => undefined,
        );
        await assertMountSources(mounts);
        // The root layer and the workspace: clones of blank images (or of the snapshot's),
        // mounted. Both steps settle before a failure is thrown, so teardown undoes all of it.
        const [layers, provisioned] = await Promise.allSettled([
          this.images.lowerDirsOf(image),
          this.storage.provision(spec.id, paths, sizes, from),
        ]);
        if (layers.status === "rejected") throw layers.reason;
        if (provisioned.status === "rejected") throw provisioned.reason;
        const lowerDirs = layers.value;
        if (mapped) {
          // The overlay's layers are idmapped through the user namespace: it must be there.
          const first = await userReady;
          if (first === null) throw new RuntimeError("host_failure", "the mapped user namespace is missing");
          await mountMappedOverlay({ lowerDirs, paths, mapped: this.mappedPaths(spec.id), first });
        } else {
          await mountOverlay({
            lowerDirs,
            upper: paths.upper,
            work: paths.work,
            target: paths.rootfs,
            linkDir: paths.lower,
          });
        }
        const user = resolveUser(
          image.config.user,
          await readRootfsFile(paths.rootfs, "etc/passwd"),
          await readRootfsFile(paths.rootfs, "etc/group"),
        );
        // On the root image, so the sandbox's mountinfo names no host path for them.
        const trust = this.trustedCaPem ? await prepareTrust(paths.rootfs, paths.layer, this.trustedCaPem) : [];
        const identity: ProcessIdentity = {
          env: sandboxEnv({
            imageEnv: image.config.env,
            specEnv: trustedEnv(this.trustedCaPem, spec.env),
            hostname,
            home: user.home,
          }),
          cwd: image.config.workingDir || "/",
          uid: user.uid,
          gid: user.gid,
          additionalGids: user.additionalGids,
          maxOpenFiles: this.maxOpenFiles,
          ...(mapped ? { inheritLimits: true as const } : {}),
        };
        // The workspace's root belongs to the sandbox's user (a restore's image may name another).
        await chown(paths.workspace, user.uid, user.gid);
        await writeFile(paths.hosts, hostsFile(hostname), { mode: 0o644 });
        await writeFile(paths.hostname, `${hostname}\n`, { mode: 0o644 });

        await networkReady;

        const record: SandboxRecord = {
          version: 1,
          id: spec.id,
          createdAt: new Date().toISOString(),
          image: { reference: image.reference, digest: image.digest, lowerDirs },
          ...(mounts.length > 0 ? { mounts } : {}),
          ...(trust.length > 0 ? { trust } : {}),
          args,
          identity,
          resources: { ...spec.resources },
          storage: { class: spec.storageClass },
          hostname,
          ...(this.userNamespaces ? { userNamespace: true as const } : {}),
          ...(mapped ? { idMapping: true as const } : {}),
          ...(spec.cpuGroup !== undefined ? { cpuGroup: spec.cpuGroup } : {}),
        };
        await this.writeBundleConfig(record, paths);
        await writeJson(paths.record, record);
        this.freshBundles.add(spec.id);
      } catch (error) {
        // Let a network step still under way finish before undoing it.
        await networkDone;
        await this.teardown(spec.id).catch(() => undefined);
        throw error;
      }
    });
  }

  /**
   * Gives a created sandbox (a pooled one, pool.ts) the command and environment of `spec`
   * when everything else matches what it was made with: what its first process is to run,
   * where. Null (nothing changed) otherwise.
   */
  async assign(spec: SandboxSpec): Promise<{ args: string[]; env: string[]; cwd: string; rootfs: string } | null> {
    validateSpec(spec);
    const image = spec.source.image;
    const args = resolveArgv(image.config, spec.command);
    const assigned = await this.withLock(spec.id, async () => {
      if (spec.source.kind !== "image") return null;
      const { record, paths } = await loadRecord(this.layout, spec.id).catch(() => ({ record: null, paths: null }));
      if (!record || !paths) return null;
      const network = await readNetworkRecord(paths).catch(() => null);
      const same =
        record.image.digest === image.digest &&
        (spec.mounts ?? []).length === 0 &&
        record.storage.class === spec.storageClass &&
        spec.storageClass === "standard" &&
        network?.mode === spec.network &&
        JSON.stringify(record.resources) === JSON.stringify(spec.resources);
      if (!same) return null;
      const home = record.identity.env.find((entry) => entry.startsWith("HOME="))?.slice(5) ?? "/";
      record.args = args;
      if (spec.cpuGroup !== undefined) record.cpuGroup = spec.cpuGroup;
      else delete record.cpuGroup;
      record.identity = {
        ...record.identity,
        env: sandboxEnv({
          imageEnv: image.config.env,
          specEnv: trustedEnv(this.trustedCaPem, spec.env),
          hostname: record.hostname,
          home,
        }),
      };
      await writeJson(paths.record, record);
      this.freshBundles.delete(spec.id);
      // The pooled run goes on under its new owner: exec must read this record, not the placeholder's.
      this.execs.forgetRun(spec.id);
      return { args, env: record.identity.env, cwd: record.identity.cwd, rootfs: paths.rootfs };
    });
    // The pooled run is already under way: from now on it weighs as its organization's.
    if (assigned) {
      this.cpuFairness.forget(spec.id);
      void this.cpuFairness.rebalance();
    }
    return assigned;
  }

  async start(id: string): Promise<void> {
    await this.withLock(id, async () => {
      const { record, paths } = await loadRecord(this.layout, id);
      const state = await readRuncState(this.layout.runcRoot, id);
      if (state && (await isInitAlive(state))) return;
      // A run that just ended may still have its shim's bookkeeping (runc delete, exit.json)
      // in flight; let it finish so a late exit.json cannot be taken for the new run's.
      await this.stopContainer(id);
      await settledExitRecord(paths, this.stopTimeoutMs);
      // After a host reboot mounts and namespaces are gone; make them again.
      await this.storage.mount(id, paths, record.storage.class);
      // The mapped overlay's layers need the user namespace.
      if (record.idMapping) await this.ensureNamespaces(record, paths);
      await this.mountRootfs(record, paths);
      // A sandbox made when these were host files has none on its root image yet.
      if (!(await exists(paths.hosts))) await writeFile(paths.hosts, hostsFile(record.hostname), { mode: 0o644 });
      if (!(await exists(paths.hostname))) await writeFile(paths.hostname, `${record.hostname}\n`, { mode: 0o644 });
      await this.ensureNamespaces(record, paths);
      // A pooled sandbox's launcher files come after create(): its bundle is written again with them.
      const fresh = this.freshBundles.delete(id) && !(await exists(launchPaths(paths).waiting));
      if (!fresh) await this.writeBundleConfig(record, paths);
      const oomFile = (await oomCounterFile(this.layout.cgroupPath(id))) ?? "/nonexistent";
      await startShim({
        runcRoot: this.layout.runcRoot,
        id,
        paths,
        oomCounterFile: oomFile,
        timeoutMs: this.startTimeoutMs,
      });
      await writeFile(path.join(paths.runDir, "started"), "");
      this.exits.watch(id);
      this.execs.prestartAgent(id);
    });
    void this.cpuFairness.rebalance();
  }

  async stop(id: string): Promise<void> {
    await this.withLock(id, async () => {
      await loadRecord(this.layout, id);
      await this.stopContainer(id);
    });
    void this.cpuFairness.rebalance();
  }

  /** Kills the container (if it runs) and waits for the shim to record the end (supervisor.ts). */
  private async stopContainer(id: string): Promise<void> {
    this.execs.forgetAgent(id);
    await stopRun({
      runcRoot: this.layout.runcRoot,
      runcStateDir: this.layout.runcStateDir(id),
      id,
      paths: this.layout.sandbox(id),
      exits: this.exits,
      timeoutMs: this.stopTimeoutMs,
    });
  }

  async destroy(id: string): Promise<void> {
    assertSandboxId(id);
    await this.withLock(id, () => this.teardown(id));
    void this.cpuFairness.rebalance();
  }

  /** Removes every trace of a sandbox, complete or half-made. Each step tolerates absence. */
  private async teardown(id: string): Promise<void> {
    this.freshBundles.delete(id);
    this.execs.forgetAgent(id);
    this.execs.forgetRun(id);
    this.cpuFairness.forget(id);
    const paths = this.layout.sandbox(id);
    await this.stopContainer(id).catch(() => runcDeleteForce(this.layout.runcRoot, id));
    this.exits.unwatch(id);
    await runcDeleteForce(this.layout.runcRoot, id);
    await removeMappedTree(this.mappedPaths(id));
    // The images' loop devices detach with their last mount (mount -o loop sets autoclear).
    await unmountUnder(paths.dir);
    await this.storage.remove(id);
    const network = await readNetworkRecord(paths).catch(() => null);
    await this.network.detach(id, network?.slot ?? null);
    await this.network.deleteNamespace(id);
    const left = await removeCgroup(this.layout.cgroupPath(id));
    if (left.length > 0) throw new RuntimeError("host_failure", `cgroups still in use: ${left.join(", ")}`);
    await this.namespaceOwners.release(id, paths);
    await this.mappedRanges.release(id, paths);
    await rm(paths.dir, { recursive: true, force: true });
  }

  // ---- exec ----

  async exec(id: string, request: ExecRequest): Promise<ExecOutcome> {
    return this.execs.exec(id, request);
  }

  openSession(id: string, request: SessionRequest, handlers: SessionHandlers): Promise<SandboxSession> {
    return this.execs.openSession(id, request, handlers);
  }

  // ---- background processes (SandboxProcesses, exec-runner.ts) ----

  startProcess(id: string, request: ProcessStartRequest): Promise<KeptProcess> {
    assertSandboxId(id);
    return this.execs.startProcess(id, request);
  }

  listProcesses(id: string): Promise<{ agent: string; processes: KeptProcess[] } | null> {
    assertSandboxId(id);
    return this.execs.listProcesses(id);
  }

  controlProcess(id: string, ref: ProcessRef, op: Parameters<SandboxProcesses["controlProcess"]>[2]): Promise<number> {
    assertSandboxId(id);
    return this.execs.controlProcess(id, ref, op);
  }

  openProcessReader(id: string, ref: ProcessRef): Promise<ProcessReader> {
    assertSandboxId(id);
    return this.execs.openProcessReader(id, ref);
  }

  onProcessExit(listener: (id: string, ref: ProcessRef, exitCode: number) => void): void {
    this.execs.onProcessExit(listener);
  }

  /** The host PID of the sandbox's live exec agent, if it has one (for tests and diagnostics). */
  execAgentPid(id: string): Promise<number | null> {
    return this.execs.execAgentPid(id);
  }

  // ---- observation ----

  async observe(id: string): Promise<SandboxObservation> {
    assertSandboxId(id);
    const paths = this.layout.sandbox(id);
    if (!(await exists(paths.record))) return { status: "absent" };
    const network = (await readNetworkRecord(paths).catch(() => null))?.mode;
    const withNetwork = (observation: SandboxObservation) => (network ? { ...observation, network } : observation);
    const state = await readRuncState(this.layout.runcRoot, id);
    if (state && (await isInitAlive(state))) {
      this.exits.watch(id);
      return withNetwork({ status: "running", pid: state.initPid });
    }
    if (!(await exists(path.join(paths.runDir, "started")))) return withNetwork({ status: "created" });
    return withNetwork(await stoppedObservation(paths));
  }

  async list(): Promise<string[]> {
    const ids = new Set<string>();
    for (const name of await readdir(this.layout.sandboxesDir).catch(() => [] as string[])) ids.add(name);
    for (const name of await readdir(this.layout.runcRoot).catch(() => [] as string[])) ids.add(name);
    for (const id of await this.network.listNamespaceIds()) ids.add(id);
    for (const id of await childCgroups(this.layout.cgroupParent)) ids.add(id);
    for (const id of await this.storage.ids()) ids.add(id);
    return [...ids].filter(isSandboxId).sort();
  }

  onExit(listener: ExitListener): () => void {
    return this.exits.onExit(listener);
  }

  // ---- snapshots ----

  async snapshot(id: string, snapshotId: string): Promise<LocalSnapshot> {
    assertSandboxId(id);
    return this.storage.snapshot(id, snapshotId, (take) =>
      this.withLock(id, async () => {
        const { paths } = await loadRecord(this.layout, id);
        const state = await readRuncState(this.layout.runcRoot, id);
        return take(paths, state !== null && (await isInitAlive(state)));
      }),
    );
  }

  localSnapshot(snapshotId: string): Promise<SnapshotImages | null> {
    return this.storage.localSnapshot(snapshotId);
  }

  importSnapshot(snapshotId: string, fill: (staging: SnapshotImages) => Promise<void>): Promise<void> {
    return this.storage.importSnapshot(snapshotId, fill);
  }

  dropLocalSnapshot(snapshotId: string): Promise<void> {
    return this.storage.dropLocalSnapshot(snapshotId);
  }

  listLocalSnapshots(): Promise<string[]> {
    return this.storage.listLocalSnapshots();
  }

  async close(): Promise<void> {
    this.cpuFairness.stop();
    await this.cpuFairness.idle();
    this.storage.close();
    await this.execs.close();
    this.exits.close();
  }

  // ---- network ----

  async setNetwork(id: string, mode: NetworkMode): Promise<NetworkReceipt> {
    if (mode !== "none" && mode !== "public" && mode !== "gateway_only") {
      throw new RuntimeError("invalid_spec", `unknown network mode "${mode}"`);
    }
    return this.withLock(id, async () => {
      const { record, paths } = await loadRecord(this.layout, id);
      await this.ensureNamespaces(record, paths);
      const current = await readNetworkRecord(paths);
      if (mode === "none") {
        await writeNetworkRecord(paths, { mode: "none", slot: current.slot });
        await this.network.detach(id, current.slot);
        await writeNetworkRecord(paths, { mode: "none", slot: null });
        return { mode, namespace: await this.network.namespaceIdentity(id), rules: [] };
      }
      return this.network.apply(id, paths, mode, current.slot);
    });
  }

  /** The addresses a sandbox with a link has (for tests and diagnostics). */
  addressesOf(id: string): Promise<{ sandbox: string; gateway: string } | null> {
    return this.network.addressesOf(id);
  }

  sandboxAtAddress(address: string): Promise<{ id: string; mode: NetworkMode } | null> {
    return this.network.holderOf(address);
  }

  async portAddress(id: string): Promise<string | null> {
    assertSandboxId(id);
    return (await this.network.addressesOf(id))?.sandbox ?? null;
  }

  async listeningPorts(id: string): Promise<number[]> {
    assertSandboxId(id);
    return listeningPortsOfSandbox(this.layout.runcRoot, id, await this.portAddress(id));
  }

  // ---- workspace ----

  /** Grows the workspace's XFS online, running or not (a stopped sandbox's images stay mounted). */
  async growWorkspace(id: string, capacityGiB: number): Promise<void> {
    assertCapacity(capacityGiB);
    await this.withLock(id, async () => {
      const { record, paths } = await loadRecord(this.layout, id);
      if (record.storage.class !== "durable") {
        throw new RuntimeError("not_durable", `sandbox ${id} has standard storage, which has no capacity to grow`);
      }
      await this.storage.growWorkspace(id, paths, capacityGiB);
    });
  }

  /** Refuses (`storage_exhausted`) a sandbox of `spec` the host could not back beside its own state now. */
  admitStorage(spec: Pick<SandboxSpec, "storageClass" | "workspaceCapacityGiB">): Promise<void> {
    return this.storage.admit(spec);
  }

  measureStorage(): Promise<StorageMeasure> {
    return this.storage.measure();
  }

  /** Counts `bytes` of images for `id` as pending until released (a pool member's admission). */
  reserveStorage(id: string, bytes: number): () => void {
    return this.storage.reserve(id, bytes);
  }

  storageReport(): Promise<StorageReport | null> {
    return this.storage.report();
  }

  cacheHints(): { images: string[]; warmImages: string[] } {
    return { images: this.images.recentImages(), warmImages: [] };
  }

  /** The host's memory and the CPUs this process may use (its affinity). */
  hostCompute(): { memoryMiB: number; cpuMillis: number } {
    return { memoryMiB: Math.floor(os.totalmem() / 1_048_576), cpuMillis: hostCpuMillis() };
  }

  // ---- internals ----

  private async hasHostState(id: string): Promise<boolean> {
    return (
      (await exists(this.layout.sandbox(id).dir)) ||
      (await exists(this.layout.runcStateDir(id))) ||
      (await exists(this.layout.sandboxImages(id).dir)) ||
      (await this.network.namespaceExists(id))
    );
  }

  /**
   * Makes the sandbox's namespaces again when they are gone (after a host reboot), with its
   * network as recorded: the user namespace first, since the network namespace belongs to it.
   */
  private async ensureNamespaces(record: SandboxRecord, paths: SandboxPaths): Promise<void> {
    const id = record.id;
    const userPin = userNamespacePin(paths);
    const pinned = await pinsNamespace(userPin);
    // Both or neither: a network namespace the host made could not be joined from the user namespace.
    const remade = record.userNamespace === true && !(pinned && (await this.network.namespaceExists(id)));
    if (remade) {
      await this.network.deleteNamespace(id);
      if (pinned) await runOrFail("unpinning the user namespace", TOOLS.umount, [userPin]);
      await rm(userPin, { force: true });
      if (record.idMapping) {
        // The idmapped mounts were made with the namespace that is gone: made again with the new one.
        await unmountUnder(paths.rootfs);
        await unmountUnder(this.mappedPaths(id).scratch);
        await removeMappedTree(this.mappedPaths(id));
        // The bundle create() wrote names that tree: the next start writes it again.
        this.freshBundles.delete(id);
        const first = (await this.mappedRanges.recorded(paths)) ?? (await this.mappedRanges.claim(id, paths));
        await makeSandboxNamespaces(first, userPin, this.network.netnsPath(id), true);
      } else {
        const owner = (await this.namespaceOwners.recorded(paths)) ?? (await this.namespaceOwners.claim(id, paths));
        await makeSandboxNamespaces(owner, userPin, this.network.netnsPath(id));
      }
    }
    if (remade || !(await this.network.namespaceExists(id))) {
      await this.network.createNamespace(id);
      const network = await readNetworkRecord(paths);
      if (network.mode !== "none") await this.network.apply(id, paths, network.mode, network.slot);
    }
  }

  /** The overlay rootfs (again, after a reboot): idmapped layers for a mapped sandbox. */
  private async mountRootfs(record: SandboxRecord, paths: SandboxPaths): Promise<void> {
    if (record.idMapping) {
      const first = await this.mappedRanges.recorded(paths);
      if (first === null) throw new RuntimeError("host_failure", `sandbox ${record.id} has no id block recorded`);
      await mountMappedOverlay({
        lowerDirs: record.image.lowerDirs,
        paths,
        mapped: this.mappedPaths(record.id),
        first,
      });
      return;
    }
    await mountOverlay({
      lowerDirs: record.image.lowerDirs,
      upper: paths.upper,
      work: paths.work,
      target: paths.rootfs,
      linkDir: paths.lower,
    });
  }

  private async writeBundleConfig(record: SandboxRecord, paths: SandboxPaths): Promise<void> {
    const execAgentPath = await this.execs.agentBinary();
    const busyboxPath = (await hostBusybox()) ?? undefined;
    // A pooled sandbox's first run waits in its launcher (pool.ts) while it is marked waiting
    // (and its FIFO, on the root image, is there).
    const launchAt = launchPaths(paths);
    const launch =
      (await exists(launchAt.waiting)) && (await exists(launchAt.spec))
        ? { dir: launchAt.bound, busybox: POOL_BUSYBOX }
        : undefined;
    const mapped = record.idMapping
      ? await prepareMappedTree({
          paths,
          mapped: this.mappedPaths(record.id),
          treeDir: this.mappedTreeDir,
          tiniPath: TOOLS.tini,
          ...(execAgentPath ? { execAgentPath } : {}),
          ...(busyboxPath ? { busyboxPath } : {}),
          ...(launch ? { launch } : {}),
          mounts: [...(record.trust ?? []), ...(record.mounts ?? [])],
        })
      : null;
    const config = buildBundleConfig({
      ...(launch ? { launch } : {}),
      hostname: record.hostname,
      rootfs: paths.rootfs,
      args: record.args,
      identity: record.identity,
      resources: record.resources,
      netnsPath: this.network.netnsPath(record.id),
      ...(record.userNamespace ? { userNamespacePath: userNamespacePin(paths) } : {}),
      cgroupsPath: this.layout.cgroupPath(record.id),
      workspaceSource: paths.workspace,
      ...(!mapped && (record.mounts || record.trust)
        ? { mounts: [...(record.trust ?? []), ...(await mountViews(record.mounts ?? [], paths.views))] }
        : {}),
      hostsFile: paths.hosts,
      hostnameFile: paths.hostname,
      tiniPath: TOOLS.tini,
      execAgentPath,
      ...(busyboxPath ? { busyboxPath } : {}),
      swapAccounting: this.swapAccounting,
      hostCpuMillis: this.hostCompute().cpuMillis,
      arch: process.arch,
      ...(mapped ?? {}),
      ...(mapped ? { mappedIdsFrom: await this.mappedRoot(record.id) } : {}),
    });
    await writeJson(paths.bundleConfig, config);
  }

  // ---- exec agent ----

  /** Serializes lifecycle calls per sandbox within this process. */
  private withLock<T>(id: string, work: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(id) ?? Promise.resolve();
    const next = previous.then(work, work);
    const tail = next.catch(() => undefined);
    this.locks.set(id, tail);
    void tail.then(() => {
      if (this.locks.get(id) === tail) this.locks.delete(id);
    });
    return next;
  }
}
