// Cgroups of sandboxes. runc creates and removes them from config.json's limits; this module
// finds them on the host (v1, v2 or the hybrid of both), reads OOM kill counters, and
// removes what a crash left behind; and freezes a sandbox for the instant of a snapshot.
import { readdir, readFile, rmdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { RuntimeError } from "../interface.js";
import { type MountInfo, readMounts } from "./mounts.js";

export interface CgroupHierarchy {
  mountPoint: string;
  /** `unified` for cgroup2; the controllers (or `name=...`) of a v1 hierarchy. */
  controllers: string[];
}

/** The cgroup hierarchies mounted on the host, from mountinfo entries. */
export function cgroupHierarchies(mounts: readonly MountInfo[], superOptions: Map<string, string>): CgroupHierarchy[] {
  const hierarchies: CgroupHierarchy[] = [];
  for (const mount of mounts) {
    if (mount.root !== "/") continue;
    if (mount.fsType === "cgroup2") hierarchies.push({ mountPoint: mount.mountPoint, controllers: ["unified"] });
    else if (mount.fsType === "cgroup") {
      const options = (superOptions.get(mount.mountPoint) ?? "").split(",");
      const controllers = options.filter((o) => o !== "rw" && o !== "ro" && !o.startsWith("release_agent"));
      hierarchies.push({ mountPoint: mount.mountPoint, controllers });
    }
  }
  return hierarchies;
}

/** Super options (the last mountinfo field) per mount point: v1 hierarchies name their controllers there. */
export function superOptionsByMountPoint(mountInfoText: string): Map<string, string> {
  const result = new Map<string, string>();
  for (const line of mountInfoText.split("\n")) {
    const fields = line.split(" ");
    const separator = fields.indexOf("-", 6);
    if (separator === -1) continue;
    result.set(fields[4] ?? "", fields[separator + 3] ?? "");
  }
  return result;
}

let cached: Promise<CgroupHierarchy[]> | null = null;

export function hostCgroupHierarchies(): Promise<CgroupHierarchy[]> {
  cached ??= (async () => {
    const text = await readFile("/proc/self/mountinfo", "utf8");
    return cgroupHierarchies(await readMounts(), superOptionsByMountPoint(text));
  })();
  return cached;
}

/** The directories of cgroup path `cgroupPath` (absolute, e.g. `/warren/ab12cd/sbx-1`) in every hierarchy. */
export async function cgroupDirs(cgroupPath: string): Promise<string[]> {
  return (await hostCgroupHierarchies()).map((h) => path.join(h.mountPoint, cgroupPath));
}

/**
 * The file whose `oom_kill N` line counts OOM kills in the cgroup: memory.oom_control on a
 * v1 memory hierarchy, memory.events on cgroup2 (when it has the memory controller).
 */
export async function oomCounterFile(cgroupPath: string): Promise<string | null> {
  const hierarchies = await hostCgroupHierarchies();
  const v1 = hierarchies.find((h) => h.controllers.includes("memory"));
  if (v1) return path.join(v1.mountPoint, cgroupPath, "memory.oom_control");
  const v2 = hierarchies.find((h) => h.controllers.includes("unified"));
  if (!v2) return null;
  const controllers = await readFile(path.join(v2.mountPoint, "cgroup.controllers"), "utf8").catch(() => "");
  return controllers.split(/\s+/).includes("memory") ? path.join(v2.mountPoint, cgroupPath, "memory.events") : null;
}

export function parseOomKills(text: string): number {
  const match = /^oom_kill (\d+)$/m.exec(text);
  return match ? Number(match[1]) : 0;
}

export async function readOomKills(cgroupPath: string): Promise<number> {
  const file = await oomCounterFile(cgroupPath);
  return file ? parseOomKills(await readFile(file, "utf8").catch(() => "")) : 0;
}

/** Removes the cgroup (and empty children) in every hierarchy; a cgroup with processes stays. */
export async function removeCgroup(cgroupPath: string): Promise<string[]> {
  const left: string[] = [];
  const remove = async (dir: string): Promise<void> => {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => null);
    if (!entries) return;
    for (const entry of entries) if (entry.isDirectory()) await remove(path.join(dir, entry.name));
    await rmdir(dir).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "ENOENT") left.push(dir);
    });
  };
  for (const dir of await cgroupDirs(cgroupPath)) await remove(dir);
  return left;
}

/** Names of child cgroups under `cgroupPath` in any hierarchy. */
export async function childCgroups(cgroupPath: string): Promise<string[]> {
  const names = new Set<string>();
  for (const dir of await cgroupDirs(cgroupPath)) {
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      if (entry.isDirectory()) names.add(entry.name);
    }
  }
  return [...names];
}

