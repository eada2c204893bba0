// The session plane's rules: which requests reach which sandbox port (credentials, the
// sandbox's organization, its `ports`, its state and link), the endpoint tokens, the
// `endpoints` of a sandbox's view, and traffic as `session` activity for idle stop. The
// HTTP side (listener, proxying, WebSocket upgrades) is src/http/session-plane.ts.
import type { HostNetwork } from "../../drivers/runtime/interface.js";
import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import { hostUnavailable } from "../hosts/membership.js";
import type { Credential } from "../identity/credential.js";
import { requireOrgScoped } from "../identity/credential.js";
import type { IdentityService } from "../identity/service.js";
import type { EndpointSource, SandboxRecord, SandboxService } from "../sandboxes/service.js";
import { type EndpointAddress, endpointUrl, type PlaneBase, parseEndpointHost, planeBase } from "./endpoint-host.js";
import type { OwnerPlanes, PlaneAddress } from "./owner-plane.js";
import { DEFAULT_TOKEN_TTL_SECONDS, isSessionToken, type SessionTokenSigner } from "./tokens.js";

/** How long a sandbox's row, address and listening ports are reused by the plane. */
const TARGET_CACHE_MS = 1000;
const TARGET_CACHE_ENTRIES = 10_000;
/** At most one activity write per sandbox per this many ms (idle timeouts are at least 60 s). */
export const ACTIVITY_INTERVAL_MS = 15_000;

/** Where the credential of a plane request came from (the plane strips it before forwarding). */
export interface PresentedCredentials {
  /** The bearer of `Authorization: Bearer …`. */
  bearer: string | null;
  /** The `warren_token` query parameter. */
  queryToken: string | null;
  /** The `warren_endpoint_token` cookie. */
  cookieToken: string | null;
}

export interface SessionTarget {
  sandboxId: string;
  /** The sandbox's organization (the plane bounds what each organization holds open). */
  orgId: string;
  port: number;
  /** Where the host connects: the sandbox's address on its veth ("" when relayed). */
  address: string;
  /**
   * The owner's plane when the sandbox is another host's: the request goes there as it came
   * (credential included, which the owner checks again); null: this host serves it.
   */
  relay: PlaneAddress | null;
  /** The credential came as a query parameter (a GET is redirected to drop it and set the cookie). */
  fromQuery: boolean;
  /** The Authorization header carried the credential (it is then not forwarded). */
  usedBearer: boolean;
  /** The token's expiry, for the cookie's lifetime (null for an API key). */
  tokenExpiresAt: Date | null;
}

interface CachedTarget {
  row: SandboxRecord;
  /** Whether this server's runtime runs the sandbox (its owner is this host, or no host is named). */
  local: boolean;
  address: string | null;
  expiresAtMs: number;
}

export const ENDPOINT_COOKIE = "warren_endpoint_token";
export const ENDPOINT_QUERY = "warren_token";

export class SessionService implements EndpointSource {
  private base: PlaneBase | null = null;
  private readonly targets = new Map<string, CachedTarget>();
  private readonly listening = new Map<string, { ports: number[]; expiresAtMs: number }>();
  private readonly lastActivityMs = new Map<string, number>();
  private readonly open = new Map<string, number>();
  private activityTimer: NodeJS.Timeout | null = null;
  private owners: OwnerPlanes | null = null;

  constructor(
    private readonly identity: IdentityService,
    private readonly sandboxes: SandboxService,
    private readonly runtime: Pick<HostNetwork, "portAddress" | "listeningPorts"> | null,
    private readonly signer: SessionTokenSigner,
    private readonly clock: Clock,
    private readonly log: Logger,
    configuredUrl: string,
  ) {
    if (configuredUrl) this.base = planeBase(configuredUrl);
  }

  /** The hosts' planes: a request for another host's sandbox is relayed to its owner's. */
  useOwnerPlanes(owners: OwnerPlanes): void {
    this.owners = owners;
  }

