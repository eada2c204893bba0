// The OCI runtime config (runc's config.json) of a sandbox and the process spec of an exec,
// as pure functions of their inputs. Defaults follow Docker's: its capability set, masked
// and read-only /proc paths, /dev and /sys mounts; plus tini as PID 1, no-new-privileges
// and a seccomp filter (seccomp.ts), and the exec agent's binary mounted beside tini.
import path from "node:path";
import type { ResourceSpec } from "../interface.js";
import { RuntimeError } from "../interface.js";
import { type SeccompProfile, seccompProfile } from "./seccomp.js";

export const DOCKER_DEFAULT_CAPABILITIES = [
  "CAP_CHOWN",
  "CAP_DAC_OVERRIDE",
  "CAP_FSETID",
  "CAP_FOWNER",
  "CAP_MKNOD",
  "CAP_NET_RAW",
  "CAP_SETGID",
  "CAP_SETUID",
  "CAP_SETFCAP",
  "CAP_SETPCAP",
  "CAP_NET_BIND_SERVICE",
  "CAP_SYS_CHROOT",
  "CAP_KILL",
  "CAP_AUDIT_WRITE",
];

export const MASKED_PATHS = [
  "/proc/asound",
  "/proc/acpi",
  "/proc/kcore",
  "/proc/keys",
  "/proc/latency_stats",
  "/proc/timer_list",
  "/proc/timer_stats",
  "/proc/sched_debug",
  "/proc/scsi",
  "/sys/firmware",
  "/sys/devices/virtual/powercap",
  // Block devices are host-global: every sandbox's loop devices (loop/backing_file names the
  // image, and so the sandbox id, of every organization) would show. /sys/block and
  // /sys/class/block are links into /sys/devices/virtual/block; /sys/dev/block links there too.
  "/sys/block",
  "/sys/class/block",
  "/sys/dev/block",
  "/sys/devices/virtual/block",
];

export const READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

export const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Where tini is bind-mounted (read-only) in every sandbox; /dev is a fresh tmpfs, so nothing lands in the rootfs. */
export const INIT_PATH = "/dev/init";

/** Where the exec agent (exec-agent.c) is bind-mounted (read-only) in every sandbox, beside tini. */
export const EXEC_AGENT_PATH = "/dev/.warren-exec";

/**
 * Where the host's static busybox is bound (read-only) in every sandbox, for the file API
 * (modules/files): its tar, stat, find, mkdir, mv and rm run there as the sandbox's own user
 * in its own mount namespace, whatever the image has. The file is named `busybox` so that
 * `busybox <applet>` picks the applet from argv[1].
 */
export const FILES_BUSYBOX_PATH = "/dev/.warren-tools/busybox";

const CPU_PERIOD_US = 100_000;

/** The sandbox's process identity and environment, fixed at create. */
/**
 * Where a pooled sandbox's first run finds its launcher (pool.ts): a host busybox and a
 * FIFO it reads the claiming sandbox's command and environment from.
 */
export const LAUNCH_DIR = "/dev/.warren-launch";

export interface ProcessIdentity {
  env: string[];
  cwd: string;
  uid: number;
  gid: number;
  additionalGids: number[];
  /** RLIMIT_NOFILE (soft = hard): Docker's 1048576, capped by what the host lets us grant. */
  maxOpenFiles: number;
  /**
   * Leave RLIMIT_NOFILE as the process inherits it from runc (the server's, the same value):
   * for a mapped sandbox (id-mapping.ts), whose root is another host uid than runc's, runc's
   * prlimit of it needs CAP_SYS_RESOURCE, which a host may not grant even to root.
   */
  inheritLimits?: true;
}

