// The exec agent (exec-agent.c): one small static C process per running sandbox, started
// once per run with `runc exec --detach`, that runs each command as a fork + execve of its
// own. Every command so inherits exactly runc's exec setup (namespaces, cgroup,
// capabilities, seccomp, no_new_privs, rlimits, identity) without paying for `runc exec`
// (two Go processes, 20-40 ms on a small host) per command. This file builds the binary
// (gcc -static, cached by the source's hash), speaks the frame protocol documented at the
// top of exec-agent.c (exec-frames.ts) over the agent's stdin/stdout, opens streaming
// sessions (exec-session.ts), and gives run() the semantics of
// runExec (exec.ts): separate stdout/stderr under one cap, timeout kills the process group,
// a short drain after the exit, a missing executable as spawn_failed.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFile, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { projectFile } from "../../../lib/paths.js";
import type { ExecOutcome, SessionHandlers } from "../interface.js";
import { OutputCollector } from "./exec.js";
import {
  type AgentRequest,
  encodeFrame,
  encodeRequest,
  type Frame,
  FrameDecoder,
  type FrameType,
  MAX_AGENT_EXECS,
  MAX_REQUEST_PAYLOAD,
} from "./exec-frames.js";
import {
  type AgentProcessInfo,
  controlAnswer,
  encodeProcessHeader,
  listAnswer,
  type Pending,
  type ReadResult,
  readAnswer,
  startAnswer,
  u32,
  u64,
} from "./exec-processes.js";
import { AgentSession, encodeSessionHeader, SessionLostError, SessionSpawnError } from "./exec-session.js";
import { TOOLS } from "./host.js";
import type { OciProcess } from "./oci-config.js";
import { runcExecCall } from "./runc.js";
import { SpawnerUnavailable, spawner } from "./spawner.js";
import { buildStaticBinary, defaultBinaryCacheDir } from "./static-binary.js";
import { firstRuncError } from "./supervisor.js";

export {
  type AgentRequest,
  decodeRequest,
  encodeFrame,
  encodeRequest,
  FRAME_HEADER,
  type Frame,
  FrameDecoder,
  FrameError,
  type FrameType,
  MAX_AGENT_EXECS,
  MAX_AGENT_FRAME_PAYLOAD,
  MAX_REQUEST_PAYLOAD,
} from "./exec-frames.js";
export { EXEC_AGENT_PATH } from "./oci-config.js";

/** As in runExec: how long pipes may stay open after the exit (the agent enforces it). */
const DRAIN_GRACE_MS = 200;
const START_TIMEOUT_MS = 10_000;
/** How long a killed or exited command's agent may take to say 'D' before the exec gives up on it. */
const AGENT_SLACK_MS = 5_000;

/** The longest 'F' message the agent writes (its `message` buffer, NUL excluded). */
const MAX_FAILURE_MESSAGE = 8191;
/** Requests written but not yet taken by the agent; an agent that stops reading gets no more. */
const MAX_UNSENT_BYTES = 2 * MAX_REQUEST_PAYLOAD;
/** Execs given up on before their last frame, whose late frames are still expected (and dropped). */
const MAX_ABANDONED_EXECS = 1024;
/** Requests and reads in flight on one agent (beyond MAX_AGENT_EXECS' execs and sessions). */
const MAX_PENDING_REQUESTS = 4096;
/** Version 1 (an agent of a run started before sessions existed) runs execs only. */
const HELLOS = new Map([
  ["warren-exec-agent 1", 1],
  ["warren-exec-agent 2", 2],
]);
/** Version 3 keeps background processes and names its boot (16 hex digits) in the hello. */
const HELLO_3 = /^warren-exec-agent 3 ([0-9a-f]{16})$/;

// ---- building ----

const SOURCE_FILE = projectFile("src/drivers/runtime/local/exec-agent.c");

export { COMPILER } from "./static-binary.js";

