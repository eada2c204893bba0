// The exec side of the local driver: each command of a running sandbox goes to that run's
// resident exec agent (exec-agent.ts), started once per run and kept per sandbox, or, when
// there is none to use, to its own `runc exec` (exec.ts). The record and runc state of a run
// are kept while its init lives, so an exec reads no file.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { exists } from "../../../lib/fs.js";
import {
  type ExecOutcome,
  type ExecRequest,
  type KeptProcess,
  type ProcessReader,
  type ProcessRef,
  type ProcessStartRequest,
  RuntimeError,
  type SandboxProcesses,
  type SandboxSession,
  type SessionHandlers,
  type SessionRequest,
} from "../interface.js";
import { runExec } from "./exec.js";
import { AgentLostError, AgentUnavailableError, buildExecAgent, EXEC_AGENT_PATH, ExecAgent } from "./exec-agent.js";
import { SessionLostError, SessionSpawnError } from "./exec-session.js";
import type { Layout, SandboxPaths } from "./layout.js";
import { execProcessSpec } from "./oci-config.js";
import { loadRecord, type SandboxRecord } from "./records.js";
import { InitHandle, isInitAlive, type RuncState, readRuncState } from "./runc.js";

/** The exec agent of one sandbox run (init pid + start time), or the failure to start it. */
interface AgentEntry {
  initPid: number;
  initStart: number;
  agent: Promise<ExecAgent | null>;
  /** The agent once `agent` resolved to one (so exec can take it without waiting a turn). */
  ready: ExecAgent | null;
  /** When starting it failed (0 while it has not): another try comes AGENT_RETRY_MS later. */
  failedAt: number;
}

const AGENT_RETRY_MS = 10_000;

/** A running sandbox as exec needs it: its record, the runc state of the run and its init (see liveRun). */
interface LiveRun {
  record: SandboxRecord;
  paths: SandboxPaths;
  state: RuncState;
  init: InitHandle;
}

export interface ExecRunnerOptions {
  /** Run execs through a resident agent (default true); otherwise each is its own `runc exec`. */
  enabled: boolean;
  /** Where the agent binary is built and cached (default `<tmpdir>/warren-exec-agent`). */
  cacheDir: string | undefined;
  /** Start a sandbox's agent in the background right after its start. */
  prestart: boolean;
}

export class ExecRunner implements SandboxProcesses {
  private readonly agents = new Map<string, AgentEntry>();
  private readonly exitListeners: ((id: string, ref: ProcessRef, exitCode: number) => void)[] = [];
  /** The run each sandbox was last seen in by exec, valid while its init lives (see liveRun). */
  private readonly liveRuns = new Map<string, LiveRun>();
  private readonly enabled: boolean;
  private readonly cacheDir: string | undefined;
  private readonly prestart: boolean;
  private builtBinary: string | null = null;
  private agentBuildWarned = false;
  private closed = false;
  /** Short private dir for the agents' start-up sockets (see ExecAgentStartInput.socketDir). */
  private agentSocketDir: Promise<string> | null = null;

  constructor(
    private readonly layout: Layout,
    options: ExecRunnerOptions,
  ) {
    this.enabled = options.enabled;
    this.cacheDir = options.cacheDir;
    this.prestart = options.prestart;
  }

  async exec(id: string, request: ExecRequest): Promise<ExecOutcome> {
    const { record, paths, state } = this.seenRun(id) ?? (await this.liveRun(id));
    const processSpec = execProcessSpec(record.identity, request);
    if (!(request.timeoutSeconds > 0)) throw new RuntimeError("invalid_spec", "timeoutSeconds must be positive");
    if (!state) return { kind: "sandbox_stopped" };
    const agent = this.readyAgent(id, state) ?? (await this.agentFor(id, record, paths, state));
    if (agent) {
      try {
        return await agent.run(
          { argv: processSpec.args, env: processSpec.env, cwd: processSpec.cwd },
          { timeoutSeconds: request.timeoutSeconds, maxOutputBytes: request.maxOutputBytes },
        );
      } catch (error) {
        if (error instanceof AgentLostError) {
          // The agent went away (or broke the protocol) after the request went out. With the
          // sandbox gone too, a started command was killed with it (SIGKILL, as runc exec
          // reports it). Otherwise the command may have run, may still run, or never started:
          // it is indeterminate, never "did not run", so a retry cannot run it twice unknowingly.
          if (error.exit !== null) return { kind: "completed", exit: error.exit, ...error.output };
          if (error.started && (await this.initEndsSoon(state))) {
            return { kind: "completed", exit: 137, ...error.output };
          }
          return { kind: "indeterminate", ...error.output, message: `sandbox ${id}: ${error.message}` };
        }
        if (!(error instanceof AgentUnavailableError)) throw error;
        // Nothing was sent: the command runs through runc exec below.
      }
    }
    return runExec({
      runcRoot: this.layout.runcRoot,
      id,
      execDir: paths.execDir,
      process: processSpec,
      timeoutSeconds: request.timeoutSeconds,
      maxOutputBytes: request.maxOutputBytes,
    });
  }

