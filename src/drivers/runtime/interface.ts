// The runtime driver: what the sandbox service and its reconciler need from whatever runs
// sandboxes (runc on this host today, Kubernetes later). Every implementation passes
// contract.test.ts. The driver holds no desired state: it does what it is told and reports
// what it observes, so a restarted server can list() what exists and adopt or remove it.
// It is split at the host boundary (docs/hosts.md): SandboxRuntime, what may cross the wire,
// and the host facets (HostNetwork, HostStorage, LocalSnapshots, HostCapacity) that never do;
// RuntimeDriver is all of them, for the wiring. Consumers take the narrowest they need.

/**
 * `none`: a network namespace with loopback only. `public`: NAT to the outside, the host and
 * private ranges blocked, plus the egress gateway. `gateway_only`: the egress gateway only.
 */
export type NetworkMode = "none" | "public" | "gateway_only";

/**
 * Both classes keep the root layer's changes and /workspace on filesystems of their own
 * (capacity-limited, ENOSPC inside when full). `standard`: the deployment's default
 * workspace size, fixed. `durable`: the sandbox's stamped capacity, growable, never shrunk.
 */
export type StorageClass = "standard" | "durable";

/** The resolved compute shape (deployment defaults already applied by the service). */
export interface ResourceSpec {
  /** Memory limit, no swap beyond it. */
  memoryMiB: number;
  /** CPU quota: 1000 is one CPU. */
  cpuMillis: number;
  /** Most processes (threads included) alive at once in the sandbox. */
  pids: number;
}

/** What a sandbox needs from its image; the driver keeps the rest (layers) to itself. */
export interface PreparedImage {
  /** The reference as asked for (`host:5000/repo:tag`). */
  reference: string;
  /** Digest of the platform manifest: the image's identity. */
  digest: string;
  /**
   * True when this call waited for layers to be downloaded (a cold image cache), false when
   * everything was on the host already; absent from a driver that does not say (metrics).
   */
  downloaded?: boolean;
  config: {
    entrypoint: string[] | null;
    cmd: string[] | null;
    /** `KEY=value` entries. */
    env: string[];
    workingDir: string;
    /** `user`, `uid`, `user:group` or `uid:gid`; empty for root. */
    user: string;
  };
}

/** Where a sandbox's root filesystem comes from. */
export type SandboxSource =
  | { kind: "image"; image: PreparedImage }
  /**
   * A sealed local snapshot (see snapshot()/importSnapshot()): the sandbox starts on a
   * copy-on-write clone of its root layer and workspace, over `image`'s layers (the
   * snapshot's image, or an override). RuntimeError not_found when this host holds no
   * sealed copy of it.
   */
  | { kind: "snapshot"; image: PreparedImage; snapshotId: string };

/** A host directory bound into the sandbox (a volume's version, a shared filesystem). */
export interface SandboxMount {
  /** Absolute path of a directory on the host that the caller owns. */
  source: string;
  /**
   * Absolute, normalized path inside the sandbox: not `/`, not `/workspace` or above it,
   * nothing under `/proc`, `/sys`, `/dev` or `/etc/hosts`/`/etc/hostname`; no two alike.
   */
  target: string;
  /**
   * A read-only mount is shown through an overlay view of `source` (local/mounts.ts), so the
   * sandbox sees no host path: its source must not change while mounted (volume cache
   * entries never do).
   */
  readOnly: boolean;
}

export interface SandboxSpec {
  /** Lowercase letters, digits and `-`, at most 64 characters (`sbx-` + 40 hex in the API). */
  id: string;
  source: SandboxSource;
  /** Bound into the sandbox for its whole life (every run), in this order. */
  mounts?: SandboxMount[];
  /** Replaces the image's ENTRYPOINT and CMD as the first process, executed directly. */
  command?: string[];
  /** Added to (and overriding) the image's environment, for the first process and every exec. */
  env?: Record<string, string>;
  resources: ResourceSpec;
  storageClass: StorageClass;
  /** Whole GiB; required for `durable`, ignored for `standard`. */
  workspaceCapacityGiB?: number;
  network: NetworkMode;
  /**
   * The sandbox's fairness group, its organization: every group's running sandboxes share
   * the host's CPU equally between groups (local/cpu-fairness.ts). Absent: the group "".
   */
  cpuGroup?: string;
}

export type SandboxStatus = "absent" | "created" | "running" | "stopped";