/** The default cache: root-owned, 0700, in the temp dir, shared by every driver on the host. */
export function defaultExecAgentCacheDir(): string {
  return defaultBinaryCacheDir();
}

/** The path of the agent binary built from exec-agent.c (static-binary.ts). */
export function buildExecAgent(cacheDir = defaultExecAgentCacheDir()): Promise<string> {
  return buildStaticBinary(SOURCE_FILE, "exec-agent", cacheDir);
}

// ---- the client ----

/** The agent could not be started, or was gone before the request was sent: use runc exec. */
export class AgentUnavailableError extends Error {
  override name = "AgentUnavailableError";
}

/**
 * The agent went away after the request was sent: whether and how the command ended is not
 * known here. `started` tells whether the agent had reported the command's start; `exit`
 * is its exit status if that came; `output` is what arrived.
 */
export class AgentLostError extends Error {
  override name = "AgentLostError";
  readonly output: { stdout: string; stderr: string; truncated: boolean };
  readonly started: boolean;
  readonly exit: number | null;

  constructor(
    message: string,
    output: { stdout: string; stderr: string; truncated: boolean },
    started: boolean,
    exit: number | null,
  ) {
    super(message);
    this.output = output;
    this.started = started;
    this.exit = exit;
  }
}

export interface ExecAgentStartInput {
  /** The agent binary on the host (buildExecAgent); it also runs runc as the agent's reaper. */
  binary: string;
  runcRoot: string;
  id: string;
  /** Where the process spec and runc's log go for the moment of the start (the sandbox's exec dir). */
  execDir: string;
  /** The agent's process: the sandbox identity, argv [EXEC_AGENT_PATH]. */
  process: OciProcess;
  /**
   * A short private (0700) dir for the moment's listening socket: a Unix socket path has
   * room for ~100 bytes, which a sandbox's exec dir under a real root exceeds. Default execDir.
   */
  socketDir?: string;
  timeoutMs?: number;
  /**
   * Where the agent's keeper listens (exec-agent.c `--listen`), so a restarted server
   * reattaches (ExecAgent.attach): the agent then keeps its background processes across
   * connections. Absent: the agent ends with its connection, as version 2 did.
   */
  keeperPath?: string;
}

interface PendingExec {
  /** Null, or how the frame broke the protocol. */
  onFrame(frame: Frame): string | null;
  onLost(reason: string): void;
}

/**
 * A listening Unix socket for the agent's reaper to connect to (`--connect`): its
 * connection becomes the agent's stdin and stdout. Not a child's own stdio pipes: the
 * reaper is started by the spawner process (a fork of the server would block it for tens of
 * ms), and Node destroys a child's stdin when the child exits.
 */
async function listenOnce(
  dir: string,
): Promise<{ file: string; connection: Promise<net.Socket>; close(): Promise<void> }> {
  const file = path.join(dir, `agent-${randomBytes(6).toString("hex")}.sock`);
  if (Buffer.byteLength(file) > 100) throw new AgentUnavailableError(`socket path too long: ${file}`);
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(file, resolve);
  });
  const connection = new Promise<net.Socket>((resolve) => server.once("connection", resolve));
  return {
    file,
    connection,
    close: async () => {
      server.close();
      await rm(file, { force: true });
    },
  };
}

/** One running agent in one sandbox run; many execs at once. */
export class ExecAgent {
  private pid = 0;
  private readonly socket: net.Socket;
  private readonly decoder = new FrameDecoder();
  private readonly pending = new Map<number, PendingExec>();
  /** Process requests and reads in flight (exec-processes.ts), apart from the execs' count. */
  private readonly requests = new Map<number, Pending>();
  /** Ids given up on before their last frame, oldest first (a Map keeps insertion order). */
  private readonly abandoned = new Map<number, true>();
  private nextId = 1;
  private greeted = false;
  private version = 0;
  private boot = "";
  /** A background process's exit ('q': its serial, its code), for whoever keeps its row. */
  onProcessExit: ((serial: number, code: number) => void) | null = null;
  private gone = false;
  private whyGone = "";
  private helloResult: { resolve(): void; reject(error: Error): void } | null = null;
  /** Resolves on the agent's hello; rejects when the connection ends or breaks the protocol first. */
  readonly hello: Promise<void>;

