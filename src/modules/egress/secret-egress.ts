// Secret egress: for a CONNECT to a host a sandbox has a secret bound for, the gateway hands
// the client stream here. It terminates the sandbox's TLS under a leaf of the deployment CA,
// reads HTTP/1.1 requests one at a time (keep-alive, pipelining, chunked bodies; bounded),
// resolves the secret again for EACH request (so a revoke, a rotation, an ungrant or an
// expiry applies to the very next one), replaces any Authorization header with
// `Bearer <value>`, re-encrypts to the address the gateway resolved with full verification
// of the host's certificate, and streams the response back with the value scrubbed. Every
// request, injected or refused, becomes a ledger entry. The value never goes to the sandbox.
// docs/secret-egress.md

import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import {
  checkServerIdentity,
  connect,
  createSecureContext,
  rootCertificates,
  type SecureContext,
  TLSSocket,
} from "node:tls";
import type { Clock } from "../../lib/clock.js";
import type { Logger } from "../../lib/logger.js";
import type { DeliverySubject, SecretBinding, SecretService } from "../secrets/service.js";
import type { EgressCa } from "./ca.js";
import {
  bodyFraming,
  chunk,
  copyBody,
  type Framing,
  fieldValues,
  HttpError,
  parseHead,
  readHead,
  StreamReader,
  serializeHead,
  wantsClose,
  withoutFields,
  write,
} from "./http1.js";
import { Scrubber, secretForms } from "./scrub.js";
import type { EgressCaller, EgressInterceptor, EgressLedger, EgressLedgerEntry } from "./types.js";

/** The port secret egress terminates: only HTTPS on its standard port is injected. */
export const HTTPS_PORT = 443;
const IDLE_TIMEOUT_MS = 120_000;
const UPSTREAM_CONNECT_TIMEOUT_MS = 15_000;
const BINDING_CACHE_ENTRIES = 4096;
/** Longest request path the ledger keeps (the query string is never kept). */
const LEDGER_PATH_CHARS = 1024;
// A header value the value may become: no CR, LF, NUL or other control bytes.
const HEADER_SAFE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;
// Hop-by-hop or proxy fields never forwarded; Authorization is replaced; Accept-Encoding is
// pinned to identity so an echo of the value stays scrubbable.
const DROPPED_REQUEST_FIELDS = [
  "authorization",
  "proxy-authorization",
  "proxy-connection",
  "accept-encoding",
  "expect",
  "keep-alive",
  "te",
];

/** A sandbox's bindings, from its row (org-checked by the caller). */
export type BindingSource = (sandboxId: string) => Promise<{ orgId: string; bindings: SecretBinding[] } | null>;

export interface SecretEgressOptions {
  secrets: Pick<SecretService, "resolveSecretForDelivery">;
  ca: EgressCa;
  ledger: EgressLedger;
  bindings: BindingSource;
  clock: Clock;
  log: Logger;
  /** PEM CAs trusted for upstream TLS besides Node's bundled roots (WARREN_EGRESS_EXTRA_CA_FILE). */
  extraCaPem: string;
}

type Refusal = { status: number; reason: string; secretId?: string; secretVersion?: number };

export class SecretEgress implements EgressInterceptor {
  private readonly upstreamContext: SecureContext;
  private readonly cache = new Map<string, { orgId: string; bindings: SecretBinding[] } | null>();

  constructor(private readonly o: SecretEgressOptions) {
    // Node's bundled roots (Mozilla's, the source of Debian's ca-certificates) plus the
    // operator's extra bundle; built once, every upstream connection shares it.
    this.upstreamContext = createSecureContext({
      minVersion: "TLSv1.2",
      ca: [...rootCertificates, ...splitPem(o.extraCaPem)],
    });
  }

