// GET /v1/sandboxes/{id}/exec/stream: the streaming exec's WebSocket (docs/api-decisions.md
// "Streaming exec"). The credential and the sandbox are checked before the upgrade (refusals
// are plain HTTP answers in ExecSandbox's flat envelope); after it the client sends one text
// message, the start (StreamExecStart), then binary frames tagged by their first byte. Every
// frame from the client is bounded and checked; a malformed one ends only this stream.
import { type Static, Type } from "@sinclair/typebox";
import { type WebSocket, WebSocketServer } from "ws";
import type { SandboxSession } from "../../drivers/runtime/interface.js";
import { errorBody, statusOf } from "../../http/errors.js";
import { FLAT, flatResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { takeUpgrade } from "../../http/upgrade.js";
import { describeValidationError, validatorCompiler } from "../../http/validation.js";
import { AppError } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import type { Credential } from "../identity/credential.js";
import { checkStreamStart, type ExecStreamService, type StreamEnd } from "./exec-stream.js";
import type { ExecTarget } from "./repo.js";

/** The first byte of a binary frame. */
export const STREAM_TAG = {
  /** client -> server: bytes for the command's stdin. */
  stdin: 0,
  /** server -> client: the command's stdout (with a terminal, all its output). */
  stdout: 1,
  /** server -> client: the command's stderr. */
  stderr: 2,
  /** client -> server: u16 rows, u16 cols (big-endian); ignored without a terminal. */
  resize: 3,
  /** client -> server: no more stdin (EOF; ignored with a terminal). */
  stdinClose: 4,
  /** client -> server: SIGKILL to the command's process group. */
  kill: 5,
} as const;

/** The subprotocol a browser offers beside `warren.bearer.<key>`; the server answers it. */
export const STREAM_PROTOCOL = "warren.v1";
/** The largest message a client may send (a start at the argv limits, in UTF-8, fits). */
export const MAX_CLIENT_MESSAGE_BYTES = 6 << 20;
/**
 * A ping this often: a socket paused for stdin the command does not take reads nothing, so
 * only a write finds that the client went away (its reset fails the write and closes the stream).
 */
export const KEEPALIVE_MS = 10_000;
/** How long after the upgrade the start message may take. */
export const START_TIMEOUT_MS = 10_000;
/** WebSocket close codes: the stream ended (or was refused), the client broke the protocol. */
const CLOSE_NORMAL = 1000;
const CLOSE_PROTOCOL = 1008;

const EnvMap = Type.Record(Type.String(), Type.String(), {
  description: "At most 256 entries; names [A-Za-z_][A-Za-z0-9_]* of at most 128 bytes; values at most 4096 characters",
});

export const StreamExecStart = Type.Object(
  {
    cmd: Type.Array(Type.String({ maxLength: 4096 }), { minItems: 1, maxItems: 256 }),
    env: Type.Optional(EnvMap),
    cwd: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, description: "Absolute; default the image's" })),
    tty: Type.Optional(
      Type.Union([
        Type.Object(
          { rows: Type.Integer({ minimum: 1, maximum: 65535 }), cols: Type.Integer({ minimum: 1, maximum: 65535 }) },
          { additionalProperties: false },
        ),
        Type.Null(),
      ]),
    ),
    timeout_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600, description: "Omit: no deadline" })),
    secret_environment: Type.Optional(
      Type.Array(
        Type.Object(
          {
            secret_name: Type.String({ minLength: 1, maxLength: 128 }),
            variable_name: Type.String({ minLength: 1, maxLength: 128, pattern: "^[A-Za-z_][A-Za-z0-9_]*$" }),
          },
          { additionalProperties: false },
        ),
        { maxItems: 64 },
      ),
    ),
  },
  { $id: "StreamExecStart", additionalProperties: false, title: "StreamExecStart" },
);
export type StreamExecStartBody = Static<typeof StreamExecStart>;

const validateStart = validatorCompiler({ schema: StreamExecStart, httpPart: "body" }) as ((
  data: unknown,
) => boolean) & {
  errors?: Parameters<typeof describeValidationError>[1] | null;
};

/** The start message's JSON as the service takes it, or AppError invalid_argument. */
export function parseStart(text: string): StreamExecStartBody {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new AppError("invalid_argument", "the start message is not JSON");
  }
  if (!validateStart(value))
    throw new AppError("invalid_argument", describeValidationError("start", validateStart.errors ?? []));
  return value as StreamExecStartBody;
}

/** Streams one organization may hold open on one server at once (the upgraded socket to its close). */
export const MAX_OPEN_STREAMS_PER_ORG = 64;

