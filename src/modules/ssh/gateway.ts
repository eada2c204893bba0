// Warren's SSH gateway (ssh2, server side). The user name is the sandbox id; the password (or
// the keyboard-interactive answer) is an API key of the sandbox's organization, which may
// see the sandbox as exec may (a sandbox-scoped key only its own sandbox). Every refusal
// looks the same (unknown key, another organization's key or sandbox, a malformed user), comes
// after the same delay, and counts against the client address (limits.ts). Channels are in
// channels.ts. Nothing a client sends is logged beyond a user name that is a sandbox id.
import net from "node:net";
import type { Duplex } from "node:stream";
import ssh2, { type AuthContext, type Connection } from "ssh2";
import type { HostNetwork, SandboxRuntime } from "../../drivers/runtime/interface.js";
import {
  ConnectionSlots,
  processDescriptorBudget,
  type SlotLimits,
  type StartupLimits,
  StartupSlots,
} from "../../lib/connection-slots.js";
import { AppError } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import { connectTcp } from "../../lib/tcp-connect.js";
import { hostUnavailable } from "../hosts/membership.js";
import type { IdentityService } from "../identity/service.js";
import type { SandboxService } from "../sandboxes/service.js";
import { isSessionToken } from "../sessions/tokens.js";
import { SessionActivity } from "./activity.js";
import {
  type ConnectionScope,
  MAX_SESSIONS_PER_CONNECTION,
  type ScopeRuntime,
  serveForward,
  serveSession,
} from "./channels.js";
import { DEFAULT_FAILURE_LIMITS, FailureLimiter, type FailureLimiterOptions } from "./limits.js";

const SANDBOX_ID = /^sbx-[0-9a-f]{40}$/;
/** Longer than any API key Warren issues; a longer password is refused unread. */
const MAX_PASSWORD_BYTES = 512;
/** Every refusal waits this long, so a wrong key and another organization's key look alike. */
export const FAILURE_DELAY_MS = 300;
/** Credential attempts per connection before it is closed. */
const MAX_ATTEMPTS_PER_CONNECTION = 6;
/** A connection must authenticate within this. */
const AUTH_TIMEOUT_MS = 30_000;
/**
 * Connections held at once and from one client address; of them, those not yet authenticated
 * (OpenSSH's MaxStartups with per-address accounting, StartupSlots): a client opening
 * handshakes it never finishes holds at most its address's share for up to AUTH_TIMEOUT_MS,
 * is dropped early as the budget fills, and clients that filled it together give a place to
 * one more address; authenticated sessions keep their own room. Defaults: the SSH share of
 * the process's descriptor budget (at most 1024 and 128; 256 and 32 unauthenticated).
 */
const defaultLimits = () => processDescriptorBudget().ssh;
const METHODS: AuthContext["method"][] = ["password", "keyboard-interactive"];

export interface SshGatewayOptions {
  hostKey: string;
  identity: IdentityService;
  sandboxes: SandboxService;
  /** This host's runtime; null on an `api` replica, where every sandbox is another host's (`routeOf`). */
  runtime: (Pick<SandboxRuntime, "openSession"> & Pick<HostNetwork, "portAddress">) | null;
  log: Logger;
  failureLimits?: FailureLimiterOptions;
  /** Connection limits (defaults: the descriptor budget's); tests lower them. */
  limits?: { connections?: SlotLimits; unauthenticated?: StartupLimits };
  /** Short-lived SSH tokens (IssueSshToken, `wst1.`...) as the password; absent: API keys only. */
  tokens?: { sshTokenOpens(token: string, sandboxId: string): Promise<boolean> } | null;
  /**
   * Where a sandbox's sessions and forwards open (HostRouter.runtimeOfId): this host's runtime
   * (`remote` null), or the owner's internal API; absent: `runtime` for every sandbox.
   */
  routeOf?: (sandboxId: string) => Promise<GatewayRoute>;
  /** Where connections closed at accept or evicted are counted (WarrenMetrics). */
  metrics?: { connectionRefused(server: "ssh", reason: "refused" | "evicted"): void };
}

/** What the gateway needs of a HostRouter route. */
export interface GatewayRoute {
  runtime: Pick<SandboxRuntime, "openSession">;
  remote: { openForward(port: number): Promise<Duplex> } | null;
}

/** How long a forward on this host waits for the sandbox's port to accept. */
const FORWARD_CONNECT_TIMEOUT_MS = 5_000;

/** A connection admitted at TCP accept and not authenticated yet. */
interface Admitted {
  authenticated(): void;
}

