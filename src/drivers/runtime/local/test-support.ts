// Shared by the runtime driver tests: a throwaway registry with the busybox test image, a
// driver on a temp root, a probe listing every host trace of a sandbox, and a peer server
// in a network namespace the test creates (sandboxes never reach the internet in tests).

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { constants, copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, rmdir, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import os from "node:os";
import path from "node:path";
import {
  pushTestImages,
  startTestRegistry,
  type TestImages,
  type TestRegistry,
} from "../../../../test/support/registry.js";
import { exists } from "../../../lib/fs.js";
import type { NetworkReceipt, PreparedImage, ResourceSpec, SandboxSpec } from "../interface.js";
import { cgroupDirs } from "./cgroups.js";
import { LocalRuntimeDriver, type LocalRuntimeDriverOptions } from "./driver.js";
import { ensureHostPackages, run, TOOLS } from "./host.js";
import { DEFAULT_MAPPED_TREE } from "./id-mapping.js";
import { Layout } from "./layout.js";
import { mountsUnder, readMounts, unmountUnder } from "./mounts.js";
import { deleteLink, NETNS_DIR } from "./network.js";
import { loopDevicesUnder } from "./storage/pool.js";
import { sweepRoot } from "./sweep.js";

/**
 * Rebuilds a stopped sandbox's dir as the code before the storage pool left it (legacy.ts):
 * `upper/` and `work/` in its dir, and `/workspace` a plain dir (standard) or mounted from an
 * ext4 `workspace.img` of 1 GiB (durable); its images in the pool are gone.
 */
export async function makeLegacyLayout(
  layout: Layout,
  id: string,
  storageClass: SandboxSpec["storageClass"],
): Promise<void> {
  const paths = layout.sandbox(id);
  const old = path.join(paths.dir, "old");
  await mkdir(old);
  await unmountUnder(paths.rootfs);
  await run(TOOLS.cp, ["-a", paths.upper, path.join(paths.dir, "upper")]);
  await mkdir(path.join(paths.dir, "work"));
  await run(TOOLS.cp, ["-a", `${paths.workspace}/.`, old]);
  await unmountUnder(paths.layer);
  await unmountUnder(paths.workspace);
  await rm(paths.layer, { recursive: true });
  await rm(layout.sandboxImages(id).dir, { recursive: true });
  await rm(paths.workspace, { recursive: true });
  if (storageClass === "durable") {
    const image = path.join(paths.dir, "workspace.img");
    await run("/usr/bin/truncate", ["-s", "1G", image]);
    await run("/usr/sbin/mkfs.ext4", ["-q", "-F", "-d", old, image]);
    await mkdir(paths.workspace);
    await run(TOOLS.mount, ["-t", "ext4", "-o", "loop", image, paths.workspace]);
  } else {
    await rename(old, paths.workspace);
  }
  await rm(old, { recursive: true, force: true });
}

export const TEST_RESOURCES: ResourceSpec = { memoryMiB: 256, cpuMillis: 1000, pids: 256 };

export function testId(prefix = "t"): string {
  return `${prefix}-${randomBytes(5).toString("hex")}`;
}

/**
 * Creates and starts a sandbox from `f.spec(overrides)` on `driver` (the fixture's by default),
 * noting its id in `made` for the test file's own cleanup; resolves with the id.
 */
export async function startSandbox(
  f: RuntimeFixture,
  made: string[],
  overrides: Partial<SandboxSpec> = {},
  driver: LocalRuntimeDriver = f.driver,
): Promise<string> {
  const spec = f.spec(overrides);
  made.push(spec.id);
  await driver.create(spec);
  await driver.start(spec.id);
  return spec.id;
}

export interface RuntimeFixture {
  registry: TestRegistry;
  images: TestImages;
  /** `127.0.0.1:<port>/test/busybox:latest` */
  busyboxRef: string;
  root: string;
  driver: LocalRuntimeDriver;
  image: PreparedImage;
  spec(overrides?: Partial<SandboxSpec>): SandboxSpec;
  /** Destroys everything (sweep) and stops the registry; safe to call twice. */
  cleanup(): Promise<void>;
}

const ROOT_PREFIX = "warren-runtime-";
const PEER_PREFIX = "warren-test-";

async function processAlive(pid: number): Promise<boolean> {
  return (await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "")).length > 0;
}