/** This server's open streams: what they buffer, and how many each organization holds. */
export class StreamSockets {
  readonly open = new Set<WebSocket>();
  private readonly perOrg = new Map<string, number>();
  /** A field so a test can lower it. */
  limitPerOrg = MAX_OPEN_STREAMS_PER_ORG;

  /** Takes one of the organization's places, or throws 429 rate_limited; release() gives it back. */
  take(orgId: string): () => void {
    const held = this.perOrg.get(orgId) ?? 0;
    if (held >= this.limitPerOrg) {
      throw new AppError("rate_limited", `at most ${this.limitPerOrg} exec streams open at once per organization`, {
        retryAfterSeconds: 1,
      });
    }
    this.perOrg.set(orgId, held + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.perOrg.get(orgId) ?? 1) - 1;
      if (left > 0) this.perOrg.set(orgId, left);
      else this.perOrg.delete(orgId);
    };
  }

  /** Bytes the open streams have queued to their clients and the kernel has not taken yet. */
  bufferedBytes(): number {
    let total = 0;
    for (const ws of this.open) {
      const socket = (ws as unknown as { _socket?: { writableLength: number } })._socket;
      total += ws.bufferedAmount + (socket?.writableLength ?? 0);
    }
    return total;
  }
}

export function registerExecStreamRoute(app: App, streams: ExecStreamService, sockets: StreamSockets): void {
  // Not a body (it is the first WebSocket message): a named component of the OpenAPI document.
  app.addSchema(StreamExecStart);
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_CLIENT_MESSAGE_BYTES,
    perMessageDeflate: false,
    // A browser that named its key as a subprotocol (upgrade.ts) must be answered one it offered:
    // `warren.v1`, never the key.
    handleProtocols: (offered) => (offered.has(STREAM_PROTOCOL) ? STREAM_PROTOCOL : false),
  });
  app.get(
    "/v1/sandboxes/:id/exec/stream",
    {
      config: FLAT,
      schema: {
        operationId: "StreamExecSandbox",
        tags: ["SandboxService"],
        summary:
          "WebSocket (Upgrade: websocket): a command with stdin, separate stdout and stderr streams, an optional terminal, and its exit at the end",
        description:
          'After the 101 the client sends the start (StreamExecStart) as one text message, then binary frames whose first byte is a tag: 0 stdin, 3 resize (u16 rows, u16 cols, big-endian), 4 stdin close, 5 kill. The server sends {"type":"started"}, binary frames 1 stdout and 2 stderr, and a final text message {"type":"exit",exit|timeout|indeterminate,truncated:false} or {"type":"error",status,error:{code,message,request_id}}. Browsers may offer the subprotocols warren.v1 and warren.bearer.<API key> instead of the Authorization header (warren.v1 is answered). See docs/api-decisions.md "Streaming exec".',
        // The WebSocket's first text message, which OpenAPI has no place for: named here so
        // clients can generate its type.
        "x-warren-websocket-start": { $ref: "#/components/schemas/StreamExecStart" },
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: flatResponses({ 101: Type.Null({ description: "Switching Protocols (WebSocket)" }) }),
      },
    },
    async (request, reply) => {
      const cred = credentialOf(request);
      const target = await streams.target(cred, request.params.id);
      const release = sockets.take(cred.orgId);
      const upgrade = request.headers.upgrade?.toLowerCase() === "websocket" ? takeUpgrade(request.raw) : null;
      if (!upgrade) {
        release();
        throw new AppError("failed_precondition", "this route is a WebSocket: send Upgrade: websocket");
      }
      reply.hijack();
      // A handshake ws refuses (a bad Sec-WebSocket-Key) never calls back: the socket's close frees the place.
      upgrade.socket.once("close", release);
      const log = request.log as unknown as Logger;
      wss.handleUpgrade(request.raw, upgrade.socket, upgrade.head, (ws) => {
        sockets.open.add(ws);
        ws.once("close", () => {
          sockets.open.delete(ws);
          release();
        });
        serveStream(ws, { cred, target, streams, requestId: request.id, log });
      });
    },
  );
}

interface StreamScope {
  cred: Credential;
  target: ExecTarget;
  streams: ExecStreamService;
  requestId: string;
  log: Logger;
}