export interface BundleInput {
  hostname: string;
  /** Absolute path of the mounted rootfs. */
  rootfs: string;
  /** The first process's argv (tini is put in front of it here). */
  args: string[];
  identity: ProcessIdentity;
  resources: ResourceSpec;
  /** The sandbox's network namespace, which outlives its container. */
  netnsPath: string;
  /**
   * The sandbox's own user namespace (user-namespace.ts), ids mapped one to one; the network
   * namespace must then be one it owns. None: the host's.
   */
  userNamespacePath?: string;
  /** With id mapping (id-mapping.ts): the host id that ids 0..65535 of the user namespace start at. */
  mappedIdsFrom?: number | null;
  cgroupsPath: string;
  /** Host directory mounted at /workspace. */
  workspaceSource: string;
  hostsFile: string;
  hostnameFile: string;
  tiniPath: string;
  /** The exec agent binary (exec-agent.ts), bind-mounted read-only at EXEC_AGENT_PATH; none when absent. */
  execAgentPath?: string;
  /** The host's static busybox, bind-mounted read-only at FILES_BUSYBOX_PATH; none when the host has none. */
  busyboxPath?: string;
  /**
   * For a pooled sandbox's first run: `dir` (on the sandbox's root image, so no host path
   * shows: the FIFO `spec` and an empty `busybox`) mounted read-only at LAUNCH_DIR with `busybox` bound over the empty file; the first
   * process then waits there for its real command instead of running `args`.
   */
  launch?: { dir: string; busybox: string };
  /** Host directories bound in after Warren's own mounts (validateMounts checked them; read-only ones are overlay views, mounts.ts). */
  mounts?: { source: string; target: string; readOnly: boolean }[];
  /** Whether the host's memory cgroup accounts swap (memory.memsw.*): then swap is pinned to the limit. */
  swapAccounting: boolean;
  /** `process.arch`, for the seccomp filter. */
  arch: string;
  /** The host's CPUs in millis: no sandbox's quota or weight counts more (cgroupResources). */
  hostCpuMillis?: number;
}

export interface OciProcess {
  terminal: boolean;
  user: { uid: number; gid: number; additionalGids?: number[] };
  args: string[];
  env: string[];
  cwd: string;
  capabilities: { bounding: string[]; effective: string[]; permitted: string[] };
  rlimits: { type: string; hard: number; soft: number }[];
  noNewPrivileges: boolean;
}

export interface OciMount {
  destination: string;
  type: string;
  source: string;
  options: string[];
}

export interface IdMapping {
  containerID: number;
  hostID: number;
  size: number;
}

/** The whole id space, one to one: runc wants the mappings of a user namespace it joins. */
const IDENTITY_MAPPING: IdMapping = { containerID: 0, hostID: 0, size: 4_294_967_295 };

/** The mappings of the user namespace the sandbox joins (as the helper wrote them). */
function idMappings(mappedFrom: number | null | undefined): { uidMappings: IdMapping[]; gidMappings: IdMapping[] } {
  const mapping =
    mappedFrom === null || mappedFrom === undefined
      ? IDENTITY_MAPPING
      : { containerID: 0, hostID: mappedFrom, size: MAPPED_ID_COUNT };
  return { uidMappings: [mapping], gidMappings: [mapping] };
}

/** Ids 0..65535 of a mapped sandbox (id-mapping.ts MAPPED_IDS). */
const MAPPED_ID_COUNT = 65_536;

export interface OciConfig {
  ociVersion: string;
  process: OciProcess;
  root: { path: string; readonly: boolean };
  hostname: string;
  mounts: OciMount[];
  linux: {
    namespaces: { type: string; path?: string }[];
    uidMappings?: IdMapping[];
    gidMappings?: IdMapping[];
    cgroupsPath: string;
    resources: {
      devices: { allow: boolean; access: string }[];
      memory: { limit: number; swap?: number };
      cpu: { quota: number; period: number; shares: number };
      pids: { limit: number };
    };
    maskedPaths: string[];
    readonlyPaths: string[];
    seccomp: SeccompProfile;
  };
}

/** ENTRYPOINT + CMD, or the sandbox's own command in their place. */
export function resolveArgv(
  config: { entrypoint: string[] | null; cmd: string[] | null },
  command?: string[],
): string[] {
  const argv = command ?? [...(config.entrypoint ?? []), ...(config.cmd ?? [])];
  if (argv.length === 0 || !argv[0]) {
    throw new RuntimeError("invalid_spec", "no command: the image has no ENTRYPOINT or CMD and none was given");
  }
  return argv;
}

function keyOf(entry: string): string {
  const eq = entry.indexOf("=");
  return eq === -1 ? entry : entry.slice(0, eq);
}

/** `KEY=value` entries with later ones replacing earlier ones of the same key, in first-seen order. */
export function mergeEnv(...layers: (readonly string[] | Record<string, string> | undefined)[]): string[] {
  const merged = new Map<string, string>();
  for (const layer of layers) {
    if (!layer) continue;
    const entries = Array.isArray(layer)
      ? (layer as readonly string[])
      : Object.entries(layer).map(([key, value]) => `${key}=${value}`);
    for (const entry of entries) {
      const key = keyOf(entry);
      if (key === "" || entry.includes("\0")) {
        throw new RuntimeError("invalid_spec", "environment names must be non-empty and free of NUL");
      }
      merged.set(key, entry);
    }
  }
  return [...merged.values()];
}