  /**
   * An interactive command through the run's agent. There is no `runc exec` fallback: a
   * session needs the agent's streaming mode (a run started before it has an agent that
   * cannot stream, and gets `unsupported`).
   */
  async openSession(id: string, request: SessionRequest, handlers: SessionHandlers): Promise<SandboxSession> {
    const { record, paths, state } = this.seenRun(id) ?? (await this.liveRun(id));
    const processSpec = execProcessSpec(record.identity, request);
    if (!state) throw new RuntimeError("not_running", `sandbox ${id} is not running`);
    const agent = this.readyAgent(id, state) ?? (await this.agentFor(id, record, paths, state));
    if (!agent?.streams) throw new RuntimeError("unsupported", `sandbox ${id} has no exec agent that streams sessions`);
    try {
      return await agent.openSession(
        { argv: processSpec.args, env: processSpec.env, cwd: processSpec.cwd },
        request.pty,
        handlers,
      );
    } catch (error) {
      if (error instanceof SessionSpawnError) throw new RuntimeError("start_failed", error.message);
      if (error instanceof SessionLostError || error instanceof AgentUnavailableError) {
        throw new RuntimeError("host_failure", `sandbox ${id}: ${error.message}`);
      }
      throw error;
    }
  }

  // ---- background processes (exec-processes.ts) ----

  /** The run's agent if it keeps processes; RuntimeError otherwise. */
  private async keepingAgent(id: string): Promise<ExecAgent> {
    const { record, paths, state } = this.seenRun(id) ?? (await this.liveRun(id));
    if (!state) throw new RuntimeError("not_running", `sandbox ${id} is not running`);
    const agent = this.readyAgent(id, state) ?? (await this.agentFor(id, record, paths, state));
    if (!agent?.keepsProcesses)
      throw new RuntimeError("unsupported", `sandbox ${id} has no exec agent that keeps processes`);
    return agent;
  }

  private async agentOf(id: string, ref: ProcessRef): Promise<ExecAgent> {
    const agent = await this.keepingAgent(id);
    if (agent.bootId !== ref.agent) throw new RuntimeError("not_found", `the agent of process ${ref.serial} is gone`);
    return agent;
  }

  async startProcess(id: string, request: ProcessStartRequest): Promise<KeptProcess> {
    const { record } = this.seenRun(id) ?? (await this.liveRun(id));
    const processSpec = execProcessSpec(record.identity, request);
    const agent = await this.keepingAgent(id);
    try {
      const started = await agent.startProcess(
        { argv: processSpec.args, env: processSpec.env, cwd: processSpec.cwd },
        { pty: request.pty, stdin: request.stdin },
      );
      return {
        agent: agent.bootId,
        serial: started.serial,
        pid: started.pid,
        exited: false,
        exitCode: null,
        firstOffset: 0,
        endOffset: 0,
        done: false,
      };
    } catch (error) {
      if (error instanceof SessionSpawnError) throw new RuntimeError("start_failed", error.message);
      throw new RuntimeError("host_failure", `sandbox ${id}: ${(error as Error).message}`);
    }
  }

  async listProcesses(id: string): Promise<{ agent: string; processes: KeptProcess[] } | null> {
    let agent: ExecAgent;
    try {
      agent = await this.keepingAgent(id);
    } catch (error) {
      if (error instanceof RuntimeError && ["not_running", "unsupported", "not_found"].includes(error.code))
        return null;
      throw error;
    }
    const list = await agent.listProcesses();
    return { agent: agent.bootId, processes: list.map((p) => ({ agent: agent.bootId, ...p })) };
  }