/**
 * Sweeps what test processes that died without their after hooks (killed, crashed) left:
 * driver roots in the temp dir and peer namespaces whose owning process is gone.
 */
export async function sweepStaleTestState(): Promise<void> {
  for (const name of await readdir(os.tmpdir()).catch(() => [] as string[])) {
    if (!name.startsWith(ROOT_PREFIX)) continue;
    const root = path.join(os.tmpdir(), name);
    const owner = Number(await readFile(path.join(root, "owner.pid"), "utf8").catch(() => "0"));
    if (owner > 0 && !(await processAlive(owner))) await sweepRoot(root).catch(() => undefined);
  }
  for (const name of await readdir(NETNS_DIR).catch(() => [] as string[])) {
    const owner = Number(/^warren-test-(\d+)-/.exec(name)?.[1] ?? 0);
    if (owner > 0 && !(await processAlive(owner)))
      await run(TOOLS.ip, ["netns", "delete", name]).catch(() => undefined);
  }
}

/** A /24 of the default pool picked by the root's tag, so test files running at once rarely share one. */
export function testSubnetPool(root: string): string {
  return `10.213.${Number.parseInt(new Layout(root).tag.slice(0, 2), 16)}.0/24`;
}

/**
 * A registry with the test images and a driver on a fresh temp root (`options` added to the
 * driver's). cleanup() sweeps the root: sandboxes, mounts, the storage pool's loop mount and
 * loop devices, cgroups, network state.
 */
export async function startRuntimeFixture(
  name: string,
  options: Partial<LocalRuntimeDriverOptions> = {},
  host: { tmpfsMiB?: number } = {},
): Promise<RuntimeFixture> {
  await ensureHostPackages({ forTests: true });
  await sweepStaleTestState();
  const registry = await startTestRegistry();
  const root = await mkdtemp(path.join(os.tmpdir(), `${ROOT_PREFIX}${name}-`));
  // A small host filesystem of its own (storage admission tests); sweepRoot unmounts it.
  if (host.tmpfsMiB) await run(TOOLS.mount, ["-t", "tmpfs", "-o", `size=${host.tmpfsMiB}m,mode=0700`, "tmpfs", root]);
  await writeFile(path.join(root, "owner.pid"), String(process.pid));
  let driver: LocalRuntimeDriver | null = null;
  let cleaned = false;
  const cleanup = async () => {
    if (cleaned) return;
    cleaned = true;
    await driver?.close();
    const report = await sweepRoot(root);
    await registry.stop();
    if (report.errors.length > 0) throw new Error(`sweep left errors: ${report.errors.join("; ")}`);
  };
  try {
    const images = await pushTestImages(registry);
    driver = await LocalRuntimeDriver.open({ ...options, root, subnetPool: testSubnetPool(root) });
    const busyboxRef = `${registry.host}/test/busybox:latest`;
    const image = await driver.prepareImage(busyboxRef);
    const spec = (overrides: Partial<SandboxSpec> = {}): SandboxSpec => ({
      id: testId(),
      source: { kind: "image", image },
      command: ["sleep", "1000000"],
      resources: TEST_RESOURCES,
      storageClass: "standard",
      network: "none",
      ...overrides,
    });
    return { registry, images, busyboxRef, root, driver, image, spec, cleanup };
  } catch (error) {
    await cleanup().catch(() => undefined);
    throw error;
  }
}

/**
 * The after hook of a storage test: destroys the sandboxes `made`, cleans the fixture up and
 * asserts nothing of its root is left: no mount (a host tmpfs included), no loop device (the
 * pool's included).
 */
export async function closeFixtureLeavingNothing(
  f: RuntimeFixture | undefined,
  made: readonly string[],
): Promise<void> {
  for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
  const root = f?.root;
  await f?.cleanup();
  if (!root) return;
  assert.deepEqual(mountsUnder(await readMounts(), root), [], "no mount left under the root");
  assert.deepEqual(await loopDevicesUnder(root), [], "no loop device left under the root");
}

