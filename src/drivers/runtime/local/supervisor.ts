// Starting a sandbox's first process and learning when it ends. A small shell shim (dash,
// about 1 MB) per sandbox runs `runc run --keep` in the foreground, in its own session, so
// it outlives a crash of the server. When the container ends the shim reads the cgroup's
// OOM kill counter, deletes the container from runc, and writes run/exit.json atomically.
// The driver learns of a start from runc's pid file and of an end from exit.json, both
// through inotify (fs.watch) on run/: no polling, and the same for sandboxes this process
// started and for ones it adopted after a restart.
import { spawn } from "node:child_process";
import { type FSWatcher, watch } from "node:fs";
import { readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { exists } from "../../../lib/fs.js";
import { RuntimeError, type SandboxObservation } from "../interface.js";
import type { ExitWatch } from "./exit-watch.js";
import { TOOLS } from "./host.js";
import type { SandboxPaths } from "./layout.js";
import { writeJson } from "./records.js";
import { isInitAlive, killInit, type RuncState, readRuncState, runcDeleteForce } from "./runc.js";
import { SpawnerUnavailable, spawner } from "./spawner.js";

/**
 * What a sandbox's first process may leave in its console log per run (its stdout and
 * stderr). The log is on the sandbox's root image (layout.ts), the previous run's kept as
 * console.log.1, so it costs the host nothing beyond the sandbox's own storage; output past
 * the cap is read and dropped, so a writer never blocks or gets EPIPE.
 */
export const CONSOLE_LOG_CAP_BYTES = 1 << 20;

/**
 * $1 runc, $2 runc root, $3 id, $4 bundle, $5 run dir, $6 OOM counter file (may not exist),
 * $7 console log, $8 its cap in bytes, $9 head, $10 cat. The container's stdout and stderr
 * are a pipe to \`head -c cap\`, then to \`cat\` into /dev/null until the last writer ends.
 */
export const SHIM_SCRIPT = `
runc=$1 root=$2 id=$3 bundle=$4 run=$5 oomfile=$6 console=$7 cap=$8 head=$9 cat=\${10}
[ -f "$console" ] && mv -f "$console" "$console.1"
{
  "$runc" --root "$root" --log "$run/runc.log" --log-format json run --keep --bundle "$bundle" --pid-file "$run/pid" "$id" </dev/null 2>&1
  code=$?
  oom=0
  if [ -r "$oomfile" ]; then
    while read -r key value; do [ "$key" = oom_kill ] && oom=$value; done <"$oomfile"
  fi
  "$runc" --root "$root" delete --force "$id" >/dev/null 2>&1
  printf '{"exitCode":%d,"oomKills":%d}\\n' "$code" "$oom" >"$run/exit.tmp" && mv -f "$run/exit.tmp" "$run/exit.json"
} | { "$head" -c "$cap" >"$console"; exec "$cat" >/dev/null; }
`;

export interface ExitRecord {
  exitCode: number;
  oomKills: number;
}

export async function readExitRecord(paths: SandboxPaths): Promise<ExitRecord | null> {
  try {
    const doc = JSON.parse(await readFile(paths.exitFile, "utf8")) as Partial<ExitRecord>;
    return { exitCode: Number(doc.exitCode ?? -1), oomKills: Number(doc.oomKills ?? 0) };
  } catch {
    return null;
  }
}

export async function readPidFile(paths: SandboxPaths): Promise<number | null> {
  const text = await readFile(paths.pidFile, "utf8").catch(() => null);
  const pid = text === null ? Number.NaN : Number(text.trim());
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/** The first error runc logged (JSON lines), for a failed start or exec. */
export function firstRuncError(log: string): string | null {
  for (const line of log.split("\n")) {
    if (!line.trim()) continue;
    try {
      const entry = JSON.parse(line) as { level?: string; msg?: string };
      if ((entry.level === "error" || entry.level === "fatal") && entry.msg) return entry.msg;
    } catch {
      if (line.includes("level=error")) return line;
    }
  }
  return null;
}

/**
 * Resolves with the first of `names` that exists in `dir` (checked after the watch is set,
 * so an event cannot slip between), or null when `timeoutMs` passes first.
 */
export function waitForFile(
  dir: string,
  names: readonly string[],
  timeoutMs: number,
  exists: (name: string) => Promise<boolean>,
): Promise<string | null> {
  return new Promise((resolve, reject) => {
    let done = false;
    let watcher: FSWatcher | null = null;
    const finish = (value: string | null, error?: unknown) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      watcher?.close();
      if (error) reject(error);
      else resolve(value);
    };
    const check = async () => {
      for (const name of names) if (await exists(name)) return finish(name);
    };
    const timer = setTimeout(() => finish(null), timeoutMs);
    try {
      watcher = watch(dir, (_event, filename) => {
        if (filename && names.includes(String(filename))) void check();
      });
      watcher.on("error", (error) => finish(null, error));
    } catch (error) {
      finish(null, error);
      return;
    }
    void check();
  });
}

function shimPidFile(paths: SandboxPaths): string {
  return `${paths.runDir}/shim.pid`;
}

/** Whether the shim of the sandbox's current run is still alive (it then will write exit.json). */
export async function isShimAlive(paths: SandboxPaths): Promise<boolean> {
  const pid = Number((await readFile(shimPidFile(paths), "utf8").catch(() => "")).trim());
  if (!Number.isInteger(pid) || pid <= 0) return false;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
  return cmdline.includes("warren-shim");
}

/**
 * The exit record of a run that has ended, waiting (up to `timeoutMs`) for its live shim to
 * finish writing it; null when there is none and no shim will write one. A run that is still
 * starting (no pid file yet) is not waited for.
 */
export async function settledExitRecord(paths: SandboxPaths, timeoutMs: number): Promise<ExitRecord | null> {
  const record = await readExitRecord(paths);
  if (record || (await readPidFile(paths)) === null) return record;
  // A shim gone by now may have written the record just after the first look.
  if (!(await isShimAlive(paths))) return readExitRecord(paths);
  await waitForFile(paths.runDir, ["exit.json"], timeoutMs, async () => (await readExitRecord(paths)) !== null);
  return readExitRecord(paths);
}

export interface ShimInput {
  runcRoot: string;
  id: string;
  paths: SandboxPaths;
  oomCounterFile: string;
  /** How long runc may take to start the container. */
  timeoutMs: number;
}

/** Spawns the shim and resolves with the init's host PID once the container runs. */
export async function startShim(input: ShimInput): Promise<number> {
  const { paths } = input;
  await rm(paths.exitFile, { force: true });
  await rm(paths.pidFile, { force: true });
  await rm(paths.runcLog, { force: true });
  await rm(`${paths.runDir}/stop-requested`, { force: true });
  const shimArgs = [
    "-c",
    SHIM_SCRIPT,
    "warren-shim",
    TOOLS.runc,
    input.runcRoot,
    input.id,
    paths.dir,
    paths.runDir,
    input.oomCounterFile,
    paths.consoleLog,
    String(CONSOLE_LOG_CAP_BYTES),
    TOOLS.head,
    TOOLS.cat,
  ];
  let shimPid: number | undefined;
  try {
    shimPid = await spawner.detach(TOOLS.sh, shimArgs, { cwd: paths.dir });
  } catch (error) {
    if (!(error instanceof SpawnerUnavailable)) {
      throw new RuntimeError("start_failed", `could not start the shim: ${(error as Error).message}`);
    }
    const child = spawn(TOOLS.sh, shimArgs, { detached: true, stdio: "ignore", cwd: paths.dir });
    child.on("error", () => undefined);
    child.unref();
    shimPid = child.pid;
  }
  if (shimPid) await writeFile(shimPidFile(paths), String(shimPid));
  const fileExists = async (name: string) => {
    if (name === "pid") return (await readPidFile(paths)) !== null;
    return (await readExitRecord(paths)) !== null;
  };
  const which = await waitForFile(paths.runDir, ["pid", "exit.json"], input.timeoutMs, fileExists);
  if (which === "pid") return (await readPidFile(paths)) as number;
  if (which === null) {
    throw new RuntimeError("start_failed", `runc did not start the sandbox within ${input.timeoutMs} ms`);
  }
  const log = await readFile(paths.runcLog, "utf8").catch(() => "");
  const message = firstRuncError(log);
  // The container ran (runc wrote its init's pid and logged no error) and its first process
  // ended at once (a missing program: tini's 127): an exit, as when the pid is seen first.
  // Which of the two files the watch sees first is a matter of timing, not of what happened.
  const pid = await readPidFile(paths);
  if (pid !== null && message === null) return pid;
  const record = await readExitRecord(paths);
  throw new RuntimeError(
    "start_failed",
    `runc could not start the sandbox (exit ${record?.exitCode}): ${message ?? "no message"}`,
  );
}

/** What a stopped sandbox's last run ended with. */
export async function stoppedObservation(paths: SandboxPaths): Promise<SandboxObservation> {
  // Between the init's death and exit.json there are a few ms of the shim's bookkeeping.
  const exit = await settledExitRecord(paths, 5000);
  const observation: SandboxObservation = { status: "stopped" };
  if (exit && exit.exitCode >= 0) {
    observation.exitCode = exit.exitCode;
    // The init (tini) ends with 137 when the kernel's OOM killer took its child (or it).
    const stopRequested = await exists(path.join(paths.runDir, "stop-requested"));
    observation.oomKilled = exit.exitCode === 137 && exit.oomKills > 0 && !stopRequested;
  }
  return observation;
}

/**
 * Resolves when both the init and its shim are gone (so no exit.json will come) or
 * `timeoutMs` passes. Node cannot wait on processes it did not start, so this looks at
 * /proc with a backoff; it is the fallback next to the exit.json event, for a killed shim.
 */
export async function unsupervisedEnd(
  state: RuncState,
  paths: SandboxPaths,
  timeoutMs: number,
  stopped: () => boolean,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 10; !stopped() && Date.now() < deadline; delay = Math.min(250, delay * 2)) {
    if (!(await isInitAlive(state)) && !(await isShimAlive(paths))) return;
    await sleep(delay);
  }
}

