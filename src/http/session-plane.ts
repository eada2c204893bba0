// The session plane: a listener of its own (WARREN_SESSION_LISTEN) that serves port
// endpoints, `<port>-<sandbox id>.<session host>`, by proxying HTTP (keep-alive, bodies
// streamed both ways) and WebSocket upgrades to the sandbox's address on its veth. Who may
// reach what is SessionService.authorize (modules/sessions); this file is the wire: the
// credential is taken from the request and never forwarded, hop-by-hop headers are dropped,
// header sizes and idle times are bounded, and whatever the sandbox sends is hostile (its
// response head is parsed with the same header cap, and a bad one ends that request only).

import http from "node:http";
import net from "node:net";
import {
  answerAndDestroy,
  ConnectionSlots,
  headCheckIntervalMs,
  planeStartupLimits,
  processDescriptorBudget,
  type SlotLimits,
  StartupSlots,
} from "../lib/connection-slots.js";
import { AppError } from "../lib/errors.js";
import { newId } from "../lib/ids.js";
import type { Logger } from "../lib/logger.js";
import { hostUnavailable } from "../modules/hosts/membership.js";
import {
  ENDPOINT_COOKIE,
  ENDPOINT_QUERY,
  type PresentedCredentials,
  type SessionService,
  type SessionTarget,
} from "../modules/sessions/service.js";
import { TOKEN_PREFIX } from "../modules/sessions/tokens.js";
import { CONSOLE_COOKIE, CONSOLE_COOKIE_SECURE } from "./console-auth.js";
import { errorBody, statusOf } from "./errors.js";

/** Largest request or response head (request line or status line plus headers). */
export const MAX_HEADER_BYTES = 16_384;
/** A client has this long to send its request head; then its connection is destroyed. */
export const HEADERS_TIMEOUT_MS = 30_000;
/** A connection (either side) with no bytes moving for this long is closed. */
export const IDLE_TIMEOUT_MS = 300_000;
/**
 * Client connections the plane holds at once and from one client address (more are closed at
 * accept), and proxied exchanges (requests in flight, open upgrades) one organization holds at
 * once (more are refused 429). Per address so that one client holding idle connections cannot
 * take the room every other client needs; per organization so that one tenant's WebSockets
 * cannot take every other tenant's; in total so that clients never take the descriptors the
 * API and the runtime need. Defaults: the plane's share of the descriptor budget
 * (descriptorBudget in lib/connection-slots.ts).
 *
 * Connections on which no request was authorized yet also take a place among `unauthenticated`
 * (at most `unauthenticatedPerAddress` from one address; defaults planeStartupLimits), with
 * random early drop and, at the bound, a client from an address holding fewer taking the
 * place of the busiest address's oldest (StartupSlots): clients on a handful of addresses
 * reconnecting can never lock a new address out. A connection leaves it at its first
 * authorized request or upgrade, and is never closed for another's sake after that.
 */
export interface PlaneLimits extends SlotLimits {
  perOrganization: number;
  unauthenticated: number;
  unauthenticatedPerAddress: number;
}

/** Where the plane counts connections it closes at accept or evicts (WarrenMetrics). */
export interface PlaneMetrics {
  connectionRefused(server: "session_plane", reason: "refused" | "evicted"): void;
}
/** Connecting to the sandbox's port may take this long. */
const CONNECT_TIMEOUT_MS = 5_000;
/** How long a refused upgrade's socket may linger for the client to read the refusal and close. */
const REFUSED_UPGRADE_LINGER_MS = 5_000;

/**
 * Marks a request one plane relayed to the sandbox's owner's plane (docs/hosts.md "Routing"):
 * the owner never relays it on. A client sending it only keeps its own request from being
 * relayed; it never reaches a sandbox.
 */
export const RELAY_HEADER = "x-warren-plane-relay";
/** Connections one plane keeps to each other host's plane (upgrades aside, which are one each). */
const RELAY_SOCKETS_PER_HOST = 128;

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "expect",
  RELAY_HEADER,
]);

export interface SessionPlane {
  /** The bound address (port 0 resolved). */
  address: { host: string; port: number };
  close(): Promise<void>;
}

