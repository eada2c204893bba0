// Background processes of a sandbox (docs/api-decisions.md "Processes"): started through the
// API, kept by the sandbox's exec agent (exec-processes.ts) with a bounded ring of their output,
// and owned by a row in sandbox_processes that the sandbox's host writes under its fence. A
// process outlives every client connection and the server's restart: at start-up the owner
// re-adopts its live rows from the agents (adopt()) or marks them lost. Its end is its exit, a
// kill, its timeout or the sandbox's stop. The checks are exec's: the caller's organization
// (another's sandbox or process is not_found), a sandbox-scoped credential's own sandbox, not
// quarantined, running (for what acts on it); served by the sandbox's owner host.
import type { SandboxDefaults } from "../../config.js";
import {
  type KeptProcess,
  type ProcessOutputChunk,
  RuntimeError,
  type SandboxProcesses,
} from "../../drivers/runtime/interface.js";
import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { newId } from "../../lib/ids.js";
import type { Logger } from "../../lib/logger.js";
import { decodeCursor, pageOf } from "../../lib/page-token.js";
import type { Db } from "../../store/db.js";
import { type HostGate, hostUnavailable } from "../hosts/membership.js";
import type { Credential } from "../identity/credential.js";
import { checkStreamStart } from "../sandboxes/exec-stream.js";
import type { ExecsInFlight } from "../sandboxes/execs-in-flight.js";
import { isVisible, SANDBOX_ID } from "../sandboxes/view.js";
import * as repo from "./repo.js";
import {
  decodeBase64,
  MAX_EARLY_EXITS,
  MAX_KEPT_ENDED,
  MAX_PROCESSES_PER_SANDBOX,
  MAX_READ_BYTES,
  MAX_STDIN_BYTES,
  type OutputEvent,
  PROCESS_ID,
  type ProcessStart,
  type ProcessView,
  processView,
  refKey,
  runtimeError,
  SIGNAL_NAMES,
  SIGNALS,
  STDIN_ROOM_DEADLINE_MS,
  startError,
} from "./views.js";

export {
  MAX_PROCESSES_PER_SANDBOX,
  MAX_READ_BYTES,
  MAX_STDIN_BYTES,
  MAX_WAIT_SECONDS,
  type OutputEvent,
  type ProcessStart,
  type ProcessView,
  processView,
  SIGNAL_NAMES,
} from "./views.js";

export interface ProcessTarget {
  id: string;
  org_id: string;
  state: string;
  desired_state: string;
  quarantined: boolean;
  finished_at: Date | null;
  host_id: string | null;
}

export interface ProcessServiceDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  defaults: SandboxDefaults;
  sandboxes: {
    rowForHost(id: string): Promise<ProcessTarget | null>;
    touch(row: { id: string }, source: "exec"): Promise<void>;
  };
  /** This host's runtime of processes (null on a server without one: an api replica). */
  runtime: SandboxProcesses | null;
  host: HostGate | null;
  /** A running process holds off its sandbox's idle stop, as an exec in flight does. */
  inFlight: ExecsInFlight<unknown>;
}

interface Live {
  row: repo.ProcessRow;
  timer: NodeJS.Timeout | null;
  /** Why we asked it to end, when we did (its exit then reads as this). */
  endingAs: repo.EndReason | null;
  ended: () => void;
}

export class ProcessService {
  /** The live processes this host keeps, by process id. */
  private readonly live = new Map<string, Live>();
  /** Process ids by `sandbox agent serial`, for the agent's exit reports. */
  private readonly byRef = new Map<string, string>();
  /** Exits reported before their process was tracked (oldest first, bounded). */
  private readonly earlyExits = new Map<string, number>();
  /** Callbacks waiting for a process's end (wait, output streams). */
  private readonly waiters = new Map<string, Set<() => void>>();

  constructor(private readonly deps: ProcessServiceDeps) {
    deps.runtime?.onProcessExit((sandboxId, ref, code) => {
      const key = refKey(sandboxId, ref);
      const id = this.byRef.get(key);
      if (id) {
        void this.ended(id, { state: "exited", exitCode: code });
        return;
      }
      // A quick process exits before its row is marked running and tracked: kept for track().
      this.earlyExits.set(key, code);
      if (this.earlyExits.size > MAX_EARLY_EXITS) {
        const oldest = this.earlyExits.keys().next().value;
        if (oldest !== undefined) this.earlyExits.delete(oldest);
      }
    });
  }

