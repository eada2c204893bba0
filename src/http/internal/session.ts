// The owner's side of a routed session (docs/hosts.md "Routing"): the grant is checked over
// the session request's JSON, the session opened on this host's runtime, and then the
// upgraded socket carries frames (node-wire.ts). An output frame's `done` is called when the
// caller acknowledges it, so the caller's pace holds the command as on one host; stdin that
// the command does not take yet pauses the socket.
import type { Socket } from "node:net";
import type { SandboxSession, SessionRequest } from "../../drivers/runtime/interface.js";
import type { Logger } from "../../lib/logger.js";
import type { NodeApi } from "../../modules/hosts/node-api.js";
import { encodeError, FRAME, FrameReader, frame, SESSION_UPGRADE } from "../../modules/hosts/node-wire.js";

const MAX_UNACKED_FRAMES = 4096;

/** Answers an Upgrade that was not accepted with the error as it crosses (node-wire.ts), and closes. */
export function refuse(socket: Socket, error: unknown): void {
  const { status, body } = encodeError(error);
  const text = JSON.stringify(body);
  socket.end(
    `HTTP/1.1 ${status} Refused\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
  );
}

function parseRequest(json: string): SessionRequest {
  const raw = JSON.parse(json) as Partial<SessionRequest>;
  if (!Array.isArray(raw.argv) || raw.argv.some((arg) => typeof arg !== "string")) throw new SyntaxError("argv");
  return {
    argv: raw.argv,
    ...(raw.env && typeof raw.env === "object" ? { env: raw.env } : {}),
    ...(typeof raw.cwd === "string" ? { cwd: raw.cwd } : {}),
    pty: raw.pty && typeof raw.pty === "object" ? { rows: Number(raw.pty.rows), cols: Number(raw.pty.cols) } : null,
  };
}

export function serveRoutedSession(
  api: NodeApi,
  sandboxId: string,
  authorization: string | undefined,
  encoded: string,
  socket: Socket,
  log: Logger,
): void {
  let json: string;
  let request: SessionRequest;
  let claims: ReturnType<NodeApi["authorize"]>;
  try {
    json = Buffer.from(encoded, "base64url").toString("utf8");
    claims = api.authorize(authorization, "session", sandboxId, Buffer.from(json));
    request = parseRequest(json);
  } catch (error) {
    refuse(socket, error);
    return;
  }
  socket.setNoDelay(true);
  // Output before the session is known to be open waits behind the 101.
  let queued: Buffer[] | null = [];
  const out = (data: Buffer) => {
    if (socket.destroyed) return;
    if (queued) queued.push(data);
    else socket.write(data);
  };
  const pendingDone: (() => void)[] = [];
  let session: SandboxSession | null = null;
  let ended = false;
  const output = (type: number) => (data: Buffer, done: () => void) => {
    if (socket.destroyed || pendingDone.length >= MAX_UNACKED_FRAMES) return done();
    pendingDone.push(done);
    out(frame(type, data));
  };
  const releaseAll = () => {
    for (const done of pendingDone.splice(0)) done();
  };
  socket.on("error", () => undefined);
  socket.once("close", () => {
    releaseAll();
    if (!ended) session?.kill();
  });
  api.operations
    .openSession(claims, request, {
      onStdout: output(FRAME.stdout),
      onStderr: output(FRAME.stderr),
      onDrain: () => {
        socket.resume();
        out(frame(FRAME.drain));
      },
      onEnd: (end) => {
        ended = true;
        out(frame(FRAME.end, Buffer.from(JSON.stringify(end))));
        if (!queued) socket.end();
      },
    })
    .then(
      (opened) => {
        session = opened;
        if (socket.destroyed) {
          if (!ended) opened.kill();
          return;
        }
        socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${SESSION_UPGRADE}\r\nconnection: Upgrade\r\n\r\n`);
        for (const data of queued ?? []) socket.write(data);
        queued = null;
        if (ended) {
          socket.end();
          return;
        }
        const reader = new FrameReader((type, payload) => {
          if (type === FRAME.stdin) {
            if (!opened.write(Buffer.from(payload))) socket.pause();
          } else if (type === FRAME.stdinEnd) opened.end();
          else if (type === FRAME.resize) {
            const size = JSON.parse(payload.toString("utf8")) as { rows: number; cols: number };
            opened.resize(Number(size.rows), Number(size.cols));
          } else if (type === FRAME.kill) opened.kill();
          else if (type === FRAME.ack) pendingDone.shift()?.();
        });
        socket.on("data", (data: Buffer) => {
          try {
            reader.push(data);
          } catch (error) {
            log.warn({ sandbox_id: sandboxId, err: (error as Error).message }, "routed session stream broke");
            socket.destroy();
          }
        });
      },
      (error: unknown) => refuse(socket, error),
    );
}
