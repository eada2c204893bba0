// CPU fairness between organizations (issue 24 A9). Every sandbox's cgroup is a sibling under
// the root's parent (`/warren/<tag>/<id>`): a pooled sandbox gets its cgroup when runc starts
// it, before it has an organization, and a cgroup cannot move to another parent, so there is
// no organization level in the tree. Instead each running sandbox's weight (cpu.shares on a
// v1 cpu hierarchy, cpu.weight on cgroup2) is recomputed on every start, stop, exit and claim
// so that each organization's running sandboxes add up to the same total: its share split by
// cpu_millis. `cpuWeights` is that rule, pure; `CpuFairness` reads and writes the cgroups.
import { readdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { type CgroupHierarchy, hostCgroupHierarchies } from "./cgroups.js";
import { isSandboxId } from "./layout.js";

export interface WeightScale {
  /** What every group's running sandboxes add up to. */
  perGroup: number;
  /** The kernel's bounds of one cgroup's weight. */
  min: number;
  max: number;
}

/** cgroup v1 `cpu.shares` takes 2 to 262144; cgroup2 `cpu.weight` 1 to 10000. */
export const V1_SHARES: WeightScale = { perGroup: 262_144, min: 2, max: 262_144 };
export const V2_WEIGHT: WeightScale = { perGroup: 10_000, min: 1, max: 10_000 };

export interface RunningSandbox {
  id: string;
  /** The fairness group: the organization; "" for a sandbox that has none (a pooled one not yet claimed). */
  group: string;
  cpuMillis: number;
}

/**
 * Each sandbox's weight: `perGroup x cpuMillis / (its group's cpuMillis)`, rounded and held
 * within the kernel's bounds. Every group then weighs the same whatever its number of
 * sandboxes, and within a group a sandbox weighs by what it asked for. A cpuMillis that is not
 * a positive finite number counts as 1 (never a division by zero or a NaN written to the kernel).
 */
export function cpuWeights(sandboxes: readonly RunningSandbox[], scale: WeightScale): Map<string, number> {
  const millisOf = (s: RunningSandbox) => (Number.isFinite(s.cpuMillis) && s.cpuMillis > 0 ? s.cpuMillis : 1);
  const groupMillis = new Map<string, number>();
  for (const s of sandboxes) groupMillis.set(s.group, (groupMillis.get(s.group) ?? 0) + millisOf(s));
  const weights = new Map<string, number>();
  for (const s of sandboxes) {
    const raw = (scale.perGroup * millisOf(s)) / (groupMillis.get(s.group) as number);
    weights.set(s.id, Math.min(scale.max, Math.max(scale.min, Math.round(raw))));
  }
  return weights;
}

/** Where this host keeps CPU weights: the v1 cpu hierarchy, or cgroup2 when it has the cpu controller. */
export interface WeightFile {
  mountPoint: string;
  file: "cpu.shares" | "cpu.weight";
  scale: WeightScale;
}

export async function weightFileOf(hierarchies: readonly CgroupHierarchy[]): Promise<WeightFile | null> {
  const v1 = hierarchies.find((h) => h.controllers.includes("cpu"));
  if (v1) return { mountPoint: v1.mountPoint, file: "cpu.shares", scale: V1_SHARES };
  const v2 = hierarchies.find((h) => h.controllers.includes("unified"));
  if (!v2) return null;
  const controllers = await readFile(path.join(v2.mountPoint, "cgroup.controllers"), "utf8").catch(() => "");
  return controllers.split(/\s+/).includes("cpu")
    ? { mountPoint: v2.mountPoint, file: "cpu.weight", scale: V2_WEIGHT }
    : null;
}

/** What a sandbox's weight is computed from, by id (the driver's records). */
export type SandboxShare = (id: string) => Promise<{ group: string; cpuMillis: number } | null>;

/**
 * Applies `cpuWeights` to the running sandboxes under `cgroupParent`: those whose cgroup in
 * the cpu hierarchy holds a process. Runs are coalesced: a rebalance asked for while one is
 * under way runs once more after it, so the last one sees the last change.
 */
export class CpuFairness {
  private running: Promise<void> | null = null;
  private again = false;

  constructor(
    private readonly cgroupParent: string,
    private readonly shareOf: SandboxShare,
    private readonly onError: (error: unknown) => void = () => undefined,
  ) {}

  /** Resolves once a rebalance that started after this call has finished. */
  rebalance(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.applyOnce().catch(this.onError);
        } while (this.again);
      } finally {
        this.running = null;
      }
    })();
    return this.running;
  }

  /** The weight each running sandbox has now, by id (tests and diagnostics). */
  async currentWeights(): Promise<Map<string, number>> {
    const target = await weightFileOf(await hostCgroupHierarchies());
    const weights = new Map<string, number>();
    if (!target) return weights;
    for (const id of await this.runningIds(target)) {
      const text = await readFile(path.join(target.mountPoint, this.cgroupParent, id, target.file), "utf8").catch(
        () => "",
      );
      if (text.trim() !== "") weights.set(id, Number(text.trim()));
    }
    return weights;
  }

  private async applyOnce(): Promise<void> {
    const target = await weightFileOf(await hostCgroupHierarchies());
    if (!target) return;
    const sandboxes: RunningSandbox[] = [];
    for (const id of await this.runningIds(target)) {
      const share = await this.shareOf(id);
      if (share) sandboxes.push({ id, ...share });
    }
    for (const [id, weight] of cpuWeights(sandboxes, target.scale)) {
      await writeFile(path.join(target.mountPoint, this.cgroupParent, id, target.file), String(weight)).catch(
        (error: NodeJS.ErrnoException) => {
          // The sandbox ended and runc removed its cgroup meanwhile: the next rebalance has it gone.
          if (error.code !== "ENOENT") throw error;
        },
      );
    }
  }

  private async runningIds(target: WeightFile): Promise<string[]> {
    const parent = path.join(target.mountPoint, this.cgroupParent);
    const ids: string[] = [];
    for (const entry of await readdir(parent, { withFileTypes: true }).catch(() => [])) {
      if (!entry.isDirectory() || !isSandboxId(entry.name)) continue;
      const procs = await readFile(path.join(parent, entry.name, "cgroup.procs"), "utf8").catch(() => "");
      if (procs.trim() !== "") ids.push(entry.name);
    }
    return ids;
  }
}
