// Streaming exec (GET /v1/sandboxes/{id}/exec/stream, docs/api-decisions.md "Streaming exec"):
// a command on the exec agent's session path (SandboxRuntime.openSession, the SSH gateway's),
// on the sandbox's owner (here, or routed over the owner's internal API), with ExecSandbox's
// checks. Output is passed on as it comes and acknowledged only once the caller has taken it,
// so a reader that never reads holds the command, never the server's memory; nothing is
// dropped, so a stream is never truncated. While it is open the sandbox is held awake (the
// in-flight registration the idle check reads) and its activity (source exec) kept fresh.
import type { SandboxDefaults } from "../../config.js";
import { RuntimeError, type SandboxSession } from "../../drivers/runtime/interface.js";
import type { Clock } from "../../lib/clock.js";
import { AppError } from "../../lib/errors.js";
import { newId } from "../../lib/ids.js";
import type { Logger } from "../../lib/logger.js";
import type { DeferringDb } from "../../store/deferred-writes.js";
import { hostUnavailable } from "../hosts/membership.js";
import type { HostRouter } from "../hosts/router.js";
import type { Credential } from "../identity/credential.js";
import type { SecretService } from "../secrets/service.js";
import type { ExecResponse, ExecService } from "./exec-service.js";
import type { ExecsInFlight } from "./execs-in-flight.js";
import * as repo from "./repo.js";
import { sandboxEventOf } from "./transitions.js";
import { checkArgv } from "./view.js";

const ACTIVITY_HEARTBEAT_MS = 30_000;
/** Environment entries per stream, and the longest value (an argv entry's limit, contract section 8). */
export const MAX_STREAM_ENV = 256;
export const MAX_ENV_VALUE = 4096;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MAX_ENV_NAME = 128;
const MAX_CWD = 4096;

/** The start message (StreamExecStart in stream-routes.ts), as the service takes it. */
export interface StreamStart {
  cmd: string[];
  env?: Record<string, string> | undefined;
  cwd?: string | undefined;
  tty?: { rows: number; cols: number } | null | undefined;
  timeout_seconds?: number | undefined;
  secret_environment?: { secret_name: string; variable_name: string }[] | undefined;
}

/** How a stream ended: ExecSandbox's variants without the output (it was streamed). */
export type StreamEnd =
  | { exit: number; truncated: false }
  | { timeout: Record<string, never>; truncated: false }
  | { indeterminate: Record<string, never>; truncated: false };

export interface StreamHandlers {
  /** `done` once the bytes are passed on (the command is held while too much is not done). */
  onStdout(data: Buffer, done: () => void): void;
  onStderr(data: Buffer, done: () => void): void;
  /** Input may flow again after write() returned false. */
  onDrain(): void;
  onEnd(end: StreamEnd): void;
}

export interface ExecStreamDeps {
  db: DeferringDb;
  clock: Clock;
  log: Logger;
  defaults: SandboxDefaults;
  secrets: SecretService;
  execs: ExecService;
  router: HostRouter;
  inFlight: ExecsInFlight<ExecResponse>;
}

/** The checks of a start message's fields beyond its schema (contract section 8's limits). */
export function checkStreamStart(start: StreamStart): void {
  checkArgv("cmd", start.cmd);
  const env = Object.entries(start.env ?? {});
  if (env.length > MAX_STREAM_ENV) throw new AppError("invalid_argument", `env: at most ${MAX_STREAM_ENV} entries`);
  for (const [name, value] of env) {
    if (!ENV_NAME.test(name) || Buffer.byteLength(name) > MAX_ENV_NAME)
      throw new AppError("invalid_argument", `env: ${JSON.stringify(name.slice(0, 64))} is not a variable name`);
    if (value.length > MAX_ENV_VALUE || value.includes("\0"))
      throw new AppError("invalid_argument", `env.${name}: at most ${MAX_ENV_VALUE} characters, no NUL`);
  }
  if (start.cwd !== undefined && (!start.cwd.startsWith("/") || start.cwd.length > MAX_CWD || start.cwd.includes("\0")))
    throw new AppError("invalid_argument", `cwd: an absolute path of at most ${MAX_CWD} characters`);
}

export class ExecStreamService {
  constructor(private readonly deps: ExecStreamDeps) {}

