// A streaming session on the exec agent ('S' in exec-agent.c): a command whose stdin the
// host feeds and whose output streams back as it comes, optionally on a pseudo-terminal
// opened inside the sandbox. Both directions are flow-controlled by acknowledgements, so
// neither side holds more than a window: the agent stops reading the command while
// SESSION_WINDOW bytes of output are unacknowledged (the host acknowledges what its consumer
// has taken), and the host sends at most SESSION_INPUT bytes the agent has not written yet.
// Every frame from the agent is hostile and checked against the order the agent keeps.
import type { SandboxSession, SessionHandlers, SessionRequest } from "../interface.js";
import { encodeFrame, type Frame } from "./exec-frames.js";

/** SESSION_WINDOW in exec-agent.c. */
export const SESSION_WINDOW = 1024 << 10;
/** SESSION_INPUT in exec-agent.c. */
export const SESSION_INPUT = 512 << 10;
/**
 * Output the agent may send beyond the window: the chunk that crossed it, plus the drain
 * after the exit (at most 16 chunks per stream, read without looking at the window).
 */
const OUTPUT_SLACK = 33 * (64 << 10);
/** Input queued on the host before write() asks its caller to wait for onDrain. */
const HOST_INPUT_HIGH_WATER = 1024 << 10;
const MAX_FAILURE_MESSAGE = 8191;

/** The 'S' payload: u32 flags (1: terminal), u32 rows, u32 cols, then an 'R' payload. */
export function encodeSessionHeader(pty: { rows: number; cols: number } | null): Buffer {
  const header = Buffer.alloc(12);
  header.writeUInt32LE(pty ? 1 : 0, 0);
  header.writeUInt32LE(clampDimension(pty?.rows ?? 0), 4);
  header.writeUInt32LE(clampDimension(pty?.cols ?? 0), 8);
  return header;
}

/** Terminal dimensions as the kernel keeps them (unsigned short); anything else is clamped. */
export function clampDimension(value: number): number {
  return Number.isInteger(value) && value > 0 ? Math.min(value, 0xffff) : 0;
}

/**
 * One session's state machine on the host. The agent calls onFrame/onLost; `started`
 * resolves on 'P' (the command runs) and rejects on 'F' or a lost agent before it.
 */
export class AgentSession implements SandboxSession {
  readonly started: Promise<void>;
  private startResult!: { resolve(): void; reject(error: Error): void };
  private isStarted = false;
  private exit: number | null = null;
  private ended = false;
  private unacked = 0;
  private inputInFlight = 0;
  private readonly queued: Buffer[] = [];
  private queuedBytes = 0;
  private eofQueued = false;
  private eofSent = false;
  private waitingForDrain = false;

  constructor(
    private readonly execId: number,
    private readonly terminal: boolean,
    private readonly send: (frame: Buffer) => void,
    /** Drops the session from the agent's table (its last frame came, or the agent is gone). */
    private readonly release: () => void,
    private readonly handlers: SessionHandlers,
  ) {
    this.started = new Promise<void>((resolve, reject) => {
      this.startResult = { resolve, reject };
    });
    this.started.catch(() => undefined);
  }

  write(data: Buffer): boolean {
    if (this.ended || this.eofQueued || data.length === 0) return !this.ended;
    this.queued.push(data);
    this.queuedBytes += data.length;
    this.pump();
    if (this.queuedBytes > HOST_INPUT_HIGH_WATER) this.waitingForDrain = true;
    return !this.waitingForDrain;
  }

  end(): void {
    if (this.ended || this.eofQueued) return;
    this.eofQueued = true;
    this.pump();
  }

  resize(rows: number, cols: number): void {
    if (this.ended || !this.terminal) return;
    const payload = Buffer.alloc(8);
    payload.writeUInt32LE(clampDimension(rows), 0);
    payload.writeUInt32LE(clampDimension(cols), 4);
    this.send(encodeFrame(this.execId, "W", payload));
  }

  kill(): void {
    if (!this.ended) this.send(encodeFrame(this.execId, "K"));
  }