  private async bindingsOf(caller: EgressCaller): Promise<SecretBinding[]> {
    // Bindings never change after admission, so they are cached; another org's id has none.
    let found = this.cache.get(caller.sandboxId);
    if (found === undefined) {
      found = await this.o.bindings(caller.sandboxId);
      if (this.cache.size >= BINDING_CACHE_ENTRIES) this.cache.clear();
      this.cache.set(caller.sandboxId, found);
    }
    return found && found.orgId === caller.orgId ? found.bindings : [];
  }

  async hostsFor(caller: EgressCaller): Promise<string[]> {
    return [...new Set((await this.bindingsOf(caller)).map((b) => b.dest_host))];
  }

  async wants(caller: EgressCaller, host: string, port: number): Promise<boolean> {
    if (port !== HTTPS_PORT || caller.mode === "none") return false;
    const lower = host.toLowerCase();
    if (!(await this.bindingsOf(caller)).some((b) => b.dest_host === lower)) return false;
    // The leaf is ready before the gateway hands the stream over, so even a client that
    // sends no SNI gets it (intercept's SNICallback covers a leaf evicted meanwhile).
    await this.o.ca.contextFor(lower).catch(() => undefined);
    return true;
  }

  intercept(client: Duplex, target: { host: string; port: number; address: string }, caller: EgressCaller): void {
    client.on("error", () => {});
    // Heads and bodies leave as separate writes: Nagle plus a delayed ACK would hold each for 40 ms.
    (client as Partial<Socket>).setNoDelay?.(true);
    const host = target.host.toLowerCase();
    // Wrapped at once, so no byte of the ClientHello can slip past; the leaf for the CONNECT's
    // host (whatever name the client's SNI claims) comes from the cache or is minted meanwhile.
    const cached = this.o.ca.cachedContext(host);
    const tls = new TLSSocket(client, {
      isServer: true,
      ALPNProtocols: ["http/1.1"],
      ...(cached ? { secureContext: cached } : {}),
      SNICallback: (_servername, callback) => {
        this.o.ca.contextFor(host).then(
          (context) => callback(null, context),
          (error: Error) => {
            this.o.log.warn({ err: error.message, host }, "secret egress: no leaf certificate");
            this.o.ledger.record(caller, { kind: "refused", host, port: target.port, reason: "no_certificate" });
            callback(error);
          },
        );
      },
    });
    tls.on("error", () => tls.destroy());
    tls.setTimeout(IDLE_TIMEOUT_MS, () => tls.destroy());
    void new Session(this.o, this.upstreamContext, tls, { ...target, host }, caller, () =>
      this.bindingsOf(caller),
    ).run();
  }
}

function splitPem(bundle: string): string[] {
  return bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
}

function pathOf(requestTarget: string): string {
  const q = requestTarget.indexOf("?");
  return (q === -1 ? requestTarget : requestTarget.slice(0, q)).slice(0, LEDGER_PATH_CHARS);
}

/** One sandbox TLS connection: its requests in order, over at most one upstream connection at a time. */
class Session {
  private readonly reader: StreamReader;
  /** The kept-alive upstream connection and the one value ever injected on it. */
  private upstream: { socket: TLSSocket; reader: StreamReader; value: string } | null = null;
  /** Whether bytes of the current response went to the sandbox (then an error can only close). */
  private answering = false;

  constructor(
    private readonly o: SecretEgressOptions,
    private readonly upstreamContext: SecureContext,
    private readonly client: TLSSocket,
    private readonly target: { host: string; port: number; address: string },
    private readonly caller: EgressCaller,
    private readonly bindings: () => Promise<SecretBinding[]>,
  ) {
    this.reader = new StreamReader(client);
  }

  private record(entry: Omit<EgressLedgerEntry, "host" | "port">) {
    this.o.ledger.record(this.caller, { host: this.target.host, port: this.target.port, ...entry });
  }

