// The egress gateway: one HTTP listener of the server on the host, which sandboxes reach at a
// virtual address (169.254.213.1:80, redirected here by the runtime's nat chain). It is
//   - a forward proxy: absolute-form `http://` requests and CONNECT tunnels, for the calling
//     sandbox's policy (policy.ts): public -> any destination outside the blocked ranges;
//     gateway_only -> the hosts of its bound secrets and its organization's allowlist;
//   - the API relay: origin-form requests go to Warren's own API, only with the calling
//     sandbox's own sandbox-scoped credential.
// Callers are known by their TCP source address (the runtime's slot address -> sandbox); an
// unknown source is refused. Everything a sandbox sends is hostile: headers are bounded,
// every wait has a timeout, and a malformed request ends its own connection only.
import { lookup } from "node:dns/promises";
import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type Server,
  type ServerResponse,
} from "node:http";
import { BlockList, connect, isIPv4, type Socket } from "node:net";
import { networkInterfaces } from "node:os";
import type { Duplex } from "node:stream";
import { answerAndDestroy, headCheckIntervalMs, processDescriptorBudget } from "../../lib/connection-slots.js";
import type { Logger } from "../../lib/logger.js";
import { decideAddresses, decideHost, parseDestinationHost } from "./policy.js";
import type { EgressCaller, EgressInterceptor, EgressLedger, EgressLedgerEntry } from "./types.js";

export interface EgressGatewayOptions {
  /** Listen address; 0.0.0.0 so the redirect to each veth's host address lands here. */
  host?: string;
  /** 0 picks a free port (tests). */
  port: number;
  /** Names resolved to these IPv4 addresses instead of DNS (WARREN_EGRESS_HOSTS); trusted as given. */
  hosts?: ReadonlyMap<string, string>;
  log: Logger;
  /** Longest request head (request line and headers) accepted from a sandbox, and from upstream. */
  maxHeaderBytes?: number;
  /** DNS, connect and response-head waits. */
  connectTimeoutMs?: number;
  /** A tunnel or request idle this long is closed. */
  idleTimeoutMs?: number;
  /** Open connections one source address (one sandbox) may hold; more are closed at once. */
  maxConnectionsPerSource?: number;
  /**
   * Open connections of every source together; more are closed at once. Default and the
   * per-source one: the egress share of the process's descriptor budget (connection-slots.ts).
   */
  maxConnections?: number;
  /** DNS lookups in flight at once (they take libuv threadpool slots the server shares). */
  maxConcurrentLookups?: number;
  /**
   * How often the callers of open connections are identified again: a connection (a CONNECT
   * tunnel above all) whose sandbox changed network mode or is gone is closed, so a switch to
   * `none` or `gateway_only` cuts what `public` opened.
   */
  recheckIntervalMs?: number;
}

/** What the gateway asks of the rest of Warren, bound once the container has it all. */
export interface EgressGatewayDeps {
  /** The caller at a source address, or null (not a sandbox, or not one this server knows). */
  identify(address: string): Promise<EgressCaller | null>;
  /** The organization's egress allowlist (exact names and `*.domain`), read per request. */
  allowlist(orgId: string): Promise<string[]>;
  /** The sandbox a credential is confined to, or null (unknown, revoked, or not sandbox-scoped). */
  sandboxOfCredential(secret: string): Promise<string | null>;
}

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "proxy-authenticate",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);

/** Headers to pass on: without hop-by-hop ones and those the Connection header names. */
export function endToEndHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const named = new Set(
    String(headers.connection ?? "")
      .split(",")
      .map((token) => token.trim().toLowerCase())
      .filter((token) => token.length > 0),
  );
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || named.has(name)) continue;
    out[name] = value;
  }
  return out;
}

