// HTTP Upgrade requests on the API's listener go through Fastify's routing like any other
// request (so the edge hooks authenticate them and a refusal is the usual envelope), with the
// raw socket set aside for a route that takes the upgrade (the streaming exec's WebSocket).
// A route that does not take it answers as it would without the upgrade, and the socket is
// closed after the answer. A request that asks for another protocol (`curl --http2`'s h2c) is
// served as plain HTTP/1.1, as it was before the server listened for upgrades.
import { type IncomingMessage, type Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { App } from "./types.js";

const UPGRADE = Symbol("warren.upgrade");

interface PendingUpgrade {
  socket: Socket;
  head: Buffer;
  res: ServerResponse | null;
  taken: boolean;
}

/** The subprotocol prefix a browser names its API key with (it cannot set Authorization on a WebSocket). */
export const BEARER_PROTOCOL_PREFIX = "warren.bearer.";

export function routeUpgrades(app: App): void {
  app.server.on("upgrade", (req: IncomingMessage, duplex: Duplex, head: Buffer) => {
    const socket = duplex as Socket;
    if (req.headers.upgrade?.toLowerCase() !== "websocket") {
      replayWithoutUpgrade(app.server, req, socket, head);
      return;
    }
    socket.on("error", () => undefined);
    const pending: PendingUpgrade = { socket, head, res: null, taken: false };
    (req as unknown as Record<symbol, PendingUpgrade>)[UPGRADE] = pending;
    if (req.headers.authorization === undefined) {
      const offered = (req.headers["sec-websocket-protocol"] ?? "").split(",").map((p) => p.trim());
      const bearer = offered.find((p) => p.startsWith(BEARER_PROTOCOL_PREFIX));
      if (bearer) req.headers.authorization = `Bearer ${bearer.slice(BEARER_PROTOCOL_PREFIX.length)}`;
    }
    const res = new ServerResponse(req);
    res.shouldKeepAlive = false;
    res.assignSocket(socket);
    pending.res = res;
    res.on("finish", () => {
      if (!pending.taken) socket.end();
    });
    app.routing(req, res);
  });
}

/**
 * Hands a request that asks for a protocol other than WebSocket back to the HTTP server as if it
 * had come without the ask: its head is written again without Upgrade (and Connection's
 * upgrade token), put back in front of what the socket holds, and the socket given to the
 * server as a new connection, whose parser reads it as plain HTTP/1.1 (keep-alive, body and all).
 */
function replayWithoutUpgrade(server: Server, req: IncomingMessage, socket: Socket, head: Buffer): void {
  const lines = [`${req.method ?? "GET"} ${req.url ?? "/"} HTTP/1.1`];
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i] as string;
    const value = req.rawHeaders[i + 1] as string;
    const lower = name.toLowerCase();
    if (lower === "upgrade" || lower === "http2-settings") continue;
    if (lower === "connection") {
      const kept = value
        .split(",")
        .map((token) => token.trim())
        .filter((token) => token && !/^(upgrade|http2-settings)$/i.test(token));
      if (kept.length > 0) lines.push(`${name}: ${kept.join(", ")}`);
      continue;
    }
    lines.push(`${name}: ${value}`);
  }
  socket.unshift(Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1"), head]));
  server.emit("connection", socket);
}

/** The upgrade's socket and first bytes, taken once by the route that serves it; null for a plain request. */
export function takeUpgrade(req: IncomingMessage): { socket: Socket; head: Buffer } | null {
  const pending = (req as unknown as Record<symbol, PendingUpgrade | undefined>)[UPGRADE];
  if (!pending || pending.taken) return null;
  pending.taken = true;
  pending.res?.detachSocket(pending.socket);
  return { socket: pending.socket, head: pending.head };
}