/**
 * How the cgroup's processes are frozen: the v1 freezer controller where the host mounts one
 * (runc puts every sandbox there), cgroup v2's core `cgroup.freeze` otherwise.
 */
async function freezerOf(cgroupPath: string): Promise<{ kind: "v1" | "v2"; dir: string } | null> {
  const hierarchies = await hostCgroupHierarchies();
  const v1 = hierarchies.find((h) => h.controllers.includes("freezer"));
  if (v1) return { kind: "v1", dir: path.join(v1.mountPoint, cgroupPath) };
  const v2 = hierarchies.find((h) => h.controllers.includes("unified"));
  return v2 ? { kind: "v2", dir: path.join(v2.mountPoint, cgroupPath) } : null;
}

async function isFrozen(freezer: { kind: "v1" | "v2"; dir: string }): Promise<boolean> {
  if (freezer.kind === "v1")
    return (await readFile(path.join(freezer.dir, "freezer.state"), "utf8")).trim() === "FROZEN";
  return /^frozen 1$/m.test(await readFile(path.join(freezer.dir, "cgroup.events"), "utf8"));
}

/**
 * The freezer's view of the cgroup: FROZEN, FREEZING (asked, not every task frozen yet) or
 * THAWED; null when the cgroup or the freezer is missing. Tests read it after a crash.
 */
export async function freezerState(cgroupPath: string): Promise<"THAWED" | "FREEZING" | "FROZEN" | null> {
  const freezer = await freezerOf(cgroupPath);
  if (!freezer) return null;
  try {
    if (freezer.kind === "v1") {
      const state = (await readFile(path.join(freezer.dir, "freezer.state"), "utf8")).trim();
      return state === "FROZEN" || state === "FREEZING" ? state : "THAWED";
    }
    const asked = (await readFile(path.join(freezer.dir, "cgroup.freeze"), "utf8")).trim() === "1";
    if (await isFrozen(freezer)) return "FROZEN";
    return asked ? "FREEZING" : "THAWED";
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
}

/**
 * Freezes every process of the cgroup and resolves once all are frozen (a task in an
 * uninterruptible wait delays that). RuntimeError host_failure after `timeoutMs`; the
 * caller thaws in any case.
 */
export async function freezeCgroup(cgroupPath: string, timeoutMs = 10_000): Promise<void> {
  const freezer = await freezerOf(cgroupPath);
  if (!freezer) throw new RuntimeError("host_failure", "this host has no cgroup freezer");
  try {
    if (freezer.kind === "v1") await writeFile(path.join(freezer.dir, "freezer.state"), "FROZEN");
    else await writeFile(path.join(freezer.dir, "cgroup.freeze"), "1");
  } catch (error) {
    throw new RuntimeError("host_failure", `freezing cgroup ${cgroupPath}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const deadline = Date.now() + timeoutMs;
  for (let delay = 1; !(await isFrozen(freezer)); delay = Math.min(20, delay * 2)) {
    if (Date.now() > deadline) throw new RuntimeError("host_failure", `cgroup ${cgroupPath} did not freeze`);
    await sleep(delay);
  }
}

/** Thaws the cgroup; one that is gone or not frozen is fine. */
export async function thawCgroup(cgroupPath: string): Promise<void> {
  const freezer = await freezerOf(cgroupPath);
  if (!freezer) return;
  const [file, value] = freezer.kind === "v1" ? ["freezer.state", "THAWED"] : ["cgroup.freeze", "0"];
  await writeFile(path.join(freezer.dir, file), value).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== "ENOENT") throw error;
  });
}

/**
 * CPU time the cgroup's processes have used, in microseconds: cpuacct.usage (ns) on a v1
 * cpuacct hierarchy, cpu.stat's usage_usec on cgroup2. Null when the cgroup is gone.
 */
export async function cpuUsageMicros(cgroupPath: string): Promise<number | null> {
  const hierarchies = await hostCgroupHierarchies();
  const v1 = hierarchies.find((h) => h.controllers.includes("cpuacct"));
  if (v1) {
    const text = await readFile(path.join(v1.mountPoint, cgroupPath, "cpuacct.usage"), "utf8").catch(() => null);
    return text === null ? null : Math.floor(Number(text.trim()) / 1000);
  }
  const v2 = hierarchies.find((h) => h.controllers.includes("unified"));
  if (!v2) return null;
  const text = await readFile(path.join(v2.mountPoint, cgroupPath, "cpu.stat"), "utf8").catch(() => null);
  const match = text === null ? null : /^usage_usec (\d+)$/m.exec(text);
  return match ? Number(match[1]) : null;
}
