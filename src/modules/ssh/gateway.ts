// Warren's SSH gateway (ssh2, server side). The user name is the sandbox id; the password (or
// the keyboard-interactive answer) is an API key of the sandbox's organization, which may
// see the sandbox as exec may (a sandbox-scoped key only its own sandbox). Every refusal
// looks the same (unknown key, another organization's key or sandbox, a malformed user), comes
// after the same delay, and counts against the client address (limits.ts). Channels are in
// channels.ts. Nothing a client sends is logged beyond a user name that is a sandbox id.
import type net from "node:net";
import ssh2, { type AuthContext, type Connection } from "ssh2";
import type { RuntimeDriver } from "../../drivers/runtime/interface.js";
import type { Logger } from "../../lib/logger.js";
import type { IdentityService } from "../identity/service.js";
import type { SandboxService } from "../sandboxes/service.js";
import { isSessionToken } from "../sessions/tokens.js";
import { SessionActivity } from "./activity.js";
import { type ConnectionScope, MAX_SESSIONS_PER_CONNECTION, serveForward, serveSession } from "./channels.js";
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
const MAX_CONNECTIONS = 1024;
const MAX_CONNECTIONS_PER_ADDRESS = 128;
const METHODS: AuthContext["method"][] = ["password", "keyboard-interactive"];

export interface SshGatewayOptions {
  hostKey: string;
  identity: IdentityService;
  sandboxes: SandboxService;
  runtime: RuntimeDriver;
  log: Logger;
  failureLimits?: FailureLimiterOptions;
  /** Short-lived SSH tokens (IssueSshToken, `wst1.`...) as the password; absent: API keys only. */
  tokens?: { sshTokenOpens(token: string, sandboxId: string): Promise<boolean> } | null;
}

export class SshGateway {
  private readonly server: ssh2.Server;
  private readonly limiter: FailureLimiter;
  readonly activity: SessionActivity;
  private readonly connections = new Set<Connection>();
  private readonly perAddress = new Map<string, number>();

  constructor(private readonly options: SshGatewayOptions) {
    this.limiter = new FailureLimiter(options.failureLimits ?? DEFAULT_FAILURE_LIMITS);
    this.activity = new SessionActivity(
      (sandboxId) => options.sandboxes.touch({ id: sandboxId }, "session"),
      (sandboxId, error) =>
        options.log.warn({ sandbox_id: sandboxId, err: error.message }, "could not record ssh session activity"),
    );
    // Keepalives drop a client that vanished without a word (its sessions would otherwise hold
    // the sandbox awake): about a minute of silence.
    const config = { hostKeys: [options.hostKey], ident: "Warren", keepaliveInterval: 15_000, keepaliveCountMax: 4 };
    this.server = new ssh2.Server(config, (client, info) => this.accept(client, info.ip));
    this.server.on("error", (error: Error) => options.log.warn({ err: error.message }, "ssh gateway error"));
  }

  /** Listens; resolves with the bound address (port 0 picks one). */
  listen(host: string, port: number): Promise<{ host: string; port: number }> {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(port, host, () => {
        this.server.removeListener("error", reject);
        const address = this.server.address() as net.AddressInfo;
        resolve({ host: address.address, port: address.port });
      });
    });
  }

  /** Whether an SSH session or forward of this process is open in the sandbox (holds off an idle stop). */
  hasOpenSession(sandboxId: string): boolean {
    return this.activity.isOpen(sandboxId);
  }

  async close(): Promise<void> {
    for (const client of this.connections) client.end();
    this.activity.close();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Connection, address: string): void {
    client.on("error", () => undefined);
    // The handshake is many small messages each way: with Nagle's algorithm on, a delayed ACK
    // held one of them ~40 ms (`ssh ... true` p50 110 ms -> 60-80 ms against a bare ssh2 server).
    // (ssh2's server-side connection has setNoDelay; @types/ssh2 declares it on the client only.)
    (client as unknown as { setNoDelay(on: boolean): void }).setNoDelay(true);
    const fromAddress = this.perAddress.get(address) ?? 0;
    if (this.connections.size >= MAX_CONNECTIONS || fromAddress >= MAX_CONNECTIONS_PER_ADDRESS) {
      client.end();
      return;
    }
    this.connections.add(client);
    this.perAddress.set(address, fromAddress + 1);
    let attempts = 0;
    let scope: ConnectionScope | null = null;
    const authTimer = setTimeout(() => client.end(), AUTH_TIMEOUT_MS);
    authTimer.unref();
    client.once("close", () => {
      clearTimeout(authTimer);
      this.connections.delete(client);
      const left = (this.perAddress.get(address) ?? 1) - 1;
      if (left > 0) this.perAddress.set(address, left);
      else this.perAddress.delete(address);
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
              runtime: this.options.runtime,
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
      clearTimeout(authTimer);
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