/** The sandbox environment: Docker's defaults (PATH, HOSTNAME, HOME) under the image's, under the spec's. */
export function sandboxEnv(input: {
  imageEnv: readonly string[];
  specEnv?: Record<string, string>;
  hostname: string;
  home: string;
}): string[] {
  const defaults = [`PATH=${DEFAULT_PATH}`, `HOSTNAME=${input.hostname}`, `HOME=${input.home}`];
  return mergeEnv(defaults, input.imageEnv, input.specEnv);
}

export function processSpec(
  args: string[],
  identity: ProcessIdentity,
  overrides: { env?: string[]; cwd?: string } = {},
) {
  const process: OciProcess = {
    terminal: false,
    user: { uid: identity.uid, gid: identity.gid },
    args,
    env: overrides.env ?? identity.env,
    cwd: overrides.cwd ?? identity.cwd,
    capabilities: {
      bounding: [...DOCKER_DEFAULT_CAPABILITIES],
      effective: [...DOCKER_DEFAULT_CAPABILITIES],
      permitted: [...DOCKER_DEFAULT_CAPABILITIES],
    },
    rlimits: identity.inheritLimits
      ? []
      : [{ type: "RLIMIT_NOFILE", hard: identity.maxOpenFiles, soft: identity.maxOpenFiles }],
    noNewPrivileges: true,
  };
  if (identity.additionalGids.length > 0) process.user.additionalGids = [...identity.additionalGids];
  return process;
}

/** The process of `runc exec`: the sandbox's identity and environment plus the request's. */
export function execProcessSpec(
  identity: ProcessIdentity,
  request: { argv: string[]; env?: Record<string, string>; cwd?: string },
): OciProcess {
  if (request.argv.length === 0 || !request.argv[0]) throw new RuntimeError("invalid_spec", "exec needs a command");
  const env = request.env ? mergeEnv(identity.env, request.env) : identity.env;
  return processSpec([...request.argv], identity, { env, cwd: request.cwd });
}

/**
 * The cgroup limits of a sandbox. Its CPU counts at most the host's CPUs, in its quota and in
 * its weight (shares): a request beyond the host (one admitted before admission checked it)
 * cannot outweigh every other sandbox.
 */
export function cgroupResources(
  resources: ResourceSpec,
  swapAccounting: boolean,
  hostCpuMillis = Number.POSITIVE_INFINITY,
): OciConfig["linux"]["resources"] {
  const limit = resources.memoryMiB * 1024 * 1024;
  const cpuMillis = Math.min(resources.cpuMillis, hostCpuMillis);
  return {
    devices: [{ allow: false, access: "rwm" }],
    memory: swapAccounting ? { limit, swap: limit } : { limit },
    cpu: {
      quota: Math.round((cpuMillis * CPU_PERIOD_US) / 1000),
      period: CPU_PERIOD_US,
      shares: Math.max(2, Math.round((cpuMillis * 1024) / 1000)),
    },
    pids: { limit: resources.pids },
  };
}

export function validateResources(resources: ResourceSpec): void {
  const check = (name: string, value: number, min: number, max: number) => {
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new RuntimeError("invalid_spec", `${name} must be an integer from ${min} to ${max}, not ${value}`);
    }
  };
  check("memoryMiB", resources.memoryMiB, 8, 1_048_576);
  check("cpuMillis", resources.cpuMillis, 10, 1_024_000);
  check("pids", resources.pids, 8, 4_194_304);
}

