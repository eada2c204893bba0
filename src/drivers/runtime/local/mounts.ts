// Host mounts of a sandbox: the overlay rootfs (image layers read-only under a per-sandbox
// upper dir), read-only overlay views of the directories it mounts (volumes), unmounting, and the loop devices behind image mounts (storage/). Whether
// something is mounted is read from /proc/self/mountinfo, so every operation here can be
// repeated safely.
import { mkdir, readdir, readFile, rm, symlink } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { RuntimeError, type SandboxMount } from "../interface.js";
import { run, runOrFail, TOOLS } from "./host.js";

export interface MountInfo {
  mountPoint: string;
  fsType: string;
  source: string;
  /** The path inside the mounted filesystem (`/` unless a bind of a subtree). */
  root: string;
}

function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
}

/** Parses /proc/<pid>/mountinfo (proc(5)). */
export function parseMountInfo(text: string): MountInfo[] {
  const mounts: MountInfo[] = [];
  for (const line of text.split("\n")) {
    if (!line) continue;
    const fields = line.split(" ");
    const separator = fields.indexOf("-", 6);
    if (separator === -1 || fields.length < separator + 3) continue;
    mounts.push({
      root: unescapeMountField(fields[3] ?? ""),
      mountPoint: unescapeMountField(fields[4] ?? ""),
      fsType: fields[separator + 1] ?? "",
      source: unescapeMountField(fields[separator + 2] ?? ""),
    });
  }
  return mounts;
}

export async function readMounts(): Promise<MountInfo[]> {
  return parseMountInfo(await readFile("/proc/self/mountinfo", "utf8"));
}

/** Mount points at or below `dir`, deepest first (the order to unmount them in). */
export function mountsUnder(mounts: readonly MountInfo[], dir: string): string[] {
  const prefix = dir.endsWith("/") ? dir : `${dir}/`;
  const points = mounts.map((m) => m.mountPoint).filter((p) => p === dir || p.startsWith(prefix));
  return [...new Set(points)].sort((a, b) => b.length - a.length || b.localeCompare(a));
}

export async function isMounted(mountPoint: string): Promise<boolean> {
  return (await readMounts()).some((m) => m.mountPoint === mountPoint);
}

/**
 * The overlayfs options, all relative to `cwd`: each lower dir through a short symlink
 * `<linkDirName>/<n>` (Docker's overlay2 does the same), upper and work dirs as paths below
 * `cwd`. The kernel shows the options as given in the sandbox's own /proc/self/mountinfo, so
 * no host path (the data dir, the layer cache) appears there; and a few bytes per layer keep
 * deep images within the one page the kernel accepts for mount options.
 */
export function overlayOptions(input: {
  lowerDirs: readonly string[];
  upper: string;
  work: string;
  cwd: string;
  linkDirName: string;
}): { options: string; links: { name: string; target: string }[] } {
  const { lowerDirs, cwd, linkDirName } = input;
  if (lowerDirs.length === 0) throw new RuntimeError("invalid_spec", "an image needs at least one layer");
  for (const dir of lowerDirs) {
    if (!path.isAbsolute(dir)) throw new RuntimeError("host_failure", `layer dir "${dir}" is not absolute`);
  }
  const below = (dir: string) => {
    const relative = path.relative(cwd, dir);
    if (!relative || relative.startsWith("..") || path.isAbsolute(relative) || /[,:\\]/.test(relative)) {
      throw new RuntimeError("host_failure", `"${dir}" cannot be given to overlayfs from ${cwd}`);
    }
    return relative;
  };
  if (!/^[A-Za-z0-9._-]+$/.test(linkDirName)) throw new RuntimeError("host_failure", "bad overlay link dir name");
  const links = lowerDirs.map((target, index) => ({ name: String(index), target }));
  const lowerdir = links.map((link) => `${linkDirName}/${link.name}`).join(":");
  return { options: `lowerdir=${lowerdir},upperdir=${below(input.upper)},workdir=${below(input.work)}`, links };
}

/** Mounts the overlay at `target`, its lower dirs linked from `linkDir` (made afresh; its parent is the cwd of the options). */
export async function mountOverlay(input: {
  lowerDirs: readonly string[];
  upper: string;
  work: string;
  target: string;
  linkDir: string;
}): Promise<void> {
  if (await isMounted(input.target)) return;
  const cwd = path.dirname(input.linkDir);
  const { options, links } = overlayOptions({ ...input, cwd, linkDirName: path.basename(input.linkDir) });
  await rm(input.linkDir, { recursive: true, force: true });
  await mkdir(input.linkDir, { mode: 0o700 });
  for (const link of links) await symlink(link.target, path.join(input.linkDir, link.name));
  await runOrFail(
    "mounting the overlay rootfs",
    TOOLS.mount,
    ["-t", "overlay", "overlay", "-o", options, input.target],
    {
      cwd,
    },
  );
}