export interface SandboxObservation {
  /**
   * `absent`: no such sandbox, or one whose create never finished (list() still names it
   * while host state is left; destroy() removes it). `created`: ready, never started.
   * `running`: the first process is alive. `stopped`: it ran and is gone; files are kept.
   */
  status: SandboxStatus;
  /** Host PID of the sandbox's init, while running. */
  pid?: number;
  /** Exit code of the first process (128 + signal when killed), when the driver saw it end. */
  exitCode?: number;
  /** True when the sandbox ended because its memory limit was hit. */
  oomKilled?: boolean;
  network?: NetworkMode;
}

export interface ExecRequest {
  /** Executed directly (no shell); argv[0] is looked up in the sandbox's PATH when it has no `/`. */
  argv: string[];
  /** Added to the sandbox's environment for this command only. */
  env?: Record<string, string>;
  /** Defaults to the image's working directory. */
  cwd?: string;
  timeoutSeconds: number;
  /** Combined cap on stdout + stderr: half keeps the head of the output, half its tail (OutputCollector). */
  maxOutputBytes: number;
}

export type ExecOutcome =
  | { kind: "completed"; exit: number; stdout: string; stderr: string; truncated: boolean }
  /** The time ran out: the command's process group was killed; output up to then is kept. */
  | { kind: "timeout"; stdout: string; stderr: string; truncated: boolean }
  /** The command did not run (a missing executable lands here, not as exit 127). */
  | { kind: "spawn_failed"; message: string }
  /** The sandbox is not running; the command did not run. */
  | { kind: "sandbox_stopped" }
  /**
   * The command was handed over, but its outcome could not be read (the exec agent died or
   * broke the protocol): it may have run, may still run, or never started. Output up to
   * then is kept; `message` says what went wrong, for the log (never the API's answer).
   */
  | { kind: "indeterminate"; stdout: string; stderr: string; truncated: boolean; message: string };

/** An interactive command: stdin fed by the caller, output streamed back (openSession). */
export interface SessionRequest {
  /** Executed directly (no shell); argv[0] is looked up in the sandbox's PATH when it has no `/`. */
  argv: string[];
  /** Added to the sandbox's environment for this command only. */
  env?: Record<string, string>;
  /** Defaults to the image's working directory. */
  cwd?: string;
  /** A pseudo-terminal inside the sandbox as the command's stdin, stdout and stderr (all output is stdout). */
  pty: { rows: number; cols: number } | null;
}

/** A background process to start (SandboxProcesses.startProcess). */
export interface ProcessStartRequest extends SessionRequest {
  /** Whether the process's stdin is a pipe the caller feeds (else /dev/null; a pty always takes input). */
  stdin: boolean;
}

/** Which agent run keeps a process, and its number there; a process row stores both. */
export interface ProcessRef {
  /** The boot id of the sandbox's exec agent (another one means the process is gone). */
  agent: string;
  serial: number;
}

export interface KeptProcess extends ProcessRef {
  pid: number;
  exited: boolean;
  exitCode: number | null;
  firstOffset: number;
  endOffset: number;
  /** No more output comes. */
  done: boolean;
}

export interface ProcessOutputChunk {
  offset: number;
  stream: "stdout" | "stderr";
  data: Buffer;
}

export interface ProcessReader {
  /**
   * Output at or after `offset` (at most `max` bytes) as soon as there is some; a first chunk
   * past `offset` means the bytes between were dropped. `complete`: nothing more comes.
   */
  read(offset: number, max: number): Promise<{ chunks: ProcessOutputChunk[]; next: number; complete: boolean }>;
  close(): void;
}

/**
 * Background processes kept by a running sandbox's exec agent across server restarts
 * (docs/api-decisions.md "Processes"). RuntimeError not_running when the sandbox does not
 * run, not_found when the process's agent is gone, unsupported for a run whose agent keeps none.
 */
export interface SandboxProcesses {
  startProcess(id: string, request: ProcessStartRequest): Promise<KeptProcess>;
  /** The processes the sandbox's agent keeps, or null when the sandbox has no (kept) agent now. */
  listProcesses(id: string): Promise<{ agent: string; processes: KeptProcess[] } | null>;
  /** 'signal' (signo), 'stdin' (bytes: taken whole, or 0 when the agent has no room), 'close', 'resize', 'release'. */
  controlProcess(
    id: string,
    ref: ProcessRef,
    op:
      | { kind: "signal"; signal: number }
      | { kind: "stdin"; data: Buffer }
      | { kind: "close" }
      | { kind: "resize"; rows: number; cols: number }
      | { kind: "release" },
  ): Promise<number>;
  openProcessReader(id: string, ref: ProcessRef): Promise<ProcessReader>;
  /** Called with each kept process's exit as the agent reports it. */
  onProcessExit(listener: (id: string, ref: ProcessRef, exitCode: number) => void): void;
}