  async controlProcess(
    id: string,
    ref: ProcessRef,
    op: Parameters<SandboxProcesses["controlProcess"]>[2],
  ): Promise<number> {
    const agent = await this.agentOf(id, ref);
    const args = Buffer.alloc(8);
    switch (op.kind) {
      case "signal":
        args.writeUInt32LE(op.signal, 0);
        return agent.controlProcess("N", ref.serial, args.subarray(0, 4));
      case "stdin":
        return agent.controlProcess("J", ref.serial, op.data);
      case "close":
        return agent.controlProcess("Y", ref.serial);
      case "resize":
        args.writeUInt32LE(Math.min(Math.max(op.rows, 0), 0xffff), 0);
        args.writeUInt32LE(Math.min(Math.max(op.cols, 0), 0xffff), 4);
        return agent.controlProcess("V", ref.serial, args);
      case "release":
        return agent.controlProcess("U", ref.serial);
    }
  }

  async openProcessReader(id: string, ref: ProcessRef): Promise<ProcessReader> {
    const agent = await this.agentOf(id, ref);
    return agent.openReader(ref.serial);
  }

  onProcessExit(listener: (id: string, ref: ProcessRef, exitCode: number) => void): void {
    this.exitListeners.push(listener);
  }

  /**
   * The run exec last saw of the sandbox, while its init (PID and start time, so never a
   * reused PID) lives: a record is written before the run (or, for a pooled sandbox, by
   * assign(), which forgets the run it rewrites), and a run's runc state names its init, so
   * neither can have changed. Otherwise null, and liveRun reads both from disk again.
   */
  private seenRun(id: string): LiveRun | null {
    const seen = this.liveRuns.get(id);
    if (!seen) return null;
    if (seen.init.alive()) return seen;
    this.forgetRun(id);
    return null;
  }

  /** The sandbox's record and current run from disk (state null when its init is not alive; not_found without a record). */
  private async liveRun(id: string): Promise<{ record: SandboxRecord; paths: SandboxPaths; state: RuncState | null }> {
    const { record, paths } = await loadRecord(this.layout, id);
    const state = await readRuncState(this.layout.runcRoot, id);
    const init = state && !this.closed ? InitHandle.open(state) : null;
    if (!state || !init) return { record, paths, state: null };
    this.forgetRun(id);
    const live = { record, paths, state, init };
    this.liveRuns.set(id, live);
    return live;
  }

  forgetRun(id: string): void {
    this.liveRuns.get(id)?.init.close();
    this.liveRuns.delete(id);
  }

  /** The agent binary to mount into sandboxes (built when missing), or undefined: no agent. */
  async agentBinary(): Promise<string | undefined> {
    if (!this.enabled) return undefined;
    if (this.builtBinary && (await exists(this.builtBinary))) return this.builtBinary;
    try {
      this.builtBinary = await buildExecAgent(this.cacheDir);
      return this.builtBinary;
    } catch (error) {
      this.builtBinary = null;
      if (!this.agentBuildWarned) {
        this.agentBuildWarned = true;
        process.emitWarning(`the exec agent could not be built, execs use runc exec: ${(error as Error).message}`);
      }
      return undefined;
    }
  }

  /**
   * The live agent of this sandbox run, started on first use (concurrent first execs share
   * one start); null when there is none to use (then runc exec runs the command).
   */
  private async agentFor(
    id: string,
    record: SandboxRecord,
    paths: SandboxPaths,
    state: RuncState,
  ): Promise<ExecAgent | null> {
    if (!this.enabled || this.closed) return null;
    for (let attempt = 0; attempt < 2; attempt++) {
      let entry = this.agents.get(id);
      if (entry && (entry.initPid !== state.initPid || entry.initStart !== state.initStart)) {
        this.forgetAgent(id);
        entry = undefined;
      }
      entry ??= this.startAgent(id, record, paths, state);
      const agent = await entry.agent;
      if (agent?.alive) return agent;
      if (this.agents.get(id) !== entry) continue;
      if (!agent && Date.now() - entry.failedAt < AGENT_RETRY_MS) return null;
      // It died (or failed long enough ago): start another.
      this.agents.delete(id);
    }
    return null;
  }

  /** The live agent of this run when it is already up, or null (agentFor then gets or starts one). */
  private readyAgent(id: string, state: RuncState): ExecAgent | null {
    const entry = this.agents.get(id);
    if (!entry || entry.initPid !== state.initPid || entry.initStart !== state.initStart) return null;
    return entry.ready?.alive ? entry.ready : null;
  }