  /** The sandbox a stream may open in (before the upgrade: its refusals are plain HTTP answers). */
  target(cred: Credential, id: string): Promise<repo.ExecTarget> {
    return this.deps.execs.streamTarget(cred, id);
  }

  /** Opens the command; rejects with the contract's codes when it did not start. */
  async open(
    cred: Credential,
    row: repo.ExecTarget,
    start: StreamStart,
    handlers: StreamHandlers,
  ): Promise<SandboxSession> {
    checkStreamStart(start);
    const { db, clock, log, inFlight } = this.deps;
    const secretEnv = await this.deps.secrets.releaseForExec(cred, start.secret_environment ?? []);
    const route = await this.deps.router.runtimeOf(row);
    const streamId = newId("exe");
    let finished: () => void = () => undefined;
    const ended = new Promise<ExecResponse>((resolve) => {
      finished = () => resolve({ indeterminate: {}, stdout: "", stderr: "", truncated: false });
    });
    inFlight.began(streamId, row.id, ended);
    const touch = () =>
      void repo
        .touchSandbox(db, row.id, clock.now(), "exec")
        .catch((error: unknown) =>
          log.warn({ sandbox_id: row.id, err: (error as Error).message }, "could not record exec stream activity"),
        );
    touch();
    const heartbeat = setInterval(touch, ACTIVITY_HEARTBEAT_MS);
    heartbeat.unref();
    const startedAt = clock.now();
    let timedOut = false;
    let timer: NodeJS.Timeout | null = null;
    let done = false;
    const close = (end: StreamEnd, outcome: string) => {
      if (done) return;
      done = true;
      clearInterval(heartbeat);
      if (timer) clearTimeout(timer);
      const at = clock.now();
      const payload = {
        argv: start.cmd,
        outcome,
        ...("exit" in end ? { exit: end.exit } : {}),
        duration_ms: at.getTime() - startedAt.getTime(),
        stream: true,
      };
      db.defer((q) =>
        repo.recordExecEnd(q, {
          sandboxId: row.id,
          at,
          record: null,
          event: sandboxEventOf(clock, row, "sandbox.exec", payload),
        }),
      )
        .catch((error: unknown) =>
          log.error(
            { sandbox_id: row.id, err: (error as Error).message },
            "the end of an exec stream was not recorded",
          ),
        )
        .finally(() => {
          finished();
          inFlight.ended(streamId);
        });
      handlers.onEnd(end);
    };
    let session: SandboxSession;
    try {
      session = await route.runtime.openSession(
        row.id,
        {
          argv: start.cmd,
          env: { ...start.env, ...secretEnv },
          ...(start.cwd ? { cwd: start.cwd } : {}),
          pty: start.tty ?? null,
        },
        {
          onStdout: handlers.onStdout,
          onStderr: handlers.onStderr,
          onDrain: handlers.onDrain,
          onEnd: ({ exit, lost }) => {
            if (lost) log.warn({ sandbox_id: row.id, reason: lost }, "exec stream lost its session");
            if (timedOut) close({ timeout: {}, truncated: false }, "timeout");
            else if (exit === null) close({ indeterminate: {}, truncated: false }, "indeterminate");
            else close({ exit, truncated: false }, "completed");
          },
        },
      );
    } catch (error) {
      done = true;
      clearInterval(heartbeat);
      finished();
      inFlight.ended(streamId);
      throw openError(error);
    }
    if (start.timeout_seconds !== undefined) {
      timer = setTimeout(() => {
        timedOut = true;
        session.kill();
      }, start.timeout_seconds * 1000);
      timer.unref();
    }
    return session;
  }
}

/** A session that did not open, as the contract's codes (the command did not run). */
function openError(error: unknown): Error {
  const code = error instanceof RuntimeError || error instanceof AppError ? error.code : null;
  const message = error instanceof Error ? error.message : String(error);
  switch (code) {
    case "start_failed":
      return new AppError("spawn_failed", `the command could not be started: ${message}`);
    case "not_running":
    case "not_found":
      return new AppError("sandbox_stopped", "the sandbox stopped before the command ran");
    case "unsupported":
      return new AppError("failed_precondition", "this sandbox run cannot take streams (restart the sandbox)");
    default:
      if (error instanceof AppError) return error;
      return hostUnavailable();
  }
}
