// What an authenticated SSH connection may open in its sandbox: a `session` channel (one
// `exec` or `shell`, optionally on a pty, with window changes and a locale-only env), and
// `direct-tcpip` forwards to the sandbox's own ports (on its owner, which may be another host).
// Output flows at the pace of the SSH channel's window: a chunk is acknowledged to the exec
// agent only once the channel took it; a forward's bytes are piped, so the slower side pauses
// the other.
import type { Duplex } from "node:stream";
import type { ServerChannel, Session } from "ssh2";
import { type RuntimeDriver, RuntimeError, type SandboxSession } from "../../drivers/runtime/interface.js";
import { AppError } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import { joinStreams } from "../../lib/tcp-connect.js";
import type { SessionActivity } from "./activity.js";
import { allowedClientEnv, terminalName } from "./limits.js";

/** Session channels (exec or shell) open at once per connection. */
export const MAX_SESSIONS_PER_CONNECTION = 10;
/** Port forwards open at once per connection. */
export const MAX_FORWARDS_PER_CONNECTION = 64;
const MAX_CLIENT_ENV = 16;
/** The longest `exec` command line passed on (OpenSSH's own limit on a command is far above any real use). */
export const MAX_COMMAND_BYTES = 64 << 10;
/** Destinations of a forward: the sandbox itself (its own ports), named as the client's `-L` usually does. */
const SANDBOX_SELF = new Set(["localhost", "127.0.0.1", "::1", "0.0.0.0"]);
/** The shell of an interactive session: a login shell, so the image's profile sets the prompt. */
export const LOGIN_SHELL = ["/bin/sh", "-l"];

export interface ConnectionScope {
  sandboxId: string;
  /**
   * Whether the connection's credential still opens the sandbox (asked at every new channel:
   * a key revoked or a sandbox quarantined after the login opens nothing more).
   */
  stillAllowed(): Promise<boolean>;
  runtime: ScopeRuntime;
  activity: SessionActivity;
  log: Logger;
  sessions: number;
  forwards: number;
}

/** Where a connection's channels open: sessions and port forwards on the sandbox's owner. */
export interface ScopeRuntime {
  openSession: RuntimeDriver["openSession"];
  /**
   * A connected stream to the sandbox's TCP `port` (on this host, or the owner's over its
   * internal API); rejects when it cannot be opened (not running, no network link, nothing
   * listening, the owner not available).
   */
  openPort(sandboxId: string, port: number): Promise<Duplex>;
}

/** Serves one `session` channel: collects pty and env requests, then runs one exec or shell. */
export function serveSession(session: Session, scope: ConnectionScope): void {
  let pty: { rows: number; cols: number; term: string } | null = null;
  const env: Record<string, string> = {};
  let started = false;
  let running: SandboxSession | null = null;
  let pendingSize: { rows: number; cols: number } | null = null;

  session.on("pty", (accept, reject, info) => {
    if (started) return reject?.();
    pty = { rows: info.rows, cols: info.cols, term: terminalName(info.term) };
    accept?.();
  });
  session.on("window-change", (accept, _reject, info) => {
    if (running) running.resize(info.rows, info.cols);
    else pendingSize = { rows: info.rows, cols: info.cols };
    accept?.();
  });
  session.on("env", (accept, reject, info) => {
    if (started || Object.keys(env).length >= MAX_CLIENT_ENV || !allowedClientEnv(info.key, info.val)) {
      return reject?.();
    }
    env[info.key] = info.val;
    accept?.();
  });
  const start = (accept: () => ServerChannel, reject: (() => void) | undefined, argv: string[] | null) => {
    if (started || !argv) return reject?.();
    started = true;
    // Accepted at once: ssh2 drops a reply that comes after the client's EOF on the session,
    // which OpenSSH sends right after the request when its stdin is empty.
    const channel = accept();
    const size = pendingSize ?? pty;
    const request = {
      argv,
      env: pty ? { ...env, TERM: pty.term } : env,
      pty: pty && size ? { rows: size.rows, cols: size.cols } : null,
    };
    void runInChannel(channel, request, scope, (opened) => {
      running = opened;
    });
  };
  session.on("exec", (accept, reject, info) => {
    const fits = Buffer.byteLength(info.command) <= MAX_COMMAND_BYTES && !info.command.includes("\0");
    start(accept, reject, fits ? ["/bin/sh", "-c", info.command] : null);
  });
  session.on("shell", (accept, reject) => start(accept, reject, LOGIN_SHELL));
  session.on("subsystem", (_accept, reject) => reject?.());
  session.on("signal", (accept) => accept?.());
  session.on("auth-agent", (_accept, reject) => reject?.());
  session.on("x11", (_accept, reject) => reject?.());
}

