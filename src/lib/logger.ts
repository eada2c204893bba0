// Structured JSON logs (pino). Fields that could carry a credential are redacted wherever
// they appear, as a second line of defence behind never logging them at all.
import pino from "pino";

export type Logger = pino.Logger;

export const REDACT_PATHS = [
  "req.headers.authorization",
  "headers.authorization",
  "authorization",
  "api_key",
  "*.api_key",
  "value",
  "*.value",
  "secret",
  "*.secret",
];

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino({ level, redact: { paths: REDACT_PATHS, censor: "[redacted]" } }, destination);
}

/** Lines the server's log dropped because its reader fell behind (warren_log_lines_dropped_total). */
let droppedLines = 0;

export function droppedLogLines(): number {
  return droppedLines;
}

const BLOCK_BYTES = 4096;
const BLOCK_MS = 200;

/**
 * The server's log on stdout, written in blocks without ever blocking the event loop: lines
 * gather until 4 KiB or 200 ms, then go to process.stdout, which on a pipe or socket queues
 * what the reader has not taken yet. That queue is bounded: a reader that stops reading (a
 * hung log collector) costs at most `queueBytes` of memory, and the lines beyond are dropped
 * and counted, never waited for. (pino's own destination would wait for such a reader in a
 * synchronous write at exit, and its queue had no bound.)
 */
export class BoundedLogSink implements pino.DestinationStream {
  private block = "";
  private timer: NodeJS.Timeout | null = null;
  private broken = false;

  constructor(
    private readonly out: NodeJS.WritableStream & { writableLength: number },
    private readonly queueBytes: number,
  ) {
    // A reader that went away (EPIPE) ends the log, not the server.
    out.on("error", () => {
      this.broken = true;
    });
  }

  write(line: string): void {
    if (this.broken || this.out.writableLength + this.block.length + line.length > this.queueBytes) {
      droppedLines += 1;
      return;
    }
    this.block += line;
    if (this.block.length >= BLOCK_BYTES) this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), BLOCK_MS);
      this.timer.unref();
    }
  }

  /** Hands the gathered lines to stdout (never waits for them to be read). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.block === "" || this.broken) return;
    const block = this.block;
    this.block = "";
    this.out.write(block);
  }

  /** Resolves once stdout has taken everything, or after `timeoutMs` (a reader that stopped). */
  drained(timeoutMs: number): Promise<void> {
    this.flush();
    if (this.out.writableLength === 0 || this.broken) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.out.off("drain", done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.out.on("drain", done);
    });
  }
}

export function createServerLogger(level: string, sink: BoundedLogSink): Logger {
  const log = createLogger(level, sink);
  // pino flushes its destination at exit; ours hands the last block over without waiting.
  process.on("exit", () => sink.flush());
  return log;
}