  async run(): Promise<void> {
    try {
      for (;;) {
        const raw = await readHead(this.reader, "a request head");
        if (raw === null) break;
        const keepGoing = await this.exchange(raw);
        if (!keepGoing) break;
      }
    } catch (error) {
      if (error instanceof HttpError) {
        const reason = error.status === 502 ? "upstream_failed" : "malformed_request";
        this.record({ kind: "refused", status: error.status, reason });
        if (!this.answering) await this.answer(error.status, reason, error.message).catch(() => {});
      }
    } finally {
      this.client.end();
      this.upstream?.socket.destroy();
      this.upstream = null;
    }
  }

  /**
   * Sends Warren's own answer to the sandbox, as the gateway answers its refusals: a JSON
   * `{code, message}` and `X-Warren-Egress: <code>`; the connection then closes.
   */
  private async answer(status: number, code: string, message: string): Promise<void> {
    const body = Buffer.from(`${JSON.stringify({ code, message })}\n`);
    const reason = status === 403 ? "Forbidden" : status === 502 ? "Bad Gateway" : "Refused";
    await write(
      this.client,
      Buffer.concat([
        Buffer.from(
          `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n` +
            `X-Warren-Egress: ${code}\r\nConnection: close\r\n\r\n`,
        ),
        body,
      ]),
    );
  }

  private async refuse(refusal: Refusal, method: string, path: string, started: number): Promise<false> {
    this.record({
      kind: "refused",
      method,
      path,
      status: refusal.status,
      reason: refusal.reason,
      durationMs: Date.now() - started,
      ...(refusal.secretId ? { secretId: refusal.secretId } : {}),
      ...(refusal.secretVersion ? { secretVersion: refusal.secretVersion } : {}),
    });
    await this.answer(refusal.status, refusal.reason, `secret egress: ${refusal.reason.replaceAll("_", " ")}`);
    return false;
  }

  /** One request and its response; false when the connection must close afterwards. */
  private async exchange(raw: Buffer): Promise<boolean> {
    const started = Date.now();
    this.answering = false;
    const head = parseHead(raw);
    const [method = "", requestTarget = "", version = ""] = head.startLine.split(" ");
    const path = pathOf(requestTarget);
    // The target is visible ASCII only: a bare CR, a NUL or a tab in it reaches an upstream
    // whose parser may end the line there and read what follows as headers (another Host).
    if (
      head.startLine.split(" ").length !== 3 ||
      !/^[A-Z]{1,20}$/.test(method) ||
      version !== "HTTP/1.1" ||
      !/^[\x21-\x7e]+$/.test(requestTarget)
    ) {
      return this.refuse({ status: 400, reason: "malformed_request_line" }, method.slice(0, 20), "", started);
    }
    if (!requestTarget.startsWith("/")) {
      return this.refuse({ status: 400, reason: "request_target_must_be_origin_form" }, method, "", started);
    }
    // The value goes only to its host: a Host naming another (virtual) host on the same
    // server would route it elsewhere (a CDN fronts many hosts on one address).
    const hosts = fieldValues(head, "host");
    const hostValue = hosts[0]?.toLowerCase() ?? "";
    if (hosts.length !== 1 || (hostValue !== this.target.host && hostValue !== `${this.target.host}:${HTTPS_PORT}`)) {
      return this.refuse({ status: 403, reason: "host_header_must_name_the_bound_host" }, method, path, started);
    }
    if (fieldValues(head, "upgrade").length > 0) {
      return this.refuse({ status: 501, reason: "protocol_upgrades_are_not_relayed" }, method, path, started);
    }
    const requestFraming = bodyFraming(head, true);
    const resolved = await this.resolve();
    if ("reason" in resolved) return this.refuse(resolved, method, path, started);

    if (fieldValues(head, "expect").some((v) => v.toLowerCase() === "100-continue")) {
      this.answering = true;
      await write(this.client, Buffer.from("HTTP/1.1 100 Continue\r\n\r\n"));
    }
    const clientClose = wantsClose(head, version);
    const forwarded = withoutFields(head, DROPPED_REQUEST_FIELDS);
    forwarded.fields.push({ name: "Authorization", value: `Bearer ${resolved.value}` });
    forwarded.fields.push({ name: "Accept-Encoding", value: "identity" });

    let upstream: { socket: TLSSocket; reader: StreamReader };
    try {
      upstream = await this.connectUpstream(resolved.value);
    } catch (error) {
      const reason =
        (error as { code?: string }).code?.startsWith("ERR_TLS") ||
        /certificate|altname/i.test((error as Error).message)
          ? "upstream_certificate_not_trusted"
          : "upstream_unreachable";
      // The request's body is left unread: the connection closes after the answer.
      return this.refuse(
        { status: 502, reason, secretId: resolved.secretId, secretVersion: resolved.version },
        method,
        path,
        started,
      );
    }
    const scrubber = new Scrubber(secretForms(resolved.value));
    await write(upstream.socket, serializeHead(forwarded));
    const [bytesIn, response] = await Promise.all([
      copyBody(this.reader, requestFraming, (bytes) => write(upstream.socket, bytes), { decode: false }),
      this.relayResponse(upstream, method, scrubber),
    ]);
    this.record({
      kind: "injected",
      method,
      path,
      status: response.status,
      bytesIn,
      bytesOut: response.bytesOut,
      durationMs: Date.now() - started,
      secretId: resolved.secretId,
      secretVersion: resolved.version,
      ...(scrubber.matches > 0 ? { reason: "response_scrubbed" } : {}),
    });
    if (response.upstreamClosed) {
      this.upstream?.socket.destroy();
      this.upstream = null;
    }
    return !clientClose && !response.clientMustClose;
  }