export function buildBundleConfig(input: BundleInput): OciConfig {
  const bind = (destination: string, source: string, extra: string[] = []): OciMount => ({
    destination,
    type: "bind",
    source,
    options: ["rbind", "rprivate", "nosuid", "nodev", ...extra],
  });
  return {
    ociVersion: "1.0.2",
    process: processSpec(
      [
        INIT_PATH,
        "-g",
        "--",
        ...(input.launch ? [`${LAUNCH_DIR}/busybox`, "sh", "-c", `. ${LAUNCH_DIR}/spec`] : input.args),
      ],
      input.identity,
    ),
    root: { path: input.rootfs, readonly: false },
    hostname: input.hostname,
    mounts: [
      { destination: "/proc", type: "proc", source: "proc", options: ["nosuid", "noexec", "nodev"] },
      {
        destination: "/dev",
        type: "tmpfs",
        source: "tmpfs",
        options: ["nosuid", "strictatime", "mode=755", "size=65536k"],
      },
      {
        destination: "/dev/pts",
        type: "devpts",
        source: "devpts",
        options: ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
      },
      {
        destination: "/dev/shm",
        type: "tmpfs",
        source: "shm",
        options: ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
      },
      { destination: "/dev/mqueue", type: "mqueue", source: "mqueue", options: ["nosuid", "noexec", "nodev"] },
      { destination: "/sys", type: "sysfs", source: "sysfs", options: ["nosuid", "noexec", "nodev", "ro"] },
      {
        destination: "/sys/fs/cgroup",
        type: "cgroup",
        source: "cgroup",
        options: ["nosuid", "noexec", "nodev", "relatime", "ro"],
      },
      bind(INIT_PATH, input.tiniPath, ["ro"]),
      ...(input.execAgentPath ? [bind(EXEC_AGENT_PATH, input.execAgentPath, ["ro"])] : []),
      ...(input.busyboxPath ? [bind(FILES_BUSYBOX_PATH, input.busyboxPath, ["ro"])] : []),
      ...(input.launch
        ? [bind(LAUNCH_DIR, input.launch.dir, ["ro"]), bind(`${LAUNCH_DIR}/busybox`, input.launch.busybox, ["ro"])]
        : []),
      bind("/etc/hosts", input.hostsFile),
      bind("/etc/hostname", input.hostnameFile),
      bind("/workspace", input.workspaceSource),
      ...(input.mounts ?? []).map((mount) => bind(mount.target, mount.source, [mount.readOnly ? "ro" : "rw"])),
    ],
    linux: {
      namespaces: [
        { type: "pid" },
        { type: "ipc" },
        { type: "uts" },
        { type: "mount" },
        { type: "network", path: input.netnsPath },
        { type: "cgroup" },
        ...(input.userNamespacePath ? [{ type: "user", path: input.userNamespacePath }] : []),
      ],
      ...(input.userNamespacePath ? idMappings(input.mappedIdsFrom) : {}),
      cgroupsPath: input.cgroupsPath,
      resources: cgroupResources(input.resources, input.swapAccounting, input.hostCpuMillis),
      maskedPaths: [...MASKED_PATHS],
      readonlyPaths: [...READONLY_PATHS],
      seccomp: seccompProfile(input.arch),
    },
  };
}

/** /etc/hosts of a sandbox: loopback names and its own hostname. */
export function hostsFile(hostname: string): string {
  return ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", `127.0.1.1\t${hostname}`, ""].join("\n");
}

/** Paths a caller's mount may not cover or sit under: what the sandbox needs from Warren. */
const RESERVED_MOUNT_PATHS = ["/proc", "/sys", "/dev", "/etc/hosts", "/etc/hostname"];
const MAX_MOUNTS = 64;

/**
 * Checks mount targets (absolute, normalized, at most 4096 bytes, not over Warren's own
 * mounts or the workspace itself, no two alike) and that sources are absolute. Throws
 * RuntimeError invalid_spec naming the mount.
 */
export function validateMounts(mounts: readonly { source: string; target: string; readOnly: boolean }[]): void {
  if (mounts.length > MAX_MOUNTS) throw new RuntimeError("invalid_spec", `at most ${MAX_MOUNTS} mounts`);
  const seen = new Set<string>();
  for (const [index, mount] of mounts.entries()) {
    const fail = (why: string) => {
      throw new RuntimeError("invalid_spec", `mounts[${index}] (${JSON.stringify(mount.target)}): ${why}`);
    };
    const { source, target } = mount;
    if (typeof source !== "string" || !path.isAbsolute(source) || source.includes("\0"))
      fail("source must be an absolute host path");
    if (typeof target !== "string" || target.includes("\0") || Buffer.byteLength(target) > 4096)
      fail("target is not a path");
    if (!target.startsWith("/") || path.posix.normalize(target) !== target || target.endsWith("/")) {
      fail("target must be an absolute, normalized path");
    }
    if (target === "/workspace" || target === "/") fail("target may not replace / or /workspace");
    for (const reserved of RESERVED_MOUNT_PATHS) {
      if (target === reserved || target.startsWith(`${reserved}/`)) fail(`target may not be under ${reserved}`);
    }
    if (seen.has(target)) fail("another mount has the same target");
    if (typeof mount.readOnly !== "boolean") fail("readOnly must be true or false");
    seen.add(target);
  }
}