  /** Whether this server's runtime runs the sandbox: no registry, no owner named, or this host owns it. */
  private runsHere(row: Pick<SandboxRecord, "host_id">): boolean {
    if (!this.owners || row.host_id === null) return this.runtime !== null;
    return row.host_id === this.owners.selfId;
  }

  /**
   * Called once the plane listens: without WARREN_SESSION_PLANE_URL the base URL is the
   * bound address, with `localhost` for a loopback one (`*.localhost` resolves to loopback
   * in curl and browsers; an IP address has no subdomains).
   */
  planeListening(address: { host: string; port: number }): void {
    if (this.base) return;
    const loopback = ["127.0.0.1", "::1", "localhost", "0.0.0.0", "::"].includes(address.host);
    if (!loopback) {
      this.log.warn(
        { host: address.host },
        "the session plane listens on an address without a host name: set WARREN_SESSION_PLANE_URL to a wildcard DNS name",
      );
    }
    this.base = planeBase(`http://${loopback ? "localhost" : address.host}:${address.port}`);
  }

  /** The plane's public base URL (GetServiceConfig); "" while none is serving. */
  publicUrl(): string {
    return this.base ? `${this.base.protocol}//${this.base.hostname}${this.base.portSuffix}` : "";
  }

  /** `http:` or `https:`, as clients reach the plane. */
  protocol(): string {
    return this.base?.protocol ?? "http:";
  }

  endpointUrl(address: EndpointAddress): string {
    if (!this.base) throw new AppError("unavailable", "no session plane is serving", { retryAfterSeconds: 30 });
    return endpointUrl(this.base, address);
  }

  // ---- endpoints of a sandbox's view ----

  /** Each of `ports` the running sandbox listens on (where the host reaches it), as `{port, url}`. */
  async endpointsOf(row: SandboxRecord): Promise<{ port: number; url: string }[]> {
    const base = this.base;
    if (!base || row.state !== "running" || row.quarantined || row.ports.length === 0) return [];
    if (row.network_access === "none") return [];
    // Another host's sandbox: its ports are listed as declared (which of them listen is known
    // to its owner only; the router will ask it).
    if (!this.runsHere(row)) {
      if (!this.owners) return [];
      return row.ports.map((port) => ({ port, url: endpointUrl(base, { port, sandboxId: row.id }) }));
    }
    const listening = await this.listeningPorts(row.id);
    return row.ports
      .filter((port) => listening.includes(port))
      .map((port) => ({ port, url: endpointUrl(base, { port, sandboxId: row.id }) }));
  }

  private async listeningPorts(id: string): Promise<number[]> {
    const nowMs = Date.now();
    const hit = this.listening.get(id);
    if (hit && hit.expiresAtMs > nowMs) return hit.ports;
    const runtime = this.runtime;
    if (!runtime) return [];
    const ports = await runtime.listeningPorts(id).catch(() => [] as number[]);
    if (this.listening.size >= TARGET_CACHE_ENTRIES) this.listening.clear();
    this.listening.set(id, { ports, expiresAtMs: nowMs + TARGET_CACHE_MS });
    return ports;
  }

  // ---- tokens ----

  /** IssueEndpointToken: a token for one port of one sandbox of the caller's organization. */
  async issueToken(cred: Credential, sandboxId: string, port: number, ttlSeconds = DEFAULT_TOKEN_TTL_SECONDS) {
    requireOrgScoped(cred, "issue endpoint tokens");
    const row = await this.sandboxes.sessionTarget(sandboxId);
    if (!row || row.org_id !== cred.orgId) throw notFound("sandbox");
    if (!row.ports.includes(port)) throw new AppError("not_found", `port ${port} is not among the sandbox's ports`);
    const url = this.endpointUrl({ port, sandboxId });
    const expiresAt = new Date(Math.floor(this.clock.now().getTime() / 1000) * 1000 + ttlSeconds * 1000);
    const token = this.signer.sign({ audience: "endpoint", orgId: row.org_id, sandboxId, port, expiresAt });
    return { token, url, expires_at: expiresAt.toISOString() };
  }

