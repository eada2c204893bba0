// The local RuntimeDriver: sandboxes on this Linux host through runc, overlayfs, cgroups,
// network namespaces and nftables. Module map:
//   layout.ts      where things live under the root; host-global names
//   oci-config.ts  config.json and exec process specs (pure), seccomp.ts its filter
//   mounts.ts      overlay rootfs, loop mounts, mountinfo
//   workspace.ts   standard and durable /workspace, growth
//   cgroups.ts     finding and removing cgroups, OOM counters
//   network.ts     netns, veth, nftables
//   supervisor.ts  the shim that runs `runc run` and records the exit
//   exec.ts        `runc exec` with caps and timeouts (the fallback)
//   exec-agent.ts  the resident exec agent per running sandbox, started once by runc exec
//   runc.ts        runc state from disk
// State on disk is the truth: a second driver on the same root (a restarted server) sees
// and adopts everything the first one made.
import { type FSWatcher, watch } from "node:fs";
import { lstat, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { ImageError } from "../image/errors.js";
import { LayerCache } from "../image/layer-cache.js";
import { parseImageReference } from "../image/reference.js";
import { RegistryClient, type RegistryClientOptions } from "../image/registry-client.js";
import {
  type ExecOutcome,
  type ExecRequest,
  type ExitListener,
  type NetworkMode,
  type NetworkReceipt,
  type PreparedImage,
  type ResourceSpec,
  type RuntimeDriver,
  RuntimeError,
  type SandboxObservation,
  type SandboxSpec,
  type StorageClass,
} from "../interface.js";
import { childCgroups, oomCounterFile, removeCgroup } from "./cgroups.js";
import { runExec } from "./exec.js";
import { AgentLostError, AgentUnavailableError, buildExecAgent, EXEC_AGENT_PATH, ExecAgent } from "./exec-agent.js";
import { ensureHostPackages, TOOLS } from "./host.js";
import { assertSandboxId, isSandboxId, Layout, type SandboxPaths } from "./layout.js";
import { mountOverlay, unmountUnder } from "./mounts.js";
import { parsePool, SANDBOX_INTERFACE, SandboxNetwork, slotAddresses } from "./network.js";
import {
  buildBundleConfig,
  execProcessSpec,
  hostsFile,
  mergeEnv,
  type ProcessIdentity,
  resolveArgv,
  sandboxEnv,
  validateResources,
} from "./oci-config.js";
import { launchPaths, POOL_BUSYBOX } from "./pool-launch.js";
import { InitHandle, isInitAlive, killInit, type RuncState, readRuncState, runcDeleteForce } from "./runc.js";
import { spawner } from "./spawner.js";
import { isShimAlive, readExitRecord, settledExitRecord, startShim } from "./supervisor.js";
import { resolveUser } from "./users.js";
import {
  assertCapacity,
  createDurableWorkspace,
  createStandardWorkspace,
  ensureDurableWorkspaceMounted,
  growDurableWorkspace,
} from "./workspace.js";

export interface LocalRuntimeDriverOptions {
  /** Everything of this driver lives below it (see layout.ts). */
  root: string;
  /** The image cache to use; by default one at `<root>/images` over a RegistryClient(`registry`). */
  layerCache?: LayerCache;
  registry?: RegistryClientOptions;
  /** How long a tag's resolution is reused for creates before asking the registry again (default 0). */
  imageTagTtlMs?: number;
  /** Pool of /30 sandbox subnets for `public` networking (default 10.213.0.0/16). */
  subnetPool?: string;
  /**
   * IPv4 ranges sandboxes may not reach, beyond the private, loopback, link-local and
   * multicast ones always blocked: e.g. the host's LAN when it uses public addresses.
   */
  extraBlockedRanges?: string[];
  /** Install missing Debian packages at open (default true). */
  installPackages?: boolean;
  startTimeoutMs?: number;
  stopTimeoutMs?: number;
  /**
   * Run execs through a resident exec agent per sandbox (exec-agent.ts; default true). When
   * false, or when the agent cannot be built or started, every exec is its own `runc exec`.
   */
  execAgent?: boolean;
  /** Where the agent binary is built and cached (default `<tmpdir>/warren-exec-agent`). */
  execAgentCacheDir?: string;
  /** Start a sandbox's agent in the background right after start() (default true). */
  prestartExecAgent?: boolean;
}

/** The exec agent of one sandbox run (init pid + start time), or the failure to start it. */
interface AgentEntry {
  initPid: number;
  initStart: number;
  agent: Promise<ExecAgent | null>;
  /** The agent once `agent` resolved to one (so exec can take it without waiting a turn). */
  ready: ExecAgent | null;
  /** When starting it failed (0 while it has not): another try comes AGENT_RETRY_MS later. */
  failedAt: number;
}

const AGENT_RETRY_MS = 10_000;

/** A running sandbox as exec needs it: its record, the runc state of the run and its init (see liveRun). */
interface LiveRun {
  record: SandboxRecord;
  paths: SandboxPaths;
  state: RuncState;
  init: InitHandle;
}

/** What create() fixed, in `<sandbox>/sandbox.json` (written last: its presence means create finished). */
interface SandboxRecord {
  version: 1;
  id: string;
  createdAt: string;
  image: { reference: string; digest: string; lowerDirs: string[] };
  args: string[];
  identity: ProcessIdentity;
  resources: ResourceSpec;
  storage: { class: StorageClass };
  hostname: string;
}

/** Mutable network state, in `<sandbox>/network.json` (written before anything is attached). */
interface NetworkRecord {
  mode: NetworkMode;
  slot: number | null;
}

const DEFAULT_POOL = "10.213.0.0/16";
const MAX_ARGS = 4096;

async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function writeJsonAtomically(file: string, value: unknown): Promise<void> {
  const temp = `${file}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(value, null, 2)}\n`, { mode: 0o600 });
  await rename(temp, file);
}