  /**
   * Serves execs on a connection to an agent (start() makes it; tests hand in one end of a
   * socket pair). Everything read from it is hostile: a frame that breaks the protocol ends
   * this agent and its pending execs, and nothing it sends can throw out of a listener.
   */
  constructor(socket: net.Socket) {
    this.socket = socket;
    this.hello = new Promise<void>((resolve, reject) => {
      this.helloResult = { resolve, reject };
    });
    this.hello.catch(() => undefined);
    socket.on("error", () => undefined);
    socket.on("data", (chunk: Buffer) => {
      try {
        this.receive(chunk);
      } catch (error) {
        this.lost(`the exec agent's frames could not be handled: ${(error as Error).message}`);
      }
    });
    socket.on("close", () => this.lost("the exec agent's connection closed"));
  }

  /** The agent's PID on the host (0 until start() has read it). */
  get hostPid(): number {
    return this.pid;
  }

  get alive(): boolean {
    return !this.gone;
  }

  /** Why the agent is gone ("" while it is alive). */
  get closeReason(): string {
    return this.whyGone;
  }

  get inFlight(): number {
    return this.pending.size;
  }

  /** Bytes of an incomplete frame from the agent held back (bounded by the decoder's cap). */
  get buffered(): number {
    return this.decoder.buffered;
  }