  /**
   * IssueSshToken: a token that logs in to the SSH gateway as one sandbox of the caller's
   * organization (its `ssh` audience: an endpoint token never opens SSH, nor this one an endpoint).
   */
  async issueSshToken(cred: Credential, sandboxId: string, ttlSeconds = DEFAULT_TOKEN_TTL_SECONDS) {
    requireOrgScoped(cred, "issue ssh tokens");
    const row = await this.sandboxes.sessionTarget(sandboxId);
    if (!row || row.org_id !== cred.orgId) throw notFound("sandbox");
    const expiresAt = new Date(Math.floor(this.clock.now().getTime() / 1000) * 1000 + ttlSeconds * 1000);
    const token = this.signer.sign({ audience: "ssh", orgId: row.org_id, sandboxId, port: 0, expiresAt });
    return { token, user: sandboxId, expires_at: expiresAt.toISOString() };
  }

  /**
   * Whether `token` logs in to the SSH gateway as `sandboxId`: signed here for the `ssh`
   * audience, unexpired, for that sandbox, which is still its organization's and not quarantined.
   */
  async sshTokenOpens(token: string, sandboxId: string): Promise<boolean> {
    let claims: { orgId: string; sandboxId: string };
    try {
      claims = this.signer.verify(token, "ssh", this.clock.now());
    } catch {
      return false;
    }
    if (claims.sandboxId !== sandboxId) return false;
    const row = await this.sandboxes.sessionTarget(sandboxId);
    return row !== null && row.org_id === claims.orgId && !row.quarantined;
  }

  // ---- authorization of a plane request ----

  /**
   * The sandbox port a request may reach, or an AppError: not_found for a host that names
   * no endpoint, another organization's or an unknown sandbox, or a port not in `ports`;
   * unauthenticated without a valid credential; permission_denied for a token of another
   * sandbox or port (checked before any lookup, so it tells nothing of the other sandbox)
   * or a sandbox-scoped credential; sandbox_not_running, failed_precondition (`none`).
   */
  async authorize(
    hostHeader: string | undefined,
    presented: PresentedCredentials,
    /** The request came relayed from another server's plane: it is never relayed again. */
    relayed = false,
  ): Promise<SessionTarget> {
    const hostname = this.base?.hostname;
    const address = hostname ? parseEndpointHost(hostHeader, hostname) : null;
    if (!address) throw new AppError("not_found", "no endpoint is served at this host name");
    const { bearer, queryToken, cookieToken } = presented;
    // A token in the URL or the cookie wins, so an app behind the endpoint may use its own
    // Authorization header (forwarded untouched then).
    const secret = queryToken ?? cookieToken ?? bearer;
    if (!secret) {
      throw new AppError(
        "unauthenticated",
        "an endpoint needs an API key of the organization (Authorization: Bearer) or an endpoint token",
      );
    }
    let orgId: string;
    let tokenExpiresAt: Date | null = null;
    if (isSessionToken(secret)) {
      const claims = this.signer.verify(secret, "endpoint", this.clock.now());
      if (claims.sandboxId !== address.sandboxId || claims.port !== address.port) {
        throw new AppError("permission_denied", "the endpoint token is for another sandbox or port");
      }
      orgId = claims.orgId;
      tokenExpiresAt = claims.expiresAt;
    } else if (secret === bearer && queryToken === null && cookieToken === null) {
      const cred = await this.identity.authenticate(secret);
      if (cred.sandbox) {
        throw new AppError("permission_denied", "a sandbox-scoped credential does not open endpoints");
      }
      orgId = cred.orgId;
    } else {
      // An API key in a URL or a cookie would be logged and kept by browsers: only tokens go there.
      throw new AppError("unauthenticated", "only an endpoint token may be passed as a query parameter or cookie");
    }
    const target = await this.target(address.sandboxId);
    if (!target || target.row.org_id !== orgId) throw notFound("sandbox");
    if (!target.row.ports.includes(address.port)) {
      throw new AppError("not_found", `port ${address.port} is not among the sandbox's ports`);
    }
    if (target.row.state !== "running" || target.row.quarantined) {
      throw new AppError("sandbox_not_running", "the sandbox is not running");
    }
    if (target.row.network_access === "none" || (target.local && !target.address)) {
      throw new AppError("failed_precondition", "a sandbox with network_access none has no endpoints");
    }
    let relay: PlaneAddress | null = null;
    if (!target.local) {
      // Another host's sandbox: to its owner's plane, once (a relayed request is never relayed on).
      const owner = relayed || !target.row.host_id ? null : await this.owners?.planeOf(target.row.host_id);
      if (!owner) throw hostUnavailable("the sandbox's host is not available now; retry shortly");
      relay = owner;
    }
    return {
      sandboxId: address.sandboxId,
      orgId: target.row.org_id,
      port: address.port,
      address: target.address ?? "",
      relay,
      fromQuery: queryToken !== null,
      usedBearer: secret === bearer && queryToken === null && cookieToken === null,
      tokenExpiresAt,
    };
  }