/**
 * Stops a run: kills its init (if it runs) and waits for the shim to record the end. When the
 * shim died too, cleans up after it (runc delete) and records an unknown exit code.
 */
export async function stopRun(input: {
  runcRoot: string;
  runcStateDir: string;
  id: string;
  paths: SandboxPaths;
  exits: ExitWatch;
  timeoutMs: number;
}): Promise<void> {
  const { paths, exits, id } = input;
  const state = await readRuncState(input.runcRoot, id);
  if (!state) return;
  if (await isInitAlive(state)) {
    exits.watch(id);
    const exited = exits.nextExit(id);
    let settled = false;
    // Marks this end as asked for, so an earlier OOM kill of an exec is not blamed for it.
    await writeFile(path.join(paths.runDir, "stop-requested"), "").catch(() => undefined);
    await killInit(state);
    const recorded = await Promise.race([
      // exit.json is removed at every start, so one that exists now is this run's.
      readExitRecord(paths).then((record) => (record ? true : new Promise<boolean>(() => undefined))),
      exited.promise.then(() => true),
      unsupervisedEnd(state, paths, input.timeoutMs, () => settled).then(() => false),
    ]);
    settled = true;
    exited.cancel();
    if (recorded) return;
    if (await isInitAlive(state)) throw new RuntimeError("host_failure", `sandbox ${id} did not die on SIGKILL`);
  }
  // The init is gone. Its shim records that within moments.
  const record = await settledExitRecord(paths, input.timeoutMs);
  if (await exists(input.runcStateDir)) await runcDeleteForce(input.runcRoot, id);
  if (!record && (await exists(paths.runDir))) {
    await writeJson(paths.exitFile, { exitCode: -1, oomKills: 0 });
  }
}