export class SshGateway {
  private readonly server: ssh2.Server;
  /** Where connections are accepted: slots are taken here, before ssh2 reads a byte. */
  private readonly listener: net.Server;
  private readonly admitted = new Map<string, Admitted>();
  private readonly limiter: FailureLimiter;
  readonly activity: SessionActivity;
  private readonly connections = new Set<Connection>();
  private readonly slots: ConnectionSlots;
  private readonly unauthenticated: StartupSlots;

  constructor(private readonly options: SshGatewayOptions) {
    this.slots = new ConnectionSlots(options.limits?.connections ?? defaultLimits().connections);
    this.unauthenticated = new StartupSlots(options.limits?.unauthenticated ?? defaultLimits().unauthenticated);
    this.limiter = new FailureLimiter(options.failureLimits ?? DEFAULT_FAILURE_LIMITS);
    this.activity = new SessionActivity(
      (sandboxId) => options.sandboxes.touch({ id: sandboxId }, "session"),
      (sandboxId, error) =>
        options.log.warn({ sandbox_id: sandboxId, err: error.message }, "could not record ssh session activity"),
    );
    // Keepalives drop a client that vanished without a word (its sessions would otherwise hold
    // the sandbox awake): about a minute of silence.
    const config = { hostKeys: [options.hostKey], ident: "Warren", keepaliveInterval: 15_000, keepaliveCountMax: 4 };
    this.server = new ssh2.Server(config, (client, info) => this.accept(client, info.ip, info.port));
    this.server.on("error", (error: Error) => options.log.warn({ err: error.message }, "ssh gateway error"));
    this.listener = net.createServer((socket) => this.admit(socket));
    this.listener.on("error", (error: Error) => options.log.warn({ err: error.message }, "ssh gateway error"));
  }

  /**
   * A TCP connection takes a connection slot and an unauthenticated one for its address, or is
   * closed at once; it must authenticate within AUTH_TIMEOUT_MS of connecting (a client that
   * never sends its SSH version line included). ssh2 only sees it once admitted.
   */
  private admit(socket: net.Socket): void {
    socket.on("error", () => undefined);
    const address = socket.remoteAddress;
    const release = address === undefined ? null : this.slots.take(address);
    // Should a client with fewer handshakes take this one's place, it is closed.
    const releaseUnauthenticated =
      release &&
      this.unauthenticated.take(address as string, () => {
        this.options.metrics?.connectionRefused("ssh", "evicted");
        socket.destroy();
      });
    if (!release || !releaseUnauthenticated) {
      release?.();
      this.options.metrics?.connectionRefused("ssh", "refused");
      socket.destroy();
      return;
    }
    const key = `${address}|${socket.remotePort}`;
    const authTimer = setTimeout(() => socket.destroy(), AUTH_TIMEOUT_MS);
    authTimer.unref();
    this.admitted.set(key, {
      authenticated: () => {
        clearTimeout(authTimer);
        releaseUnauthenticated();
      },
    });
    socket.once("close", () => {
      clearTimeout(authTimer);
      this.admitted.delete(key);
      releaseUnauthenticated();
      release();
    });
    this.server.injectSocket(socket);
  }

  /** Listens; resolves with the bound address (port 0 picks one). */
  listen(host: string, port: number): Promise<{ host: string; port: number }> {
    return new Promise((resolve, reject) => {
      this.listener.once("error", reject);
      this.listener.listen(port, host, () => {
        this.listener.removeListener("error", reject);
        const address = this.listener.address() as net.AddressInfo;
        resolve({ host: address.address, port: address.port });
      });
    });
  }

  /** The bound port once listening (port 0 resolved); null before. */
  get port(): number | null {
    const address = this.listener.address();
    return address && typeof address === "object" ? address.port : null;
  }

  /** Sessions and forwards on the sandbox's owner: this host's runtime, or routed to another host. */
  private scopeRuntime(): ScopeRuntime {
    const { runtime, routeOf } = this.options;
    const local = async (): Promise<GatewayRoute> => {
      if (!runtime) throw hostUnavailable();
      return { runtime, remote: null };
    };
    const route = routeOf ?? local;
    return {
      openSession: async (id, request, handlers) => (await route(id)).runtime.openSession(id, request, handlers),
      openPort: async (id, port) => {
        const { remote } = await route(id);
        if (remote) return remote.openForward(port);
        const address = runtime ? await runtime.portAddress(id) : null;
        if (!address) throw new AppError("failed_precondition", "the sandbox has no network link to forward to");
        return connectTcp(address, port, FORWARD_CONNECT_TIMEOUT_MS);
      },
    };
  }

