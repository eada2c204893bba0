// CPU accounting from /proc (Linux): how much of the machine the server, the load generator
// and the database used during a run, and how much went to anything else on the machine
// (a busy neighbour makes a run unrepresentative, so it is recorded with the numbers).
import { readdirSync, readFileSync } from "node:fs";

const TICKS_PER_SEC = 100; // USER_HZ on Linux

function procTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime and stime are fields 14 and 15 of stat; fields[] starts at field 3.
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

function machineTicks(): { busy: number; total: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "";
  const values = line.trim().split(/\s+/).slice(1).map(Number);
  const total = values.reduce((a, b) => a + b, 0);
  const idle = (values[3] ?? 0) + (values[4] ?? 0);
  return { busy: total - idle, total };
}

/** Pids of a PostgreSQL cluster: the postmaster listening on `port` and its children. */
export function postgresPids(port: number): number[] {
  const entries = readdirSync("/proc").filter((name) => /^\d+$/.test(name));
  let postmaster = -1;
  const parents = new Map<number, number>();
  for (const name of entries) {
    const pid = Number(name);
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      if (!stat.includes("(postgres)")) continue;
      parents.set(pid, Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
      if (cmdline.includes(`-p ${port} `)) postmaster = pid;
    } catch {
      // gone meanwhile
    }
  }
  if (postmaster < 0) return [];
  return [postmaster, ...[...parents].filter(([, ppid]) => ppid === postmaster).map(([pid]) => pid)];
}

export interface CpuUsage {
  /** Share of one core, in percent (100 = one core fully busy). */
  serverPct: number;
  loadgenPct: number;
  dbPct: number;
  /** Everything else on the machine, in percent of one core. */
  otherPct: number;
  /** The whole machine, in percent of all cores. */
  machineBusyPct: number;
}

export interface CpuSampler {
  stop(): CpuUsage;
}

export function sampleCpu(groups: { server: number; loadgen: number; db: () => number[] }): CpuSampler {
  const dbPids = groups.db();
  const start = {
    machine: machineTicks(),
    server: procTicks(groups.server),
    loadgen: procTicks(groups.loadgen),
    db: dbPids.reduce((sum, pid) => sum + procTicks(pid), 0),
    at: performance.now(),
  };
  return {
    stop: () => {
      const seconds = (performance.now() - start.at) / 1000;
      const machine = machineTicks();
      // Backends that started during the run count from zero.
      const db = groups.db().reduce((sum, pid) => sum + procTicks(pid), 0) - start.db;
      const pct = (ticks: number) => Math.max(0, (ticks / TICKS_PER_SEC / seconds) * 100);
      const serverPct = pct(procTicks(groups.server) - start.server);
      const loadgenPct = pct(procTicks(groups.loadgen) - start.loadgen);
      const dbPct = pct(db);
      const machineBusy = machine.busy - start.machine.busy;
      const machineAll = machine.total - start.machine.total;
      const machinePctOfOneCore = pct(machineBusy);
      return {
        serverPct,
        loadgenPct,
        dbPct,
        otherPct: Math.max(0, machinePctOfOneCore - serverPct - loadgenPct - dbPct),
        machineBusyPct: machineAll > 0 ? (machineBusy / machineAll) * 100 : 0,
      };
    },
  };
}

/** Percent of one core used by everything on the machine over `ms` (a quietness check). */
export async function machineLoad(ms: number): Promise<number> {
  const a = machineTicks();
  await new Promise((resolve) => setTimeout(resolve, ms));
  const b = machineTicks();
  return ((b.busy - a.busy) / TICKS_PER_SEC / (ms / 1000)) * 100;
}

/** Other processes above this share of one core make a machine busy and a run disturbed. */
export const QUIET_PCT = 25;

/** Waits (up to `waitSec` seconds) until the machine is quiet; returns the last reading. */
export async function awaitQuiet(waitSec: number, log: (line: string) => void): Promise<number> {
  const deadline = performance.now() + waitSec * 1000;
  let busy = await machineLoad(1000);
  while (busy > QUIET_PCT && performance.now() < deadline) {
    log(`machine busy (${busy.toFixed(0)}% of one core from other processes); waiting`);
    busy = await machineLoad(2000);
  }
  return busy;
}

/**
 * Waits for a load run of `seconds` and samples CPU inside it (1 s after start to 1 s before
 * the end), while both processes are alive and the load is steady.
 */
export async function cpuDuring<T>(
  groups: { server: number; loadgen: number; db: () => number[] },
  seconds: number,
  done: Promise<T>,
): Promise<{ result: T; cpu: CpuUsage }> {
  const margin = Math.min(1000, (seconds * 1000) / 4);
  const cpu = new Promise<CpuUsage>((resolve) => {
    setTimeout(() => {
      const sampler = sampleCpu(groups);
      setTimeout(() => resolve(sampler.stop()), seconds * 1000 - 2 * margin);
    }, margin);
  });
  const [result, usage] = await Promise.all([done, cpu]);
  return { result, cpu: usage };
}

/**
 * Makes a measured run, each attempt after waiting for a quiet machine; an attempt during
 * which other processes took more than QUIET_PCT of a core is repeated (up to `retries`
 * times) and the least disturbed attempt is kept, with the machine reading before it.
 */
export async function leastDisturbed<R extends { cpu: CpuUsage }>(
  opts: { retries: number; quietWaitSec: number; log: (line: string) => void; label: string },
  attempt: () => Promise<R>,
): Promise<{ kept: R & { busyBeforePct: number }; attempts: number }> {
  let kept: (R & { busyBeforePct: number }) | null = null;
  let attempts = 0;
  while (attempts <= opts.retries) {
    attempts++;
    const busyBeforePct = await awaitQuiet(opts.quietWaitSec, opts.log);
    const run = await attempt();
    if (!kept || run.cpu.otherPct < kept.cpu.otherPct) kept = { ...run, busyBeforePct };
    if (run.cpu.otherPct <= QUIET_PCT) break;
    opts.log(`${opts.label}: other processes took ${run.cpu.otherPct.toFixed(0)}% of a core; repeating`);
  }
  if (!kept) throw new Error("no run was made");
  return { kept, attempts };
}