  /** Sends as much queued input as the agent has room for, then the EOF when all went. */
  private pump(): void {
    while (this.queued.length > 0 && this.inputInFlight < SESSION_INPUT) {
      const head = this.queued[0] as Buffer;
      const room = SESSION_INPUT - this.inputInFlight;
      const piece = head.length <= room ? head : head.subarray(0, room);
      if (piece.length === head.length) this.queued.shift();
      else this.queued[0] = head.subarray(room);
      this.queuedBytes -= piece.length;
      this.inputInFlight += piece.length;
      this.send(encodeFrame(this.execId, "I", piece));
    }
    if (this.eofQueued && !this.eofSent && this.queued.length === 0) {
      this.eofSent = true;
      this.send(encodeFrame(this.execId, "I"));
    }
    if (this.waitingForDrain && this.queuedBytes <= HOST_INPUT_HIGH_WATER / 2) {
      this.waitingForDrain = false;
      this.handlers.onDrain?.();
    }
  }

  /** Null, or how the frame broke the protocol (the agent is then dropped). */
  onFrame(frame: Frame): string | null {
    const length = frame.payload.length;
    switch (frame.type) {
      case "P":
        if (length !== 4 || this.isStarted) return "a second or malformed start";
        this.isStarted = true;
        this.startResult.resolve();
        return null;
      case "O":
      case "E": {
        if (!this.isStarted || this.ended) return "output before the start";
        if (frame.type === "E" && this.terminal) return "stderr output from a terminal session";
        this.unacked += length;
        if (this.unacked > SESSION_WINDOW + OUTPUT_SLACK) return "output beyond the session's window";
        // Copied: the payload is a view of the decoder's buffer, and the consumer may keep it.
        const data = Buffer.from(frame.payload);
        let acknowledged = false;
        const done = () => {
          if (acknowledged || this.ended) return;
          acknowledged = true;
          this.unacked -= length;
          const ack = Buffer.alloc(4);
          ack.writeUInt32LE(length, 0);
          this.send(encodeFrame(this.execId, "A", ack));
        };
        if (frame.type === "O") this.handlers.onStdout(data, done);
        else this.handlers.onStderr(data, done);
        return null;
      }
      case "a": {
        if (length !== 4) return "a malformed input acknowledgement";
        const n = frame.payload.readUInt32LE(0);
        if (n > this.inputInFlight) return "an acknowledgement of more input than was sent";
        this.inputInFlight -= n;
        this.pump();
        return null;
      }
      case "X": {
        if (length !== 4 || !this.isStarted || this.exit !== null) return "an exit out of order or malformed";
        const code = frame.payload.readInt32LE(0);
        if (code < 0 || code > 255) return `an exit code of ${code}`;
        this.exit = code;
        return null;
      }
      case "F":
        if (this.isStarted || length > MAX_FAILURE_MESSAGE) return "a failure after the start, or too long";
        this.finish();
        this.startResult.reject(new SessionSpawnError(frame.payload.toString("utf8")));
        return null;
      case "D":
        if (length !== 0 || this.exit === null) return "a done before the exit";
        this.finish();
        this.handlers.onEnd({ exit: this.exit });
        return null;
      default:
        return `a frame of unknown type ${JSON.stringify(frame.type)}`;
    }
  }

  onLost(reason: string): void {
    if (this.ended) return;
    this.finish();
    if (!this.isStarted) this.startResult.reject(new SessionLostError(reason));
    else this.handlers.onEnd({ exit: this.exit, lost: reason });
  }

  private finish(): void {
    this.ended = true;
    this.queued.length = 0;
    this.queuedBytes = 0;
    this.release();
  }
}

/** The command did not start (its message, as exec's spawn_failed). */
export class SessionSpawnError extends Error {
  override name = "SessionSpawnError";
}

/** The agent went away before the session's command was reported started. */
export class SessionLostError extends Error {
  override name = "SessionLostError";
}

export type { SessionRequest };
