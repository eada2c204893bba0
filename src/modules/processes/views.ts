// What the processes API shows and takes (docs/api-decisions.md "Processes"): its limits, the
// process as the API shows it, output events, and the runtime's errors as the contract's codes.
import { type ProcessRef, RuntimeError } from "../../drivers/runtime/interface.js";
import { AppError } from "../../lib/errors.js";
import { hostUnavailable } from "../hosts/membership.js";
import type * as repo from "./repo.js";

/** Live (starting or running) processes one sandbox may have. */
export const MAX_PROCESSES_PER_SANDBOX = 32;
/** Ended processes whose output a sandbox's agent keeps; beyond, the oldest are released. */
export const MAX_KEPT_ENDED = 16;
/** Exits remembered for processes not yet tracked. */
export const MAX_EARLY_EXITS = 1024;
/** The most one output read returns. */
export const MAX_READ_BYTES = 1 << 20;
/** The longest :wait and output long-poll. */
export const MAX_WAIT_SECONDS = 60;
/** Stdin bytes one :stdin call may carry (the agent's input buffer). */
export const MAX_STDIN_BYTES = 64 << 10;
/** How long :stdin waits for the agent's input buffer to have room. */
export const STDIN_ROOM_DEADLINE_MS = 10_000;
export const PROCESS_ID = /^proc_[0-9a-z]{26}$/;

export const SIGNALS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGUSR2: 12,
  SIGTERM: 15,
  SIGCONT: 18,
  SIGSTOP: 19,
  SIGWINCH: 28,
};
export const SIGNAL_NAMES = Object.keys(SIGNALS);

export interface ProcessStart {
  cmd: string[];
  env?: Record<string, string> | undefined;
  cwd?: string | undefined;
  stdin?: boolean | undefined;
  pty?: { rows: number; cols: number } | null | undefined;
  timeout_seconds?: number | undefined;
}

export interface ProcessView {
  id: string;
  sandbox_id: string;
  state: repo.ProcessState;
  cmd: string[];
  cwd: string | null;
  pty: { rows: number; cols: number } | null;
  stdin: boolean;
  pid: number | null;
  exit_code: number | null;
  end_reason: repo.EndReason | null;
  output_kept: boolean;
  timeout_seconds: number | null;
  created_at: string;
  started_at: string | null;
  ended_at: string | null;
}

/** One event of an output stream: bytes at an offset, a gap (bytes dropped), or the end. */
export type OutputEvent =
  | { kind: "output"; offset: number; stream: "stdout" | "stderr"; data: Buffer }
  | { kind: "gap"; from: number; to: number }
  | { kind: "end"; offset: number };

export function processView(row: repo.ProcessRow): ProcessView {
  return {
    id: row.id,
    sandbox_id: row.sandbox_id,
    state: row.state,
    cmd: row.argv,
    cwd: row.cwd,
    pty: row.pty,
    stdin: row.stdin,
    pid: row.pid,
    exit_code: row.exit_code,
    end_reason: row.end_reason,
    output_kept: row.output_kept,
    timeout_seconds: row.timeout_seconds,
    created_at: row.created_at.toISOString(),
    started_at: row.started_at?.toISOString() ?? null,
    ended_at: row.ended_at?.toISOString() ?? null,
  };
}

export function decodeBase64(text: string): Buffer {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0)
    throw new AppError("invalid_argument", "data_base64 is not base64");
  return Buffer.from(text, "base64");
}

export function refKey(sandboxId: string, ref: ProcessRef): string {
  return `${sandboxId} ${ref.agent} ${ref.serial}`;
}

export function startError(error: unknown): Error {
  if (error instanceof RuntimeError) {
    switch (error.code) {
      case "start_failed":
        return new AppError("spawn_failed", `the command could not be started: ${error.message}`);
      case "not_running":
      case "not_found":
        return new AppError("sandbox_stopped", "the sandbox stopped before the process started");
      case "unsupported":
        return new AppError("failed_precondition", "this sandbox run cannot keep processes (restart the sandbox)");
    }
  }
  return runtimeError(error);
}

export function runtimeError(error: unknown): Error {
  if (error instanceof AppError) return error;
  if (error instanceof RuntimeError && (error.code === "not_running" || error.code === "not_found"))
    return new AppError("sandbox_not_running", "the sandbox is not running");
  if (error instanceof RuntimeError && error.code === "unsupported")
    return new AppError("failed_precondition", "this sandbox run cannot keep processes (restart the sandbox)");
  return hostUnavailable();
}