export async function startSessionPlane(
  sessions: SessionService,
  options: {
    host: string;
    port: number;
    log: Logger;
    /** Connection bounds (each defaults to the descriptor budget's); tests lower them. */
    limits?: Partial<PlaneLimits>;
    /** The request-head deadline (default HEADERS_TIMEOUT_MS); tests lower it. */
    headersTimeoutMs?: number;
    metrics?: PlaneMetrics;
  },
): Promise<SessionPlane> {
  const { log } = options;
  const headersTimeout = options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS;
  const base = { ...processDescriptorBudget().plane, ...options.limits };
  const startupDefaults = planeStartupLimits(base);
  const limits: PlaneLimits = {
    unauthenticated: startupDefaults.overall,
    unauthenticatedPerAddress: startupDefaults.perAddress,
    ...base,
  };
  // Upstream sockets, pooled ones included, never outnumber the client connections allowed.
  const agent = new http.Agent({
    keepAlive: true,
    maxSockets: 256,
    maxFreeSockets: 64,
    maxTotalSockets: limits.overall,
    timeout: IDLE_TIMEOUT_MS,
  });
  const server = http.createServer({
    maxHeaderSize: MAX_HEADER_BYTES,
    requestTimeout: 0,
    headersTimeout,
    // Node checks the head deadline on this interval (default 30 s, which doubled the bound).
    connectionsCheckingInterval: headCheckIntervalMs(headersTimeout),
    keepAliveTimeout: 30_000,
  });
  server.setTimeout(IDLE_TIMEOUT_MS, (socket) => socket.destroy());
  // Bounds what one process holds open for clients (each may also hold an upstream connection).
  const slots = new ConnectionSlots({ overall: limits.overall, perAddress: limits.perAddress });
  const unauthenticated = new StartupSlots({
    overall: limits.unauthenticated,
    perAddress: limits.unauthenticatedPerAddress,
  });
  /** Each unauthenticated connection's place among `unauthenticated`, given back at its first authorized request. */
  const startupPlaces = new WeakMap<net.Socket, () => void>();
  // To other hosts' planes (relayed requests): pooled apart from the sandboxes' upstreams.
  const relayAgent = new http.Agent({
    keepAlive: true,
    maxSockets: RELAY_SOCKETS_PER_HOST,
    maxFreeSockets: 16,
    maxTotalSockets: limits.overall,
    timeout: IDLE_TIMEOUT_MS,
  });
  const plane: Plane = {
    sessions,
    agent,
    relayAgent,
    log,
    organizations: new ConnectionSlots({ overall: Number.MAX_SAFE_INTEGER, perAddress: limits.perOrganization }),
    authenticated(socket) {
      startupPlaces.get(socket)?.();
      startupPlaces.delete(socket);
    },
  };
  server.on("connection", (socket: net.Socket) => {
    const address = socket.remoteAddress;
    const release = address === undefined ? null : slots.take(address);
    // Should a client from an address holding fewer take this one's place, it is closed (its
    // connection slot given back at once, so the newcomer finds one).
    const releaseStartup =
      release &&
      unauthenticated.take(address as string, () => {
        release();
        options.metrics?.connectionRefused("session_plane", "evicted");
        socket.destroy();
      });
    if (!release || !releaseStartup) {
      release?.();
      options.metrics?.connectionRefused("session_plane", "refused");
      socket.destroy();
      return;
    }
    startupPlaces.set(socket, releaseStartup);
    socket.once("close", () => {
      releaseStartup();
      release();
    });
  });
  server.on("request", (req, res) => {
    proxyRequest(plane, req, res).catch((error: unknown) => sendError(res, error, log));
  });
  server.on("upgrade", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    proxyUpgrade(plane, req, socket, head).catch((error: unknown) => {
      log.error({ err: (error as Error).message }, "session plane upgrade failed");
      socket.destroy();
    });
  });
  server.on("clientError", (error: NodeJS.ErrnoException, socket: net.Socket) => {
    const code =
      error.code === "HPE_HEADER_OVERFLOW"
        ? "headers_too_large"
        : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
          ? "request_timeout"
          : "invalid_argument";
    answerAndDestroy(socket, rawError(new AppError(code, "the request could not be parsed in time or at all")));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const bound = server.address() as net.AddressInfo;
  const address = { host: options.host, port: bound.port };
  sessions.planeListening(address);
  log.info({ address: `${options.host}:${bound.port}`, url: sessions.publicUrl() }, "the session plane is serving");
  return {
    address,
    async close() {
      sessions.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      agent.destroy();
      relayAgent.destroy();
    },
  };
}

/**
 * Whether a request target is a path of this origin: `//host` and `/\\host` are not (a
 * browser resolves either, as a Location, to another host: the token redirect below would
 * be an open redirect), nor is an absolute-form target.
 */
export function isOriginPath(url: string | undefined): url is string {
  if (url === undefined) return false;
  return url.startsWith("/") && url[1] !== "/" && url[1] !== "\\";
}

/**
 * A Set-Cookie value of the sandbox without its Domain attribute: every endpoint is a sibling
 * host under the plane's name, so a cookie for the parent domain would reach other sandboxes'
 * endpoints (other organizations' included) and the plane's own cookie; host-only it stays
 * on this endpoint's origin.
 */
export function hostOnlyCookie(value: string): string {
  return value
    .split(";")
    .filter((part, i) => i === 0 || !/^\s*domain\s*=/i.test(part))
    .join(";");
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: the control bytes a head line may not hold
const STATUS_LINE = /^HTTP\/1\.[01] [1-9]\d\d(?: [^\x00-\x08\x0a-\x1f\x7f]*)?$/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control bytes a head line may not hold
const HEADER_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\x00-\x08\x0a-\x1f\x7f]*$/;

/**
 * The sandbox's answer head to an upgrade (without its final CRLF CRLF), checked strictly and
 * with its Set-Cookie headers made host-only; null when it is not a valid HTTP/1.1 head: a bare
 * LF or CR (a browser or a lenient client would split a line there, so a `Set-Cookie` hidden
 * behind one would pass unfiltered), a control character, a folded line, a malformed name.
 * `complete` false: the head so far (the last line may be partial), checked for what is final.
 */
export function upgradeAnswerHead(head: string, complete: boolean): string | null {
  const lines = head.split("\r\n");
  if (!complete) lines.pop();
  for (const [i, line] of lines.entries()) if (!(i === 0 ? STATUS_LINE : HEADER_LINE).test(line)) return null;
  // A partial last line must not hold a bare LF or CR either (it would never be whole).
  const lastBreak = head.lastIndexOf("\r\n");
  if (!complete && /\n|\r(?!$)/.test(lastBreak === -1 ? head : head.slice(lastBreak + 2))) return null;
  if (!complete) return head;
  return lines
    .map((line, i) => {
      const colon = line.indexOf(":");
      if (i === 0 || line.slice(0, colon).toLowerCase() !== "set-cookie") return line;
      return `${line.slice(0, colon)}:${hostOnlyCookie(line.slice(colon + 1))}`;
    })
    .join("\r\n");
}

/** A request the endpoint cookie authorized must come from no page or one of the same sandbox's endpoints. */
function refuseForeignOrigin(sessions: SessionService, req: http.IncomingMessage, target: SessionTarget): void {
  if (target.fromQuery || target.usedBearer) return;
  if (!sessions.cookieOriginAllowed(req.headers.origin, target.sandboxId)) {
    throw new AppError("permission_denied", "the endpoint cookie is not accepted from another site's page");
  }
}

/** An API key (`wrn_`) or a session token (`wst1.`) anywhere in a string. */
const WARREN_SECRET = new RegExp(`wrn_|${TOKEN_PREFIX.replace(".", "\\.")}`, "i");

/**
 * Whether a header value carries a Warren API key or session token in any form: after any
 * scheme or none, quoted, percent-encoded, or base64-encoded (Basic `user:key`). Such a value
 * never reaches a sandbox. (A bootstrap key an operator chose without the `wrn_` prefix is
 * not recognized by its form; it goes only where it was sent as the Bearer credential.)
 */
export function carriesWarrenCredential(value: string): boolean {
  if (WARREN_SECRET.test(value)) return true;
  if (value.includes("%")) {
    try {
      if (WARREN_SECRET.test(decodeURIComponent(value))) return true;
    } catch {
      // Not percent-encoding after all: the raw value was checked.
    }
  }
  for (const token of value.split(/[\s,;:="']+/)) {
    if (token.length >= 8 && /^[A-Za-z0-9+/_-]+={0,2}$/.test(token)) {
      if (WARREN_SECRET.test(Buffer.from(token, "base64").toString("latin1"))) return true;
    }
  }
  return false;
}

// ---- credentials ----

function presentedCredentials(req: http.IncomingMessage): PresentedCredentials {
  const authorization = req.headers.authorization ?? "";
  const bearer = /^bearer\s+(\S+)\s*$/i.exec(authorization)?.[1] ?? null;
  const url = req.url ?? "/";
  const queryAt = url.indexOf("?");
  const queryToken =
    queryAt >= 0 && url.includes(ENDPOINT_QUERY, queryAt)
      ? new URLSearchParams(url.slice(queryAt + 1)).get(ENDPOINT_QUERY)
      : null;
  let cookieToken: string | null = null;
  const cookie = req.headers.cookie;
  if (cookie?.includes(ENDPOINT_COOKIE)) {
    for (const part of cookie.split(";")) {
      const [name, ...value] = part.trim().split("=");
      if (name === ENDPOINT_COOKIE) cookieToken = value.join("=");
    }
  }
  return { bearer, queryToken, cookieToken };
}

/** The request target without the token query parameter. */
function pathWithoutToken(url: string): string {
  const queryAt = url.indexOf("?");
  if (queryAt < 0 || !url.includes(ENDPOINT_QUERY, queryAt)) return url;
  const params = new URLSearchParams(url.slice(queryAt + 1));
  if (!params.has(ENDPOINT_QUERY)) return url;
  params.delete(ENDPOINT_QUERY);
  const rest = params.toString();
  return rest ? `${url.slice(0, queryAt)}?${rest}` : url.slice(0, queryAt);
}

/** The Cookie header without the endpoint cookie, the console's, nor any cookie carrying a Warren credential (null when nothing is left). */
function cookiesWithoutToken(cookie: string): string | null {
  const kept = cookie
    .split(";")
    .map((part) => part.trim())
    .filter((part) => {
      const name = part.split("=")[0];
      // The console's session cookie never reaches a sandbox (its value is a Warren secret too).
      if (name === CONSOLE_COOKIE || name === CONSOLE_COOKIE_SECURE) return false;
      return part.length > 0 && name !== ENDPOINT_COOKIE && !carriesWarrenCredential(part);
    });
  return kept.length > 0 ? kept.join("; ") : null;
}

/** Header pairs to forward: no hop-by-hop ones, none named in Connection, and not Warren's credential. */
function forwardedHeaders(
  req: http.IncomingMessage,
  target: SessionTarget,
  protocol: string,
  upgrade: boolean,
): [string, string][] {
  const named = new Set(
    (req.headers.connection ?? "")
      .split(",")
      .map((token) => token.trim().toLowerCase())
      .filter((token) => token.length > 0),
  );
  const out: [string, string][] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as string;
    const value = raw[i + 1] as string;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || named.has(lower) || lower.startsWith("x-forwarded-")) continue;
    // Warren's own credentials never reach the sandbox, whichever one opened the endpoint: a
    // client that sends its API key along with a token (an SDK adding it to every request)
    // would otherwise hand the key to the app.
    if (lower === "authorization" && target.usedBearer) continue;
    if (lower === "cookie") {
      const kept = cookiesWithoutToken(value);
      if (kept) out.push([name, kept]);
      continue;
    }
    // In any header (Authorization with any scheme or none, quoted, an X-Api-Key of the app's).
    if (carriesWarrenCredential(value)) continue;
    out.push([name, value]);
  }
  // Transfer-Encoding is hop-by-hop, but a body needs its framing again: without it Node's
  // client writes a GET's chunked body raw, and the sandbox's server reads those bytes as
  // another request on a pooled connection other clients' requests then share (smuggling).
  if (!upgrade && req.headers["transfer-encoding"] !== undefined) out.push(["Transfer-Encoding", "chunked"]);
  if (upgrade) {
    out.push(["Connection", "Upgrade"]);
    out.push(["Upgrade", req.headers.upgrade ?? ""]);
  }
  out.push(["X-Forwarded-For", req.socket.remoteAddress ?? ""]);
  out.push(["X-Forwarded-Host", req.headers.host ?? ""]);
  out.push(["X-Forwarded-Proto", protocol.replace(/:$/, "")]);
  return out;
}

/**
 * Header pairs of a request relayed to the owner's plane: as the client sent them (Host and
 * the credential included: the owner authorizes it again) but for hop-by-hop ones, plus the
 * relay mark.
 */
function relayedHeaders(req: http.IncomingMessage, upgrade: boolean): [string, string][] {
  const named = new Set(
    (req.headers.connection ?? "")
      .split(",")
      .map((token) => token.trim().toLowerCase())
      .filter((token) => token.length > 0),
  );
  const out: [string, string][] = [];
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i] as string;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || named.has(lower)) continue;
    out.push([name, raw[i + 1] as string]);
  }
  if (!upgrade && req.headers["transfer-encoding"] !== undefined) out.push(["Transfer-Encoding", "chunked"]);
  if (upgrade) {
    out.push(["Connection", "Upgrade"]);
    out.push(["Upgrade", req.headers.upgrade ?? ""]);
  }
  out.push([RELAY_HEADER, "1"]);
  return out;
}