/** `host:port` of a CONNECT request, or null. */
export function parseAuthority(authority: string): { host: string; port: number } | null {
  const match = /^([^:/?#@\s[\]]+):(\d{1,5})$/.exec(authority);
  if (!match) return null;
  const port = Number(match[2]);
  if (port < 1 || port > 65535) return null;
  return { host: match[1] as string, port };
}

/** The path of a request for the ledger and logs: never its query string, which may carry tokens. */
function pathOnly(target: string): string {
  const path = target.split("?")[0] ?? "";
  return path.length > 256 ? `${path.slice(0, 256)}...` : path;
}

/** Where the gateway reaches the API: the listener's port, on loopback when it listens on every address. */
export function apiTargetOf(
  listenHost: string,
  address: string | { port: number } | null,
): { host: string; port: number } {
  const port = typeof address === "object" && address ? address.port : 0;
  const host = listenHost === "0.0.0.0" || listenHost === "" ? "127.0.0.1" : listenHost === "::" ? "::1" : listenHost;
  return { host, port };
}

class Refusal extends Error {
  constructor(
    readonly status: 403 | 502 | 503 | 400,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Refusal(502, "timeout", `${what} timed out`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export class EgressGateway {
  private readonly server: Server;
  private readonly options: Required<Omit<EgressGatewayOptions, "hosts">> & { hosts: ReadonlyMap<string, string> };
  private deps: EgressGatewayDeps | null = null;
  private interceptor: EgressInterceptor | null = null;
  private ledger: EgressLedger | null = null;
  private apiTarget: { host: string; port: number } | null = null;
  private readonly sockets = new Set<Duplex>();
  private boundPort = 0;
  private closing: Promise<void> | null = null;
  private readonly perSource = new Map<string, number>();
  private connectionCount = 0;
  private lookupsInFlight = 0;
  private readonly lookupQueue: (() => void)[] = [];
  private ownAddresses: { list: BlockList; atMs: number } | null = null;
  /** Connections with the caller they were admitted for (recheck closes them when it changes). */
  private readonly admitted = new Map<
    Duplex,
    { address: string; sandboxId: string; mode: EgressCaller["mode"]; destination?: string }
  >();
  private readonly recheckTimer: NodeJS.Timeout;
  private rechecking = false;

  private constructor(options: EgressGatewayOptions) {
    this.options = {
      host: options.host ?? "0.0.0.0",
      port: options.port,
      hosts: options.hosts ?? new Map(),
      log: options.log,
      maxHeaderBytes: options.maxHeaderBytes ?? 16 * 1024,
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      idleTimeoutMs: options.idleTimeoutMs ?? 300_000,
      maxConnectionsPerSource: options.maxConnectionsPerSource ?? processDescriptorBudget().egress.perSource,
      maxConnections: options.maxConnections ?? processDescriptorBudget().egress.overall,
      maxConcurrentLookups: options.maxConcurrentLookups ?? 8,
      recheckIntervalMs: options.recheckIntervalMs ?? 2_000,
    };
    this.recheckTimer = setInterval(() => void this.recheck(), this.options.recheckIntervalMs).unref();
    this.server = createServer({
      maxHeaderSize: this.options.maxHeaderBytes,
      headersTimeout: this.options.connectTimeoutMs,
      connectionsCheckingInterval: headCheckIntervalMs(this.options.connectTimeoutMs),
      requestTimeout: 0,
      keepAliveTimeout: 5_000,
    });
    // A client that half-closes after its request (`printf ... | nc`) still gets its answer.
    (this.server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
    this.server.on("connection", (socket: Socket) => {
      const source = socket.remoteAddress ?? "";
      const open = (this.perSource.get(source) ?? 0) + 1;
      if (open > this.options.maxConnectionsPerSource || this.connectionCount >= this.options.maxConnections) {
        return void socket.destroy();
      }
      this.perSource.set(source, open);
      this.connectionCount++;
      socket.once("close", () => {
        this.connectionCount--;
        const left = (this.perSource.get(source) ?? 1) - 1;
        if (left > 0) this.perSource.set(source, left);
        else this.perSource.delete(source);
      });
      this.sockets.add(socket);
      socket.setTimeout(this.options.idleTimeoutMs, () => socket.destroy());
      socket.on("close", () => this.sockets.delete(socket));
    });
    this.server.on("request", (req: IncomingMessage, res: ServerResponse) => {
      this.onRequest(req, res).catch((error) => this.fail(res, error));
    });
    this.server.on("connect", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on("error", () => socket.destroy());
      this.onConnect(req, socket, head).catch((error) => this.failTunnel(socket, error));
    });
    // A malformed or oversized request head ends that connection with a 400/431, nothing more.
    // A head past its deadline ends the same way, destroyed rather than half-closed (a sandbox
    // trickling header bytes would otherwise keep it).
    this.server.on("clientError", (error: NodeJS.ErrnoException, socket: Duplex) => {
      const status =
        error.code === "HPE_HEADER_OVERFLOW"
          ? "431 Request Header Fields Too Large"
          : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
            ? "408 Request Timeout"
            : "400 Bad Request";
      answerAndDestroy(socket, `HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    });
  }

  static async start(options: EgressGatewayOptions): Promise<EgressGateway> {
    const gateway = new EgressGateway(options);
    await new Promise<void>((resolve, reject) => {
      gateway.server.once("error", reject);
      gateway.server.listen(options.port, gateway.options.host, () => {
        gateway.server.off("error", reject);
        resolve();
      });
    });
    const address = gateway.server.address();
    gateway.boundPort = typeof address === "object" && address ? address.port : 0;
    return gateway;
  }

  /** The port the gateway listens on (the runtime's nat chain redirects the virtual address here). */
  get port(): number {
    return this.boundPort;
  }

  bind(deps: EgressGatewayDeps): void {
    this.deps = deps;
  }

  /** Secret egress plugs in here (src/modules/egress/secret-egress.ts). */
  use(plugins: { interceptor?: EgressInterceptor | null; ledger?: EgressLedger | null }): void {
    if (plugins.interceptor !== undefined) this.interceptor = plugins.interceptor;
    if (plugins.ledger !== undefined) this.ledger = plugins.ledger;
  }

  /** Where origin-form requests go: the server's own API listener (known once it listens). */
  setApiTarget(target: { host: string; port: number }): void {
    this.apiTarget = target;
  }

  /** Stops listening and ends every connection (tunnels included). Idempotent. */
  close(): Promise<void> {
    clearInterval(this.recheckTimer);
    this.closing ??= new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      for (const socket of this.sockets) socket.destroy();
    });
    return this.closing;
  }

  // ---- callers and policy ----

  private async caller(socket: Duplex): Promise<EgressCaller> {
    const address = (socket as Socket).remoteAddress?.replace(/^::ffff:/, "") ?? "";
    const caller = this.deps ? await this.deps.identify(address) : null;
    if (!caller) throw new Refusal(403, "unknown_source", "this gateway serves Warren sandboxes only");
    if (!this.admitted.has(socket)) socket.once("close", () => this.admitted.delete(socket));
    this.admitted.set(socket, { address, sandboxId: caller.sandboxId, mode: caller.mode });
    return caller;
  }

  /** The host a connection now talks to (its tunnel's, or its latest forwarded request's). */
  private holdsDestination(socket: Duplex, host: string): void {
    const held = this.admitted.get(socket);
    if (held) held.destination = host;
  }

  /** The hosts a gateway_only caller may reach now: its secrets' and its organization's allowlist. */
  private async allowedHosts(caller: EgressCaller): Promise<string[]> {
    const deps = this.deps as EgressGatewayDeps;
    const [fromSecrets, fromOrg] = await Promise.all([
      this.interceptor ? this.interceptor.hostsFor(caller) : Promise.resolve([]),
      deps.allowlist(caller.orgId),
    ]);
    return [...fromSecrets, ...fromOrg];
  }

  /**
   * Identifies the caller of every open connection again and closes those whose sandbox is
   * gone or runs another network mode now: nftables stops new flows at a switch, but a tunnel
   * the gateway holds would otherwise go on (to anywhere, for one opened under `public`).
   */
  private async recheck(): Promise<void> {
    if (this.rechecking || !this.deps || this.admitted.size === 0) return;
    this.rechecking = true;
    try {
      const now = new Map<string, EgressCaller | null | undefined>();
      const allowedNow = new Map<string, string[] | undefined>();
      for (const [socket, held] of [...this.admitted]) {
        if (!now.has(held.address)) {
          // A failed lookup (a store hiccup) closes nothing: undefined is "not known".
          now.set(held.address, await this.deps.identify(held.address).catch(() => undefined));
        }
        const current = now.get(held.address);
        if (current === undefined) continue;
        let changed = current === null || current.sandboxId !== held.sandboxId || current.mode !== held.mode;
        if (!changed && current && current.mode === "gateway_only" && held.destination !== undefined) {
          // A host taken off the allowlist (or a secret's binding gone) ends what was open to it.
          if (!allowedNow.has(current.sandboxId)) {
            allowedNow.set(current.sandboxId, await this.allowedHosts(current).catch(() => undefined));
          }
          const allowed = allowedNow.get(current.sandboxId);
          const host = parseDestinationHost(held.destination);
          changed = allowed !== undefined && host !== null && !decideHost("gateway_only", host, allowed).allowed;
        }
        if (changed) {
          this.admitted.delete(socket);
          this.options.log.debug(
            { sandbox: held.sandboxId, mode: current?.mode ?? null },
            "egress connection closed: its sandbox's network changed",
          );
          socket.destroy();
        }
      }
    } finally {
      this.rechecking = false;
    }
  }

  /**
   * Checks `host:port` for the caller and resolves it: the address returned is the one that
   * was checked, and the one connected to (so a DNS answer cannot change in between).
   */
  private async admit(caller: EgressCaller, rawHost: string, port: number, method: string, path?: string) {
    const refuse = (code: string, reason: string, host = rawHost): never => {
      this.record(caller, { kind: "refused", host, port, method, ...(path ? { path } : {}), status: 403, reason });
      throw new Refusal(403, code, reason);
    };
    const host = parseDestinationHost(rawHost);
    if (!host) return refuse("bad_host", "the destination is not a DNS host name or an IPv4 address");
    const allowed = caller.mode === "gateway_only" ? await this.allowedHosts(caller) : [];
    const byName = decideHost(caller.mode, host, allowed);
    if (!byName.allowed) return refuse(byName.code, byName.reason, host.host);
    const mapped = this.options.hosts.get(host.host);
    if (mapped) return { host: host.host, address: mapped };
    const addresses =
      host.kind === "ipv4"
        ? [host.host]
        : await withTimeout(this.resolve(host.host), this.options.connectTimeoutMs, `resolving ${host.host}`);
    const byAddress = decideAddresses(host.host, addresses, this.hostAddresses());
    if (!byAddress.allowed) {
      if (byAddress.code === "unresolved") throw new Refusal(502, byAddress.code, byAddress.reason);
      return refuse(byAddress.code, byAddress.reason, host.host);
    }
    // IPv4 first: the host may have no IPv6 route, and sandboxes have no IPv6 at all.
    return { host: host.host, address: addresses.find((address) => isIPv4(address)) ?? (addresses[0] as string) };
  }

  /**
   * The host's own addresses (every interface's, public ones included): the gateway runs on
   * the host, so connecting to one of them would reach the host's own services from the host
   * itself, past the input chain that keeps sandboxes off the host. Read again every few seconds.
   */
  private hostAddresses(): BlockList {
    const nowMs = Date.now();
    if (this.ownAddresses && nowMs - this.ownAddresses.atMs < 5_000) return this.ownAddresses.list;
    const list = new BlockList();
    for (const entry of Object.values(networkInterfaces()).flat()) {
      if (!entry) continue;
      try {
        list.addAddress(entry.address.replace(/%.*$/, ""), entry.family === "IPv6" ? "ipv6" : "ipv4");
      } catch {
        // An address BlockList cannot take is not one a sandbox names either.
      }
    }
    this.ownAddresses = { list, atMs: nowMs };
    return list;
  }

  /** getaddrinfo through at most maxConcurrentLookups threadpool slots; [] when it fails. */
  private async resolve(name: string): Promise<string[]> {
    if (this.lookupsInFlight >= this.options.maxConcurrentLookups) {
      if (this.lookupQueue.length >= 1024) throw new Refusal(503, "unavailable", "too many lookups waiting");
      await new Promise<void>((resolve) => this.lookupQueue.push(resolve));
    }
    this.lookupsInFlight++;
    try {
      return (await lookup(name, { all: true, verbatim: true })).map((entry) => entry.address);
    } catch {
      return [];
    } finally {
      this.lookupsInFlight--;
      this.lookupQueue.shift()?.();
    }
  }

  private record(caller: EgressCaller, entry: EgressLedgerEntry): void {
    this.options.log.debug(
      { sandbox: caller.sandboxId, host: entry.host, port: entry.port, reason: entry.reason },
      "egress refused",
    );
    try {
      this.ledger?.record(caller, entry);
    } catch (error) {
      this.options.log.warn({ err: (error as Error).message }, "the egress ledger failed to record");
    }
  }

  // ---- HTTP ----

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.on("error", () => undefined);
    const caller = await this.caller(req.socket);
    const target = req.url ?? "";
    if (target.startsWith("/")) return this.relayApi(caller, req, res);
    let url: URL;
    try {
      url = new URL(target);
    } catch {
      throw new Refusal(
        400,
        "bad_request",
        "the request target is neither a path (the API) nor an absolute http:// URL",
      );
    }
    if (url.protocol !== "http:") {
      throw new Refusal(400, "bad_request", "absolute-form requests are http:// only; use CONNECT for https");
    }
    const port = url.port ? Number(url.port) : 80;
    const method = req.method ?? "GET";
    const admitted = await this.admit(caller, url.hostname, port, method, pathOnly(url.pathname));
    this.holdsDestination(req.socket, admitted.host);
    const headers = endToEndHeaders(req.headers);
    // RFC 9112 3.2.2: a proxy sends the request target's authority as Host, whatever the client said.
    headers.host = url.host;
    this.forward(req, res, {
      host: admitted.address,
      port,
      method,
      path: `${url.pathname}${url.search}`,
      headers,
      what: `${admitted.host}:${port}`,
    });
  }

  /** Origin-form: Warren's API, with the calling sandbox's own credential only. */
  private async relayApi(caller: EgressCaller, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const deps = this.deps as EgressGatewayDeps;
    const path = pathOnly(req.url ?? "/");
    const refuse = (reason: string): never => {
      this.record(caller, {
        kind: "refused",
        host: "warren-api",
        port: 80,
        method: req.method ?? "GET",
        path,
        status: 403,
        reason,
      });
      throw new Refusal(403, "permission_denied", reason);
    };
    const match = /^Bearer ([^\s]{1,512})$/.exec(String(req.headers.authorization ?? ""));
    if (!match)
      return refuse(
        "the API through the gateway needs this sandbox's credential (WARREN_SANDBOX_TOKEN) as a Bearer token",
      );
    const owner = await deps.sandboxOfCredential(match[1] as string);
    if (owner !== caller.sandboxId) {
      return refuse("the API through the gateway accepts only this sandbox's own sandbox-scoped credential");
    }
    if (!this.apiTarget) throw new Refusal(503, "unavailable", "the API is not serving yet");
    const headers = endToEndHeaders(req.headers);
    // An HTTP/1.0 client may send no Host; the API (HTTP/1.1) requires one.
    headers.host ??= `${this.apiTarget.host}:${this.apiTarget.port}`;
    this.forward(req, res, {
      host: this.apiTarget.host,
      port: this.apiTarget.port,
      method: req.method ?? "GET",
      path: req.url ?? "/",
      headers,
      what: "the API",
    });
  }

  private forward(
    req: IncomingMessage,
    res: ServerResponse,
    to: { host: string; port: number; method: string; path: string; headers: OutgoingHttpHeaders; what: string },
  ): void {
    // Transfer-Encoding is hop-by-hop, but a body needs its framing again: without it Node's
    // client writes a GET's chunked body raw, and the upstream (Warren's API, for the relay)
    // reads those bytes as a second request the gateway never checked (request smuggling).
    if (req.headers["transfer-encoding"] !== undefined) {
      delete to.headers["content-length"];
      to.headers["transfer-encoding"] = "chunked";
    }
    const upstream = httpRequest({
      host: to.host,
      port: to.port,
      method: to.method,
      path: to.path,
      headers: to.headers,
      setHost: false,
      agent: false,
      maxHeaderSize: this.options.maxHeaderBytes,
      timeout: this.options.idleTimeoutMs,
    });
    const connectTimer = setTimeout(
      () => upstream.destroy(new Refusal(502, "timeout", `${to.what} did not answer in time`)),
      this.options.connectTimeoutMs,
    );
    upstream.on("timeout", () => upstream.destroy(new Refusal(502, "timeout", `${to.what} went idle`)));
    upstream.on("response", (response) => {
      clearTimeout(connectTimer);
      // Node's client takes any three digits as a status; writeHead throws below 100, which in
      // this listener would leave the sandbox's request hanging and log a stack per request.
      const status = response.statusCode ?? 0;
      if (status < 100 || status > 999) {
        response.destroy();
        upstream.destroy();
        return this.fail(res, new Refusal(502, "upstream_failed", `${to.what} answered with an invalid status`));
      }
      res.writeHead(status, response.statusMessage, endToEndHeaders(response.headers));
      response.pipe(res);
      response.on("error", () => res.destroy());
    });
    upstream.on("error", (error) => {
      clearTimeout(connectTimer);
      if (res.headersSent) return res.destroy();
      this.fail(
        res,
        error instanceof Refusal ? error : new Refusal(502, "upstream_failed", `${to.what}: ${error.message}`),
      );
    });
    req.on("error", () => upstream.destroy());
    req.pipe(upstream);
  }

  private fail(res: ServerResponse, error: unknown): void {
    const refusal = error instanceof Refusal ? error : new Refusal(502, "gateway_error", "the gateway failed");
    if (!(error instanceof Refusal)) this.options.log.warn({ err: (error as Error).message }, "egress gateway error");
    if (res.headersSent) return void res.destroy();
    const body = `${JSON.stringify({ code: refusal.code, message: `warren egress gateway: ${refusal.message}` })}\n`;
    res.writeHead(refusal.status, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      "x-warren-egress": refusal.code,
      connection: "close",
    });
    res.end(body);
  }

  // ---- CONNECT ----

  private async onConnect(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    const caller = await this.caller(client);
    const authority = parseAuthority(req.url ?? "");
    if (!authority) throw new Refusal(400, "bad_request", "CONNECT needs host:port");
    const admitted = await this.admit(caller, authority.host, authority.port, "CONNECT");
    this.holdsDestination(client, admitted.host);
    const target = { host: admitted.host, port: authority.port, address: admitted.address };
    if (this.interceptor && (await this.interceptor.wants(caller, target.host, target.port))) {
      client.write("HTTP/1.1 200 Connection established\r\n\r\n");
      if (head.length > 0) client.unshift(head);
      this.interceptor.intercept(client, target, caller);
      return;
    }
    const upstream = connect({ host: target.address, port: target.port });
    upstream.setTimeout(this.options.connectTimeoutMs, () =>
      upstream.destroy(new Refusal(502, "timeout", `connecting to ${target.host}:${target.port} timed out`)),
    );
    await new Promise<void>((resolve, reject) => {
      upstream.once("connect", resolve);
      upstream.once("error", (error) =>
        reject(
          error instanceof Refusal
            ? error
            : new Refusal(502, "upstream_failed", `${target.host}:${target.port}: ${error.message}`),
        ),
      );
      client.once("close", () => upstream.destroy());
    });
    upstream.setTimeout(this.options.idleTimeoutMs, () => upstream.destroy());
    upstream.on("error", () => client.destroy());
    upstream.on("close", () => client.destroy());
    client.on("close", () => upstream.destroy());
    client.write("HTTP/1.1 200 Connection established\r\n\r\n");
    if (head.length > 0) upstream.write(head);
    client.pipe(upstream);
    upstream.pipe(client);
  }

  private failTunnel(client: Duplex, error: unknown): void {
    const refusal = error instanceof Refusal ? error : new Refusal(502, "gateway_error", "the gateway failed");
    if (!(error instanceof Refusal)) this.options.log.warn({ err: (error as Error).message }, "egress gateway error");
    if (!client.writable) return void client.destroy();
    const reason = { 400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable" }[
      refusal.status
    ];
    const body = `warren egress gateway: ${refusal.message}\n`;
    client.end(
      `HTTP/1.1 ${refusal.status} ${reason}\r\nContent-Type: text/plain\r\nX-Warren-Egress: ${refusal.code}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
}