  /** The bound secret's current value for this host, or why it cannot be injected. */
  private async resolve(): Promise<{ value: string; version: number; secretId: string } | Refusal> {
    const binding = (await this.bindings()).find((b) => b.dest_host === this.target.host);
    if (!binding) return { status: 403, reason: "no_secret_bound_for_this_host" };
    const subject = { kind: binding.subject_kind, id: binding.subject_id } as DeliverySubject;
    const result = await this.o.secrets.resolveSecretForDelivery(
      this.caller.orgId,
      binding.name,
      subject,
      binding.delivery,
    );
    if (!result.ok) return { status: 403, reason: `secret_${result.reason}`, secretId: binding.secret_id };
    // A secret deleted and created again under the same name is another secret: not bound.
    if (result.secretId !== binding.secret_id)
      return { status: 403, reason: "secret_not_found", secretId: binding.secret_id };
    if (binding.delivery === "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS" && result.destHost !== binding.dest_host) {
      return { status: 403, reason: "secret_destination_changed", secretId: binding.secret_id };
    }
    if (!HEADER_SAFE.test(result.value)) {
      return {
        status: 403,
        reason: "secret_value_not_header_safe",
        secretId: result.secretId,
        secretVersion: result.version,
      };
    }
    return { value: result.value, version: result.version, secretId: result.secretId };
  }