/** Where a request goes: the sandbox's port, or (relayed) the owner's plane. */
function upstreamOf(
  req: http.IncomingMessage,
  target: SessionTarget,
  protocol: string,
  upgrade: boolean,
): { host: string; port: number; path: string; headers: [string, string][] } {
  if (target.relay) {
    return { ...target.relay, path: req.url ?? "/", headers: relayedHeaders(req, upgrade) };
  }
  return {
    host: target.address,
    port: target.port,
    path: pathWithoutToken(req.url ?? "/"),
    headers: forwardedHeaders(req, target, protocol, upgrade),
  };
}

/** The answer when the upstream cannot be reached: the sandbox's port, or its owner's plane. */
function upstreamDown(target: SessionTarget): AppError {
  return target.relay ? hostUnavailable("the sandbox's host did not answer; retry shortly") : unreachable(target.port);
}

// ---- HTTP ----

function sendError(res: http.ServerResponse, error: unknown, log: Logger): void {
  const appError =
    error instanceof AppError ? error : new AppError("internal", "the session plane failed to serve the request");
  if (!(error instanceof AppError)) log.error({ err: (error as Error).message }, "session plane request failed");
  if (res.destroyed || res.writableEnded) return;
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const requestId = newId("req");
  const body = JSON.stringify(errorBody(appError, requestId, "standard"));
  const headers: http.OutgoingHttpHeaders = {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    "x-request-id": requestId,
  };
  if (appError.retryAfterSeconds !== undefined) headers["retry-after"] = String(appError.retryAfterSeconds);
  if (appError.code === "unauthenticated") headers["www-authenticate"] = 'Bearer realm="warren endpoint"';
  res.writeHead(statusOf(appError), headers);
  res.end(body);
}