  // ---- checks ----

  private async sandbox(cred: Credential, sandboxId: string): Promise<ProcessTarget> {
    const row = SANDBOX_ID.test(sandboxId) ? await this.deps.sandboxes.rowForHost(sandboxId) : null;
    if (
      !row ||
      row.org_id !== cred.orgId ||
      !isVisible(row, this.deps.clock.now(), this.deps.defaults.retentionSeconds)
    )
      throw notFound("sandbox");
    if (cred.sandbox && cred.sandbox.sandboxId !== row.id) throw notFound("sandbox");
    return row;
  }

  /** The runtime of a sandbox this host owns and may act on; host_unavailable otherwise. */
  private runtimeFor(row: Pick<ProcessTarget, "host_id">): SandboxProcesses {
    const { runtime, host } = this.deps;
    if (!runtime || !host || row.host_id !== host.id) {
      throw hostUnavailable("processes are served by the sandbox's host; retry through it");
    }
    if (!host.canAct()) throw hostUnavailable();
    return runtime;
  }

  private checkActive(row: ProcessTarget): void {
    if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
    if (row.state !== "running" || row.desired_state !== "running")
      throw new AppError("sandbox_not_running", `the sandbox is ${row.state}; processes need it running`);
  }

  private async processRow(cred: Credential, sandboxId: string, processId: string) {
    const sandbox = await this.sandbox(cred, sandboxId);
    const row = PROCESS_ID.test(processId) ? await repo.get(this.deps.db, sandbox.id, processId) : null;
    if (!row || row.org_id !== cred.orgId) throw notFound("process");
    return { sandbox, row };
  }

  // ---- the API ----

  async start(cred: Credential, sandboxId: string, body: ProcessStart): Promise<ProcessView> {
    // The sandbox first: another organization's is not_found whatever the body holds.
    const sandbox = await this.sandbox(cred, sandboxId);
    checkStreamStart({ cmd: body.cmd, env: body.env, cwd: body.cwd, tty: body.pty ?? null });
    if (body.timeout_seconds !== undefined && !(Number.isInteger(body.timeout_seconds) && body.timeout_seconds >= 1))
      throw new AppError("invalid_argument", "timeout_seconds: a whole number of seconds, at least 1");
    this.checkActive(sandbox);
    const runtime = this.runtimeFor(sandbox);
    const { db, clock, host } = this.deps;
    const owner = (host as HostGate).owner();
    if ((await repo.countLive(db, sandbox.id)) >= MAX_PROCESSES_PER_SANDBOX)
      throw new AppError(
        "failed_precondition",
        `the sandbox has ${MAX_PROCESSES_PER_SANDBOX} live processes, the most it may have; end one first`,
      );
    await this.releaseOldOutput(sandbox.id, runtime);
    const id = newId("proc");
    const now = clock.now();
    const pty = body.pty ?? null;
    const stdin = pty !== null || body.stdin === true;
    // The row first: no process ever runs without one (a crash here leaves a starting row, lost at start-up).
    await repo.insertStarting(
      db,
      {
        id,
        org_id: sandbox.org_id,
        sandbox_id: sandbox.id,
        argv: body.cmd,
        cwd: body.cwd ?? null,
        pty,
        stdin,
        timeout_seconds: body.timeout_seconds ?? null,
        created_at: now,
      },
      owner,
    );
    let kept: KeptProcess;
    try {
      kept = await runtime.startProcess(sandbox.id, {
        argv: body.cmd,
        ...(body.env ? { env: body.env } : {}),
        ...(body.cwd ? { cwd: body.cwd } : {}),
        pty,
        stdin,
      });
    } catch (error) {
      await repo.deleteStarting(db, id, owner).catch(() => undefined);
      throw startError(error);
    }
    const startedAt = clock.now();
    const deadline = body.timeout_seconds ? new Date(startedAt.getTime() + body.timeout_seconds * 1000) : null;
    const ok = await repo
      .markRunning(db, id, { agent: kept.agent, serial: kept.serial, pid: kept.pid, at: startedAt, deadline }, owner)
      .catch(() => false);
    if (!ok) {
      // Fenced (or the store failed): this host may not own it, so it does not run.
      await runtime.controlProcess(sandbox.id, kept, { kind: "release" }).catch(() => undefined);
      await repo.deleteStarting(db, id, owner).catch(() => undefined);
      throw hostUnavailable();
    }
    const row = await repo.get(db, sandbox.id, id);
    if (!row) throw hostUnavailable();
    this.track(row);
    void this.deps.sandboxes.touch(sandbox, "exec").catch(() => undefined);
    return processView(row);
  }