  /** Whether an SSH session or forward of this process is open in the sandbox (holds off an idle stop). */
  hasOpenSession(sandboxId: string): boolean {
    return this.activity.isOpen(sandboxId);
  }

  async close(): Promise<void> {
    for (const client of this.connections) client.end();
    this.activity.close();
    await new Promise<void>((resolve) => this.listener.close(() => resolve()));
  }

  private accept(client: Connection, address: string, port: number): void {
    client.on("error", () => undefined);
    // The handshake is many small messages each way: with Nagle's algorithm on, a delayed ACK
    // held one of them ~40 ms (`ssh ... true` p50 110 ms -> 60-80 ms against a bare ssh2 server).
    // (ssh2's server-side connection has setNoDelay; @types/ssh2 declares it on the client only.)
    (client as unknown as { setNoDelay(on: boolean): void }).setNoDelay(true);
    const admitted = this.admitted.get(`${address}|${port}`);
    if (!admitted) {
      client.end();
      return;
    }
    this.connections.add(client);
    let attempts = 0;
    let scope: ConnectionScope | null = null;
    client.once("close", () => {
      this.connections.delete(client);
    });

    client.on("authentication", (ctx) => {
      if (ctx.method !== "password" && ctx.method !== "keyboard-interactive") {
        ctx.reject(METHODS);
        return;
      }
      attempts++;
      const decide = (secret: string) => {
        void this.verify(address, ctx.username, secret).then((sandboxId) => {
          if (sandboxId) {
            scope = {
              sandboxId,
              stillAllowed: () => this.opens(secret, sandboxId).then((id) => id !== null),
              runtime: this.scopeRuntime(),
              activity: this.activity,
              log: this.options.log,
              sessions: 0,
              forwards: 0,
            };
            ctx.accept();
            return;
          }
          ctx.reject(METHODS);
          if (attempts >= MAX_ATTEMPTS_PER_CONNECTION) client.end();
        });
      };
      if (ctx.method === "password") decide(ctx.password);
      else ctx.prompt([{ prompt: "Warren API key: ", echo: false }], (answers) => decide(answers[0] ?? ""));
    });

    client.on("ready", () => {
      admitted.authenticated();
      const granted = scope;
      if (!granted) {
        client.end();
        return;
      }
      client.on("session", (accept, reject) => {
        if (granted.sessions >= MAX_SESSIONS_PER_CONNECTION) return reject();
        granted.sessions++;
        const session = accept();
        session.once("close", () => {
          granted.sessions--;
        });
        serveSession(session, granted);
      });
      client.on("tcpip", (accept, reject, info) => {
        void serveForward(accept, reject, info, granted);
      });
      // Remote forwards (tcpip-forward), agent and streamlocal forwarding: none.
      client.on("request", (_accept, reject) => reject?.());
      client.on("openssh.streamlocal", (_accept, reject) => reject());
    });
  }

  /**
   * The sandbox's id when this secret opens it, else null: an SSH token for it, or an API key
   * that may exec in it (as ExecSandbox checks).
   */
  private async opens(secret: string, sandboxId: string): Promise<string | null> {
    if (isSessionToken(secret)) {
      const tokens = this.options.tokens;
      return tokens && (await tokens.sshTokenOpens(secret, sandboxId).catch(() => false)) ? sandboxId : null;
    }
    try {
      const cred = await this.options.identity.authenticate(secret);
      const row = await this.options.sandboxes.loadExecTarget(cred, sandboxId);
      return row.quarantined ? null : row.id;
    } catch {
      return null;
    }
  }

  /** The sandbox id this credential opens, or null: every failure is the same null after the same delay. */
  private async verify(address: string, user: string, secret: string): Promise<string | null> {
    const started = Date.now();
    let sandboxId: string | null = null;
    if (
      this.limiter.allowed(address, started) &&
      SANDBOX_ID.test(user) &&
      Buffer.byteLength(secret) <= MAX_PASSWORD_BYTES
    ) {
      sandboxId = await this.opens(secret, user);
    }
    if (sandboxId) return sandboxId;
    this.limiter.recordFailure(address, Date.now());
    // The user only when it is a sandbox id: a key pasted as the user name must not reach the log.
    const named = SANDBOX_ID.test(user) ? user : "(not a sandbox id)";
    this.options.log.info({ client: address, user: named }, "ssh authentication refused");
    const wait = FAILURE_DELAY_MS - (Date.now() - started);
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    return null;
  }
}