function rawError(error: AppError): string {
  const requestId = newId("req");
  const body = JSON.stringify(errorBody(error, requestId, "standard"));
  const status = statusOf(error);
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? "Error"}\r\ncontent-type: application/json; charset=utf-8\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${requestId}\r\n` +
    (error.retryAfterSeconds !== undefined ? `retry-after: ${error.retryAfterSeconds}\r\n` : "") +
    `connection: close\r\n\r\n${body}`
  );
}

const unreachable = (port: number) =>
  new AppError("unavailable", `nothing answers on port ${port} of the sandbox`, { retryAfterSeconds: 1 });

/** What the proxy functions share: the service, the upstream pool, the log, the organizations' places. */
interface Plane {
  sessions: SessionService;
  agent: http.Agent;
  /** Upstream connections to other hosts' planes. */
  relayAgent: http.Agent;
  log: Logger;
  /** Proxied exchanges (requests in flight, open upgrades) per organization id. */
  organizations: ConnectionSlots;
  /** A request on `socket` was authorized: it leaves the unauthenticated places (idempotent). */
  authenticated(socket: net.Socket): void;
}

const organizationFull = () =>
  new AppError("rate_limited", "the organization holds as many endpoint connections as it may; retry later", {
    retryAfterSeconds: 1,
  });

async function proxyRequest(plane: Plane, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const { sessions, agent, log } = plane;
  req.on("error", () => res.destroy());
  let target: SessionTarget;
  try {
    // Origin-form only: an absolute-form target (`GET http://elsewhere/`) would make the
    // token redirect below an open redirect, and names a host the Host header does not.
    if (!isOriginPath(req.url)) throw new AppError("invalid_argument", "the request target must be a path");
    target = await sessions.authorize(
      req.headers.host,
      presentedCredentials(req),
      req.headers[RELAY_HEADER] !== undefined,
    );
    refuseForeignOrigin(sessions, req, target);
    plane.authenticated(req.socket);
  } catch (error) {
    req.resume();
    return sendError(res, error, log);
  }
  const protocol = sessions.protocol();
  const path = pathWithoutToken(req.url ?? "/");
  if (target.fromQuery && (req.method === "GET" || req.method === "HEAD")) {
    // The token moves to a cookie of this host only, and the URL loses it (history, logs, Referer).
    const token = presentedCredentials(req).queryToken as string;
    const maxAge = Math.max(0, Math.floor(((target.tokenExpiresAt?.getTime() ?? 0) - Date.now()) / 1000));
    res.writeHead(302, {
      location: path,
      "set-cookie": `${ENDPOINT_COOKIE}=${token}; Path=/; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${protocol === "https:" ? "; Secure" : ""}`,
      "cache-control": "no-store",
      "content-length": 0,
    });
    res.end();
    req.resume();
    return;
  }
  const release = plane.organizations.takeFor(target.orgId);
  if (!release) {
    req.resume();
    return sendError(res, organizationFull(), log);
  }
  res.on("close", release);
  // The owner's plane records activity for a relayed request.
  if (!target.relay) {
    sessions.noteActivity(target.sandboxId);
    res.on("close", sessions.connectionOpened(target.sandboxId));
  }
  const to = upstreamOf(req, target, protocol, false);
  const upstream = http.request({
    host: to.host,
    port: to.port,
    method: req.method,
    path: to.path,
    headers: to.headers.flat(),
    agent: target.relay ? plane.relayAgent : agent,
    maxHeaderSize: MAX_HEADER_BYTES,
    timeout: IDLE_TIMEOUT_MS,
  });
  const connectTimer = setTimeout(() => upstream.destroy(upstreamDown(target)), CONNECT_TIMEOUT_MS);
  upstream.on("socket", (socket) => {
    if (!socket.connecting) clearTimeout(connectTimer);
    else socket.once("connect", () => clearTimeout(connectTimer));
  });
  upstream.on("timeout", () => upstream.destroy(new AppError("deadline_exceeded", "the sandbox stopped answering")));
  upstream.on("error", (error: NodeJS.ErrnoException) => {
    clearTimeout(connectTimer);
    if (error instanceof AppError) return sendError(res, error, log);
    // A refused or reset connection, or a response head over the cap: this request ends, nothing else.
    sendError(
      res,
      error.code === "HPE_HEADER_OVERFLOW"
        ? new AppError("unavailable", "the sandbox's response head is too large")
        : upstreamDown(target),
      log,
    );
  });
  upstream.on("response", (upstreamRes) => {
    clearTimeout(connectTimer);
    const headers: [string, string][] = [];
    const named = new Set(
      String(upstreamRes.headers.connection ?? "")
        .split(",")
        .map((token) => token.trim().toLowerCase()),
    );
    const raw = upstreamRes.rawHeaders;
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const lower = (raw[i] as string).toLowerCase();
      if (HOP_BY_HOP.has(lower) || named.has(lower)) continue;
      const value = raw[i + 1] as string;
      headers.push([raw[i] as string, lower === "set-cookie" ? hostOnlyCookie(value) : value]);
    }
    upstreamRes.on("error", () => res.destroy());
    // Node's client takes any three digits as a status; writeHead throws below 100 (in this
    // listener: an uncaught error per request, the client left hanging).
    const status = upstreamRes.statusCode ?? 0;
    if (status < 100 || status > 999) {
      upstreamRes.destroy();
      upstream.destroy();
      return sendError(res, new AppError("unavailable", "the sandbox's response has an invalid status"), log);
    }
    res.writeHead(status, headers.flat());
    upstreamRes.pipe(res);
  });
  res.on("close", () => {
    if (!res.writableFinished) upstream.destroy();
  });
  req.pipe(upstream);
}

