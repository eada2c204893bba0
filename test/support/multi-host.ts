// Several Warren servers as the hosts of one deployment on this machine, as an operator would
// run them on several: each server (the bundle `make run` runs) in a network namespace the
// harness makes, with its own address on a bridge, its own data dir and runtime root; one
// PostgreSQL database (on the suite's cluster), one s3rver bucket as the blob store, one master
// key, one bootstrap API key. Hosts are entered with `nsenter --net` only, so they share the
// machine's mounts (the test sees their sandboxes' mounts, runc state and cgroups, and sweeps
// them) while each has its own links, routes, nftables tables and ports.
//
// PostgreSQL, s3rver and the test registry listen on the root namespace's loopback; the harness
// forwards a port of the bridge's address to each (tcp-forward.ts), so hosts reach them at
// <bridge address>:<same port>. The test process reaches every host at its address directly.
//
// Everything is removed by cleanup() (idempotent; call it from an after hook), and a start
// sweeps what a run that died without its after hook left (names carry the run's pid).
import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { link, mkdir, mkdtemp, readdir, readFile, rm, rmdir, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { buildServerBundle, bundleFiles, PROJECT_DIR } from "../../scripts/server-bundle.js";
import { loadConfig } from "../../src/config.js";
import { ensureHostPackages, TOOLS } from "../../src/drivers/runtime/local/host.js";
import { deleteLink, linkNames, NETNS_DIR } from "../../src/drivers/runtime/local/network.js";
import { exists } from "../../src/lib/fs.js";
import { adminUrl } from "../harness.js";
import { eventually } from "./eventually.js";
import {
  bridgeName,
  hostVethName,
  netnsName,
  peerVethName,
  pickSubnet,
  pidOfLink,
  pidOfNetns,
  pidOfRunDir,
  RUN_DIR_PREFIX,
  uidRangeOf,
} from "./multi-host-net.js";
import { pushTestImages, startTestRegistry, type TestRegistry } from "./registry.js";
import { type S3rverHandle, startS3rver } from "./s3rver.js";
import { apiRequest, type Json, type Reply, type ShownSandbox } from "./server-process.js";
import { TcpForward } from "./tcp-forward.js";

const execFileAsync = promisify(execFile);
const SWEEP_SCRIPT = path.join(PROJECT_DIR, "test", "support", "multi-host-sweep.ts");
const NSENTER = "/usr/bin/nsenter";
/** Every host's API port, inside its own namespace. */
export const HOST_API_PORT = 8080;
/** Every host's internal API (routing to a sandbox's owner) and SSH gateway ports, inside its own namespace. */
export const HOST_INTERNAL_PORT = 8090;
export const HOST_SSH_PORT = 2222;
/** Kept of each host process's output (the tail is what a failure needs). */
const LOG_KEEP_BYTES = 512 * 1024;

async function sh(file: string, args: string[]): Promise<string> {
  const { stdout } = await execFileAsync(file, args, { maxBuffer: 16 * 1024 * 1024 });
  return stdout;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Removes a runtime root's sandboxes and everything of it on the host (sweep.ts's sweepRoot),
 * inside network namespace `netns` when it still exists (its veths and nftables table live
 * there), in a process of its own.
 */
async function sweepHostRoot(root: string, netns: string | null): Promise<string[]> {
  const node = [process.execPath, "--import", "tsx", SWEEP_SCRIPT, root];
  const [file, ...args] = netns ? [NSENTER, `--net=${path.join(NETNS_DIR, netns)}`, "--", ...node] : node;
  try {
    const out = await sh(file as string, args);
    return (JSON.parse(out.trim().split("\n").pop() || "{}") as { errors?: string[] }).errors ?? [];
  } catch (error) {
    return [`sweeping ${root}: ${(error as Error).message}`];
  }
}

/** SIGKILLs every process in network namespace `netns` (a dead run's servers outlive it). */
async function killProcessesIn(netns: string): Promise<void> {
  const pin = await stat(path.join(NETNS_DIR, netns)).catch(() => null);
  if (!pin) return;
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    const ns = await stat(`/proc/${pid}/ns/net`).catch(() => null);
    if (ns && ns.ino === pin.ino && ns.dev === pin.dev) {
      try {
        process.kill(Number(pid), "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
  }
}

const CPU_GROUP_PREFIX = "warren-mh-cpu-";

/** Where CPU cgroups are made: the unified hierarchy's root, or cgroup v1's cpu controller. */
async function cpuGroupParent(): Promise<{ dir: string; v2: boolean }> {
  return (await exists("/sys/fs/cgroup/cgroup.controllers"))
    ? { dir: "/sys/fs/cgroup", v2: true }
    : { dir: "/sys/fs/cgroup/cpu", v2: false };
}

/** A cgroup capped at `cores` of CPU (period 100 ms): its cgroup.procs file and its removal. */
async function makeCpuGroup(name: string, cores: number): Promise<{ procs: string; remove: () => Promise<void> }> {
  assert.ok(cores > 0 && cores <= os.availableParallelism(), `hostCpuCores ${cores} is not a share of this machine`);
  const parent = await cpuGroupParent();
  const dir = path.join(parent.dir, name);
  await mkdir(dir);
  const quota = String(Math.round(cores * 100_000));
  if (parent.v2) await writeFile(path.join(dir, "cpu.max"), `${quota} 100000`);
  else {
    await writeFile(path.join(dir, "cpu.cfs_period_us"), "100000");
    await writeFile(path.join(dir, "cpu.cfs_quota_us"), quota);
  }
  // Removed once the host was killed (undo runs backwards, and the host's kill was pushed after this).
  return { procs: path.join(dir, "cgroup.procs"), remove: () => rmdir(dir).catch(() => undefined) };
}

/** The harness's leftovers of runs whose process is gone: servers, runtime roots, namespaces, links, dirs. */
export async function sweepMultiHostLeftovers(): Promise<void> {
  const namespaces = await readdir(NETNS_DIR).catch(() => [] as string[]);
  for (const name of namespaces) {
    const pid = pidOfNetns(name);
    if (pid !== null && !alive(pid)) await killProcessesIn(name);
  }
  for (const name of await readdir(os.tmpdir()).catch(() => [] as string[])) {
    const pid = pidOfRunDir(name);
    if (pid === null || alive(pid)) continue;
    const dir = path.join(os.tmpdir(), name);
    for (const host of await readdir(dir).catch(() => [] as string[])) {
      const index = /^h(\d+)$/.exec(host)?.[1];
      if (index === undefined) continue;
      const netns = netnsName(pid, Number(index));
      await sweepHostRoot(path.join(dir, host, "runtime"), namespaces.includes(netns) ? netns : null);
    }
    await rm(dir, { recursive: true, force: true });
  }
  for (const name of namespaces) {
    const pid = pidOfNetns(name);
    if (pid !== null && !alive(pid)) await sh(TOOLS.ip, ["netns", "delete", name]).catch(() => undefined);
  }
  for (const link of await linkNames()) {
    const pid = pidOfLink(link);
    if (pid !== null && !alive(pid)) await deleteLink(link).catch(() => undefined);
  }
  const cpuGroups = (await cpuGroupParent()).dir;
  for (const name of await readdir(cpuGroups).catch(() => [] as string[])) {
    const pid = new RegExp(`^${CPU_GROUP_PREFIX}(\\d+)-h\\d+$`).exec(name)?.[1];
    if (pid !== undefined && !alive(Number(pid))) await rmdir(path.join(cpuGroups, name)).catch(() => undefined);
  }
  // Server bundles: build/warren-mh-<name>-<pid>.mjs and the files beside it.
  const build = path.join(PROJECT_DIR, "build");
  for (const name of await readdir(build).catch(() => [] as string[])) {
    const pid = /^warren-mh-.*-(\d+)(?:\.[a-z-]+)?\.mjs(?:\.map)?$/.exec(name)?.[1];
    if (pid !== undefined && !alive(Number(pid))) await rm(path.join(build, name), { force: true });
  }
}

/** An answer of a host's API, with its headers (Retry-After, Location). */
export interface HostReply extends Reply {
  headers: Headers;
}

export interface HostOptions {
  /** `all` (default) or another role of WARREN_ROLE (see addApiReplica). */
  role?: string;
  /** Settings of this host only (beside the cluster's). */
  env?: Record<string, string>;
}

/** One server of the deployment, in its own network namespace. */
export class Host {
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();
  /** What the current (or last) process wrote to stdout and stderr (its last 512 KiB). */
  log = "";

  constructor(
    readonly index: number,
    /** `ip netns` name. */
    readonly netns: string,
    /** Its address on the bridge (the test process reaches it there). */
    readonly address: string,
    /** The root-namespace end of its veth (partition() sets it down). */
    readonly veth: string,
    readonly dataDir: string,
    readonly runtimeRoot: string,
    private readonly env: Record<string, string>,
    private readonly bundle: string,
    private readonly apiKey: string,
    /** The cgroup.procs file a start enters first (MultiHostOptions.hostCpuCores), or null. */
    private readonly cpuGroupProcs: string | null = null,
  ) {}

  get name(): string {
    return `h${this.index}`;
  }

  get url(): string {
    return `http://${this.address}:${HOST_API_PORT}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Starts the server (`extraEnv` for this process only) and waits for /readyz. */
  async start(extraEnv: Record<string, string> = {}, readyTimeoutMs = 240_000): Promise<void> {
    assert.ok(!this.running, `${this.name} is already running`);
    this.log = "";
    const env: NodeJS.ProcessEnv = { ...process.env, ...this.env, ...extraEnv };
    delete env.NODE_TEST_CONTEXT;
    // nsenter execs node: the child's pid is the server's.
    const argv = [
      NSENTER,
      `--net=${path.join(NETNS_DIR, this.netns)}`,
      "--",
      process.execPath,
      "--enable-source-maps",
      this.bundle,
    ];
    // With a CPU cap the shell enters the host's cgroup, then execs nsenter (still one pid).
    const [file, ...args] = this.cpuGroupProcs
      ? ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', this.cpuGroupProcs, ...argv]
      : argv;
    const child = spawn(file as string, args, { cwd: PROJECT_DIR, env, stdio: ["ignore", "pipe", "pipe"] });
    this.child = child;
    const keep = (chunk: Buffer) => {
      this.log += String(chunk);
      if (this.log.length > LOG_KEEP_BYTES * 2) this.log = this.log.slice(-LOG_KEEP_BYTES);
    };
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);
    this.exited = new Promise((resolve) => child.once("exit", () => resolve()));
    const outcome = await eventually(
      `${this.name} to be ready`,
      async () => {
        if (child.exitCode !== null || child.signalCode !== null) return "exited";
        const res = await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(5000) });
        return res.status === 200 && "ready";
      },
      readyTimeoutMs,
    ).catch((error: Error) => {
      throw new Error(`${error.message}\n${this.log}`);
    });
    if (outcome === "exited") throw new Error(`${this.name} exited at start:\n${this.log}`);
  }

  /** Sends `signal` (SIGKILL: the crash) and resolves once the process is gone. */
  async kill(signal: NodeJS.Signals = "SIGKILL", timeoutMs = 60_000): Promise<void> {
    const child = this.child;
    if (!child || !this.running) return;
    child.kill(signal);
    let timer: NodeJS.Timeout | undefined;
    const gone = await Promise.race([
      this.exited.then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (!gone) {
      child.kill("SIGKILL");
      await this.exited;
    }
  }

  /** A clean stop (SIGTERM), as an operator's restart does. */
  stop(): Promise<void> {
    return this.kill("SIGTERM");
  }

  /** Stops (SIGTERM) and starts again on the same data dir and runtime root. */
  async restart(extraEnv: Record<string, string> = {}): Promise<void> {
    await this.stop();
    await this.start(extraEnv);
  }

  /** Cuts the host off the bridge (its veth down): no database, blob store, peers or clients. */
  async partition(): Promise<void> {
    await sh(TOOLS.ip, ["link", "set", this.veth, "down"]);
  }

  async heal(): Promise<void> {
    await sh(TOOLS.ip, ["link", "set", this.veth, "up"]);
  }

  /** runc's containers on this host (`runc list` of its runtime root): id and status. */
  async containers(): Promise<{ id: string; status: string }[]> {
    const out = await sh(TOOLS.runc, ["--root", path.join(this.runtimeRoot, "runc"), "list", "--format", "json"]);
    const list = (JSON.parse(out.trim() || "null") ?? []) as { id: string; status: string }[];
    return list.map(({ id, status }) => ({ id, status }));
  }

  /** The links of this host's network namespace (its eth0, lo, its sandboxes' veths). */
  async links(): Promise<string[]> {
    const out = await sh(TOOLS.ip, ["-n", this.netns, "-o", "link", "show"]);
    return out
      .split("\n")
      .map((line) => /^\d+:\s+([^:@\s]+)/.exec(line)?.[1])
      .filter((name): name is string => name !== undefined);
  }

  /** One request to this host's API (the bootstrap key unless headers name another). */
  async api(
    method: string,
    url: string,
    body?: unknown,
    headers: Record<string, string> = {},
    timeoutMs = 90_000,
  ): Promise<HostReply> {
    return apiRequest(this.url, this.apiKey, { method, url, body, headers, timeoutMs });
  }

  async sandbox(id: string, query = ""): Promise<ShownSandbox> {
    const res = await this.api("GET", `/v1/sandboxes/${id}${query}`);
    assert.equal(res.status, 200, `${this.name}: ${res.raw}`);
    return res.body.sandbox as ShownSandbox;
  }

  /** Waits until the sandbox shows `state` (long polls within `timeoutMs`); fails the test otherwise. */
  async waitFor(id: string, state: string, timeoutMs = 120_000): Promise<ShownSandbox> {
    return eventually(
      `${id} to be ${state} on ${this.name}`,
      async () => {
        const sandbox = await this.sandbox(id, `?wait_state=${state}&wait_timeout_seconds=20`);
        return sandbox.state === state && sandbox;
      },
      timeoutMs,
    );
  }

  /** Creates a sandbox through this host (`sleep` as its process unless `body` says otherwise); resolves with its id. */
  async createSandbox(body: Json = {}): Promise<string> {
    const res = await this.api("POST", "/v1/sandboxes", {
      command: ["sleep", "3600"],
      network_access: "none",
      ...body,
    });
    assert.equal(res.status, 200, `${this.name}: ${res.raw}`);
    return res.body.id as string;
  }

  async exec(id: string, cmd: string[], headers: Record<string, string> = {}, extra: Json = {}): Promise<HostReply> {
    return this.api("POST", `/v1/sandboxes/${id}:exec`, { cmd, ...extra }, headers);
  }
}

export interface MultiHostOptions {
  /** Hosts started at once (default 2); addHost() adds more later. */
  hosts?: number;
  /**
   * The CPU each host's processes may use, in cores (a CFS quota on a cgroup of the host's
   * own, which its server, spawner and the tools they run inherit; sandboxes have their own
   * cgroups). Unset: no cap. What lets a benchmark give every host the same machine.
   */
  hostCpuCores?: number;
  /** Settings of every host, beside the harness's. */
  env?: Record<string, string>;
}

export interface MultiHost {
  hosts: Host[];
  /** The bootstrap API key of the operator organization (every host's). */
  apiKey: string;
  /** The image the hosts create sandboxes from by default (the test registry's busybox). */
  busyboxRef: string;
  s3: S3rverHandle;
  registry: TestRegistry;
  /** The test database, as the test process reaches it (127.0.0.1). */
  databaseUrl: string;
  /** One query on the test database. */
  query<R extends pg.QueryResultRow = Json>(sql: string, params?: unknown[]): Promise<R[]>;
  /** Adds (and starts) one more host. */
  addHost(options?: HostOptions): Promise<Host>;
  /**
   * The hook for issue 25's api-only replica: a server with WARREN_ROLE=api (no runtime of
   * its own). Refused until src/config.ts knows the role, so no test runs an `all` server
   * believing it is an api replica.
   */
  addApiReplica(options?: HostOptions): Promise<Host>;
  /** Kills every host and removes everything the harness made; safe to call twice, and after a failed start. */
  cleanup(): Promise<void>;
}

/** True once src/config.ts parses WARREN_ROLE=`role` (the many-hosts roles of issue 25). */
export function roleSupported(role: string): boolean {
  try {
    return (loadConfig({ WARREN_ROLE: role }) as unknown as { role?: string }).role === role;
  } catch {
    return false;
  }
}

/** Where runs claim their bridge's /24 (172.29.N.0/24 is claimed by the file named N). */
const SUBNET_CLAIMS = "/run/warren-mh-subnets";
const subnetClaim = (n: number) => path.join(SUBNET_CLAIMS, String(n));

/**
 * A /24 for this run's bridge that no route uses and no live run claimed: two test files
 * starting at once read the same routes before either bridge is up, so the choice is claimed
 * with an exclusive create (the claim names the run's pid; a dead run's claim is taken over).
 */
async function claimSubnet(pid: number): Promise<ReturnType<typeof pickSubnet>> {
  await mkdir(SUBNET_CLAIMS, { recursive: true });
  const taken = new Set<number>();
  for (;;) {
    const subnet = pickSubnet(await readFile("/proc/net/route", "utf8"), taken);
    // Written whole under a name of this run's, then linked into place: link() fails with
    // EEXIST when the claim exists, and a claim is never seen half written.
    const draft = path.join(SUBNET_CLAIMS, `.${pid}-${subnet.n}`);
    await writeFile(draft, String(pid));
    try {
      await link(draft, subnetClaim(subnet.n));
      return subnet;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const owner = Number((await readFile(subnetClaim(subnet.n), "utf8").catch(() => "")).trim());
      const alive = Number.isSafeInteger(owner) && owner > 0 && (await exists(`/proc/${owner}`));
      if (alive) taken.add(subnet.n);
      else await rm(subnetClaim(subnet.n), { force: true });
    } finally {
      await rm(draft, { force: true });
    }
  }
}

/** Starts the shared services and `options.hosts` hosts; `name` names the bundle and database. */
export async function startMultiHost(name: string, options: MultiHostOptions = {}): Promise<MultiHost> {
  await ensureHostPackages({ forTests: true });
  await sweepMultiHostLeftovers();
  const pid = process.pid;
  const undo: (() => Promise<unknown>)[] = [];
  const hosts: Host[] = [];
  let cleaned = false;
  const cleanup = async () => {
    if (cleaned) return;
    cleaned = true;
    const errors: string[] = [];
    for (const step of undo.reverse()) await step().catch((error: Error) => errors.push(error.message));
    if (errors.length > 0) process.stderr.write(`multi-host cleanup: ${errors.join("; ")}\n`);
  };
  try {
    const runDir = await mkdtemp(path.join(os.tmpdir(), `${RUN_DIR_PREFIX}${pid}-`));
    await writeFile(path.join(runDir, "owner.pid"), String(pid));
    undo.push(() => rm(runDir, { recursive: true, force: true }));

    const registry = await startTestRegistry();
    undo.push(() => registry.stop());
    await pushTestImages(registry);
    const s3 = await startS3rver(`mh-${randomBytes(4).toString("hex")}`);
    undo.push(() => s3.stop());

    const admin = await adminUrl();
    const database = `mh_${pid}_${randomBytes(4).toString("hex")}`;
    await withClient(admin, (c) => c.query(`CREATE DATABASE ${database}`));
    undo.push(() => withClient(admin, (c) => c.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)));
    const databaseUrl = Object.assign(new URL(admin), { pathname: `/${database}` }).toString();

    const subnet = await claimSubnet(pid);
    undo.push(() => rm(subnetClaim(subnet.n), { force: true }));
    const bridge = bridgeName(pid);
    await sh(TOOLS.ip, ["link", "add", bridge, "type", "bridge"]);
    undo.push(() => deleteLink(bridge));
    await sh(TOOLS.ip, ["addr", "add", `${subnet.bridge}/${subnet.prefix}`, "dev", bridge]);
    await sh(TOOLS.ip, ["link", "set", bridge, "up"]);

    // Hosts reach the root namespace's loopback services at the bridge's address, same port.
    const forwarded = new Map<string, string>();
    const forward = async (loopbackUrl: string) => {
      const url = new URL(loopbackUrl);
      const port = Number(url.port);
      const tcp = await TcpForward.listen(subnet.bridge, port, "127.0.0.1", port);
      undo.push(() => tcp.close());
      forwarded.set(`${url.hostname}:${port}`, `${subnet.bridge}:${port}`);
      url.hostname = subnet.bridge;
      return url;
    };
    const hostDatabaseUrl = (await forward(databaseUrl)).toString();
    const hostS3Endpoint = (await forward(s3.endpoint)).origin;
    const registryHost = (await forward(registry.url)).host;
    const busyboxRef = `${registryHost}/test/busybox:latest`;

    const bundle = await buildServerBundle(path.join(PROJECT_DIR, "build", `warren-mh-${name}-${pid}.mjs`));
    undo.push(() => Promise.all(bundleFiles(bundle).map((file) => rm(file, { force: true }))));

    const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;
    const shared: Record<string, string> = {
      DATABASE_URL: hostDatabaseUrl,
      WARREN_BOOTSTRAP_API_KEY: apiKey,
      WARREN_MASTER_KEY: randomBytes(32).toString("base64"),
      WARREN_BLOB_STORE: "s3",
      WARREN_S3_BUCKET: s3.bucket,
      WARREN_S3_ENDPOINT: hostS3Endpoint,
      WARREN_S3_ACCESS_KEY_ID: s3.accessKeyId,
      WARREN_S3_SECRET_ACCESS_KEY: s3.secretAccessKey,
      WARREN_S3_FORCE_PATH_STYLE: "true",
      WARREN_DEFAULT_IMAGE: busyboxRef,
      WARREN_INSECURE_REGISTRIES: registryHost,
      WARREN_SANDBOX_MEMORY_MB: "128",
      WARREN_SANDBOX_PIDS: "128",
      // No warm pool: every container on a host is then a sandbox with a row.
      WARREN_SANDBOX_POOL_SIZE: "0",
      WARREN_LOG_LEVEL: "warn",
      UV_THREADPOOL_SIZE: "16",
      ...options.env,
    };

    let nextIndex = 0;
    const addHost = async (hostOptions: HostOptions = {}): Promise<Host> => {
      const index = nextIndex++;
      const netns = netnsName(pid, index);
      const veth = hostVethName(pid, index);
      const peer = peerVethName(pid, index);
      const address = subnet.host(index);
      await sh(TOOLS.ip, ["netns", "add", netns]);
      undo.push(() => sh(TOOLS.ip, ["netns", "delete", netns]));
      await sh(TOOLS.ip, ["link", "add", veth, "type", "veth", "peer", "name", peer]);
      undo.push(() => deleteLink(veth));
      await sh(TOOLS.ip, ["link", "set", peer, "netns", netns]);
      await sh(TOOLS.ip, ["link", "set", veth, "master", bridge, "up"]);
      const inside = (...args: string[]) => sh(TOOLS.ip, ["-n", netns, ...args]);
      await inside("link", "set", "lo", "up");
      await inside("link", "set", peer, "name", "eth0");
      await inside("addr", "add", `${address}/${subnet.prefix}`, "dev", "eth0");
      await inside("link", "set", "eth0", "up");
      const dir = path.join(runDir, `h${index}`);
      const dataDir = path.join(dir, "data");
      const runtimeRoot = path.join(dir, "runtime");
      await mkdir(dataDir, { recursive: true });
      await mkdir(runtimeRoot, { recursive: true });
      const role = hostOptions.role ?? "all";
      const env: Record<string, string> = {
        ...shared,
        WARREN_DATA_DIR: dataDir,
        WARREN_RUNTIME_ROOT: runtimeRoot,
        WARREN_LISTEN: `${address}:${HOST_API_PORT}`,
        WARREN_INTERNAL_LISTEN: `${address}:${HOST_INTERNAL_PORT}`,
        WARREN_SSH_LISTEN: `${address}:${HOST_SSH_PORT}`,
        WARREN_SANDBOX_UID_RANGE: uidRangeOf(index),
        ...(role !== "all" ? { WARREN_ROLE: role } : {}),
        ...hostOptions.env,
      };
      let cpuGroupProcs: string | null = null;
      if (options.hostCpuCores !== undefined) {
        const group = await makeCpuGroup(`${CPU_GROUP_PREFIX}${pid}-h${index}`, options.hostCpuCores);
        undo.push(group.remove);
        cpuGroupProcs = group.procs;
      }
      const host = new Host(index, netns, address, veth, dataDir, runtimeRoot, env, bundle, apiKey, cpuGroupProcs);
      hosts[index] = host;
      // Runs before the namespace's deletion (undo runs backwards): the server first, then its sandboxes.
      undo.push(async () => {
        await host.kill("SIGKILL");
        const errors = await sweepHostRoot(runtimeRoot, netns);
        if (errors.length > 0) throw new Error(`${host.name} sweep: ${errors.join("; ")}`);
      });
      await host.start();
      return host;
    };

    const count = options.hosts ?? 2;
    // The first start migrates the database; the others then start side by side.
    if (count > 0) await addHost();
    await Promise.all(Array.from({ length: count - 1 }, () => addHost()));

    return {
      hosts,
      apiKey,
      busyboxRef,
      s3,
      registry,
      databaseUrl,
      query: async <R extends pg.QueryResultRow>(sql: string, params: unknown[] = []) =>
        withClient(databaseUrl, async (c) => (await c.query<R>(sql, params)).rows),
      addHost,
      addApiReplica: async (hostOptions: HostOptions = {}) => {
        if (!roleSupported("api")) {
          throw new Error("the api role is not built yet (issue 25): src/config.ts does not parse WARREN_ROLE=api");
        }
        return addHost({ ...hostOptions, role: "api" });
      },
      cleanup,
    };
  } catch (error) {
    await cleanup();
    throw error;
  }
}

async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}