/** Reads a file of the image's rootfs without following symlinks out of it (empty when absent or a link). */
async function readRootfsFile(rootfs: string, relative: string): Promise<string> {
  let current = rootfs;
  for (const part of relative.split("/")) {
    current = path.join(current, part);
    const info = await lstat(current).catch(() => null);
    if (!info || info.isSymbolicLink()) return "";
  }
  return readFile(current, "utf8").catch(() => "");
}

async function hostMaxOpenFiles(): Promise<number> {
  const limits = await readFile("/proc/self/limits", "utf8").catch(() => "");
  const match = /^Max open files\s+\S+\s+(\d+)/m.exec(limits);
  return Math.min(1_048_576, match ? Number(match[1]) : 1_048_576);
}

function validateSpec(spec: SandboxSpec): void {
  assertSandboxId(spec.id);
  validateResources(spec.resources);
  if (spec.storageClass !== "standard" && spec.storageClass !== "durable") {
    throw new RuntimeError("invalid_spec", `unknown storage class "${spec.storageClass}"`);
  }
  if (spec.storageClass === "durable") assertCapacity(spec.workspaceCapacityGiB);
  if (spec.network !== "none" && spec.network !== "public") {
    throw new RuntimeError("invalid_spec", `unknown network mode "${spec.network}"`);
  }
  if (spec.env !== undefined) mergeEnv(spec.env);
  if (spec.command !== undefined) {
    if (!Array.isArray(spec.command) || spec.command.length > MAX_ARGS || spec.command.some((a) => a.includes("\0"))) {
      throw new RuntimeError("invalid_spec", "command must be an array of strings without NUL");
    }
  }
}

export class LocalRuntimeDriver implements RuntimeDriver {
  readonly kind = "local";
  readonly layout: Layout;
  readonly network: SandboxNetwork;
  private readonly cache: LayerCache;
  private readonly startTimeoutMs: number;
  private readonly stopTimeoutMs: number;
  private readonly swapAccounting: boolean;
  private readonly maxOpenFiles: number;
  private readonly pool: ReturnType<typeof parsePool>;
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly exitWatchers = new Map<string, FSWatcher>();
  private readonly exitWaiters = new Map<string, Set<() => void>>();
  private readonly listeners = new Set<ExitListener>();
  private readonly agents = new Map<string, AgentEntry>();
  /** The run each sandbox was last seen in by exec, valid while its init lives (see liveRun). */
  private readonly liveRuns = new Map<string, LiveRun>();
  private readonly execAgentEnabled: boolean;
  private readonly execAgentCacheDir: string | undefined;
  private readonly prestartExecAgent: boolean;
  private agentBinary: string | null = null;
  private agentBuildWarned = false;
  private closed = false;
  /** Short private dir for the agents' start-up sockets (see ExecAgentStartInput.socketDir). */
  private agentSocketDir: Promise<string> | null = null;

  private constructor(
    options: LocalRuntimeDriverOptions,
    host: { swapAccounting: boolean; maxOpenFiles: number },
    layout: Layout,
  ) {
    this.layout = layout;
    this.pool = parsePool(options.subnetPool ?? DEFAULT_POOL);
    this.network = new SandboxNetwork(layout, options.subnetPool ?? DEFAULT_POOL, options.extraBlockedRanges);
    this.cache =
      options.layerCache ??
      new LayerCache({
        root: layout.imagesDir,
        client: new RegistryClient(options.registry),
        tagTtlMs: options.imageTagTtlMs ?? 0,
      });
    this.startTimeoutMs = options.startTimeoutMs ?? 15_000;
    this.stopTimeoutMs = options.stopTimeoutMs ?? 10_000;
    this.execAgentEnabled = options.execAgent !== false;
    this.execAgentCacheDir = options.execAgentCacheDir;
    this.prestartExecAgent = options.prestartExecAgent !== false;
    this.swapAccounting = host.swapAccounting;
    this.maxOpenFiles = host.maxOpenFiles;
  }