  /**
   * Whether a request's Origin may use the endpoint cookie of `sandboxId`: no Origin (a
   * top-level navigation, a non-browser client) or an endpoint of the same sandbox. Every
   * endpoint is a sibling host under the plane's name, so to a browser another sandbox's
   * endpoint (another organization's included) is the same site, and SameSite=Lax sends the
   * cookie with its page's fetches and WebSockets: without this check a page one tenant serves
   * could drive another tenant's app with that user's cookie.
   */
  cookieOriginAllowed(origin: string | undefined, sandboxId: string): boolean {
    if (origin === undefined) return true;
    const hostname = this.base?.hostname;
    if (!hostname) return false;
    let host: string;
    try {
      host = new URL(origin).host;
    } catch {
      return false;
    }
    return parseEndpointHost(host, hostname)?.sandboxId === sandboxId;
  }

  private async target(id: string): Promise<CachedTarget | null> {
    const nowMs = Date.now();
    const hit = this.targets.get(id);
    if (hit && hit.expiresAtMs > nowMs) return hit;
    const row = await this.sandboxes.sessionTarget(id);
    if (!row) {
      this.targets.delete(id);
      return null;
    }
    const local = this.runsHere(row);
    const address = row.network_access === "none" || !local ? null : ((await this.runtime?.portAddress(id)) ?? null);
    const entry = { row, local, address, expiresAtMs: nowMs + TARGET_CACHE_MS };
    if (this.targets.size >= TARGET_CACHE_ENTRIES) this.targets.clear();
    this.targets.set(id, entry);
    return entry;
  }

  // ---- activity ----

  /** A request reached the sandbox: `session` activity, written at most every ACTIVITY_INTERVAL_MS. */
  noteActivity(sandboxId: string): void {
    const nowMs = Date.now();
    if (nowMs - (this.lastActivityMs.get(sandboxId) ?? 0) < ACTIVITY_INTERVAL_MS) return;
    if (this.lastActivityMs.size >= TARGET_CACHE_ENTRIES) this.lastActivityMs.clear();
    this.lastActivityMs.set(sandboxId, nowMs);
    this.sandboxes.touch({ id: sandboxId }, "session").catch((error: unknown) => {
      this.log.warn({ sandbox: sandboxId, err: (error as Error).message }, "recording session activity failed");
    });
  }

  /** A connection (a long response, a WebSocket) is held open: activity keeps advancing until closed. */
  connectionOpened(sandboxId: string): () => void {
    this.open.set(sandboxId, (this.open.get(sandboxId) ?? 0) + 1);
    // One timer while the plane serves (not one per connection): it touches what is held open.
    this.activityTimer ??= setInterval(() => {
      for (const id of this.open.keys()) this.noteActivity(id);
    }, ACTIVITY_INTERVAL_MS).unref();
    let closed = false;
    return () => {
      if (closed) return;
      closed = true;
      const left = (this.open.get(sandboxId) ?? 1) - 1;
      if (left > 0) this.open.set(sandboxId, left);
      else this.open.delete(sandboxId);
    };
  }

  close(): void {
    if (this.activityTimer) clearInterval(this.activityTimer);
    this.activityTimer = null;
  }
}
