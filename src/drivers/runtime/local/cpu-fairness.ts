// CPU fairness between organizations (issue 24 A9). Every sandbox's cgroup is a sibling under
// the root's parent (`/warren/<tag>/<id>`): a pooled sandbox gets its cgroup when runc starts
// it, before it has an organization, and a cgroup cannot move to another parent, so there is
// no organization level in the tree. Instead each running sandbox's weight (cpu.shares on a
// v1 cpu hierarchy, cpu.weight on cgroup2) is recomputed on every start, stop, exit and claim
// (and every few seconds) so that each organization's busy sandboxes add up to the same
// total: its share split by cpu_millis. Only busy ones count, as a level in the tree would
// count only runnable children: an organization's idle sandboxes must not thin out the share
// of its busy one. `cpuWeights` and `isBusy` are the rules, pure; `CpuFairness` samples and
// writes the cgroups.
import { readdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { type CgroupHierarchy, cpuUsageMicros, hostCgroupHierarchies } from "./cgroups.js";
import { isSandboxId, type Layout } from "./layout.js";
import { loadRecord } from "./records.js";

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
  /** Used CPU in the last sample (isBusy). */
  busy: boolean;
}

/**
 * Each sandbox's weight. In a group with busy sandboxes, a busy one gets `perGroup x
 * cpuMillis / (the group's busy cpuMillis)`, so the busy ones add up to the group's share
 * whatever its number of sandboxes; an idle one gets what it would have if it woke now
 * (`perGroup x cpuMillis / (busy cpuMillis + its own)`), until the next sample counts it. In a
 * group with none busy, every sandbox weighs as if all were. Rounded, held within the
 * kernel's bounds. A cpuMillis that is not a positive finite number counts as 1 (never a
 * division by zero or a NaN written to the kernel).
 */
export function cpuWeights(sandboxes: readonly RunningSandbox[], scale: WeightScale): Map<string, number> {
  const millisOf = (s: RunningSandbox) => (Number.isFinite(s.cpuMillis) && s.cpuMillis > 0 ? s.cpuMillis : 1);
  const busyMillis = new Map<string, number>();
  const allMillis = new Map<string, number>();
  for (const s of sandboxes) {
    allMillis.set(s.group, (allMillis.get(s.group) ?? 0) + millisOf(s));
    if (s.busy) busyMillis.set(s.group, (busyMillis.get(s.group) ?? 0) + millisOf(s));
  }
  const weights = new Map<string, number>();
  for (const s of sandboxes) {
    const busy = busyMillis.get(s.group) ?? 0;
    const among = busy === 0 ? (allMillis.get(s.group) as number) : s.busy ? busy : busy + millisOf(s);
    const raw = (scale.perGroup * millisOf(s)) / among;
    weights.set(s.id, Math.min(scale.max, Math.max(scale.min, Math.round(raw))));
  }
  return weights;
}

/**
 * A sandbox used at least this part of one CPU since its last sample: busy. Low, since under
 * contention a busy sandbox gets little; a runnable task counts busy whatever it got.
 */
export const BUSY_CPU_FRACTION = 0.01;
/** A sample is compared with one at least this old; events closer together keep the older baseline. */
export const MIN_SAMPLE_MS = 500;
/** Tasks of one sandbox looked at for a runnable one per sample (a sandbox may have thousands). */
export const MAX_TASKS_CHECKED = 64;

export interface UsageSample {
  usageMicros: number;
  atMs: number;
  busy: boolean;
}

/**
 * The next sample of a sandbox from the last one kept, its usage now and whether one of its
 * tasks is runnable now. Busy when a task is runnable (it wants a CPU, however little it got
 * under contention) or it used BUSY_CPU_FRACTION of a CPU since the baseline; a sandbox seen
 * for the first time, or whose usage went back (a new run, a new cgroup), counts busy: it is
 * starting. Within MIN_SAMPLE_MS of the baseline the baseline stays, and so does the verdict
 * unless a task is runnable.
 */
export function isBusy(
  previous: UsageSample | undefined,
  usageMicros: number,
  atMs: number,
  runnable: boolean,
): UsageSample {
  if (!previous || usageMicros < previous.usageMicros) return { usageMicros, atMs, busy: true };
  const elapsedMs = atMs - previous.atMs;
  if (elapsedMs < MIN_SAMPLE_MS) return runnable && !previous.busy ? { ...previous, busy: true } : previous;
  const busy = runnable || usageMicros - previous.usageMicros >= BUSY_CPU_FRACTION * elapsedMs * 1000;
  return { usageMicros, atMs, busy };
}

/** Whether a /proc/<tid>/stat line is of a task running or waiting for a CPU (state R). */
export function statIsRunnable(stat: string): boolean {
  // The state follows the command name, which is in parentheses and may hold any byte.
  const end = stat.lastIndexOf(")");
  return end !== -1 && stat.slice(end + 2, end + 3) === "R";
}