  async list(
    cred: Credential,
    sandboxId: string,
    query: { page_size?: number | undefined; page_token?: string | undefined },
  ): Promise<{ processes: ProcessView[]; next_page_token: string }> {
    const sandbox = await this.sandbox(cred, sandboxId);
    const pageSize = query.page_size ?? 50;
    const rows = await repo.listPage(
      this.deps.db,
      sandbox.id,
      decodeCursor("processes", query.page_token),
      pageSize + 1,
    );
    const page = pageOf("processes", rows, pageSize, (row) => ({ at: row.created_at, id: row.id }));
    return { processes: page.items.map(processView), next_page_token: page.nextPageToken };
  }

  async get(cred: Credential, sandboxId: string, processId: string): Promise<ProcessView> {
    return processView((await this.processRow(cred, sandboxId, processId)).row);
  }

  /** A signal to the process's group; `kill` is SIGKILL (its end then reads `killed`). */
  async signal(cred: Credential, sandboxId: string, processId: string, signal: string): Promise<ProcessView> {
    const { sandbox, row } = await this.processRow(cred, sandboxId, processId);
    const number = SIGNALS[signal];
    if (number === undefined) throw new AppError("invalid_argument", `signal: one of ${SIGNAL_NAMES.join(", ")}`);
    if (sandbox.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
    if (row.state !== "running") return processView(row);
    const runtime = this.runtimeFor(sandbox);
    const live = this.live.get(row.id);
    if (live && (number === 9 || number === 15 || number === 2 || number === 1)) live.endingAs ??= "killed";
    await this.control(runtime, row, { kind: "signal", signal: number });
    return processView((await repo.get(this.deps.db, sandbox.id, row.id)) ?? row);
  }

  async stdin(
    cred: Credential,
    sandboxId: string,
    processId: string,
    body: { data?: string | undefined; data_base64?: string | undefined; close?: boolean | undefined },
  ): Promise<{ written: number; closed: boolean }> {
    const { sandbox, row } = await this.processRow(cred, sandboxId, processId);
    if (body.data !== undefined && body.data_base64 !== undefined)
      throw new AppError("invalid_argument", "give data or data_base64, not both");
    const input = {
      data: body.data_base64 !== undefined ? decodeBase64(body.data_base64) : Buffer.from(body.data ?? "", "utf8"),
      close: body.close === true,
    };
    if (input.data.length > MAX_STDIN_BYTES)
      throw new AppError("invalid_argument", `data: at most ${MAX_STDIN_BYTES} bytes per call`);
    this.checkActive(sandbox);
    if (!row.stdin) throw new AppError("failed_precondition", "the process was started without stdin");
    if (row.state !== "running") throw new AppError("failed_precondition", "the process is not running");
    const runtime = this.runtimeFor(sandbox);
    let written = 0;
    if (input.data.length > 0) {
      const deadline = Date.now() + STDIN_ROOM_DEADLINE_MS;
      for (;;) {
        const taken = await this.control(runtime, row, { kind: "stdin", data: input.data });
        if (taken === -2) throw new AppError("failed_precondition", "the process's stdin is closed");
        if (taken > 0) {
          written = taken;
          break;
        }
        // The agent's input buffer is full (the process does not read): wait for room, bounded.
        if (Date.now() > deadline)
          throw new AppError("operation_conflict", "the process has not read its stdin; try again later", {
            retryAfterSeconds: 1,
          });
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    if (input.close && !row.pty) await this.control(runtime, row, { kind: "close" });
    return { written, closed: input.close && !row.pty };
  }

  async resize(
    cred: Credential,
    sandboxId: string,
    processId: string,
    size: { rows: number; cols: number },
  ): Promise<ProcessView> {
    const { sandbox, row } = await this.processRow(cred, sandboxId, processId);
    this.checkActive(sandbox);
    if (!row.pty) throw new AppError("failed_precondition", "the process has no terminal");
    if (row.state !== "running") throw new AppError("failed_precondition", "the process is not running");
    await this.control(this.runtimeFor(sandbox), row, { kind: "resize", ...size });
    return processView(row);
  }

  /** The process once it ended, or as it is when `timeoutSeconds` passed first. */
  async wait(cred: Credential, sandboxId: string, processId: string, timeoutSeconds: number): Promise<ProcessView> {
    const { sandbox, row } = await this.processRow(cred, sandboxId, processId);
    if (row.state === "exited" || row.state === "lost") return processView(row);
    await this.untilEnded(sandbox.id, row.id, timeoutSeconds * 1000);
    return processView((await repo.get(this.deps.db, sandbox.id, row.id)) ?? row);
  }

  /**
   * A reader of the process's output from `offset`: events in order, without a byte lost or
   * repeated while the agent keeps it; bytes it dropped come as one gap. While the reader is
   * open the agent keeps every byte from its position on (the process waits instead), and at
   * most one read (`chunkBytes`) is in flight: a consumer that does not take events holds the
   * process's output, never the server's memory. `close()` lets go.
   */
  async output(
    cred: Credential,
    sandboxId: string,
    processId: string,
    offset: number,
  ): Promise<{ events: AsyncGenerator<OutputEvent>; close(): void; row: repo.ProcessRow }> {
    const { sandbox, row } = await this.processRow(cred, sandboxId, processId);
    if (!row.output_kept || row.state === "lost" || row.state === "starting")
      throw new AppError("failed_precondition", "the process's output is no longer kept");
    const runtime = this.runtimeFor(sandbox);
    let reader: Awaited<ReturnType<SandboxProcesses["openProcessReader"]>>;
    try {
      reader = await runtime.openProcessReader(sandbox.id, { agent: row.agent_id, serial: row.agent_serial });
    } catch (error) {
      if (error instanceof RuntimeError && error.code === "not_found") {
        // The agent that kept it is gone (and the process with it: PDEATHSIG).
        if (row.state === "running") await this.ended(row.id, { state: "lost", exitCode: null });
        throw new AppError("failed_precondition", "the process's output is no longer kept (its agent ended)");
      }
      throw runtimeError(error);
    }
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      reader.close();
    };
    // The exit comes before the output's end ('q' before the last 'h'), but its row is written
    // meanwhile: the end waits (bounded) for it, so whoever reads the process then sees its exit.
    const settled = () => (this.live.has(row.id) ? this.untilEnded(sandbox.id, row.id, 10_000) : Promise.resolve());
    async function* events(): AsyncGenerator<OutputEvent> {
      let at = offset;
      try {
        while (!closed) {
          const result = await reader.read(at, MAX_READ_BYTES);
          for (const chunk of result.chunks) {
            if (chunk.offset > at) yield { kind: "gap", from: at, to: chunk.offset };
            yield { kind: "output", offset: chunk.offset, stream: chunk.stream, data: chunk.data };
            at = chunk.offset + chunk.data.length;
          }
          if (result.chunks.length === 0 && result.next > at) {
            yield { kind: "gap", from: at, to: result.next };
            at = result.next;
          }
          if (result.complete) {
            await settled();
            yield { kind: "end", offset: at };
            return;
          }
        }
      } finally {
        close();
      }
    }
    return { events: events(), close, row };
  }

  /**
   * One read of output from `offset` (at most `maxBytes`), as soon as there is some or
   * `waitSeconds` passed: what an MCP tool or a poller asks. `next_offset` is where to go on.
   */
  async read(
    cred: Credential,
    sandboxId: string,
    processId: string,
    query: { offset: number; maxBytes: number; waitSeconds: number },
  ): Promise<{
    offset: number;
    next_offset: number;
    dropped_bytes: number;
    chunks: { offset: number; stream: "stdout" | "stderr"; data: string }[];
    complete: boolean;
    process: ProcessView;
  }> {
    const maxBytes = Math.min(query.maxBytes, MAX_READ_BYTES);
    const stream = await this.output(cred, sandboxId, processId, query.offset);
    const chunks: ProcessOutputChunk[] = [];
    let dropped = 0;
    let next = query.offset;
    let complete = false;
    let got = 0;
    const timer = setTimeout(() => stream.close(), Math.max(query.waitSeconds * 1000, 25));
    try {
      for await (const event of stream.events) {
        if (event.kind === "gap") {
          dropped += event.to - event.from;
          next = event.to;
        } else if (event.kind === "output") {
          const room = maxBytes - got;
          const data = event.data.length > room ? event.data.subarray(0, room) : event.data;
          chunks.push({ offset: event.offset, stream: event.stream, data });
          got += data.length;
          next = event.offset + data.length;
          if (got >= maxBytes) break;
          // Once there is output, take only what is there now: the next read waits again.
          clearTimeout(timer);
          setTimeout(() => stream.close(), 0).unref();
        } else {
          complete = true;
          break;
        }
      }
    } catch (error) {
      if (!(error instanceof Error && error.message === "the reader was closed")) throw runtimeError(error);
    } finally {
      clearTimeout(timer);
      stream.close();
    }
    const row = (await repo.get(this.deps.db, stream.row.sandbox_id, stream.row.id)) ?? stream.row;
    return {
      offset: query.offset,
      next_offset: next,
      dropped_bytes: dropped,
      chunks: chunks.map((c) => ({ offset: c.offset, stream: c.stream, data: c.data.toString("base64") })),
      complete,
      process: processView(row),
    };
  }

  // ---- the owner's bookkeeping ----

  private async control(
    runtime: SandboxProcesses,
    row: repo.ProcessRow,
    op: Parameters<SandboxProcesses["controlProcess"]>[2],
  ): Promise<number> {
    try {
      const answer = await runtime.controlProcess(
        row.sandbox_id,
        { agent: row.agent_id, serial: row.agent_serial },
        op,
      );
      if (answer === -1) {
        void this.ended(row.id, { state: "lost", exitCode: null });
        throw new AppError("failed_precondition", "the process is gone");
      }
      return answer;
    } catch (error) {
      if (error instanceof AppError) throw error;
      if (error instanceof RuntimeError && error.code === "not_found") {
        void this.ended(row.id, { state: "lost", exitCode: null });
        throw new AppError("failed_precondition", "the process is gone");
      }
      throw runtimeError(error);
    }
  }

  private track(row: repo.ProcessRow): void {
    if (this.live.has(row.id)) return;
    let ended: () => void = () => undefined;
    const done = new Promise<unknown>((resolve) => {
      ended = () => resolve(undefined);
    });
    const live: Live = { row, timer: null, endingAs: null, ended };
    this.live.set(row.id, live);
    const key = refKey(row.sandbox_id, { agent: row.agent_id, serial: row.agent_serial });
    this.byRef.set(key, row.id);
    this.deps.inFlight.began(row.id, row.sandbox_id, done);
    const early = this.earlyExits.get(key);
    if (early !== undefined) {
      this.earlyExits.delete(key);
      void this.ended(row.id, { state: "exited", exitCode: early });
    }
    if (row.deadline) {
      const left = Math.max(0, row.deadline.getTime() - this.deps.clock.now().getTime());
      live.timer = setTimeout(() => {
        live.endingAs = "timeout";
        const runtime = this.deps.runtime;
        if (!runtime) return;
        void runtime
          .controlProcess(
            row.sandbox_id,
            { agent: row.agent_id, serial: row.agent_serial },
            { kind: "signal", signal: 9 },
          )
          .catch((error: unknown) =>
            this.deps.log.warn(
              { process_id: row.id, err: (error as Error).message },
              "a process's timeout kill failed",
            ),
          );
      }, left);
      live.timer.unref();
    }
  }

  /** Records a live process's end (once) and wakes whoever waits for it. */
  private async ended(id: string, end: { state: "exited" | "lost"; exitCode: number | null; reason?: repo.EndReason }) {
    const live = this.live.get(id);
    const host = this.deps.host;
    if (!host) return;
    const reason: repo.EndReason = end.reason ?? (end.state === "lost" ? "lost" : (live?.endingAs ?? "exited"));
    try {
      await repo.markEnded(
        this.deps.db,
        id,
        { state: end.state, exitCode: end.exitCode, reason, at: this.deps.clock.now() },
        host.owner(),
      );
    } catch (error) {
      this.deps.log.error({ process_id: id, err: (error as Error).message }, "a process's end was not recorded");
      return;
    }
    if (live) {
      if (live.timer) clearTimeout(live.timer);
      this.live.delete(id);
      this.byRef.delete(refKey(live.row.sandbox_id, { agent: live.row.agent_id, serial: live.row.agent_serial }));
      this.deps.inFlight.ended(id);
      live.ended();
      void this.deps.sandboxes.touch({ id: live.row.sandbox_id }, "exec").catch(() => undefined);
    }
    for (const wake of this.waiters.get(id) ?? []) wake();
    this.waiters.delete(id);
  }

  private untilEnded(sandboxId: string, id: string, timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const set = this.waiters.get(id) ?? new Set<() => void>();
      this.waiters.set(id, set);
      const wake = () => {
        clearTimeout(timer);
        set.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, timeoutMs);
      set.add(wake);
      // It may have ended between the caller's read and the registration.
      void repo
        .get(this.deps.db, sandboxId, id)
        .then((row) => {
          if (row && (row.state === "exited" || row.state === "lost")) wake();
        })
        .catch(() => undefined);
    });
  }