async function runInChannel(
  channel: ServerChannel,
  request: { argv: string[]; env: Record<string, string>; pty: { rows: number; cols: number } | null },
  scope: ConnectionScope,
  opened: (session: SandboxSession) => void,
): Promise<void> {
  channel.on("error", () => undefined);
  if (!(await scope.stillAllowed())) {
    channel.stderr.write("warren: this credential no longer opens the sandbox\r\n");
    channel.exit(255);
    channel.end();
    return;
  }
  const endActivity = scope.activity.begin(scope.sandboxId);
  let closed = false;
  let ended = false;
  const finish = (exit: number, message?: string) => {
    if (ended) return;
    ended = true;
    endActivity();
    if (closed) return;
    if (message) channel.stderr.write(`warren: ${message}\r\n`);
    channel.exit(exit);
    channel.end();
  };
  // Once the client is gone, output is taken and dropped, so the command is never held.
  const pass = (target: { write(data: Buffer, callback: () => void): boolean }) => (data: Buffer, done: () => void) => {
    if (closed) done();
    else target.write(data, done);
  };
  channel.once("close", () => {
    closed = true;
  });
  let session: SandboxSession;
  try {
    session = await scope.runtime.openSession(scope.sandboxId, request, {
      onStdout: pass(channel),
      onStderr: pass(channel.stderr),
      onDrain: () => channel.resume(),
      onEnd: ({ exit, lost }) => {
        if (lost) scope.log.warn({ sandbox_id: scope.sandboxId, reason: lost }, "ssh session lost");
        finish(exit ?? 255, lost ? "the session's exec agent went away" : undefined);
      },
    });
  } catch (error) {
    const code = error instanceof RuntimeError ? error.code : error instanceof AppError ? error.code : "";
    if (!(error instanceof RuntimeError) && !(error instanceof AppError)) {
      scope.log.error({ sandbox_id: scope.sandboxId, err: (error as Error).message }, "ssh session failed to open");
    }
    finish(
      code === "start_failed" ? 127 : 255,
      code === "not_running"
        ? "the sandbox is not running (start it first)"
        : code === "start_failed"
          ? `the command did not start: ${(error as Error).message}`
          : code === "unsupported"
            ? "this sandbox run cannot take sessions (restart the sandbox)"
            : code === "host_unavailable"
              ? "the sandbox's host is not available now; retry shortly"
              : "the session could not be opened",
    );
    return;
  }
  opened(session);
  if (closed && !ended) session.kill();
  channel.on("data", (data: Buffer) => {
    if (!session.write(data)) channel.pause();
  });
  channel.on("end", () => session.end());
  channel.once("close", () => {
    if (!ended) session.kill();
  });
}

/** Serves a `direct-tcpip` request: a TCP connection to the sandbox's own port, from its owner host to its veth address. */
export async function serveForward(
  accept: () => ServerChannel,
  reject: () => void,
  info: { destIP: string; destPort: number },
  scope: ConnectionScope,
): Promise<void> {
  const port = info.destPort;
  if (
    !SANDBOX_SELF.has(info.destIP) ||
    !Number.isInteger(port) ||
    port < 1 ||
    port > 65535 ||
    scope.forwards >= MAX_FORWARDS_PER_CONNECTION
  ) {
    reject();
    return;
  }
  scope.forwards++;
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    scope.forwards--;
  };
  let stream: Duplex | null = null;
  if (await scope.stillAllowed()) {
    stream = await scope.runtime.openPort(scope.sandboxId, port).catch((error: unknown) => {
      if (!(error instanceof AppError) && !(error instanceof RuntimeError) && !(error as { code?: string }).code) {
        scope.log.warn({ sandbox_id: scope.sandboxId, err: (error as Error).message }, "ssh forward failed to open");
      }
      return null;
    });
  }
  if (!stream) {
    release();
    reject();
    return;
  }
  const endActivity = scope.activity.begin(scope.sandboxId);
  const channel = accept();
  joinStreams(channel, stream, () => {
    endActivity();
    release();
  });
}