// ---- WebSocket (any Upgrade) ----

async function proxyUpgrade(plane: Plane, req: http.IncomingMessage, socket: net.Socket, head: Buffer): Promise<void> {
  const { sessions, log } = plane;
  socket.on("error", () => socket.destroy());
  let target: SessionTarget;
  let release: (() => void) | null;
  try {
    if (!isOriginPath(req.url)) throw new AppError("invalid_argument", "the request target must be a path");
    target = await sessions.authorize(
      req.headers.host,
      presentedCredentials(req),
      req.headers[RELAY_HEADER] !== undefined,
    );
    refuseForeignOrigin(sessions, req, target);
    plane.authenticated(socket);
    release = plane.organizations.takeFor(target.orgId);
    if (!release) throw organizationFull();
  } catch (error) {
    const appError = error instanceof AppError ? error : new AppError("internal", "the upgrade failed");
    if (!(error instanceof AppError)) log.error({ err: (error as Error).message }, "session plane upgrade failed");
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    // An upgrade socket is the plane's alone (the HTTP server no longer reads or closes it):
    // read and drop what the client still sends, so its end closes the socket, and never
    // keep a refused one longer than the idle bound.
    socket.end(rawError(appError));
    socket.resume();
    const linger = setTimeout(() => socket.destroy(), REFUSED_UPGRADE_LINGER_MS);
    socket.once("close", () => clearTimeout(linger));
    return;
  }
  const protocol = sessions.protocol();
  // The owner's plane records activity for a relayed upgrade.
  if (!target.relay) sessions.noteActivity(target.sandboxId);
  const done = target.relay ? () => undefined : sessions.connectionOpened(target.sandboxId);
  const to = upstreamOf(req, target, protocol, true);
  const upstream = net.connect({ host: to.host, port: to.port });
  const connectTimer = setTimeout(() => upstream.destroy(new Error("connect timeout")), CONNECT_TIMEOUT_MS);
  let connected = false;
  const end = () => {
    clearTimeout(connectTimer);
    release();
    done();
    socket.destroy();
    upstream.destroy();
  };
  upstream.on("error", () => {
    if (!connected && socket.writable) socket.end(rawError(upstreamDown(target)));
    end();
  });
  socket.on("close", end);
  upstream.on("close", end);
  upstream.on("connect", () => {
    connected = true;
    clearTimeout(connectTimer);
    const lines = [`${req.method} ${to.path} HTTP/1.1`];
    for (const [name, value] of to.headers) lines.push(`${name}: ${value}`);
    // latin1: header values are bytes (obs-text included), as Node's parser read them.
    upstream.write(`${lines.join("\r\n")}\r\n\r\n`, "latin1");
    if (head.length > 0) upstream.write(head);
    // The rest is the sandbox's and the client's business: bytes both ways, idle-bounded.
    socket.setTimeout(IDLE_TIMEOUT_MS, end);
    upstream.setTimeout(IDLE_TIMEOUT_MS, end);
    socket.pipe(upstream);
    // The sandbox's answer head is parsed as strictly as a plain response's (Node's parser
    // refuses a bare LF there) and gets the same Set-Cookie treatment (a browser takes cookies
    // from a 101 too); then bytes flow untouched.
    let pending = Buffer.alloc(0);
    const refuse = () => {
      upstream.off("data", onHead);
      if (socket.writable) {
        socket.end(rawError(new AppError("unavailable", "the sandbox's upgrade answer is not valid HTTP/1.1")));
      }
      end();
    };
    const onHead = (data: Buffer) => {
      pending = Buffer.concat([pending, data]);
      const at = pending.indexOf("\r\n\r\n");
      const head = upgradeAnswerHead(
        pending.subarray(0, at === -1 ? pending.length : at).toString("latin1"),
        at !== -1,
      );
      if (head === null || (at === -1 && pending.length > MAX_HEADER_BYTES)) return refuse();
      if (at === -1) return;
      upstream.off("data", onHead);
      socket.write(Buffer.from(`${head}\r\n\r\n`, "latin1"));
      const rest = pending.subarray(at + 4);
      if (rest.length > 0) socket.write(rest);
      upstream.pipe(socket);
    };
    upstream.on("data", onHead);
  });
}