  /** Beyond MAX_KEPT_ENDED ended processes with kept output, the agent lets go of the oldest. */
  private async releaseOldOutput(sandboxId: string, runtime: SandboxProcesses): Promise<void> {
    const kept = await repo.keptEnded(this.deps.db, sandboxId);
    const host = this.deps.host as HostGate;
    for (const row of kept.slice(0, Math.max(0, kept.length - MAX_KEPT_ENDED + 1))) {
      await runtime
        .controlProcess(sandboxId, { agent: row.agent_id, serial: row.agent_serial }, { kind: "release" })
        .catch(() => undefined);
      await repo.markReleased(this.deps.db, row.id, host.owner());
    }
  }

  /** The sandbox's init ended: its processes ended with it. */
  async sandboxStopped(sandboxId: string): Promise<void> {
    if (!this.deps.host) return;
    const rows = await repo.liveOf(this.deps.db, sandboxId);
    for (const row of rows) {
      if (row.host_id !== this.deps.host.id) continue;
      await this.ended(row.id, { state: "exited", exitCode: null, reason: "sandbox_stopped" });
    }
  }

  /**
   * At start-up: this host's live rows, re-adopted from the agents that keep them (by boot id
   * and serial), or ended: exited while the server was away (the agent kept the exit), lost
   * when no agent keeps them (a row still `starting` included: whether it ran is not known).
   */
  async adopt(): Promise<{ adopted: number; ended: number; lost: number }> {
    const { runtime, host, db, log } = this.deps;
    const counts = { adopted: 0, ended: 0, lost: 0 };
    if (!runtime || !host) return counts;
    const rows = await repo.adoptLive(db, host.owner());
    const bySandbox = new Map<string, repo.ProcessRow[]>();
    for (const row of rows) bySandbox.set(row.sandbox_id, [...(bySandbox.get(row.sandbox_id) ?? []), row]);
    for (const [sandboxId, list] of bySandbox) {
      const kept = await runtime.listProcesses(sandboxId).catch((error: unknown) => {
        log.warn({ sandbox_id: sandboxId, err: (error as Error).message }, "could not list a sandbox's processes");
        return null;
      });
      for (const row of list) {
        const found =
          kept && row.state === "running" && kept.agent === row.agent_id
            ? kept.processes.find((p) => p.serial === row.agent_serial)
            : undefined;
        if (!found) {
          counts.lost++;
          // Tracked first, so ended() finds it; a `starting` row's process (if any) is unknown.
          await this.ended(row.id, {
            state: "lost",
            exitCode: null,
            reason: kept ? "lost" : "sandbox_stopped",
          });
          continue;
        }
        this.track(row);
        if (found.exited) {
          counts.ended++;
          await this.ended(row.id, { state: "exited", exitCode: found.exitCode });
        } else {
          counts.adopted++;
        }
      }
    }
    if (rows.length > 0) log.info(counts, "processes taken over at start-up");
    return counts;
  }

  /** Stops the timers (the processes run on: the agents keep them). */
  close(): void {
    for (const live of this.live.values()) if (live.timer) clearTimeout(live.timer);
  }
}