export interface SessionHandlers {
  /**
   * Output as it comes. `done` must be called once the caller has passed the bytes on: the
   * command is held (its pipe fills) while too much output is not done.
   */
  onStdout(data: Buffer, done: () => void): void;
  onStderr(data: Buffer, done: () => void): void;
  /** write() returned false and the input queue went down again. */
  onDrain?(): void;
  /** The last call: the exit status (128 + signal), or null with `lost` when it could not be read. */
  onEnd(end: { exit: number | null; lost?: string }): void;
}

export interface SandboxSession {
  /** Queues input for the command's stdin; false: wait for onDrain before writing more. */
  write(data: Buffer): boolean;
  /** Closes the command's stdin once the queued input is written (ignored with a terminal). */
  end(): void;
  resize(rows: number, cols: number): void;
  /** SIGKILL to the command's process group. */
  kill(): void;
}

/**
 * What setNetwork() applied as it may leave the host (the API's receipt, receiptView): the
 * mode, the namespace's name and identity, the rules in force; no host path, veth or address.
 */
export interface NetworkApplied {
  mode: NetworkMode;
  namespace: {
    /** The namespace's name (`ip netns`), or the driver's equivalent. */
    name: string;
    /** Inode of the namespace (`net:[inode]`): its identity while it lives (the receipt's resource version). */
    inode: number;
  };
  /** The firewall rules now in force for this sandbox (empty for `none`). */
  rules: { family: string; table: string; chain: string; handle: number; rule: string }[];
}

/** The part of a receipt that may leave the host (what the owner's internal API answers, node-api.ts). */
export function networkApplied(receipt: NetworkApplied): NetworkApplied {
  const { name, inode } = receipt.namespace;
  return { mode: receipt.mode, namespace: { name, inode }, rules: receipt.rules };
}

/** What the local driver's setNetwork() applied, naming the exact kernel objects so the host can check it. */
export interface NetworkReceipt extends NetworkApplied {
  namespace: {
    /** The namespace's name (`ip netns`), or the driver's equivalent. */
    name: string;
    /** The bind-mounted handle of the namespace. */
    path: string;
    /** Inode of the namespace (`net:[inode]`): its identity while it lives. */
    inode: number;
  };
  /** For `public` and `gateway_only`: the veth pair and addresses. */
  link?: { hostInterface: string; sandboxInterface: string; sandboxAddress: string; gatewayAddress: string };
}

export type RuntimeErrorCode =
  /** The spec or argument is malformed (a bad id, an empty command, a capacity below 1). */
  | "invalid_spec"
  | "not_found"
  | "already_exists"
  /** The image could not be pulled; `cause` holds the image layer's error. */
  | "image_unavailable"
  /** growWorkspace to a smaller capacity. */
  | "workspace_shrink_unsupported"
  /** growWorkspace on a standard sandbox. */
  | "not_durable"
  /** A snapshot of a sandbox that has one being taken. */
  | "snapshot_in_progress"
  /** A snapshot's copy cannot be had (gone, or a chunk missing or corrupt in the blob store). */
  | "snapshot_not_restorable"
  /** The first process could not be started (runc refused, or a missing executable). */
  | "start_failed"
  /** The host could not do what was asked (a tool failed); the message says which. */
  | "host_failure"
  /** This driver cannot do that (yet): a snapshot source on a driver without restore. */
  | "unsupported"
  /** openSession on a sandbox that is not running. */
  | "not_running"
  /**
   * The host cannot back the storage a create, restore or growth asks for (see
   * local/storage/admission.ts); `permanent` when it could not even with no other sandbox.
   */
  | "storage_exhausted";

export class RuntimeError extends Error {
  readonly code: RuntimeErrorCode;
  /** Asking again cannot succeed on this host (e.g. more storage than it could ever back). */
  readonly permanent: boolean;

  constructor(code: RuntimeErrorCode, message: string, options?: { cause?: unknown; permanent?: boolean }) {
    super(message, options);
    this.name = "RuntimeError";
    this.code = code;
    this.permanent = options?.permanent ?? false;
  }
}

/**
 * The host's storage as measured once (RuntimeDriver.measureStorage): both methods are pure
 * and synchronous, so the API may call them while it holds its admission lock.
 */
export interface StorageMeasure {
  /** Bytes of images a sandbox of this shape holds on the host (a restore: at least, the host checks its snapshot's). */
  bytesOf(shape: { storageClass: StorageClass; workspaceCapacityGiB: number | null }): number;
  /**
   * Whether sandbox `request.id` may hold `request.bytes` of images beside what the host held
   * when measured and the live sandboxes' reservations (`reserved`: bytes by sandbox id; a
   * sandbox counts at the larger of its reservation and its measured images).
   */
  decide(reserved: ReadonlyMap<string, number>, request: { id: string; bytes: number }): StorageDecision;
}