  /** `runc exec --detach` of the agent on a socket; resolves once the agent said hello. */
  static async start(input: ExecAgentStartInput): Promise<ExecAgent> {
    const name = `agent-${Date.now().toString(36)}-${randomBytes(6).toString("hex")}`;
    const call = runcExecCall(input.runcRoot, input.id, input.execDir, name, { detach: true });
    const { processFile, logFile, pidFile } = call;
    await writeFile(processFile, JSON.stringify(input.process), { mode: 0o600 });
    let socket: net.Socket | null = null;
    const timeoutMs = input.timeoutMs ?? START_TIMEOUT_MS;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new AgentUnavailableError("the exec agent did not start in time")), timeoutMs);
    });
    deadline.catch(() => undefined);
    const listener = await listenOnce(input.socketDir ?? input.execDir);
    try {
      // runc hands its stdio (the connection) to the agent as they are (--detach without a
      // terminal). The agent binary's --reap mode runs runc and then reaps the orphaned agent
      // (see exec-agent.c); in its own session, it outlives a crash of the server.
      const runcArgs = [...call.args];
      const keeper: string[] = [];
      if (input.keeperPath) {
        runcArgs.splice(runcArgs.indexOf("exec") + 1, 0, "--preserve-fds", "1");
        keeper.push("--listen", input.keeperPath);
      }
      const args = ["--connect", listener.file, ...keeper, "--reap", TOOLS.runc, ...runcArgs];
      try {
        await spawner.detach(input.binary, args, {});
      } catch (error) {
        if (!(error instanceof SpawnerUnavailable)) throw new AgentUnavailableError((error as Error).message);
        const child = spawn(input.binary, args, { stdio: "ignore", detached: true });
        child.on("error", () => undefined);
        child.unref();
      }
      const ours = await Promise.race([listener.connection, deadline]);
      socket = ours;
      await listener.close();
      // The agent must not keep the server alive; a running exec's timer does that.
      ours.unref();
      const agent = new ExecAgent(ours);
      try {
        await Promise.race([agent.hello, deadline]);
      } catch (error) {
        // Closed before the hello: runc could not start the agent (or the agent died at once).
        if (agent.closeReason !== "the exec agent's connection closed") throw error;
        const message = firstRuncError(await readFile(logFile, "utf8").catch(() => "")) ?? "no message from runc";
        throw new AgentUnavailableError(`runc exec of the agent failed: ${message}`);
      }
      // The agent may say hello a moment before runc, exiting, has written its pid file.
      let hostPid = Number.NaN;
      for (let waited = 0; waited <= 2000 && !(hostPid > 0); waited += 5) {
        hostPid = Number((await readFile(pidFile, "utf8").catch(() => "")).trim());
        if (!(hostPid > 0)) await new Promise((resolve) => setTimeout(resolve, 5));
      }
      if (!Number.isInteger(hostPid) || hostPid <= 0) throw new AgentUnavailableError("no pid of the agent");
      agent.pid = hostPid;
      // Beside the keeper's socket, for a server that reattaches (diagnostics and tests).
      if (input.keeperPath) await writeFile(`${input.keeperPath}.pid`, String(hostPid), { mode: 0o600 });
      return agent;
    } catch (error) {
      socket?.destroy();
      throw error instanceof AgentUnavailableError ? error : new AgentUnavailableError(String(error));
    } finally {
      clearTimeout(timer);
      await listener.close();
      await Promise.all([rm(processFile, { force: true }), rm(logFile, { force: true }), rm(pidFile, { force: true })]);
    }
  }

  /**
   * Runs one command. Resolves like runExec; rejects with AgentUnavailableError when the
   * request could not be sent (nothing ran) and AgentLostError when the agent went away (or
   * broke the protocol) after the request was sent: the command may have run.
   */
  run(request: AgentRequest, limits: { timeoutSeconds: number; maxOutputBytes: number }): Promise<ExecOutcome> {
    if (this.gone) return Promise.reject(new AgentUnavailableError("the exec agent is gone"));
    if (!this.greeted) return Promise.reject(new AgentUnavailableError("the exec agent has not said hello"));
    if (this.pending.size >= MAX_AGENT_EXECS) return Promise.reject(new AgentUnavailableError("the agent is full"));
    const payload = encodeRequest(request);
    if (payload.length > MAX_REQUEST_PAYLOAD) {
      return Promise.reject(new AgentUnavailableError("the request is too large for the agent"));
    }
    if (this.socket.writableLength + payload.length > MAX_UNSENT_BYTES) {
      return Promise.reject(new AgentUnavailableError("the exec agent is not reading its requests"));
    }
    const execId = this.nextId;
    this.nextId = this.nextId >= 0xffff_fff0 ? 1 : this.nextId + 1;
    return new Promise<ExecOutcome>((resolve, reject) => {
      const output = new OutputCollector(limits.maxOutputBytes);
      let exit: number | null = null;
      let started = false;
      let timedOut = false;
      let slackTimer: NodeJS.Timeout | null = null;
      const finish = (outcome: ExecOutcome | Error) => {
        if (!this.pending.delete(execId)) return;
        clearTimeout(timeoutTimer);
        if (slackTimer) clearTimeout(slackTimer);
        if (outcome instanceof Error) reject(outcome);
        else resolve(outcome);
      };
      const settle = () => {
        const captured = output.result();
        if (timedOut) finish({ kind: "timeout", ...captured });
        else if (exit !== null) finish({ kind: "completed", exit, ...captured });
        else
          finish(new AgentLostError("the exec agent ended the exec without an exit status", captured, started, null));
      };
      // If the agent stops answering, the exec must still end: what is known is returned.
      const giveUpLater = () => {
        if (slackTimer) return;
        slackTimer = setTimeout(() => {
          this.abandon(execId);
          if (exit !== null || timedOut) settle();
          else finish(new AgentLostError("the exec agent stopped answering", output.result(), started, null));
        }, DRAIN_GRACE_MS + AGENT_SLACK_MS);
      };
      this.pending.set(execId, {
        // The order the agent keeps (exec-agent.c): F alone, or P, output, X, more output, D.
        onFrame: (frame) => {
          const length = frame.payload.length;
          switch (frame.type) {
            case "P":
              if (length !== 4 || started) return "a second or malformed start";
              started = true;
              return null;
            case "O":
            case "E":
              if (!started) return "output before the start";
              output.push(frame.type === "O" ? "stdout" : "stderr", frame.payload);
              return null;
            case "X": {
              if (length !== 4 || !started || exit !== null) return "an exit out of order or malformed";
              const code = frame.payload.readInt32LE(0);
              // An exit status, or 128 + a signal number.
              if (code < 0 || code > 255) return `an exit code of ${code}`;
              exit = code;
              giveUpLater();
              return null;
            }
            case "F":
              if (started || length > MAX_FAILURE_MESSAGE) return "a failure after the start, or too long";
              finish({ kind: "spawn_failed", message: frame.payload.toString("utf8") });
              return null;
            case "D":
              if (length !== 0 || exit === null) return "a done before the exit";
              settle();
              return null;
            default:
              return `a frame of unknown type ${JSON.stringify(frame.type)}`;
          }
        },
        onLost: (reason) =>
          finish(
            new AgentLostError(
              `${reason} during the exec${started ? "" : " (its start was not reported)"}`,
              output.result(),
              started,
              exit,
            ),
          ),
      });
      const timeoutTimer = setTimeout(() => {
        timedOut = true;
        this.send(encodeFrame(execId, "K"));
        giveUpLater();
      }, limits.timeoutSeconds * 1000);
      this.send(encodeFrame(execId, "R", payload));
    });
  }

  /** Whether this agent streams sessions (openSession); an agent of an older run does not. */
  get streams(): boolean {
    return this.version >= 2;
  }

  /**
   * Starts a streaming session (exec-session.ts); resolves once its command runs. Rejects
   * with AgentUnavailableError when nothing was sent, SessionSpawnError when the command did
   * not start and SessionLostError when the agent went away before reporting its start.
   */
  async openSession(
    request: AgentRequest,
    pty: { rows: number; cols: number } | null,
    handlers: SessionHandlers,
  ): Promise<AgentSession> {
    if (this.gone) throw new AgentUnavailableError("the exec agent is gone");
    if (!this.greeted || !this.streams) throw new AgentUnavailableError("the exec agent does not stream sessions");
    if (this.pending.size >= MAX_AGENT_EXECS) throw new AgentUnavailableError("the agent is full");
    const payload = Buffer.concat([encodeSessionHeader(pty), encodeRequest(request)]);
    if (payload.length > MAX_REQUEST_PAYLOAD) throw new AgentUnavailableError("the request is too large for the agent");
    const execId = this.nextId;
    this.nextId = this.nextId >= 0xffff_fff0 ? 1 : this.nextId + 1;
    const session = new AgentSession(
      execId,
      pty !== null,
      (frame) => this.send(frame),
      () => this.pending.delete(execId),
      handlers,
    );
    this.pending.set(execId, session);
    this.send(encodeFrame(execId, "S", payload));
    // An agent that never reports the start must not hold the caller: the command is killed
    // (if it started after all) and its late frames are dropped.
    const timer = setTimeout(() => {
      if (this.pending.get(execId) !== session) return;
      this.send(encodeFrame(execId, "K"));
      this.abandon(execId);
      session.onLost("the exec agent did not report the session's start in time");
    }, START_TIMEOUT_MS);
    try {
      await session.started;
    } finally {
      clearTimeout(timer);
    }
    return session;
  }

  /**
   * Reattaches to a kept agent through its keeper's socket (a server restarted while the
   * agent kept background processes); resolves once the agent said hello on the new connection.
   */
  static async attach(keeperPath: string, timeoutMs = START_TIMEOUT_MS): Promise<ExecAgent> {
    const socket = net.connect(keeperPath);
    const agent = new ExecAgent(socket);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        agent.hello,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new AgentUnavailableError("the kept agent did not say hello")), timeoutMs);
        }),
      ]);
    } catch (error) {
      socket.destroy();
      throw error instanceof AgentUnavailableError ? error : new AgentUnavailableError(String(error));
    } finally {
      clearTimeout(timer);
    }
    socket.unref();
    const pid = Number((await readFile(`${keeperPath}.pid`, "utf8").catch(() => "")).trim());
    if (Number.isInteger(pid) && pid > 0) agent.pid = pid;
    return agent;
  }

  /** This agent's boot id (version 3), "" before: a process row names the agent that keeps it. */
  get bootId(): string {
    return this.boot;
  }

  /** Whether this agent keeps background processes (version 3). */
  get keepsProcesses(): boolean {
    return this.version >= 3;
  }

  private request<T>(
    type: FrameType,
    payload: Buffer,
    answer: (resolve: (value: T) => void, reject: (error: Error) => void) => Pending,
  ): Promise<T> {
    if (this.gone) return Promise.reject(new AgentUnavailableError("the exec agent is gone"));
    if (!this.keepsProcesses) return Promise.reject(new AgentUnavailableError("the exec agent keeps no processes"));
    if (this.requests.size >= MAX_PENDING_REQUESTS)
      return Promise.reject(new AgentUnavailableError("the agent is busy"));
    const id = this.nextId;
    this.nextId = this.nextId >= 0xffff_fff0 ? 1 : this.nextId + 1;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.requests.delete(id)) {
          this.abandon(id);
          reject(
            new AgentLostError(
              "the exec agent did not answer in time",
              { stdout: "", stderr: "", truncated: false },
              false,
              null,
            ),
          );
        }
      }, START_TIMEOUT_MS);
      const done =
        <V>(settle: (value: V) => void) =>
        (value: V) => {
          clearTimeout(timer);
          this.requests.delete(id);
          settle(value);
        };
      this.requests.set(id, answer(done(resolve), done(reject)));
      this.send(encodeFrame(id, type, payload));
    });
  }

  /** Starts a background process ('B'); rejects with SessionSpawnError when it did not start. */
  startProcess(
    request: AgentRequest,
    options: { pty: { rows: number; cols: number } | null; stdin: boolean },
  ): Promise<{ serial: number; pid: number }> {
    const payload = Buffer.concat([encodeProcessHeader(options.pty, options.stdin), encodeRequest(request)]);
    if (payload.length > MAX_REQUEST_PAYLOAD)
      return Promise.reject(new AgentUnavailableError("the request is too large for the agent"));
    return this.request("B", payload, (resolve, reject) =>
      startAnswer(
        resolve,
        reject,
        (message) => new SessionSpawnError(message),
        (reason) => new SessionLostError(reason),
      ),
    );
  }

  /** 'N' signal, 'J' stdin bytes, 'Y' close stdin, 'V' resize, 'U' release: the agent's answer ('j'). */
  controlProcess(type: "N" | "J" | "Y" | "V" | "U", serial: number, args: Buffer = Buffer.alloc(0)): Promise<number> {
    return this.request(type, Buffer.concat([u32(serial), args]), controlAnswer);
  }

  /** The background processes the agent keeps. */
  listProcesses(): Promise<AgentProcessInfo[]> {
    return this.request("L", Buffer.alloc(0), listAnswer);
  }

  /**
   * A reader of one process's output: each read() answers as soon as there is output at or
   * after `offset` (at most `max` bytes), or the output is complete. While it is open the
   * agent keeps every byte from its offset on (the process waits instead); close() lets go.
   */
  openReader(serial: number): { read(offset: number, max: number): Promise<ReadResult>; close(): void } {
    const id = this.nextId;
    this.nextId = this.nextId >= 0xffff_fff0 ? 1 : this.nextId + 1;
    let closed = false;
    return {
      read: (offset, max) => {
        if (this.gone || closed) return Promise.reject(new AgentUnavailableError("the exec agent is gone"));
        if (this.requests.has(id)) return Promise.reject(new Error("a read is in flight"));
        return new Promise<ReadResult>((resolve, reject) => {
          const settle =
            <V>(f: (value: V) => void) =>
            (value: V) => {
              this.requests.delete(id);
              f(value);
            };
          this.requests.set(id, readAnswer(offset, max, settle(resolve), settle(reject)));
          this.send(encodeFrame(id, "G", Buffer.concat([u32(serial), u64(offset), u32(max)])));
        });
      },
      close: () => {
        if (closed) return;
        closed = true;
        const pending = this.requests.get(id);
        this.requests.delete(id);
        pending?.onLost("the reader was closed");
        this.send(encodeFrame(id, "C"));
      },
    };
  }

  /** Ends the agent: it exits on stdin EOF (running commands keep running). */
  close(): void {
    this.socket.end();
  }

  private send(frame: Buffer): void {
    if (!this.gone) this.socket.write(frame);
  }

  private receive(chunk: Buffer): void {
    if (this.gone) return;
    let frames: Frame[];
    try {
      frames = this.decoder.push(chunk);
    } catch (error) {
      this.lost(`the exec agent broke the protocol: ${(error as Error).message}`);
      return;
    }
    for (const frame of frames) {
      const problem = this.dispatch(frame);
      if (problem) {
        this.lost(`the exec agent broke the protocol: ${problem} (exec ${frame.execId})`);
        return;
      }
      if (this.gone) return;
    }
  }

  /** Hands a frame to its exec; a non-null answer says how the frame broke the protocol. */
  private dispatch(frame: Frame): string | null {
    if (!this.greeted) {
      const text = frame.payload.toString("latin1");
      const boot = HELLO_3.exec(text)?.[1];
      const version = boot ? 3 : HELLOS.get(text);
      if (frame.type !== "H" || frame.execId !== 0 || version === undefined) return "no hello first";
      this.version = version;
      this.boot = boot ?? "";
      this.greeted = true;
      this.helloResult?.resolve();
      return null;
    }
    if (frame.type === "q") {
      if (frame.payload.length !== 4) return "a malformed process exit";
      const code = frame.payload.readInt32LE(0);
      if (code < 0 || code > 255) return `an exit code of ${code}`;
      this.onProcessExit?.(frame.execId, code);
      return null;
    }
    const exec = this.pending.get(frame.execId) ?? this.requests.get(frame.execId);
    if (exec) return exec.onFrame(frame);
    // A read given up on (its reader dropped) may still have frames on the way.
    if (frame.type === "g" || frame.type === "h") return null;
    if (this.abandoned.has(frame.execId)) {
      if (frame.type === "Q" && frame.payload.length === 8) {
        // A process started after its request was given up on: nothing owns it, so it ends.
        this.send(encodeFrame(frame.execId, "U", frame.payload.subarray(0, 4)));
        return null; // its 'j' comes under the same id
      }
      if ("DFj".includes(frame.type)) this.abandoned.delete(frame.execId);
      return null;
    }
    return frame.type === "H" ? "a second hello" : `a frame of type ${JSON.stringify(frame.type)} for no exec`;
  }

  /** Remembers an exec given up on, so its late frames are not taken for a broken protocol. */
  private abandon(execId: number): void {
    this.abandoned.set(execId, true);
    if (this.abandoned.size > MAX_ABANDONED_EXECS) {
      const oldest = this.abandoned.keys().next().value;
      if (oldest !== undefined) this.abandoned.delete(oldest);
    }
  }

  private lost(reason: string): void {
    if (this.gone) return;
    this.gone = true;
    this.whyGone = reason;
    this.socket.destroy();
    this.helloResult?.reject(new AgentUnavailableError(reason));
    for (const exec of [...this.pending.values()]) exec.onLost(reason);
    for (const request of [...this.requests.values()]) request.onLost(reason);
    this.requests.clear();
  }
}