/** Where this host keeps CPU weights: the v1 cpu hierarchy, or cgroup2 when it has the cpu controller. */
export interface WeightFile {
  mountPoint: string;
  file: "cpu.shares" | "cpu.weight";
  /** The cgroup's threads. */
  tasks: "tasks" | "cgroup.threads";
  scale: WeightScale;
}

export async function weightFileOf(hierarchies: readonly CgroupHierarchy[]): Promise<WeightFile | null> {
  const v1 = hierarchies.find((h) => h.controllers.includes("cpu"));
  if (v1) return { mountPoint: v1.mountPoint, file: "cpu.shares", tasks: "tasks", scale: V1_SHARES };
  const v2 = hierarchies.find((h) => h.controllers.includes("unified"));
  if (!v2) return null;
  const controllers = await readFile(path.join(v2.mountPoint, "cgroup.controllers"), "utf8").catch(() => "");
  return controllers.split(/\s+/).includes("cpu")
    ? { mountPoint: v2.mountPoint, file: "cpu.weight", tasks: "cgroup.threads", scale: V2_WEIGHT }
    : null;
}

/** What a sandbox's weight is computed from, by id (the driver's records). */
export type SandboxShare = (id: string) => Promise<{ group: string; cpuMillis: number } | null>;

/** SandboxShare from the driver's records; cpuMillis held to the host's, as its quota is (cgroupResources). */
export function recordShares(layout: Layout, hostCpuMillis: () => number): SandboxShare {
  return async (id) => {
    const { record } = await loadRecord(layout, id).catch(() => ({ record: null }));
    if (!record) return null;
    return { group: record.cpuGroup ?? "", cpuMillis: Math.min(record.resources.cpuMillis, hostCpuMillis()) };
  };
}

/**
 * Applies `cpuWeights` to the running sandboxes under `cgroupParent`: those whose cgroup in
 * the cpu hierarchy holds a process. Runs are coalesced: a rebalance asked for while one is
 * under way runs once more after it, so the last one sees the last change. Between events a
 * timer samples every `intervalMs`, so a sandbox going busy or idle is counted.
 */
export class CpuFairness {
  private running: Promise<void> | null = null;
  private again = false;
  private timer: NodeJS.Timeout | null = null;
  private readonly samples = new Map<string, UsageSample>();
  private readonly shares = new Map<string, { group: string; cpuMillis: number }>();
  private target: WeightFile | null = null;

  constructor(
    private readonly cgroupParent: string,
    private readonly shareOf: SandboxShare,
    private readonly onError: (error: unknown) => void = () => undefined,
    private readonly intervalMs = 2000,
  ) {}

  /** Starts the periodic sample (unreferenced: it never keeps the process alive). */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.rebalance(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** The sandbox's group or resources changed (a claim) or it is gone: read its record again. */
  forget(id: string): void {
    this.shares.delete(id);
  }

  /** Resolves when no rebalance is under way (close). */
  async idle(): Promise<void> {
    await this.running;
  }

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
    this.target ??= await weightFileOf(await hostCgroupHierarchies());
    const target = this.target;
    if (!target) return;
    const sandboxes: RunningSandbox[] = [];
    const seen = new Set<string>();
    for (const id of await this.runningIds(target)) {
      seen.add(id);
      const share = this.shares.get(id) ?? (await this.shareOf(id));
      const usage = await cpuUsageMicros(path.posix.join(this.cgroupParent, id));
      if (!share || usage === null) continue;
      this.shares.set(id, share);
      const previous = this.samples.get(id);
      const now = Date.now();
      let sample = isBusy(previous, usage, now, false);
      // Its tasks are looked at only when its CPU time does not already say busy.
      if (!sample.busy && (await this.hasRunnableTask(target, id))) sample = isBusy(previous, usage, now, true);
      this.samples.set(id, sample);
      sandboxes.push({ id, ...share, busy: sample.busy });
    }
    for (const id of [...this.samples.keys()]) if (!seen.has(id)) this.samples.delete(id);
    for (const id of [...this.shares.keys()]) if (!seen.has(id)) this.shares.delete(id);
    for (const [id, weight] of cpuWeights(sandboxes, target.scale)) {
      // Written every time, unchanged or not: whatever else set the file is corrected within an interval.
      await writeFile(path.join(target.mountPoint, this.cgroupParent, id, target.file), String(weight)).catch(
        (error: NodeJS.ErrnoException) => {
          // The sandbox ended and runc removed its cgroup meanwhile: the next rebalance has it gone.
          if (error.code !== "ENOENT") throw error;
        },
      );
    }
  }

  private async hasRunnableTask(target: WeightFile, id: string): Promise<boolean> {
    const tasks = await readFile(path.join(target.mountPoint, this.cgroupParent, id, target.tasks), "utf8").catch(
      () => "",
    );
    for (const tid of tasks.split("\n").slice(0, MAX_TASKS_CHECKED)) {
      if (!/^\d+$/.test(tid)) continue;
      if (statIsRunnable(await readFile(`/proc/${tid}/stat`, "utf8").catch(() => ""))) return true;
    }
    return false;
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
