// One file operation as a streaming session in the sandbox (SandboxRuntime.openSession, routed
// to the owner host by HostRouter): stdin fed from the caller with backpressure (a chunk is
// written only once the session took the last one), stdout handed to a consumer whose
// promise must settle before the output is acknowledged (so the command is held, its pipe
// full, while the caller does not read: nothing is buffered without bound), stderr kept to
// its head for the error text.
import type { SandboxRuntime, SandboxSession } from "../../drivers/runtime/interface.js";

/** How much of a script's stderr is kept (its head) for the error message. */
export const MAX_STDERR_BYTES = 4096;

export interface SessionEnd {
  /** The exit status (128 + signal), or null when it could not be read (`lost`). */
  exit: number | null;
  lost?: string;
  stderr: string;
  /** What the stdout consumer or the stdin source threw: the session was killed for it. */
  failure?: unknown;
}

export interface FileSessionOptions {
  /** Fed to the command's stdin, then closed; none: stdin closed at once. */
  stdin?: AsyncIterable<Buffer | Uint8Array> | null;
  /** Each chunk of stdout; its acknowledgement waits for the returned promise. */
  stdout(data: Buffer): Promise<void> | void;
  /** Aborting kills the command (the caller went away, or a deadline passed). */
  signal?: AbortSignal;
}

export interface RunningFileSession {
  /** Settles once the command ended (never rejects). */
  ended: Promise<SessionEnd>;
  kill(): void;
}

/** Starts `argv` in the sandbox; rejects as openSession does (not_running, start_failed, host_unavailable...). */
export async function startFileSession(
  runtime: Pick<SandboxRuntime, "openSession">,
  sandboxId: string,
  argv: string[],
  options: FileSessionOptions,
): Promise<RunningFileSession> {
  let session: SandboxSession | null = null;
  let killed = false;
  let failure: unknown;
  let finished = false;
  let stderr = Buffer.alloc(0);
  const drains = new Set<() => void>();
  let consumer: Promise<void> = Promise.resolve();
  let resolveEnd!: (end: SessionEnd) => void;
  const ended = new Promise<SessionEnd>((resolve) => {
    resolveEnd = resolve;
  });
  const kill = () => {
    killed = true;
    session?.kill();
  };
  const fail = (error: unknown) => {
    failure ??= error;
    kill();
  };
  const onAbort = () => kill();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  session = await runtime
    .openSession(
      sandboxId,
      { argv, cwd: "/", pty: null },
      {
        onStdout: (data, done) => {
          // One chunk at a time, in order: the next waits for the consumer to have taken this one.
          consumer = consumer.then(async () => {
            if (!killed && failure === undefined) {
              try {
                await options.stdout(data);
              } catch (error) {
                fail(error);
              }
            }
            done();
          });
        },
        onStderr: (data, done) => {
          if (stderr.length < MAX_STDERR_BYTES) {
            stderr = Buffer.concat([stderr, data.subarray(0, MAX_STDERR_BYTES - stderr.length)]);
          }
          done();
        },
        onDrain: () => {
          for (const wake of [...drains]) wake();
        },
        onEnd: ({ exit, lost }) => {
          finished = true;
          options.signal?.removeEventListener("abort", onAbort);
          for (const wake of [...drains]) wake();
          // Told once the consumer took every chunk before the end.
          void consumer.then(() =>
            resolveEnd({
              exit,
              ...(lost ? { lost } : {}),
              stderr: stderr.toString("utf8"),
              ...(failure !== undefined ? { failure } : {}),
            }),
          );
        },
      },
    )
    .catch((error: unknown) => {
      options.signal?.removeEventListener("abort", onAbort);
      throw error;
    });
  const opened = session;
  if (killed) opened.kill();
  void pumpStdin(opened, options.stdin ?? null, drains, () => finished || killed).catch(fail);
  return { ended, kill };
}

async function pumpStdin(
  session: SandboxSession,
  stdin: AsyncIterable<Buffer | Uint8Array> | null,
  drains: Set<() => void>,
  over: () => boolean,
): Promise<void> {
  if (stdin) {
    for await (const chunk of stdin) {
      if (over()) return;
      if (chunk.length === 0) continue;
      if (!session.write(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length))) {
        await new Promise<void>((resolve) => {
          const wake = () => {
            drains.delete(wake);
            resolve();
          };
          drains.add(wake);
          if (over()) wake();
        });
      }
    }
  }
  if (!over()) session.end();
}