/**
 * Checks a sealed image as a restore would find it: a copy-on-write copy of `image` (in
 * `scratchDir`, on the pool) is mounted, which replays its log, `script` (if any) runs with the
 * mount point as $1, and once it is unmounted `xfs_repair -n` must find nothing. The mount is
 * made in a private mount namespace of its own: one made on the host is copied into every
 * mount namespace created meanwhile (another test's sandbox or peer starting), where the
 * host's unmount does not reach, so the filesystem would stay mounted there and its log
 * unwritten when the repair reads it. Resolves with the script's output.
 */
export async function checkImageCopy(image: string, scratchDir: string, script = "true"): Promise<string> {
  const scratch = path.join(scratchDir, `fsck-${testId("img")}`);
  const point = `${scratch}.mnt`;
  await copyFile(image, scratch, constants.COPYFILE_FICLONE_FORCE);
  try {
    await mkdir(point);
    const inner = [
      'mount -t xfs -o loop,nouuid "$1" "$2" || exit 1',
      // The mount reads this very file (mount -o loop may reuse a loop device it finds for an inode).
      'b=$(cat /sys/block/$(basename $(findmnt -no SOURCE "$2"))/loop/backing_file)',
      '[ "$b" = "$1" ] || { echo "the mount reads $b"; umount "$2"; exit 7; }',
      'rc=0; sh -c "$3" check "$2" || rc=$?',
      'umount "$2" || exit 1',
      "exit $rc",
    ].join("\n");
    const output = await run("/usr/bin/unshare", [
      "--mount",
      "--propagation",
      "private",
      TOOLS.sh,
      "-c",
      inner,
      "inner",
      scratch,
      point,
      script,
    ]);
    const repair = await run(TOOLS.sh, ["-c", `xfs_repair -n "$1" 2>&1; echo rc=$?`, "repair", scratch]);
    if (!/rc=0\s*$/.test(repair)) throw new Error(`xfs_repair -n found problems in a copy of ${image}:\n${repair}`);
    return output;
  } finally {
    await rmdir(point).catch(() => undefined);
    await rm(scratch, { force: true });
  }
}

/** Every trace of sandbox `id` left on the host, described; empty when there is none. */
export async function hostTraces(layout: Layout, id: string): Promise<string[]> {
  const traces: string[] = [];
  const dir = layout.sandbox(id).dir;
  for (const point of mountsUnder(await readMounts(), dir)) traces.push(`mount ${point}`);
  const mountinfo = await readFile("/proc/self/mountinfo", "utf8");
  if (mountinfo.includes(layout.netnsName(id))) traces.push("netns mount");
  for (const cgroup of await cgroupDirs(layout.cgroupPath(id)))
    if (await exists(cgroup)) traces.push(`cgroup ${cgroup}`);
  if (await exists(layout.runcStateDir(id))) traces.push("runc state");
  if (await exists(dir)) traces.push(`dir ${dir}`);
  const tree = path.join(DEFAULT_MAPPED_TREE, layout.tag, id);
  for (const point of mountsUnder(await readMounts(), tree)) traces.push(`mount ${point}`);
  if (await exists(tree)) traces.push(`mapped tree ${tree}`);
  if (await exists(path.join(NETNS_DIR, layout.netnsName(id)))) traces.push("netns");
  if (await exists(layout.sandboxImages(id).dir)) traces.push("images in the storage pool");
  const rules = await run(TOOLS.nft, ["-a", "list", "table", "inet", layout.nftTable]).catch(() => "");
  if (rules.includes(`warren:${id}"`)) traces.push("nftables rules");
  return traces;
}

/** The namespace, host interface and rules a receipt names that still exist. */
export async function receiptLeftovers(layout: Layout, receipt: NetworkReceipt): Promise<string[]> {
  const left: string[] = [];
  if (await exists(receipt.namespace.path)) left.push(`netns ${receipt.namespace.path}`);
  if (receipt.link && (await exists(`/sys/class/net/${receipt.link.hostInterface}`))) {
    left.push(`link ${receipt.link.hostInterface}`);
  }
  const listing = await run(TOOLS.nft, ["-a", "list", "table", "inet", layout.nftTable]).catch(() => "");
  // Tables, sets and chains carry handles too; only rule lines count.
  const ruleLines = listing.split("\n").filter((line) => !/^\s*(table|set|chain) /.test(line));
  for (const rule of receipt.rules) {
    if (ruleLines.some((line) => line.endsWith(`# handle ${rule.handle}`))) left.push(`rule ${rule.handle}`);
  }
  return left;
}