/** A storage verdict; `permanent`: not even a host holding no other sandbox could back it. */
export type StorageDecision = { admitted: true } | { admitted: false; permanent: boolean; detail: string };

/** The local storage pool as an operator sees it (bytes); see local/storage/admission.ts. */
export interface StorageReport {
  /** Free space of the host filesystem holding the pool. */
  hostFreeBytes: number;
  /** What the pool's sparse file holds on the host now. */
  poolAllocatedBytes: number;
  /** Sum of the live sandboxes' filesystem sizes: what they may fill. */
  promisedBytes: number;
  /** What the pool may still take from the host if every sandbox filled its filesystems. */
  mayStillWriteBytes: number;
  /** What the host can back: free space minus the reserve, times the overcommit ratio. */
  backableBytes: number;
}

/** Host paths of a sealed local snapshot's image files (read-only: never write to them). */
export interface SnapshotImages {
  /** The root layer's changes (the overlay upper dir's filesystem). */
  root: string;
  workspace: string;
}

/** What snapshot() sealed. */
export interface LocalSnapshot {
  snapshotId: string;
  /** Workspace capacity captured (whole GiB): the size of the workspace filesystem. */
  workspaceCapacityGiB: number;
  /** Bytes the images hold (allocated data, holes excluded). */
  sizeBytes: number;
  /** How long the sandbox was frozen (0 when it was not running). */
  frozenMs: number;
}

export interface PrepareImageOptions {
  /** Hears, while layers are fetched, how many bytes of the image's layer blobs have arrived. */
  onProgress?: (progress: { bytesDone: number; bytesTotal: number }) => void;
}

export type ExitListener = (id: string, observation: SandboxObservation) => void;

/**
 * What may cross the wire (docs/hosts.md "The host boundary in the code"): the operations on a
 * sandbox, answered with states, modes and receipts, never a host path, veth or address. The
 * local driver implements it; the owner's client (hosts/node-client.ts) the part that routes.
 *
 * Lifecycle: create (resources allocated, not running) -> start -> running -> (the first
 * process exits, or stop) -> stopped -> start again (rootfs changes and workspace kept) ...
 * -> destroy (everything gone). Lifecycle calls on one sandbox are serialized by the
 * driver; exec may run alongside them. Every method is safe to retry after a crash.
 */
export interface SandboxRuntime {
  /** Allocates the sandbox without starting it. RuntimeError already_exists when it exists. */
  create(spec: SandboxSpec): Promise<void>;
  /** Starts (or wakes) the first process; resolves once it runs. A no-op while running. */
  start(id: string): Promise<void>;
  /** Kills every process of the sandbox and waits until they are gone; files are kept. Idempotent. */
  stop(id: string): Promise<void>;
  exec(id: string, request: ExecRequest): Promise<ExecOutcome>;
  /**
   * Starts an interactive command in the running sandbox; resolves once it runs. RuntimeError
   * not_running when the sandbox is not running, start_failed when the command did not start,
   * unsupported when this run cannot stream (a sandbox started before the streaming agent).
   */
  openSession(id: string, request: SessionRequest, handlers: SessionHandlers): Promise<SandboxSession>;
  /** Removes everything the sandbox has on the host. Idempotent; absent is fine. */
  destroy(id: string): Promise<void>;
  observe(id: string): Promise<SandboxObservation>;
  /** Ids with any state on the host, complete or not (for adoption and cleanup after a crash). */
  list(): Promise<string[]>;
  /** Switches the network live (running or not) and reports what is in force. */
  setNetwork(id: string, mode: NetworkMode): Promise<NetworkApplied>;
  /** Grows a durable workspace to `capacityGiB` (the same value again is a no-op); never shrinks. */
  growWorkspace(id: string, capacityGiB: number): Promise<void>;
  /**
   * Seals a copy-on-write snapshot of the sandbox's root layer and workspace under
   * `snapshotId`. A running sandbox is frozen (cgroup freezer, filesystems flushed) only
   * for the instant the clone takes and is always thawed again. Idempotent: a snapshot id
   * already sealed returns its record. Serialized with the sandbox's lifecycle calls;
   * RuntimeError snapshot_in_progress while another snapshot of it is being taken.
   */
  snapshot(id: string, snapshotId: string): Promise<LocalSnapshot>;
}