/**
 * The options of a read-only overlay of `<linkDirName>/0` (the source) over `<linkDirName>/1`
 * (an empty dir: without an upper dir overlayfs needs two lower dirs). Relative to the
 * parent of the link dir, so the sandbox's mountinfo names no host path.
 */
export function readOnlyViewOptions(linkDirName: string): string {
  if (!/^[A-Za-z0-9._-]+$/.test(linkDirName)) throw new RuntimeError("host_failure", "bad view link dir name");
  return `ro,lowerdir=${linkDirName}/0:${linkDirName}/1`;
}

/**
 * Shows the host directory `source` read-only at `target` through overlayfs. A bind mount
 * shows the sandbox its source's path on the host filesystem (mountinfo's root field: the data
 * dir, the volume cache entry); a bind of this overlay's root shows `/`, and its options only
 * the short relative links, as the rootfs's do (overlayOptions).
 */
export async function mountReadOnlyView(input: {
  source: string;
  target: string;
  linkDir: string;
  empty: string;
}): Promise<void> {
  if (await isMounted(input.target)) return;
  const options = readOnlyViewOptions(path.basename(input.linkDir));
  await mkdir(input.empty, { recursive: true, mode: 0o755 });
  await mkdir(input.target, { recursive: true, mode: 0o700 });
  await rm(input.linkDir, { recursive: true, force: true });
  await mkdir(input.linkDir, { mode: 0o700 });
  await symlink(input.source, path.join(input.linkDir, "0"));
  await symlink(input.empty, path.join(input.linkDir, "1"));
  await runOrFail("mounting a read-only view", TOOLS.mount, ["-t", "overlay", "overlay", "-o", options, input.target], {
    cwd: path.dirname(input.linkDir),
  });
}

/**
 * A sandbox's mounts as it binds them: each read-only one through its overlay view under
 * `viewsDir` (mounted here if it is not), so the sandbox's mountinfo names no host path (the
 * volume cache's). A read-write mount stays a plain bind (only tests make one).
 */
export async function mountViews(mounts: readonly SandboxMount[], viewsDir: string): Promise<SandboxMount[]> {
  const views: SandboxMount[] = [];
  for (const [index, mount] of mounts.entries()) {
    if (!mount.readOnly) {
      views.push(mount);
      continue;
    }
    const target = path.join(viewsDir, String(index));
    await mountReadOnlyView({
      source: mount.source,
      target,
      linkDir: path.join(viewsDir, `l${index}`),
      empty: path.join(viewsDir, "empty"),
    });
    views.push({ ...mount, source: target });
  }
  return views;
}

/** Unmounts everything at or below `dir`, deepest first; a busy mount is detached lazily. */
export async function unmountUnder(dir: string): Promise<void> {
  for (const point of mountsUnder(await readMounts(), dir)) {
    try {
      await run(TOOLS.umount, [point]);
    } catch {
      await run(TOOLS.umount, ["-l", point]).catch(() => undefined);
    }
  }
  const left = mountsUnder(await readMounts(), dir);
  if (left.length > 0) throw new RuntimeError("host_failure", `could not unmount ${left.join(", ")}`);
}

/** The loop device backing `image`, from sysfs (no shell). */
export async function loopDeviceOf(image: string): Promise<string | null> {
  for (const name of await readdir("/sys/block").catch(() => [] as string[])) {
    if (!name.startsWith("loop")) continue;
    const backing = await readFile(`/sys/block/${name}/loop/backing_file`, "utf8").catch(() => "");
    if (backing.trim() === image) return `/dev/${name}`;
  }
  return null;
}

/**
 * Waits until no loop device backs `image`. `mount -o loop` sets autoclear, so the device goes
 * once the last mount of it does, and a stopped sandbox's mount namespace (which holds a bind
 * of the workspace) is torn down by the kernel a moment after its last process is reaped.
 */
export async function awaitLoopReleased(image: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 5; ; delay = Math.min(200, delay * 2)) {
    const device = await loopDeviceOf(image);
    if (!device) return;
    if (Date.now() >= deadline) {
      throw new RuntimeError("host_failure", `${image} is still attached to ${device}; try again shortly`);
    }
    await sleep(delay);
  }
}
