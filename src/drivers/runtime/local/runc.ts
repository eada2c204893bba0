// What runc knows about a container, read straight from its state file and /proc (no runc
// process per observation), and the few runc commands the driver needs outside a start.
import { closeSync, openSync, readSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import path from "node:path";
import { run, TOOLS } from "./host.js";

export interface RuncState {
  initPid: number;
  /** Start time of the init process in clock ticks (field 22 of /proc/<pid>/stat), against PID reuse. */
  initStart: number;
}

export async function readRuncState(runcRoot: string, id: string): Promise<RuncState | null> {
  try {
    const doc = JSON.parse(await readFile(path.join(runcRoot, id, "state.json"), "utf8")) as {
      init_process_pid?: number;
      init_process_start?: number;
    };
    return { initPid: doc.init_process_pid ?? 0, initStart: doc.init_process_start ?? 0 };
  } catch {
    return null;
  }
}

/** `state` and `starttime` from the text of /proc/<pid>/stat (the command name may hold spaces and parens). */
export function parseProcStat(text: string): { state: string; startTime: number } | null {
  const close = text.lastIndexOf(")");
  if (close === -1) return null;
  const fields = text
    .slice(close + 2)
    .trim()
    .split(" ");
  // fields[0] is field 3 (state); starttime is field 22.
  const state = fields[0];
  const startTime = Number(fields[19]);
  if (!state || !Number.isFinite(startTime)) return null;
  return { state, startTime };
}

/** True when the container's init still runs (not gone, not a zombie, not a reused PID). */
export async function isInitAlive(state: RuncState): Promise<boolean> {
  if (state.initPid <= 0) return false;
  const text = await readFile(`/proc/${state.initPid}/stat`, "utf8").catch(() => null);
  const stat = text ? parseProcStat(text) : null;
  return stat !== null && stat.state !== "Z" && stat.state !== "X" && stat.startTime === state.initStart;
}

/**
 * A run's init, held open for repeated liveness checks on the exec path: /proc/<pid>/stat is
 * opened once and re-read in place (one pread, no thread pool). The open file belongs to the
 * process, not to its PID: once the process is reaped every read fails (ESRCH), even if the
 * PID is reused, so only the first read has to compare the start time.
 */
export class InitHandle {
  private readonly buffer = Buffer.alloc(1024);

  private constructor(private fd: number | null) {}

  /** A handle on the init `state` names, or null when that process is not alive. */
  static open(state: RuncState): InitHandle | null {
    if (state.initPid <= 0) return null;
    let fd: number;
    try {
      fd = openSync(`/proc/${state.initPid}/stat`, "r");
    } catch {
      return null;
    }
    const handle = new InitHandle(fd);
    const stat = handle.read();
    if (stat?.startTime === state.initStart && handle.aliveIn(stat)) return handle;
    handle.close();
    return null;
  }

  /** Not gone, not a zombie; false for good once it was false (the file is closed). */
  alive(): boolean {
    const stat = this.read();
    if (stat && this.aliveIn(stat)) return true;
    this.close();
    return false;
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private aliveIn(stat: { state: string }): boolean {
    return stat.state !== "Z" && stat.state !== "X";
  }

  private read(): { state: string; startTime: number } | null {
    if (this.fd === null) return null;
    try {
      const length = readSync(this.fd, this.buffer, 0, this.buffer.length, 0);
      return parseProcStat(this.buffer.toString("latin1", 0, length));
    } catch {
      return null;
    }
  }
}

export function runcArgs(runcRoot: string, ...args: string[]): string[] {
  return ["--root", runcRoot, ...args];
}

/** One `runc exec` of a process spec file: its files in `dir` (spec, JSON log, pid) and argv. */
export interface RuncExecCall {
  processFile: string;
  logFile: string;
  pidFile: string;
  args: string[];
}

export function runcExecCall(
  runcRoot: string,
  id: string,
  dir: string,
  name: string,
  options: { detach?: boolean } = {},
): RuncExecCall {
  const processFile = path.join(dir, `${name}.json`);
  const logFile = path.join(dir, `${name}.log`);
  const pidFile = path.join(dir, `${name}.pid`);
  const detach = options.detach ? ["--detach"] : [];
  const args = runcArgs(runcRoot, "--log", logFile, "--log-format", "json", "exec", ...detach);
  args.push("--process", processFile, "--pid-file", pidFile, id);
  return { processFile, logFile, pidFile, args };
}

/** Kills what is left and removes runc's state and cgroups of the container. Absent is fine. */
export async function runcDeleteForce(runcRoot: string, id: string): Promise<void> {
  await run(TOOLS.runc, runcArgs(runcRoot, "delete", "--force", id)).catch(() => undefined);
  await rm(path.join(runcRoot, id), { recursive: true, force: true });
}

/** SIGKILL to the init kills the whole PID namespace, so every process of the sandbox. */
export async function killInit(state: RuncState): Promise<boolean> {
  if (!(await isInitAlive(state))) return false;
  try {
    process.kill(state.initPid, "SIGKILL");
    return true;
  } catch {
    return false;
  }
}