/** The host's network as only the host sees it (the egress gateway, the session plane, SSH forwards). */
export interface HostNetwork {
  /**
   * The sandbox whose network address `address` is, with its mode (the egress gateway knows
   * its callers by source address); null for any other address. Absent: no gateway callers.
   */
  sandboxAtAddress?(address: string): Promise<{ id: string; mode: NetworkMode } | null>;
  /**
   * The address the host connects to for the sandbox's guest TCP ports (its end of the veth
   * in `public` and `gateway_only`); null when it has no link (`none`) or does not exist.
   * Used by the session plane's endpoints and the SSH gateway's port forwarding.
   */
  portAddress(id: string): Promise<string | null>;
  /**
   * Guest TCP ports the running sandbox listens on the wildcard address or on portAddress()
   * (not on loopback only, which no host connection reaches), ascending; [] when it is not
   * running. Whether the host can connect at all is portAddress()'s answer.
   */
  listeningPorts(id: string): Promise<number[]>;
}

/** The host's storage: images pulled into its layer cache, its pool's admission and report. */
export interface HostStorage {
  /** Makes an image available (pulled and unpacked once, however many creates ask at once). */
  prepareImage(reference: string, options?: PrepareImageOptions): Promise<PreparedImage>;
  /**
   * Measures the host's storage now (statfs, the size of every image: I/O), for the API to
   * admit a create or a growth with under its admission lock against the store's live
   * sandboxes (docs/api-decisions.md "Host admission is a reservation"). The driver checks
   * again when it makes the images.
   */
  measureStorage?(): Promise<StorageMeasure>;
  /** The storage pool's numbers (null before there is a pool). */
  storageReport?(): Promise<StorageReport | null>;
  /** Bytes received from image registries since the driver opened (metrics; optional). */
  imagePullBytes?(): number;
}

/** The host's sealed local snapshot copies (host paths: they never leave the host). */
export interface LocalSnapshots {
  /** The sealed local copy's images, or null when this host has none. */
  localSnapshot(snapshotId: string): Promise<SnapshotImages | null>;
  /**
   * Builds a sealed local copy from elsewhere (the blob store): `fill` writes both image
   * files at the staging paths it is given; the copy is sealed when it resolves and
   * removed when it throws. A copy already sealed is kept and `fill` is not called.
   */
  importSnapshot(snapshotId: string, fill: (staging: SnapshotImages) => Promise<void>): Promise<void>;
  /** Removes the local copy (sandboxes restored from it keep their own clones). Idempotent. */
  dropLocalSnapshot(snapshotId: string): Promise<void>;
  /** Ids of the sealed local copies on this host. */
  listLocalSnapshots(): Promise<string[]>;
}

/** What the host offers, for admission and the heartbeat (placement reads it from the registry). */
export interface HostCapacity {
  /** The host's memory (MiB) and CPUs (millis), which the API admits memory_mb and cpu_millis against. */
  hostCompute?(): { memoryMiB: number; cpuMillis: number };
  /** Placement's hints (docs/hosts.md): images in the layer cache, images with a warm pool member. */
  cacheHints?(): { images: string[]; warmImages: string[] };
}

/**
 * The whole local driver, for the wiring (container.ts) and its own tests: the sandbox runtime
 * and every host facet, with the receipt of setNetwork() in full (the kernel objects).
 */
export interface RuntimeDriver extends SandboxRuntime, HostNetwork, HostStorage, LocalSnapshots, HostCapacity {
  readonly kind: string;
  /** Switches the network live (running or not) and reports exactly what is in force. */
  setNetwork(id: string, mode: NetworkMode): Promise<NetworkReceipt>;
  /**
   * Whether the sandbox's create was served by a pre-started pooled sandbox; answered until
   * its first start (metrics; optional, absent means no pool).
   */
  servedFromPool?(id: string): boolean;
  /** Called whenever a sandbox's first process ends (stop() included). Returns an unsubscribe. */
  onExit(listener: ExitListener): () => void;
  /** Releases the driver's own resources (watchers); sandboxes keep running. */
  close(): Promise<void>;
}

/** What a create asks for, as a pool of ready sandboxes sees it. */
export interface PoolRequest {
  image: string;
  memoryMiB: number;
  cpuMillis: number;
  storageClass: string;
  workspaceCapacityGiB: number | null;
  network: string;
}

/**
 * Ids of sandboxes a runtime has already made for the default shape (the local driver's
 * pool): a create of that shape takes one as its id and the reconciler's create claims it.
 */
export interface SandboxIdPool {
  take(request: PoolRequest): string | null;
  /** The id was taken but no sandbox was recorded with it. */
  release(id: string): void;
}