  /**
   * The upstream connection for a request carrying `value`. A kept-alive one is reused only
   * when it never carried another value: after a rotation an upstream that desynced its
   * responses (answering an earlier request late) could otherwise echo the old value past a
   * scrubber that knows only the new one.
   */
  private connectUpstream(value: string): Promise<{ socket: TLSSocket; reader: StreamReader }> {
    // An upstream that closed its idle keep-alive connection meanwhile is not reused.
    if (
      this.upstream &&
      this.upstream.value === value &&
      !this.upstream.socket.destroyed &&
      !this.upstream.reader.isEnded
    ) {
      return Promise.resolve(this.upstream);
    }
    this.upstream?.socket.destroy();
    this.upstream = null;
    return new Promise((resolve, reject) => {
      const socket = connect({
        host: this.target.address,
        port: this.target.port,
        servername: this.target.host,
        secureContext: this.upstreamContext,
        ALPNProtocols: ["http/1.1"],
        rejectUnauthorized: true,
        // Verified against the host name, not the address connected to.
        checkServerIdentity: (_name, cert) => checkServerIdentity(this.target.host, cert),
      });
      const timer = setTimeout(
        () => socket.destroy(new Error("upstream connect timed out")),
        UPSTREAM_CONNECT_TIMEOUT_MS,
      );
      socket.setNoDelay(true);
      socket.once("secureConnect", () => {
        clearTimeout(timer);
        socket.setTimeout(IDLE_TIMEOUT_MS, () => socket.destroy());
        this.upstream = { socket, reader: new StreamReader(socket), value };
        resolve(this.upstream);
      });
      socket.once("error", (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });
  }

  /** Streams the upstream's response (1xx heads included) to the sandbox with the value scrubbed. */
  private async relayResponse(
    upstream: { socket: TLSSocket; reader: StreamReader },
    method: string,
    scrubber: Scrubber,
  ): Promise<{ status: number; bytesOut: number; upstreamClosed: boolean; clientMustClose: boolean }> {
    for (;;) {
      const raw = await readHead(upstream.reader, "a response head");
      if (raw === null) throw new HttpError(502, "the upstream closed before answering");
      const head = parseHead(scrubber.scrubWhole(raw));
      const [version = "", statusText = ""] = head.startLine.split(" ");
      const status = Number(statusText);
      if (!/^HTTP\/1\.[01]$/.test(version) || !/^\d{3}$/.test(statusText))
        throw new HttpError(502, "a malformed upstream response");
      if (status === 101) throw new HttpError(502, "the upstream switched protocols");
      // Accept-Encoding was identity: a body encoded anyway could carry the value past the scrubber.
      const encodings = fieldValues(head, "content-encoding").flatMap((v) => v.toLowerCase().split(","));
      if (encodings.some((coding) => coding.trim() !== "" && coding.trim() !== "identity")) {
        throw new HttpError(502, "the upstream encoded its response (Content-Encoding), which cannot be scrubbed");
      }
      this.answering = true;
      if (status >= 100 && status < 200) {
        await write(this.client, serializeHead(head));
        continue;
      }
      const framing: Framing =
        method === "HEAD" || status === 204 || status === 304 ? { kind: "none" } : bodyFraming(head, false);
      const upstreamClose = wantsClose(head, version) || framing.kind === "close";
      // The body is decoded, scrubbed and framed again: chunked when the upstream chunked it
      // or delimited it by closing, the same length otherwise (a scrub keeps lengths).
      const rechunk = framing.kind === "chunked" || framing.kind === "close";
      const out = rechunk
        ? withoutFields(head, ["transfer-encoding", "content-length", "connection", "keep-alive"])
        : withoutFields(head, ["keep-alive"]);
      if (rechunk) out.fields.push({ name: "Transfer-Encoding", value: "chunked" });
      if (rechunk && upstreamClose) out.fields.push({ name: "Connection", value: "keep-alive" });
      await write(
        this.client,
        serializeHead(version === "HTTP/1.0" ? { ...out, startLine: `HTTP/1.1 ${head.startLine.slice(9)}` } : out),
      );
      let bytesOut = 0;
      const emit = async (bytes: Buffer) => {
        if (bytes.length === 0) return;
        bytesOut += bytes.length;
        await write(this.client, rechunk ? chunk(bytes) : bytes);
      };
      await copyBody(upstream.reader, framing, (bytes) => emit(scrubber.push(bytes)), { decode: true });
      await emit(scrubber.flush());
      if (rechunk) await write(this.client, chunk(Buffer.alloc(0)));
      const clientMustClose = !rechunk && wantsClose(head, version);
      return { status, bytesOut, upstreamClosed: upstreamClose, clientMustClose };
    }
  }
}
