// One command in a running sandbox through `runc exec`: stdout and stderr captured
// separately under one combined byte cap (half for the head, half for the tail; what falls
// between is drained and counted as truncated), a timeout that kills the command's whole
// process group inside the sandbox, and runc's own failures told apart from the command's exit code by runc's JSON log.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFile, rm, writeFile } from "node:fs/promises";
import { constants } from "node:os";
import type { ExecOutcome } from "../interface.js";
import { TOOLS } from "./host.js";
import type { OciProcess } from "./oci-config.js";
import { runcExecCall } from "./runc.js";
import { firstRuncError } from "./supervisor.js";

/** The length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence. */
export function utf8SafeLength(bytes: Uint8Array, length = bytes.length): number {
  let start = length;
  // Walk back over at most 3 continuation bytes to the lead byte of the last sequence.
  while (start > 0 && length - start < 4 && ((bytes[start - 1] as number) & 0xc0) === 0x80) start--;
  if (start === 0) return length;
  const lead = bytes[start - 1] as number;
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return need > 1 && length - (start - 1) < need ? start - 1 : length;
}

/**
 * Keeps at most `maxBytes` of stdout and stderr together: the first half of the cap in
 * arrival order (the head) and, once that is full, the last bytes that fit the other half
 * (the tail), so what a command writes last (a traceback after a large output) survives a
 * cut. Whatever falls between the two is dropped and reported as truncated.
 */
export class OutputCollector {
  private readonly headRoom: number;
  private readonly tailRoom: number;
  private headKept = 0;
  private readonly head = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  /** The tail window, oldest first, across both streams. */
  private readonly tail: { stream: "stdout" | "stderr"; data: Buffer }[] = [];
  private tailKept = 0;
  private readonly seen = { stdout: 0, stderr: 0 };
  truncated = false;

  constructor(maxBytes: number) {
    const cap = Math.max(0, Math.floor(maxBytes));
    this.headRoom = Math.ceil(cap / 2);
    this.tailRoom = cap - this.headRoom;
  }

  push(stream: "stdout" | "stderr", chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.seen[stream] += chunk.length;
    const room = this.headRoom - this.headKept;
    let rest = chunk;
    if (room > 0) {
      const piece = rest.length <= room ? rest : rest.subarray(0, room);
      this.head[stream].push(piece);
      this.headKept += piece.length;
      rest = rest.subarray(piece.length);
      if (rest.length === 0) return;
    }
    if (rest.length > this.tailRoom) {
      this.truncated = true;
      rest = rest.subarray(rest.length - this.tailRoom);
    }
    if (rest.length === 0) return;
    this.tail.push({ stream, data: rest });
    this.tailKept += rest.length;
    while (this.tailKept > this.tailRoom) {
      this.truncated = true;
      const oldest = this.tail[0] as { stream: "stdout" | "stderr"; data: Buffer };
      const over = this.tailKept - this.tailRoom;
      if (oldest.data.length <= over) {
        this.tail.shift();
        this.tailKept -= oldest.data.length;
      } else {
        oldest.data = oldest.data.subarray(over);
        this.tailKept -= over;
      }
    }
  }

  result(): { stdout: string; stderr: string; truncated: boolean } {
    return { stdout: this.text("stdout"), stderr: this.text("stderr"), truncated: this.truncated };
  }

  private text(stream: "stdout" | "stderr"): string {
    let head = Buffer.concat(this.head[stream]);
    let tail = Buffer.concat(this.tail.filter((entry) => entry.stream === stream).map((entry) => entry.data));
    // Bytes of this stream were dropped between head and tail: a sequence either edge of the
    // gap split is dropped rather than shown as U+FFFD.
    if (this.seen[stream] > head.length + tail.length) {
      head = head.subarray(0, utf8SafeLength(head));
      let skip = 0;
      while (skip < 3 && skip < tail.length && ((tail[skip] as number) & 0xc0) === 0x80) skip++;
      tail = tail.subarray(skip);
    }
    return Buffer.concat([head, tail]).toString("utf8");
  }
}