function serveStream(ws: WebSocket, scope: StreamScope): void {
  ws.binaryType = "nodebuffer";
  const socket = (
    ws as unknown as { _socket?: { setNoDelay(on: boolean): void; setKeepAlive(on: boolean, ms: number): void } }
  )._socket;
  socket?.setNoDelay(true);
  socket?.setKeepAlive(true, KEEPALIVE_MS);
  const keepalive = setInterval(() => {
    if (ws.readyState === ws.OPEN) ws.ping();
  }, KEEPALIVE_MS);
  keepalive.unref();
  let session: SandboxSession | null = null;
  let state: "waiting" | "opening" | "open" | "ended" = "waiting";
  /** Frames that came while the session opened (the socket is paused meanwhile). */
  const early: Buffer[] = [];
  /** Output passed to the socket and not yet written: acknowledged when it is, or when the socket closes. */
  const unwritten = new Set<() => void>();
  const startTimer = setTimeout(
    () => fail(new AppError("invalid_argument", "no start message came in time")),
    START_TIMEOUT_MS,
  );

  const sendJson = (message: Record<string, unknown>) => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(message));
  };
  function fail(error: unknown): void {
    clearTimeout(startTimer);
    if (state === "ended") return;
    state = "ended";
    session?.kill();
    const appError = error instanceof AppError ? error : new AppError("internal", "the stream failed on the server");
    if (!(error instanceof AppError)) scope.log.error({ err: (error as Error).message }, "exec stream failed");
    sendJson({ type: "error", status: statusOf(appError), error: errorBody(appError, scope.requestId, "flat") });
    // Paused while the session opened: the client's close frame must still be read.
    ws.resume();
    ws.close(appError.code === "invalid_argument" ? CLOSE_PROTOCOL : CLOSE_NORMAL);
  }
  const output = (tag: number) => (data: Buffer, done: () => void) => {
    if (ws.readyState !== ws.OPEN) return done();
    unwritten.add(done);
    const frame = Buffer.allocUnsafe(data.length + 1);
    frame[0] = tag;
    data.copy(frame, 1);
    ws.send(frame, { binary: true }, () => {
      if (unwritten.delete(done)) done();
    });
  };
  const end = (result: StreamEnd) => {
    if (state === "ended") return;
    state = "ended";
    sendJson({ type: "exit", ...result });
    ws.resume();
    ws.close(CLOSE_NORMAL);
  };

  const onFrame = (frame: Buffer): void => {
    const open = session as SandboxSession;
    const tag = frame[0];
    if (tag === STREAM_TAG.stdin) {
      if (frame.length > 1 && !open.write(frame.subarray(1))) ws.pause();
    } else if (tag === STREAM_TAG.stdinClose && frame.length === 1) open.end();
    else if (tag === STREAM_TAG.resize && frame.length === 5) open.resize(frame.readUInt16BE(1), frame.readUInt16BE(3));
    else if (tag === STREAM_TAG.kill && frame.length === 1) open.kill();
    else fail(new AppError("invalid_argument", `a malformed frame (tag ${tag ?? "none"}, ${frame.length} bytes)`));
  };

  ws.on("message", (data: Buffer, isBinary: boolean) => {
    if (state === "ended") return;
    if (state === "waiting") {
      clearTimeout(startTimer);
      if (isBinary) return fail(new AppError("invalid_argument", "the first message must be the start, as JSON text"));
      let start: StreamExecStartBody;
      try {
        start = parseStart(data.toString("utf8"));
        checkStreamStart(start);
      } catch (error) {
        return fail(error);
      }
      state = "opening";
      ws.pause();
      scope.streams
        .open(scope.cred, scope.target, start, {
          onStdout: output(STREAM_TAG.stdout),
          onStderr: output(STREAM_TAG.stderr),
          onDrain: () => ws.resume(),
          onEnd: end,
        })
        .then(
          (opened) => {
            session = opened;
            if (state === "ended") {
              opened.kill();
              return;
            }
            state = "open";
            sendJson({ type: "started" });
            for (const frame of early.splice(0)) if (state === "open") onFrame(frame);
            ws.resume();
          },
          (error: unknown) => fail(error),
        );
      return;
    }
    if (!isBinary) return fail(new AppError("invalid_argument", "after the start, frames are binary"));
    if (state === "opening") early.push(data);
    else onFrame(data);
  });
  // A frame over MAX_CLIENT_MESSAGE_BYTES or a broken frame: ws closes with 1009 or 1002 itself.
  ws.on("error", () => undefined);
  ws.once("close", () => {
    clearTimeout(startTimer);
    clearInterval(keepalive);
    for (const done of unwritten) done();
    unwritten.clear();
    if (state !== "ended") {
      state = "ended";
      session?.kill();
    }
  });
}