/** Host-side veths of a layout that exist now. */
export async function vethsOf(layout: Layout): Promise<string[]> {
  return (await readdir("/sys/class/net")).filter((name) => name.startsWith(layout.vethPrefix));
}

export interface TestPeer {
  /** The peer's address: outside every blocked range (TEST-NET-3), like a public server. */
  address: string;
  /** TCP: answers "pong\n" and closes. */
  port: number;
  /** HTTP: answers `peer <method> <url> host=<Host header>` (and echoes a 1 KiB body for /kib). */
  httpPort: number;
  netns: string;
  stop(): Promise<void>;
}

/**
 * A TCP server answering "pong\n" (and an HTTP server on the next port) inside a network
 * namespace made for the test, linked to the host by a veth on a /30 of 203.0.113.0/24.
 * Sandboxes reach it only through NAT or the egress gateway: it plays the internet.
 */
export async function startTestPeer(): Promise<TestPeer> {
  const suffix = randomBytes(3).toString("hex");
  const netns = `${PEER_PREFIX}${process.pid}-${suffix}`;
  const veth = `wt${suffix}`;
  const slot = Number.parseInt(suffix, 16) % 64;
  const hostAddress = `203.0.113.${slot * 4 + 1}`;
  const address = `203.0.113.${slot * 4 + 2}`;
  const port = 18_000 + (Number.parseInt(suffix, 16) % 1000);
  let server: ChildProcess | null = null;
  const stop = async () => {
    server?.kill("SIGKILL");
    await deleteLink(veth).catch(() => undefined);
    await run(TOOLS.ip, ["netns", "delete", netns]).catch(() => undefined);
  };
  try {
    await run(TOOLS.ip, ["netns", "add", netns]);
    await run(TOOLS.ip, ["-batch", "-"], {
      input: [
        `link add ${veth} type veth peer name eth0 netns ${netns}`,
        `addr add ${hostAddress}/30 dev ${veth}`,
        `link set ${veth} up`,
        "",
      ].join("\n"),
    });
    await run(TOOLS.ip, ["-n", netns, "-batch", "-"], {
      input: [`addr add ${address}/30 dev eth0`, "link set eth0 up", "link set lo up", ""].join("\n"),
    });
    const code = [
      `require("net").createServer((s) => s.end("pong\\n")).listen(${port}, "${address}", () => {`,
      `  require("http").createServer((q, r) => {`,
      `    q.resume();`,
      `    r.end(q.url === "/kib" ? "k".repeat(1024) : "peer " + q.method + " " + q.url + " host=" + q.headers.host + "\\n");`,
      `  }).listen(${port + 1}, "${address}", () => console.log("ready"));`,
      "});",
    ].join("\n");
    const child = spawn(TOOLS.ip, ["netns", "exec", netns, process.execPath, "-e", code], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    server = child;
    await new Promise<void>((resolve, reject) => {
      let errors = "";
      child.stderr?.on("data", (chunk) => {
        errors += String(chunk);
      });
      child.stdout?.on("data", (chunk) => {
        if (String(chunk).includes("ready")) resolve();
      });
      child.on("exit", (exitCode) => reject(new Error(`the test peer exited (${exitCode}): ${errors}`)));
    });
    return { address, port, httpPort: port + 1, netns, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A host TCP server counting the connections it accepts. */
export async function countingServer(host: string): Promise<{ server: Server; port: number; accepted: () => number }> {
  let accepted = 0;
  const server = createServer((socket) => {
    accepted++;
    socket.end("hello\n");
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const address = server.address();
  return { server, port: typeof address === "object" && address ? address.port : 0, accepted: () => accepted };
}

export function hostIPv4Addresses(): string[] {
  return Object.values(os.networkInterfaces())
    .flat()
    .filter((a) => a && a.family === "IPv4" && !a.internal)
    .map((a) => (a as os.NetworkInterfaceInfo).address);
}
