// The streaming exec (GET /v1/sandboxes/{id}/exec/stream, a WebSocket): `sandbox.execStream(cmd)`
// returns a handle whose stdout and stderr are async iterables of bytes as they come, with
// stdin written through it, a terminal's resize, a kill, and `wait()` for the end. Reading is
// flow-controlled: while more than HIGH_WATER bytes wait unread the socket is paused, so the
// command inside the sandbox is held rather than this process's memory growing; a stream you
// do not read still counts, so read both (or pass onStdout/onStderr, which take every chunk).
// The socket comes from the entry point (`socket-node.ts` over ws, `socket-browser.ts` over
// the browser's WebSocket), so this file runs in both. In a browser the chunks are
// Uint8Array (Buffer's base class) and reading is not flow-controlled (the browser's
// WebSocket cannot pause).
import { ConnectionError, errorFromResponse } from "./errors.js";

/** What ExecStream needs of a WebSocket. */
export interface StreamSocket {
  readonly isOpen: boolean;
  /** Resolves once the socket took the frame. */
  send(data: string | Uint8Array): Promise<void>;
  /** Stop reading (backpressure); a socket that cannot ignores it. */
  pause(): void;
  resume(): void;
  /** Ends the connection at once. */
  terminate(): void;
}

export interface StreamSocketEvents {
  open(): void;
  text(message: string): void;
  binary(data: Uint8Array): void;
  /** The connection failed (an error answer before the upgrade is an API error). */
  failure(error: Error): void;
  close(): void;
}

/** Opens the streaming exec's socket at `url` authenticated with `apiKey`. */
export type StreamSocketOpener = (url: string, apiKey: string, events: StreamSocketEvents) => StreamSocket;

/** Frame tags (the first byte of a binary frame). */
const TAG = { stdin: 0, stdout: 1, stderr: 2, resize: 3, stdinClose: 4, kill: 5 } as const;
const HIGH_WATER = 1 << 20;
const LOW_WATER = 256 << 10;

export interface ExecStreamOptions {
  /** Added to the sandbox's environment for this command only. */
  env?: Record<string, string>;
  /** Absolute working directory (default: the image's). */
  cwd?: string;
  /** A terminal of this size (all output then comes on stdout; resize() changes it). */
  tty?: { rows: number; cols: number } | null;
  /** Killed after this long (the result is then `timed_out`); default: no deadline. */
  timeoutSeconds?: number;
  secretEnvironment?: { secret_name: string; variable_name: string }[];
  /** Written to stdin, then stdin is closed (without it, call write() and closeStdin()). */
  stdin?: string | Uint8Array | AsyncIterable<Uint8Array | string>;
  /** Take output as it comes instead of iterating `stdout` / `stderr`. */
  onStdout?: (data: Buffer) => void;
  onStderr?: (data: Buffer) => void;
  signal?: AbortSignal;
}

/** How a streamed command ended (ExecSandbox's outcomes; nothing streamed is ever truncated). */
export type ExecStreamResult =
  | { kind: "completed"; exit: number; truncated: false }
  | { kind: "timed_out"; truncated: false }
  | { kind: "indeterminate"; truncated: false };

class ByteQueue implements AsyncIterable<Buffer> {
  private readonly chunks: Buffer[] = [];
  private waiter: (() => void) | null = null;
  private ended = false;
  bytes = 0;

  constructor(private readonly taken: () => void) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    this.wake();
  }

  end(): void {
    this.ended = true;
    this.wake();
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = null;
    waiter?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    for (;;) {
      const chunk = this.chunks.shift();
      if (chunk) {
        this.bytes -= chunk.length;
        this.taken();
        yield chunk;
        continue;
      }
      if (this.ended) return;
      await new Promise<void>((resolve) => {
        this.waiter = resolve;
      });
    }
  }
}

export class ExecStream {
  readonly stdout: AsyncIterable<Buffer>;
  readonly stderr: AsyncIterable<Buffer>;
  /** Resolves once the command runs (rejects with the API's error when it did not start). */
  readonly started: Promise<void>;
  private readonly ws: StreamSocket;
  private readonly out: ByteQueue;
  private readonly err: ByteQueue;
  private readonly ended: Promise<ExecStreamResult>;
  private paused = false;

