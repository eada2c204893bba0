// HTTP Upgrade requests on the API's listener go through Fastify's routing like any other
// request (so the edge hooks authenticate them and a refusal is the usual envelope), with the
// raw socket set aside for a route that takes the upgrade (the streaming exec's WebSocket).
// A route that does not take it answers as it would without the upgrade, and the socket is
// closed after the answer.
import { type IncomingMessage, ServerResponse } from "node:http";
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

/** The upgrade's socket and first bytes, taken once by the route that serves it; null for a plain request. */
export function takeUpgrade(req: IncomingMessage): { socket: Socket; head: Buffer } | null {
  const pending = (req as unknown as Record<symbol, PendingUpgrade | undefined>)[UPGRADE];
  if (!pending || pending.taken) return null;
  pending.taken = true;
  pending.res?.detachSocket(pending.socket);
  return { socket: pending.socket, head: pending.head };
}