  /**
   * `<root>/sock` (kept, reused after a restart), or a private temp dir removed at close when
   * the root is so deep that a socket path below it would pass the ~100 bytes Unix allows.
   */
  private async makeAgentSocketDir(): Promise<string> {
    const dir = path.join(this.layout.root, "sock");
    if (Buffer.byteLength(path.join(dir, "agent-000000000000.sock")) > 100) {
      return mkdtemp(path.join(os.tmpdir(), "warren-agent-"));
    }
    await mkdir(dir, { recursive: true, mode: 0o700 });
    return dir;
  }

  private startAgent(id: string, record: SandboxRecord, paths: SandboxPaths, state: RuncState): AgentEntry {
    const entry: AgentEntry = {
      initPid: state.initPid,
      initStart: state.initStart,
      agent: Promise.resolve(null),
      ready: null,
      failedAt: 0,
    };
    entry.agent = (async () => {
      // A run started before the agent existed (or without its binary) has no mount of it.
      const binary = await this.agentBinary();
      if (!binary || !(await exists(`/proc/${state.initPid}/root${EXEC_AGENT_PATH}`))) return null;
      this.agentSocketDir ??= this.makeAgentSocketDir();
      const socketDir = await this.agentSocketDir;
      const keeperPath = path.join(socketDir, `k-${id}.sock`);
      // A kept agent of this run (the server restarted while it kept processes) is reattached.
      let agent: ExecAgent | null = null;
      if (await exists(keeperPath)) agent = await ExecAgent.attach(keeperPath, 3000).catch(() => null);
      agent ??= await ExecAgent.start({
        binary,
        socketDir,
        keeperPath,
        runcRoot: this.layout.runcRoot,
        id,
        execDir: paths.execDir,
        // The sandbox identity and environment of any exec; each request brings its own cwd.
        process: execProcessSpec(record.identity, { argv: [EXEC_AGENT_PATH, "--kept"], cwd: "/" }),
      });
      const kept = agent;
      kept.onProcessExit = (serial, code) => {
        for (const listener of this.exitListeners) listener(id, { agent: kept.bootId, serial }, code);
      };
      if (this.agents.get(id) !== entry) {
        // Stopped, destroyed or closed meanwhile.
        agent.close();
        return null;
      }
      return agent;
    })()
      .catch(() => null)
      .then((agent) => {
        if (!agent) entry.failedAt = Date.now();
        entry.ready = agent;
        return agent;
      });
    this.agents.set(id, entry);
    return entry;
  }

  /** Starts the agent of a sandbox that just started, in the background (errors are dropped). */
  prestartAgent(id: string): void {
    if (!this.enabled || !this.prestart || this.closed) return;
    setImmediate(() => {
      void (async () => {
        const { record, paths } = await loadRecord(this.layout, id);
        const state = await readRuncState(this.layout.runcRoot, id);
        if (state && (await isInitAlive(state))) await this.agentFor(id, record, paths, state);
      })().catch(() => undefined);
    });
  }

  /**
   * Drops the sandbox's agent from the map. An idle one is told to exit (a stop kills it
   * with the sandbox anyway); a busy one keeps running its commands until the sandbox ends.
   */
  forgetAgent(id: string, always = false): void {
    const entry = this.agents.get(id);
    if (!entry) return;
    this.agents.delete(id);
    void entry.agent.then((agent) => {
      if (agent && (always || agent.inFlight === 0)) agent.close();
    });
  }

  /**
   * Whether the init is gone or goes within a moment. A sandbox's processes die while its
   * init is still exiting (it kills the PID namespace first), so an agent can be gone
   * before the init looks dead.
   */
  private async initEndsSoon(state: RuncState): Promise<boolean> {
    for (let waited = 0; waited < 1000; waited += 20) {
      if (!(await isInitAlive(state))) return true;
      await delay(20);
    }
    return !(await isInitAlive(state));
  }

  /** The host PID of the sandbox's live agent, if it has one (for tests and diagnostics). */
  async execAgentPid(id: string): Promise<number | null> {
    const agent = await this.agents.get(id)?.agent;
    return agent?.alive ? agent.hostPid : null;
  }

  /** Ends every agent (running commands keep running) and forgets every run. */
  async close(): Promise<void> {
    this.closed = true;
    for (const id of [...this.agents.keys()]) this.forgetAgent(id, true);
    for (const id of [...this.liveRuns.keys()]) this.forgetRun(id);
    const socketDir = await this.agentSocketDir?.catch(() => null);
    if (socketDir?.startsWith(path.join(os.tmpdir(), "warren-agent-")))
      await rm(socketDir, { recursive: true, force: true });
  }
}