  /** Prepares the host (packages, dirs) and adopts the sandboxes already running under `root`. */
  static async open(options: LocalRuntimeDriverOptions): Promise<LocalRuntimeDriver> {
    spawner.warm();
    if (options.installPackages !== false) await ensureHostPackages();
    const layout = new Layout(options.root);
    for (const dir of [layout.root, layout.runcRoot, layout.sandboxesDir]) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
    }
    const host = {
      swapAccounting: await exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"),
      maxOpenFiles: await hostMaxOpenFiles(),
    };
    const driver = new LocalRuntimeDriver(options, host, layout);
    await driver.execAgentBinary();
    for (const id of await driver.recordIds()) {
      const state = await readRuncState(layout.runcRoot, id);
      if (state && (await isInitAlive(state))) driver.watchExit(id);
    }
    return driver;
  }

  // ---- images ----

  async prepareImage(reference: string): Promise<PreparedImage> {
    try {
      const { image } = await this.cache.pull(reference);
      const { entrypoint, cmd, env, workingDir, user } = image.config;
      return { reference, digest: image.digest, config: { entrypoint, cmd, env, workingDir, user } };
    } catch (error) {
      if (error instanceof ImageError) {
        const code = error.code === "invalid_reference" ? "invalid_spec" : "image_unavailable";
        throw new RuntimeError(code, error.message, { cause: error });
      }
      throw error;
    }
  }

  /** The image's layer dirs, pulled again by digest if the cache lost them. */
  private async lowerDirsOf(image: PreparedImage): Promise<string[]> {
    const cached = await this.cache.getImage(image.digest);
    if (cached && (await Promise.all(cached.lowerDirs.map(exists))).every(Boolean)) return cached.lowerDirs;
    try {
      const ref = { ...parseImageReference(image.reference), digest: image.digest };
      return (await this.cache.pull(ref)).image.lowerDirs;
    } catch (error) {
      throw new RuntimeError("image_unavailable", `image ${image.reference}: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }

  // ---- lifecycle ----

  async create(spec: SandboxSpec): Promise<void> {
    validateSpec(spec);
    const args = resolveArgv(spec.image.config, spec.command);
    const hostname = this.layout.hostnameOf(spec.id);
    await this.withLock(spec.id, async () => {
      const paths = this.layout.sandbox(spec.id);
      if (await exists(paths.record)) throw new RuntimeError("already_exists", `sandbox ${spec.id} exists`);
      if (await this.hasHostState(spec.id)) await this.teardown(spec.id);
      let networkDone: Promise<void> = Promise.resolve();
      try {
        await mkdir(paths.dir, { recursive: true, mode: 0o700 });
        for (const dir of [paths.work, paths.rootfs, paths.runDir, paths.execDir]) await mkdir(dir, { mode: 0o700 });
        // The merged root takes the upper dir's mode: it must let every user in, as / does.
        await mkdir(paths.upper, { mode: 0o755 });
        const network: NetworkRecord = { mode: spec.network, slot: null };
        await writeJsonAtomically(path.join(paths.dir, "network.json"), network);

        // The network (namespace, and for `public` veth, addresses and rules) is made while
        // the root filesystem and workspace are: separate host tools, no shared state.
        // create() began by clearing what an earlier attempt left, so a public attachment
        // makes the namespace itself and has nothing to remove first.
        const networkReady =
          spec.network === "public"
            ? this.attachPublic(spec.id, paths, null, true)
            : this.network.createNamespace(spec.id);
        networkDone = networkReady.then(
          () => undefined,
          () => undefined,
        );
        const lowerDirs = await this.lowerDirsOf(spec.image);
        await mountOverlay({ lowerDirs, upper: paths.upper, work: paths.work, target: paths.rootfs });
        const user = resolveUser(
          spec.image.config.user,
          await readRootfsFile(paths.rootfs, "etc/passwd"),
          await readRootfsFile(paths.rootfs, "etc/group"),
        );
        const identity: ProcessIdentity = {
          env: sandboxEnv({ imageEnv: spec.image.config.env, specEnv: spec.env, hostname, home: user.home }),
          cwd: spec.image.config.workingDir || "/",
          uid: user.uid,
          gid: user.gid,
          additionalGids: user.additionalGids,
          maxOpenFiles: this.maxOpenFiles,
        };
        const owner = { uid: user.uid, gid: user.gid };
        if (spec.storageClass === "durable") {
          await createDurableWorkspace({
            image: paths.workspaceImage,
            mountPoint: paths.workspace,
            capacityGiB: spec.workspaceCapacityGiB as number,
            owner,
          });
        } else {
          await createStandardWorkspace(paths.workspace, owner);
        }
        await writeFile(paths.hosts, hostsFile(hostname), { mode: 0o644 });
        await writeFile(paths.hostname, `${hostname}\n`, { mode: 0o644 });

        await networkReady;

        const record: SandboxRecord = {
          version: 1,
          id: spec.id,
          createdAt: new Date().toISOString(),
          image: { reference: spec.image.reference, digest: spec.image.digest, lowerDirs },
          args,
          identity,
          resources: { ...spec.resources },
          storage: { class: spec.storageClass },
          hostname,
        };
        await this.writeBundleConfig(record, paths);
        await writeJsonAtomically(paths.record, record);
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
    const args = resolveArgv(spec.image.config, spec.command);
    return this.withLock(spec.id, async () => {
      const { record, paths } = await this.load(spec.id).catch(() => ({ record: null, paths: null }));
      if (!record || !paths) return null;
      const network = await this.readNetwork(paths).catch(() => null);
      const same =
        record.image.digest === spec.image.digest &&
        record.storage.class === spec.storageClass &&
        spec.storageClass === "standard" &&
        network?.mode === spec.network &&
        JSON.stringify(record.resources) === JSON.stringify(spec.resources);
      if (!same) return null;
      const home = record.identity.env.find((entry) => entry.startsWith("HOME="))?.slice(5) ?? "/";
      record.args = args;
      record.identity = {
        ...record.identity,
        env: sandboxEnv({ imageEnv: spec.image.config.env, specEnv: spec.env, hostname: record.hostname, home }),
      };
      await writeJsonAtomically(paths.record, record);
      // The pooled run goes on under its new owner: exec must read this record, not the placeholder's.
      this.forgetRun(spec.id);
      return { args, env: record.identity.env, cwd: record.identity.cwd, rootfs: paths.rootfs };
    });
  }

  async start(id: string): Promise<void> {
    await this.withLock(id, async () => {
      const { record, paths } = await this.load(id);
      const state = await readRuncState(this.layout.runcRoot, id);
      if (state && (await isInitAlive(state))) return;
      // A run that just ended may still have its shim's bookkeeping (runc delete, exit.json)
      // in flight; let it finish so a late exit.json cannot be taken for the new run's.
      await this.stopContainer(id);
      await settledExitRecord(paths, this.stopTimeoutMs);
      // After a host reboot mounts and namespaces are gone; make them again.
      await mountOverlay({
        lowerDirs: record.image.lowerDirs,
        upper: paths.upper,
        work: paths.work,
        target: paths.rootfs,
      });
      if (record.storage.class === "durable")
        await ensureDurableWorkspaceMounted(paths.workspaceImage, paths.workspace);
      if (!(await this.network.namespaceExists(id))) {
        await this.network.createNamespace(id);
        const network = await this.readNetwork(paths);
        if (network.mode === "public") await this.attachPublic(id, paths, network.slot);
      }
      await this.writeBundleConfig(record, paths);
      const oomFile = (await oomCounterFile(this.layout.cgroupPath(id))) ?? "/nonexistent";
      await startShim({
        runcRoot: this.layout.runcRoot,
        id,
        paths,
        oomCounterFile: oomFile,
        timeoutMs: this.startTimeoutMs,
      });
      await writeFile(path.join(paths.runDir, "started"), "");
      this.watchExit(id);
      this.prestartAgent(id);
    });
  }

  async stop(id: string): Promise<void> {
    await this.withLock(id, async () => {
      await this.load(id);
      await this.stopContainer(id);
    });
  }

  /** Kills the container (if it runs) and waits for the shim to record the end. */
  private async stopContainer(id: string): Promise<void> {
    this.forgetAgent(id);
    const paths = this.layout.sandbox(id);
    const state = await readRuncState(this.layout.runcRoot, id);
    if (!state) return;
    if (await isInitAlive(state)) {
      this.watchExit(id);
      const exited = this.nextExit(id);
      let settled = false;
      // Marks this end as asked for, so an earlier OOM kill of an exec is not blamed for it.
      await writeFile(path.join(paths.runDir, "stop-requested"), "").catch(() => undefined);
      await killInit(state);
      const recorded = await Promise.race([
        // exit.json is removed at every start, so one that exists now is this run's.
        readExitRecord(paths).then((record) => (record ? true : new Promise<boolean>(() => undefined))),
        exited.promise.then(() => true),
        this.unsupervisedEnd(state, paths, () => settled).then(() => false),
      ]);
      settled = true;
      exited.cancel();
      if (recorded) return;
      if (await isInitAlive(state)) throw new RuntimeError("host_failure", `sandbox ${id} did not die on SIGKILL`);
    }
    // The init is gone. Its shim records that within moments; if the shim died too, the
    // driver cleans up after it and records an unknown exit code.
    const record = await settledExitRecord(paths, this.stopTimeoutMs);
    if (await exists(this.layout.runcStateDir(id))) await runcDeleteForce(this.layout.runcRoot, id);
    if (!record && (await exists(paths.runDir))) {
      await writeJsonAtomically(paths.exitFile, { exitCode: -1, oomKills: 0 });
    }
  }

  /**
   * Resolves when both the init and its shim are gone (so no exit.json will come) or the stop
   * timeout passes. Node cannot wait on processes it did not start, so this looks at /proc
   * with a backoff; it is the fallback next to the exit.json event, for a killed shim.
   */
  private async unsupervisedEnd(state: RuncState, paths: SandboxPaths, stopped: () => boolean): Promise<void> {
    const deadline = Date.now() + this.stopTimeoutMs;
    for (let delay = 10; !stopped() && Date.now() < deadline; delay = Math.min(250, delay * 2)) {
      if (!(await isInitAlive(state)) && !(await isShimAlive(paths))) return;
      await sleep(delay);
    }
  }

  async destroy(id: string): Promise<void> {
    assertSandboxId(id);
    await this.withLock(id, () => this.teardown(id));
  }

  /** Removes every trace of a sandbox, complete or half-made. Each step tolerates absence. */
  private async teardown(id: string): Promise<void> {
    this.forgetAgent(id);
    this.forgetRun(id);
    const paths = this.layout.sandbox(id);
    await this.stopContainer(id).catch(() => runcDeleteForce(this.layout.runcRoot, id));
    this.unwatchExit(id);
    await runcDeleteForce(this.layout.runcRoot, id);
    await unmountUnder(paths.dir);
    const network = await this.readNetwork(paths).catch(() => null);
    await this.network.detachPublic(id, network?.slot ?? null);
    await this.network.deleteNamespace(id);
    const left = await removeCgroup(this.layout.cgroupPath(id));
    if (left.length > 0) throw new RuntimeError("host_failure", `cgroups still in use: ${left.join(", ")}`);
    await rm(paths.dir, { recursive: true, force: true });
  }

  // ---- exec ----

  async exec(id: string, request: ExecRequest): Promise<ExecOutcome> {
    const { record, paths, state } = this.seenRun(id) ?? (await this.liveRun(id));
    const processSpec = execProcessSpec(record.identity, request);
    if (!(request.timeoutSeconds > 0)) throw new RuntimeError("invalid_spec", "timeoutSeconds must be positive");
    if (!state) return { kind: "sandbox_stopped" };
    const agent = this.readyAgent(id, state) ?? (await this.agentFor(id, record, paths, state));
    if (agent) {
      try {
        return await agent.run(
          { argv: processSpec.args, env: processSpec.env, cwd: processSpec.cwd },
          { timeoutSeconds: request.timeoutSeconds, maxOutputBytes: request.maxOutputBytes },
        );
      } catch (error) {
        if (error instanceof AgentLostError) {
          // The agent went away (or broke the protocol) after the request went out. With the
          // sandbox gone too, a started command was killed with it (SIGKILL, as runc exec
          // reports it). Otherwise the command may have run, may still run, or never started:
          // it is indeterminate, never "did not run", so a retry cannot run it twice unknowingly.
          if (error.exit !== null) return { kind: "completed", exit: error.exit, ...error.output };
          if (error.started && (await this.initEndsSoon(state))) {
            return { kind: "completed", exit: 137, ...error.output };
          }
          return { kind: "indeterminate", ...error.output, message: `sandbox ${id}: ${error.message}` };
        }
        if (!(error instanceof AgentUnavailableError)) throw error;
        // Nothing was sent: the command runs through runc exec below.
      }
    }
    return runExec({
      runcRoot: this.layout.runcRoot,
      id,
      execDir: paths.execDir,
      process: processSpec,
      timeoutSeconds: request.timeoutSeconds,
      maxOutputBytes: request.maxOutputBytes,
    });
  }

  /**
   * The run exec last saw of the sandbox, while its init (PID and start time, so never a
   * reused PID) lives: a record is written before the run (or, for a pooled sandbox, by
   * assign(), which forgets the run it rewrites), and a run's runc state names its init, so
   * neither can have changed. Otherwise null, and liveRun reads both from disk again.
   */
  private seenRun(id: string): LiveRun | null {
    const seen = this.liveRuns.get(id);
    if (!seen) return null;
    if (seen.init.alive()) return seen;
    this.forgetRun(id);
    return null;
  }

  /** The sandbox's record and current run from disk (state null when its init is not alive; not_found without a record). */
  private async liveRun(id: string): Promise<{ record: SandboxRecord; paths: SandboxPaths; state: RuncState | null }> {
    const { record, paths } = await this.load(id);
    const state = await readRuncState(this.layout.runcRoot, id);
    const init = state && !this.closed ? InitHandle.open(state) : null;
    if (!state || !init) return { record, paths, state: null };
    this.forgetRun(id);
    const live = { record, paths, state, init };
    this.liveRuns.set(id, live);
    return live;
  }

  private forgetRun(id: string): void {
    this.liveRuns.get(id)?.init.close();
    this.liveRuns.delete(id);
  }

  // ---- observation ----

  async observe(id: string): Promise<SandboxObservation> {
    assertSandboxId(id);
    const paths = this.layout.sandbox(id);
    if (!(await exists(paths.record))) return { status: "absent" };
    const network = (await this.readNetwork(paths).catch(() => null))?.mode;
    const withNetwork = (observation: SandboxObservation) => (network ? { ...observation, network } : observation);
    const state = await readRuncState(this.layout.runcRoot, id);
    if (state && (await isInitAlive(state))) {
      this.watchExit(id);
      return withNetwork({ status: "running", pid: state.initPid });
    }
    if (!(await exists(path.join(paths.runDir, "started")))) return withNetwork({ status: "created" });
    return withNetwork(await this.stoppedObservation(paths));
  }

  private async stoppedObservation(paths: SandboxPaths): Promise<SandboxObservation> {
    // Between the init's death and exit.json there are a few ms of the shim's bookkeeping.
    const exit = await settledExitRecord(paths, 5000);
    const observation: SandboxObservation = { status: "stopped" };
    if (exit && exit.exitCode >= 0) {
      observation.exitCode = exit.exitCode;
      // The init (tini) ends with 137 when the kernel's OOM killer took its child (or it).
      const stopRequested = await exists(path.join(paths.runDir, "stop-requested"));
      observation.oomKilled = exit.exitCode === 137 && exit.oomKills > 0 && !stopRequested;
    }
    return observation;
  }

  async list(): Promise<string[]> {
    const ids = new Set<string>();
    for (const name of await readdir(this.layout.sandboxesDir).catch(() => [] as string[])) ids.add(name);
    for (const name of await readdir(this.layout.runcRoot).catch(() => [] as string[])) ids.add(name);
    for (const id of await this.network.listNamespaceIds()) ids.add(id);
    for (const id of await childCgroups(this.layout.cgroupParent)) ids.add(id);
    return [...ids].filter(isSandboxId).sort();
  }

  onExit(listener: ExitListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const id of [...this.agents.keys()]) this.forgetAgent(id, true);
    for (const id of [...this.liveRuns.keys()]) this.forgetRun(id);
    const socketDir = await this.agentSocketDir?.catch(() => null);
    if (socketDir?.startsWith(path.join(os.tmpdir(), "warren-agent-")))
      await rm(socketDir, { recursive: true, force: true });
    for (const id of [...this.exitWatchers.keys()]) this.unwatchExit(id);
  }

  // ---- network ----

  async setNetwork(id: string, mode: NetworkMode): Promise<NetworkReceipt> {
    if (mode !== "none" && mode !== "public") throw new RuntimeError("invalid_spec", `unknown network mode "${mode}"`);
    return this.withLock(id, async () => {
      const { paths } = await this.load(id);
      if (!(await this.network.namespaceExists(id))) await this.network.createNamespace(id);
      const current = await this.readNetwork(paths);
      if (mode === "none") {
        await writeJsonAtomically(path.join(paths.dir, "network.json"), { mode: "none", slot: current.slot });
        await this.network.detachPublic(id, current.slot);
        await writeJsonAtomically(path.join(paths.dir, "network.json"), { mode: "none", slot: null });
        return { mode, namespace: await this.network.namespaceIdentity(id), rules: [] };
      }
      return this.attachPublic(id, paths, current.slot);
    });
  }

  /** Makes the sandbox public on `slot` (a fresh one when null) and records it. */
  private async attachPublic(
    id: string,
    paths: SandboxPaths,
    slot: number | null,
    creating = false,
  ): Promise<NetworkReceipt> {
    const chosen = slot ?? (await this.network.allocateSlot(await this.slotsInUse(id)));
    const networkFile = path.join(paths.dir, "network.json");
    await writeJsonAtomically(networkFile, { mode: "public", slot: chosen } satisfies NetworkRecord);
    try {
      const attached =
        (slot !== null ? await this.network.currentPublic(id, slot) : null) ??
        (await this.network.attachPublic(id, chosen, { createNamespace: creating && slot === null }));
      return {
        mode: "public",
        namespace: await this.network.namespaceIdentity(id),
        link: {
          hostInterface: attached.veth,
          sandboxInterface: SANDBOX_INTERFACE,
          sandboxAddress: attached.addresses.sandbox,
          gatewayAddress: attached.addresses.gateway,
        },
        rules: attached.rules,
      };
    } finally {
      this.network.releaseSlot(chosen);
    }
  }

  /** Slots recorded by this root's other sandboxes. */
  private async slotsInUse(except: string): Promise<Set<number>> {
    const slots = new Set<number>();
    for (const id of await readdir(this.layout.sandboxesDir).catch(() => [] as string[])) {
      if (id === except || !isSandboxId(id)) continue;
      const network = await this.readNetwork(this.layout.sandbox(id)).catch(() => null);
      if (network?.slot !== null && network?.slot !== undefined) slots.add(network.slot);
    }
    return slots;
  }

  /** The addresses a public sandbox has (for tests and diagnostics). */
  async addressesOf(id: string): Promise<{ sandbox: string; gateway: string } | null> {
    const network = await this.readNetwork(this.layout.sandbox(id)).catch(() => null);
    if (network?.mode !== "public" || network.slot === null) return null;
    return slotAddresses(this.pool, network.slot);
  }

  // ---- workspace ----

  async growWorkspace(id: string, capacityGiB: number): Promise<void> {
    assertCapacity(capacityGiB);
    await this.withLock(id, async () => {
      const { record, paths } = await this.load(id);
      if (record.storage.class !== "durable") {
        throw new RuntimeError("not_durable", `sandbox ${id} has standard storage, which has no capacity to grow`);
      }
      const state = await readRuncState(this.layout.runcRoot, id);
      const online = state !== null && (await isInitAlive(state));
      await growDurableWorkspace({ image: paths.workspaceImage, mountPoint: paths.workspace, capacityGiB, online });
    });
  }

  // ---- internals ----

  private async load(id: string): Promise<{ record: SandboxRecord; paths: SandboxPaths }> {
    const paths = this.layout.sandbox(id);
    let text: string;
    try {
      text = await readFile(paths.record, "utf8");
    } catch {
      throw new RuntimeError("not_found", `no sandbox ${id}`);
    }
    return { record: JSON.parse(text) as SandboxRecord, paths };
  }

  private async readNetwork(paths: SandboxPaths): Promise<NetworkRecord> {
    return JSON.parse(await readFile(path.join(paths.dir, "network.json"), "utf8")) as NetworkRecord;
  }

  private async recordIds(): Promise<string[]> {
    const ids: string[] = [];
    for (const id of await readdir(this.layout.sandboxesDir).catch(() => [] as string[])) {
      if (isSandboxId(id) && (await exists(this.layout.sandbox(id).record))) ids.push(id);
    }
    return ids;
  }

  private async hasHostState(id: string): Promise<boolean> {
    return (
      (await exists(this.layout.sandbox(id).dir)) ||
      (await exists(this.layout.runcStateDir(id))) ||
      (await this.network.namespaceExists(id))
    );
  }

  private async writeBundleConfig(record: SandboxRecord, paths: SandboxPaths): Promise<void> {
    const execAgentPath = await this.execAgentBinary();
    // A pooled sandbox's first run waits in its launcher (pool.ts) while the FIFO is there.
    const launch = (await exists(launchPaths(paths).spec))
      ? { dir: launchPaths(paths).dir, busybox: POOL_BUSYBOX }
      : undefined;
    const config = buildBundleConfig({
      ...(launch ? { launch } : {}),
      hostname: record.hostname,
      rootfs: paths.rootfs,
      args: record.args,
      identity: record.identity,
      resources: record.resources,
      netnsPath: this.network.netnsPath(record.id),
      cgroupsPath: this.layout.cgroupPath(record.id),
      workspaceSource: paths.workspace,
      hostsFile: paths.hosts,
      hostnameFile: paths.hostname,
      tiniPath: TOOLS.tini,
      execAgentPath,
      swapAccounting: this.swapAccounting,
      arch: process.arch,
    });
    await writeJsonAtomically(paths.bundleConfig, config);
  }

  // ---- exec agent ----

  /** The agent binary to mount into sandboxes (built when missing), or undefined: no agent. */
  private async execAgentBinary(): Promise<string | undefined> {
    if (!this.execAgentEnabled) return undefined;
    if (this.agentBinary && (await exists(this.agentBinary))) return this.agentBinary;
    try {
      this.agentBinary = await buildExecAgent(this.execAgentCacheDir);
      return this.agentBinary;
    } catch (error) {
      this.agentBinary = null;
      if (!this.agentBuildWarned) {
        this.agentBuildWarned = true;
        process.emitWarning(`the exec agent could not be built, execs use runc exec: ${(error as Error).message}`);
      }
      return undefined;
    }
  }

  /**
   * The live agent of this sandbox run, started on first use (concurrent first execs share
   * one start); null when there is none to use (then runc exec runs the command).
   */
  private async agentFor(
    id: string,
    record: SandboxRecord,
    paths: SandboxPaths,
    state: RuncState,
  ): Promise<ExecAgent | null> {
    if (!this.execAgentEnabled || this.closed) return null;
    for (let attempt = 0; attempt < 2; attempt++) {
      let entry = this.agents.get(id);
      if (entry && (entry.initPid !== state.initPid || entry.initStart !== state.initStart)) {
        this.forgetAgent(id);
        entry = undefined;
      }
      entry ??= this.startAgent(id, record, paths, state);
      const agent = await entry.agent;
      if (agent?.alive) return agent;
      if (this.agents.get(id) !== entry) continue;
      if (!agent && Date.now() - entry.failedAt < AGENT_RETRY_MS) return null;
      // It died (or failed long enough ago): start another.
      this.agents.delete(id);
    }
    return null;
  }

  /** The live agent of this run when it is already up, or null (agentFor then gets or starts one). */
  private readyAgent(id: string, state: RuncState): ExecAgent | null {
    const entry = this.agents.get(id);
    if (!entry || entry.initPid !== state.initPid || entry.initStart !== state.initStart) return null;
    return entry.ready?.alive ? entry.ready : null;
  }

  /**
   * `<root>/sock` (kept, reused after a restart), or a private temp dir removed at close when
   * the root is so deep that a socket path below it would pass the ~100 bytes Unix allows.
   */
  private async makeAgentSocketDir(): Promise<string> {
    const dir = path.join(this.layout.root, "sock");
    if (Buffer.byteLength(path.join(dir, "agent-000000000000.sock")) > 100) {
      return mkdtemp(path.join(os.tmpdir(), "warren-agent-"));
    }
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return dir;
  }

  private startAgent(id: string, record: SandboxRecord, paths: SandboxPaths, state: RuncState): AgentEntry {
    const entry: AgentEntry = {
      initPid: state.initPid,
      initStart: state.initStart,
      agent: Promise.resolve(null),
      ready: null,
      failedAt: 0,
    };
    entry.agent = (async () => {
      // A run started before the agent existed (or without its binary) has no mount of it.
      const binary = await this.execAgentBinary();
      if (!binary || !(await exists(`/proc/${state.initPid}/root${EXEC_AGENT_PATH}`))) return null;
      this.agentSocketDir ??= this.makeAgentSocketDir();
      const agent = await ExecAgent.start({
        binary,
        socketDir: await this.agentSocketDir,
        runcRoot: this.layout.runcRoot,
        id,
        execDir: paths.execDir,
        // The sandbox identity and environment of any exec; each request brings its own cwd.
        process: execProcessSpec(record.identity, { argv: [EXEC_AGENT_PATH], cwd: "/" }),
      });
      if (this.agents.get(id) !== entry) {
        // Stopped, destroyed or closed meanwhile.
        agent.close();
        return null;
      }
      return agent;
    })()
      .catch(() => null)
      .then((agent) => {
        if (!agent) entry.failedAt = Date.now();
        entry.ready = agent;
        return agent;
      });
    this.agents.set(id, entry);
    return entry;
  }

  /** Starts the agent of a sandbox that just started, in the background (errors are dropped). */
  private prestartAgent(id: string): void {
    if (!this.execAgentEnabled || !this.prestartExecAgent || this.closed) return;
    setImmediate(() => {
      void (async () => {
        const { record, paths } = await this.load(id);
        const state = await readRuncState(this.layout.runcRoot, id);
        if (state && (await isInitAlive(state))) await this.agentFor(id, record, paths, state);
      })().catch(() => undefined);
    });
  }

  /**
   * Drops the sandbox's agent from the map. An idle one is told to exit (a stop kills it
   * with the sandbox anyway); a busy one keeps running its commands until the sandbox ends.
   */
  private forgetAgent(id: string, always = false): void {
    const entry = this.agents.get(id);
    if (!entry) return;
    this.agents.delete(id);
    void entry.agent.then((agent) => {
      if (agent && (always || agent.inFlight === 0)) agent.close();
    });
  }

  /**
   * Whether the init is gone or goes within a moment. A sandbox's processes die while its
   * init is still exiting (it kills the PID namespace first), so an agent can be gone
   * before the init looks dead.
   */
  private async initEndsSoon(state: RuncState): Promise<boolean> {
    for (let waited = 0; waited < 1000; waited += 20) {
      if (!(await isInitAlive(state))) return true;
      await sleep(20);
    }
    return !(await isInitAlive(state));
  }

  /** The host PID of the sandbox's live agent, if it has one (for tests and diagnostics). */
  async execAgentPid(id: string): Promise<number | null> {
    const agent = await this.agents.get(id)?.agent;
    return agent?.alive ? agent.hostPid : null;
  }

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

  /** Watches run/ for exit.json until the current run's end is seen, then tells the listeners. */
  private watchExit(id: string): void {
    if (this.closed || this.exitWatchers.has(id)) return;
    const paths = this.layout.sandbox(id);
    let watcher: FSWatcher;
    try {
      watcher = watch(paths.runDir, (_event, filename) => {
        if (String(filename) === "exit.json") void check();
      });
    } catch {
      return;
    }
    watcher.on("error", () => this.unwatchExit(id));
    this.exitWatchers.set(id, watcher);
    const check = async () => {
      if (this.exitWatchers.get(id) !== watcher || !(await readExitRecord(paths))) return;
      this.unwatchExit(id);
      const observation = await this.stoppedObservation(paths);
      for (const resolve of this.exitWaiters.get(id) ?? []) resolve();
      for (const listener of this.listeners) {
        try {
          listener(id, { ...observation, network: (await this.readNetwork(paths).catch(() => null))?.mode });
        } catch {
          // A listener's failure is its own.
        }
      }
    };
    void check();
  }

  private unwatchExit(id: string): void {
    this.exitWatchers.get(id)?.close();
    this.exitWatchers.delete(id);
  }

  private nextExit(id: string): { promise: Promise<void>; cancel: () => void } {
    let resolveExit: () => void = () => undefined;
    const promise = new Promise<void>((resolve) => {
      resolveExit = resolve;
    });
    const waiters = this.exitWaiters.get(id) ?? new Set();
    waiters.add(resolveExit);
    this.exitWaiters.set(id, waiters);
    return {
      promise,
      cancel: () => {
        waiters.delete(resolveExit);
        if (waiters.size === 0) this.exitWaiters.delete(id);
      },
    };
  }
}