/** How long to wait for the pipes to close after runc exits: a background child may hold them. */
const DRAIN_GRACE_MS = 200;

export interface ExecInput {
  runcRoot: string;
  id: string;
  execDir: string;
  process: OciProcess;
  timeoutSeconds: number;
  maxOutputBytes: number;
}

/** runc's messages for "there is no running container to exec in". */
const NOT_RUNNING_RE =
  /container does not exist|cannot exec in a (stopped|paused) container|container not running|not running/i;

export async function runExec(input: ExecInput): Promise<ExecOutcome> {
  const name = `${Date.now().toString(36)}-${randomBytes(6).toString("hex")}`;
  const { processFile, logFile, pidFile, args } = runcExecCall(input.runcRoot, input.id, input.execDir, name);
  await writeFile(processFile, JSON.stringify(input.process), { mode: 0o600 });
  try {
    return await new Promise<ExecOutcome>((resolve) => {
      const output = new OutputCollector(input.maxOutputBytes);
      const child = spawn(TOOLS.runc, args, { stdio: ["ignore", "pipe", "pipe"] });
      let timedOut = false;
      let settled = false;
      let killTimer: NodeJS.Timeout | null = null;
      let open = 2;
      let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
      let drainTimer: NodeJS.Timeout | null = null;

      const settle = async () => {
        if (settled || !exit) return;
        settled = true;
        clearTimeout(timeoutTimer);
        if (killTimer) clearTimeout(killTimer);
        if (drainTimer) clearTimeout(drainTimer);
        child.stdout.destroy();
        child.stderr.destroy();
        const captured = output.result();
        if (timedOut) {
          resolve({ kind: "timeout", ...captured });
          return;
        }
        const code = exit.code ?? 128 + signalNumber(exit.signal);
        if (code === 255) {
          const error = firstRuncError(await readFile(logFile, "utf8").catch(() => ""));
          if (error) {
            resolve(
              NOT_RUNNING_RE.test(error) ? { kind: "sandbox_stopped" } : { kind: "spawn_failed", message: error },
            );
            return;
          }
        }
        resolve({ kind: "completed", exit: code, ...captured });
      };
      const streamClosed = () => {
        open--;
        if (open === 0) void settle();
      };
      child.stdout.on("data", (chunk: Buffer) => output.push("stdout", chunk));
      child.stderr.on("data", (chunk: Buffer) => output.push("stderr", chunk));
      child.stdout.on("close", streamClosed);
      child.stderr.on("close", streamClosed);
      child.on("error", (error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timeoutTimer);
        resolve({ kind: "spawn_failed", message: `could not run runc: ${error.message}` });
      });
      child.on("exit", (code, signal) => {
        exit = { code, signal };
        if (open === 0) void settle();
        else drainTimer = setTimeout(() => void settle(), DRAIN_GRACE_MS);
      });

      // The command leads its own process group (runc's init calls setsid), so -pid reaches
      // everything it started that did not leave the group. Until runc has written the pid
      // file there is nothing to kill yet; look again shortly.
      let killAttempts = 0;
      const killGroup = async () => {
        if (exit) return;
        // runc itself should end once its child is gone; if it does not, it goes too.
        if (++killAttempts > 40) child.kill("SIGKILL");
        const pid = Number((await readFile(pidFile, "utf8").catch(() => "")).trim());
        if (Number.isInteger(pid) && pid > 0) {
          try {
            process.kill(-pid, "SIGKILL");
          } catch {
            // Already gone.
          }
        }
        killTimer = setTimeout(() => void killGroup(), 50);
      };
      const timeoutTimer = setTimeout(() => {
        timedOut = true;
        void killGroup();
      }, input.timeoutSeconds * 1000);
    });
  } finally {
    await Promise.all([rm(processFile, { force: true }), rm(logFile, { force: true }), rm(pidFile, { force: true })]);
  }
}

function signalNumber(signal: NodeJS.Signals | null): number {
  return signal ? (constants.signals[signal] ?? 0) : 0;
}
