// The node internal API's listener (WARREN_INTERNAL_LISTEN; docs/hosts.md "Routing"): plain
// HTTP/1.1 for other Warren servers only. POST /internal/v1/sandboxes/<id>/<operation>
// (exec, snapshot, grow, network) with a JSON body of at most bodyLimitBytes, answered
// `{"result": ...}` (200) or the error as it crosses (node-wire.ts); GET .../session with
// `Upgrade: warren-session/1` streams a session (session.ts), GET .../forward with
// `Upgrade: warren-forward/1` carries an SSH port forward to the sandbox's port (forward.ts). Connections are bounded
// (maxConnections), and so is how long a request's headers and body may take.
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { invalid } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import type { RoutedOperation } from "../../modules/hosts/grants.js";
import type { NodeApi } from "../../modules/hosts/node-api.js";
import {
  decodePoolRequest,
  encodeError,
  FORWARD_HEADER,
  FORWARD_UPGRADE,
  type RoutedExecRequest,
  SESSION_HEADER,
  SESSION_UPGRADE,
} from "../../modules/hosts/node-wire.js";
import { serveRoutedForward } from "./forward.js";
import { serveRoutedSession } from "./session.js";

export const MAX_INTERNAL_CONNECTIONS = 512;
const HEADERS_TIMEOUT_MS = 10_000;
const BODY_TIMEOUT_MS = 30_000;
const ROUTE =
  /^\/internal\/v1\/sandboxes\/([A-Za-z0-9_-]{1,80})\/(exec|snapshot|grow|network|session|forward|pool-take|pool-release)$/;

export interface InternalApiOptions {
  host: string;
  port: number;
  api: NodeApi;
  bodyLimitBytes: number;
  log: Logger;
  maxConnections?: number;
}

export interface InternalApiServer {
  /** The bound address as a base URL (what a host publishes when WARREN_INTERNAL_URL is not set). */
  boundUrl: string;
  close(): Promise<void>;
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function readBody(req: http.IncomingMessage, limit: number): Promise<Buffer | null> {
  return new Promise((resolve) => {
    const declared = Number(req.headers["content-length"] ?? "0");
    if (!Number.isFinite(declared) || declared > limit) return resolve(null);
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = setTimeout(() => req.destroy(), BODY_TIMEOUT_MS);
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        clearTimeout(timer);
        resolve(null);
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on("end", () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks));
    });
    req.on("error", () => {
      clearTimeout(timer);
      resolve(null);
    });
  });
}

async function serve(
  api: NodeApi,
  operation: RoutedOperation,
  sandboxId: string,
  auth: string | undefined,
  body: Buffer,
) {
  const claims = api.authorize(auth, operation, sandboxId, body);
  const input = JSON.parse(body.toString("utf8")) as Record<string, unknown>;
  const ops = api.operations;
  switch (operation) {
    case "exec":
      return ops.exec(claims, input as unknown as RoutedExecRequest);
    case "snapshot":
      await ops.snapshot(claims, String(input.snapshot_id));
      return {};
    case "grow":
      await ops.grow(claims, Number(input.capacity_gib));
      return {};
    case "network":
      return ops.network(claims, input.mode as "none");
    case "pool-take":
      return { id: await ops.poolTake(claims, decodePoolRequest(input)) };
    case "pool-release":
      ops.poolRelease(claims);
      return {};
    default:
      throw new Error("unreachable");
  }
}

export async function startInternalApi(options: InternalApiOptions): Promise<InternalApiServer> {
  const { api, log } = options;
  const server = http.createServer({ headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: 0, keepAliveTimeout: 65_000 });
  server.maxConnections = options.maxConnections ?? MAX_INTERNAL_CONNECTIONS;
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("request", (req, res) => {
    const match = req.method === "POST" ? ROUTE.exec(req.url ?? "") : null;
    const operation = match?.[2] as RoutedOperation | undefined;
    if (!match || !operation || operation === "session" || operation === "forward") {
      send(res, 404, { error: { code: "not_found", message: "no such internal route" } });
      return;
    }
    void readBody(req, options.bodyLimitBytes).then(async (body) => {
      if (!body) {
        if (!res.headersSent && !req.destroyed)
          send(res, 413, { error: { code: "payload_too_large", message: "the request body is too large" } });
        return;
      }
      try {
        send(res, 200, { result: await serve(api, operation, match[1] as string, req.headers.authorization, body) });
      } catch (error) {
        const { status, body: wire } = encodeError(
          error instanceof SyntaxError ? invalid("the request body is not JSON") : error,
        );
        if (status === 500) log.error({ err: (error as Error).message, operation }, "internal API request failed");
        if (!res.headersSent) send(res, status, wire);
      }
    });
  });
  server.on("upgrade", (req: http.IncomingMessage, socket: Socket, head: Buffer) => {
    const match = ROUTE.exec(req.url ?? "");
    socket.on("error", () => undefined);
    if (req.method === "GET" && match?.[2] === "forward" && req.headers.upgrade === FORWARD_UPGRADE) {
      const encoded = req.headers[FORWARD_HEADER];
      serveRoutedForward(
        api,
        match[1] as string,
        req.headers.authorization,
        typeof encoded === "string" ? encoded : "",
        socket,
        head,
      );
      return;
    }
    if (req.method !== "GET" || match?.[2] !== "session" || req.headers.upgrade !== SESSION_UPGRADE) {
      socket.end("HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    const encoded = req.headers[SESSION_HEADER];
    serveRoutedSession(
      api,
      match[1] as string,
      req.headers.authorization,
      typeof encoded === "string" ? encoded : "",
      socket,
      log,
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const hostForUrl = address.address.includes(":") ? `[${address.address}]` : address.address;
  return {
    boundUrl: `http://${hostForUrl}:${address.port}`,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}