  constructor(
    open: StreamSocketOpener,
    url: string,
    apiKey: string,
    start: Record<string, unknown>,
    private readonly options: ExecStreamOptions,
  ) {
    const resumeIfLow = () => {
      if (this.paused && this.out.bytes + this.err.bytes <= LOW_WATER) {
        this.paused = false;
        this.ws.resume();
      }
    };
    this.out = new ByteQueue(resumeIfLow);
    this.err = new ByteQueue(resumeIfLow);
    this.stdout = this.out;
    this.stderr = this.err;
    let started!: { resolve(): void; reject(error: Error): void };
    this.started = new Promise((resolve, reject) => {
      started = { resolve, reject };
    });
    this.started.catch(() => undefined);
    let settle!: { resolve(result: ExecStreamResult): void; reject(error: Error): void };
    this.ended = new Promise<ExecStreamResult>((resolve, reject) => {
      settle = { resolve, reject };
    });
    let failure: Error | null = null;
    let result: ExecStreamResult | null = null;
    this.ws = open(url, apiKey, {
      open: () => void this.ws.send(JSON.stringify(start)).catch(() => undefined),
      binary: (data) => {
        const chunk = data.subarray(1) as Buffer;
        if (data[0] === TAG.stdout) this.deliver(this.out, options.onStdout, chunk);
        else if (data[0] === TAG.stderr) this.deliver(this.err, options.onStderr, chunk);
      },
      text: (text) => {
        let message: Record<string, unknown>;
        try {
          message = JSON.parse(text) as Record<string, unknown>;
        } catch {
          failure ??= new ConnectionError("the exec stream sent a message that is not JSON");
          this.ws.terminate();
          return;
        }
        if (message.type === "started") {
          started.resolve();
          void this.feedStdin();
        } else if (message.type === "exit") {
          result =
            "exit" in message
              ? { kind: "completed", exit: Number(message.exit), truncated: false }
              : "timeout" in message
                ? { kind: "timed_out", truncated: false }
                : { kind: "indeterminate", truncated: false };
        } else if (message.type === "error") {
          const envelope = message.error as Record<string, unknown>;
          failure = errorFromResponse(Number(message.status ?? 0), envelope, null);
        }
      },
      failure: (error) => {
        failure ??= error;
      },
      close: () => {
        this.out.end();
        this.err.end();
        if (result) {
          started.resolve();
          settle.resolve(result);
          return;
        }
        const error = failure ?? new ConnectionError("the exec stream closed before the command's end");
        started.reject(error);
        settle.reject(error);
      },
    });
    this.ended.catch(() => undefined);
    options.signal?.addEventListener("abort", () => this.kill(), { once: true });
  }

  private deliver(queue: ByteQueue, callback: ((data: Buffer) => void) | undefined, chunk: Buffer): void {
    if (callback) {
      callback(chunk);
      return;
    }
    queue.push(chunk);
    if (!this.paused && this.out.bytes + this.err.bytes > HIGH_WATER) {
      this.paused = true;
      this.ws.pause();
    }
  }

  private async feedStdin(): Promise<void> {
    const input = this.options.stdin;
    if (input === undefined) return;
    if (typeof input === "string" || input instanceof Uint8Array) await this.write(input);
    else for await (const piece of input) await this.write(piece);
    this.closeStdin();
  }

  /** Sends bytes to the command's stdin; resolves once the socket took them (await it for backpressure). */
  write(data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    if (!this.ws.isOpen) return Promise.reject(new ConnectionError("the exec stream is closed"));
    const frame = new Uint8Array(bytes.length + 1);
    frame[0] = TAG.stdin;
    frame.set(bytes, 1);
    return this.ws.send(frame);
  }

  /** No more stdin (the command reads EOF once what was written is taken). */
  closeStdin(): void {
    this.sendTag(Uint8Array.of(TAG.stdinClose));
  }

  resize(rows: number, cols: number): void {
    const frame = new Uint8Array(5);
    const view = new DataView(frame.buffer);
    frame[0] = TAG.resize;
    view.setUint16(1, Math.max(1, Math.min(rows, 0xffff)));
    view.setUint16(3, Math.max(1, Math.min(cols, 0xffff)));
    this.sendTag(frame);
  }

  /** SIGKILL to the command's process group. */
  kill(): void {
    this.sendTag(Uint8Array.of(TAG.kill));
  }

  /** The command's end (rejects with the API's error when it did not start, or a ConnectionError). */
  wait(): Promise<ExecStreamResult> {
    return this.ended;
  }

  private sendTag(frame: Uint8Array): void {
    if (this.ws.isOpen) void this.ws.send(frame).catch(() => undefined);
  }
}

/** The start message for `cmd` under `options` (the API's StreamExecStart). */
export function streamStart(cmd: string[], options: ExecStreamOptions): Record<string, unknown> {
  const start: Record<string, unknown> = { cmd };
  if (options.env) start.env = options.env;
  if (options.cwd) start.cwd = options.cwd;
  if (options.tty) start.tty = options.tty;
  if (options.timeoutSeconds !== undefined) start.timeout_seconds = options.timeoutSeconds;
  if (options.secretEnvironment) start.secret_environment = options.secretEnvironment;
  return start;
}
