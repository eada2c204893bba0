// Id mapping (issue 24 A2; WARREN_SANDBOX_ID_MAPPING): a sandbox's uids and gids 0..65535 map
// to a host block of its own (FIRST..FIRST+65535, claimed machine-wide by namespace-owners.ts),
// so root inside is an unprivileged host uid for every per-user count of the kernel (epoll
// max_user_watches, inotify, RLIMIT_NPROC), not host root. Files keep their owners on disk
// (uid 0 in the image layers, the root image, snapshots and volumes): the sandbox sees them
// through idmapped mounts (userns-helper.c `idmap`) made with its user namespace. An overlayfs
// mount cannot itself be idmapped, but its layers can: each lower dir and the root image's dir
// holding upper/ and work/ are idmapped binds under `<sandbox dir>/mapped/`, and the overlay is
// mounted with fsuid FIRST (`overlay`), so what it makes in the upper dir lands as uid 0 on
// disk. The workspace, /etc/hosts and /etc/hostname, the trust files and the caller's mounts
// are idmapped binds too.
//
// runc resolves the rootfs (and mount sources) as the sandbox's root, an unmapped host uid
// that the 0700 runtime root does not let through; the runtime root stays closed, and
// everything the bundle names lives instead in a search-only tree of its own
// (`<treeDir>/<tag>/<id>/`, dirs 0711, nothing to list): binds of the overlay, the tools and
// the idmapped mounts.
import { lstat, mkdir, rm, rmdir, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { projectFile } from "../../../lib/paths.js";
import type { SandboxMount } from "../interface.js";
import { runOrFail, TOOLS } from "./host.js";
import type { Layout, SandboxPaths } from "./layout.js";
import { isMounted, mountReadOnlyView, overlayOptions, readMounts, unmountUnder } from "./mounts.js";
import { type ClaimKind, NamespaceOwners, type UidRange } from "./namespace-owners.js";
import { buildStaticBinary } from "./static-binary.js";
import { userNamespacePin } from "./user-namespace.js";

const HELPER_SOURCE = projectFile("src/drivers/runtime/local/userns-helper.c");

/** Ids mapped per sandbox: 0..65535 inside. */
export const MAPPED_IDS = 65_536;
/** Blocks of MAPPED_IDS from 2^31 up to 2^32 - 65536 (uid 2^32 - 1 is no uid). */
export const DEFAULT_MAPPED_BLOCKS: UidRange = { first: 0x8000_0000, count: 0x7fff };
export const DEFAULT_MAPPED_TREE = "/run/warren-mapped";
const BLOCK_KIND: ClaimKind = {
  stride: MAPPED_IDS,
  prefix: "range-",
  recordFile: "userns.range",
  exhausted: "no free block of 65536 host ids for a mapped sandbox",
};

/** The claims of id blocks, beside the owner claims (same machine-wide directory). */
export function mappedRanges(layout: Layout, blocks: UidRange | undefined, claimsDir: string | undefined) {
  return new NamespaceOwners(layout, blocks ?? DEFAULT_MAPPED_BLOCKS, claimsDir, BLOCK_KIND);
}

/** Where a mapped sandbox's idmapped layers (host-only) and its search-only tree are. */
export interface MappedPaths {
  /** `<sandbox dir>/mapped`: idmapped binds of the lower dirs (`l<n>`), the root image's dir (`layer`), mount sources (`s<n>`). */
  scratch: string;
  /** `<treeDir>/<tag>/<id>`: everything the bundle names. */
  tree: string;
  rootfs: string;
}

export function mappedPaths(layout: Layout, paths: SandboxPaths, treeDir: string, id: string): MappedPaths {
  const tree = path.join(treeDir, layout.tag, id);
  return { scratch: path.join(paths.dir, "mapped"), tree, rootfs: path.join(tree, "rootfs") };
}

/** Waits for every step, then throws the first failure (so a teardown never races a step still under way). */
async function settleAll(steps: Promise<unknown>[]): Promise<void> {
  const failed = (await Promise.allSettled(steps)).find((step) => step.status === "rejected");
  if (failed) throw (failed as PromiseRejectedResult).reason;
}

async function helper(): Promise<string> {
  return buildStaticBinary(HELPER_SOURCE, "warren-userns");
}

/** An empty file or dir at `target` for a mount of `source` (the kind a bind needs). */
async function mountPoint(source: string, target: string): Promise<void> {
  const info = await lstat(source);
  if (info.isDirectory()) await mkdir(target, { recursive: true, mode: 0o700 });
  else if (!(await lstat(target).catch(() => null))) await writeFile(target, "", { mode: 0o600 });
}

/** Binds `source` at `target` idmapped through the user namespace pinned at `userPin` (once). */
export async function idmappedBind(
  userPin: string,
  source: string,
  target: string,
  readOnly: boolean,
  mounted?: ReadonlySet<string>,
): Promise<void> {
  if (mounted ? mounted.has(target) : await isMounted(target)) return;
  await mountPoint(source, target);
  await runOrFail("making an idmapped mount", await helper(), [
    "idmap",
    userPin,
    source,
    target,
    ...(readOnly ? ["ro"] : []),
  ]);
}

/**
 * A plain read-only bind (a host tool into the tree), made afresh: the tool may have been
 * rebuilt at another path since (the exec agent after an upgrade); the tree is prepared only
 * while the sandbox does not run.
 */
async function plainBind(source: string, target: string, mounted: ReadonlySet<string>): Promise<void> {
  if (mounted.has(target)) await unmountUnder(target);
  await mountPoint(source, target);
  // One mount(8): with --bind, util-linux applies ro,nosuid,nodev in the bind's own remount.
  await runOrFail("binding a tool read-only", TOOLS.mount, ["--bind", "-o", "ro,nosuid,nodev", source, target]);
}

/** The mount points of this process's mount namespace, read once for a series of binds. */
async function mountPoints(): Promise<Set<string>> {
  return new Set((await readMounts()).map((m) => m.mountPoint));
}

/**
 * The overlay rootfs of a mapped sandbox at `paths.rootfs`: idmapped lower dirs and upper
 * dir, mounted with the block's first uid as fsuid.
 */
export async function mountMappedOverlay(input: {
  lowerDirs: readonly string[];
  paths: SandboxPaths;
  mapped: MappedPaths;
  first: number;
}): Promise<void> {
  const { paths, mapped } = input;
  if (await isMounted(paths.rootfs)) return;
  const userPin = userNamespacePin(paths);
  await mkdir(mapped.scratch, { recursive: true, mode: 0o700 });
  // Independent binds of distinct targets: made side by side, on one read of the mount table.
  const mounted = await mountPoints();
  const lowers = input.lowerDirs.map((_, index) => path.join(mapped.scratch, `l${index}`));
  const layer = path.join(mapped.scratch, "layer");
  await settleAll([
    ...input.lowerDirs.map((dir, index) => idmappedBind(userPin, dir, lowers[index] as string, true, mounted)),
    idmappedBind(userPin, paths.layer, layer, false, mounted),
  ]);
  const cwd = paths.dir;
  const { options, links } = overlayOptions({
    lowerDirs: lowers,
    upper: path.join(layer, path.relative(paths.layer, paths.upper)),
    work: path.join(layer, path.relative(paths.layer, paths.work)),
    cwd,
    linkDirName: path.basename(paths.lower),
  });
  await rm(paths.lower, { recursive: true, force: true });
  await mkdir(paths.lower, { mode: 0o700 });
  for (const link of links) await symlink(link.target, path.join(paths.lower, link.name));
  await runOrFail(
    "mounting the mapped overlay rootfs",
    await helper(),
    ["overlay", String(input.first), options, paths.rootfs],
    {
      cwd,
    },
  );
}

export interface MappedBundle {
  rootfs: string;
  workspaceSource: string;
  hostsFile: string;
  hostnameFile: string;
  tiniPath: string;
  execAgentPath?: string;
  busyboxPath?: string;
  launch?: { dir: string; busybox: string };
  mounts: SandboxMount[];
}

/**
 * Builds (or completes, after a reboot) the sandbox's search-only tree and returns the
 * bundle's paths in it. `mounts` are the trust files and the caller's mounts as recorded:
 * each an idmapped bind; a read-only directory is then shown through a read-only overlay view
 * (mounts.ts), so the sandbox's mountinfo names no host path.
 */
export async function prepareMappedTree(input: {
  paths: SandboxPaths;
  mapped: MappedPaths;
  treeDir: string;
  tiniPath: string;
  execAgentPath?: string;
  busyboxPath?: string;
  launch?: { dir: string; busybox: string };
  mounts: readonly SandboxMount[];
}): Promise<MappedBundle> {
  const { paths, mapped } = input;
  const userPin = userNamespacePin(paths);
  // Search-only: the sandbox's root (an unmapped host uid) may pass, never list.
  await mkdir(input.treeDir, { recursive: true, mode: 0o711 });
  for (const dir of [path.dirname(mapped.tree), mapped.tree]) await mkdir(dir, { recursive: true, mode: 0o711 });
  const at = (name: string) => path.join(mapped.tree, name);
  // Independent binds of distinct targets: made side by side, on one read of the mount table
  // (each bind is a tool run; the tree is prepared under the sandbox's lock, so nothing else
  // mounts here meanwhile).
  const mounted = await mountPoints();
  const { execAgentPath, busyboxPath, launch: launchInput } = input;
  await settleAll([
    (async () => {
      if (mounted.has(mapped.rootfs)) return;
      await mkdir(mapped.rootfs, { recursive: true, mode: 0o700 });
      await runOrFail("binding the rootfs into the mapped tree", TOOLS.mount, ["--bind", paths.rootfs, mapped.rootfs]);
    })(),
    idmappedBind(userPin, paths.workspace, at("workspace"), false, mounted),
    idmappedBind(userPin, paths.hosts, at("hosts"), false, mounted),
    idmappedBind(userPin, paths.hostname, at("hostname"), false, mounted),
    plainBind(input.tiniPath, at("init"), mounted),
    ...(execAgentPath ? [plainBind(execAgentPath, at("agent"), mounted)] : []),
    ...(busyboxPath ? [plainBind(busyboxPath, at("tools-busybox"), mounted)] : []),
    ...(launchInput
      ? [
          idmappedBind(userPin, launchInput.dir, at("launch"), true, mounted),
          plainBind(launchInput.busybox, at("busybox"), mounted),
        ]
      : []),
  ]);
  const launch: MappedBundle["launch"] = launchInput ? { dir: at("launch"), busybox: at("busybox") } : undefined;
  const mounts: SandboxMount[] = [];
  for (const [index, mount] of input.mounts.entries()) {
    const source = path.join(mapped.scratch, `s${index}`);
    const isDir = (await lstat(mount.source)).isDirectory();
    if (mount.readOnly && isDir) {
      await idmappedBind(userPin, mount.source, source, true);
      await mountReadOnlyView({
        source,
        target: at(`m${index}`),
        linkDir: path.join(mapped.scratch, `v${index}`),
        empty: path.join(mapped.scratch, "empty"),
      });
    } else {
      await idmappedBind(userPin, mount.source, at(`m${index}`), mount.readOnly);
    }
    mounts.push({ ...mount, source: at(`m${index}`) });
  }
  return {
    rootfs: mapped.rootfs,
    workspaceSource: at("workspace"),
    hostsFile: at("hosts"),
    hostnameFile: at("hostname"),
    tiniPath: at("init"),
    ...(input.execAgentPath ? { execAgentPath: at("agent") } : {}),
    ...(input.busyboxPath ? { busyboxPath: at("tools-busybox") } : {}),
    ...(launch ? { launch } : {}),
    mounts,
  };
}

/** Unmounts and removes the sandbox's tree (its scratch binds go with the sandbox's dir). */
export async function removeMappedTree(mapped: MappedPaths): Promise<void> {
  await unmountUnder(mapped.tree);
  await rm(mapped.tree, { recursive: true, force: true });
  // The root's dir goes with its last sandbox (another may be making one: then it stays).
  await rmdir(path.dirname(mapped.tree)).catch(() => undefined);
}
