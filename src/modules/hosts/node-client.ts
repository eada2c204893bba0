// A client of one owner host's internal API, for one sandbox (made by HostRouter.runtimeOf):
// each request carries a grant signed for it alone (grants.ts). Requests go over keep-alive
// HTTP/1.1; a session is an HTTP Upgrade carrying framed stdin/resize/kill in and
// stdout/stderr/end out, with every output frame acknowledged, so a slow reader holds the
// command on the owner as it does on one host (node-wire.ts). Built from a cached hosts row,
// a request the owner refused (401: another epoch) or that never reached it is retried once
// on the row read again (`revalidate`); one that reached the owner and lost its answer is not.
// Every copy of one request carries the same grant, which the owner accepts once: a copy
// re-sent after a reset keep-alive connection, or to the row read again, never runs twice.
import http from "node:http";
import type { Socket } from "node:net";
import type {
  NetworkApplied,
  NetworkMode,
  PoolRequest,
  SandboxRuntime,
  SandboxSession,
  SessionHandlers,
  SessionRequest,
} from "../../drivers/runtime/interface.js";
import type { Logger } from "../../lib/logger.js";
import type { GrantSigner, RoutedOperation } from "./grants.js";
import { hostUnavailable } from "./membership.js";
import {
  decodeError,
  FORWARD_HEADER,
  FORWARD_UPGRADE,
  FRAME,
  FrameReader,
  frame,
  GRANT_SCHEME,
  INTERNAL_PREFIX,
  isNotOwnerRefusal,
  isReplayRefusal,
  NotOwner,
  POOL_MEMBER_ID,
  type RoutedExecRequest,
  SESSION_HEADER,
  SESSION_UPGRADE,
} from "./node-wire.js";

const CONNECT_TIMEOUT_MS = 3_000;
/** How long a create waits for another host's pool-take (it goes the normal way after). */
const POOL_TAKE_MS = 2_000;
/** The most a routed answer may hold (an exec's output is capped well below it). */
const MAX_RESPONSE_BYTES = 64 << 20;
const SLOW_OPERATION_MS = 15 * 60_000;
/** How long a routed forward waits for the owner's 101 (the owner gives the sandbox's port 5 s to accept). */
const FORWARD_ANSWER_MS = 15_000;
/** The most of a refusal's body read (an error envelope is far smaller). */
const MAX_REFUSAL_BYTES = 64 << 10;

/** The owner could not be asked, or its answer was lost after the request went out (`sent`). */
export class NodeUnreachable extends Error {
  constructor(
    message: string,
    readonly sent: boolean,
  ) {
    super(message);
    this.name = "NodeUnreachable";
  }
}

/** The owner refused the request's grant (401): it ran nothing. */
class GrantRefused extends Error {
  constructor() {
    super("the owner host refused the routed grant");
    this.name = "GrantRefused";
  }
}

/** The owner had already accepted this request's grant (a retried copy): it did not run it again. */
class RequestReplayed extends Error {
  constructor() {
    super("the owner host had already received this request");
    this.name = "RequestReplayed";
  }
}

/** The owner lost on the way, as the API's 503 host_unavailable; any other error as it is. */
function unavailableWhenLost(error: unknown): never {
  throw error instanceof NodeUnreachable ? hostUnavailable() : error;
}

export interface NodeClientOptions {
  baseUrl: string;
  hostId: string;
  epoch: number;
  orgId: string;
  sandboxId: string;
  grants: GrantSigner;
  agent: http.Agent;
  log: Logger;
  /**
   * Set when the route came from the router's cache: after a refused grant or an unsent
   * request, the owner's row read again; the base URL and epoch to try once more, or null
   * when nothing changed (host_unavailable when the owner is no longer routable).
   */
  revalidate?: () => Promise<{ baseUrl: string; epoch: number } | null>;
}

const UNSENT = new Set(["ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN", "ENOTFOUND", "ECONNABORTED"]);

/** The owner's runtime for one sandbox: the part of SandboxRuntime that routes (exec and snapshot route whole). */
export class NodeClient implements Pick<SandboxRuntime, "openSession" | "growWorkspace" | "setNetwork"> {
  /** Where requests go and the epoch their grants name (replaced once by a revalidation). */
  private target: { baseUrl: string; epoch: number };
  private revalidate: NodeClientOptions["revalidate"];

  constructor(private readonly options: NodeClientOptions) {
    this.target = { baseUrl: options.baseUrl, epoch: options.epoch };
    this.revalidate = options.revalidate;
  }

  get hostId(): string {
    return this.options.hostId;
  }

  /** ExecSandbox's answer, run (claimed, recorded) by the owner. */
  exec(request: RoutedExecRequest, timeoutMs: number): Promise<unknown> {
    return this.call("exec", request, timeoutMs);
  }

  /** Takes the pending snapshot `snapshotId` on the owner; it seals or fails the row itself. */
  async takeSnapshot(snapshotId: string): Promise<void> {
    await this.call("snapshot", { snapshot_id: snapshotId }, SLOW_OPERATION_MS);
  }

  /**
   * One of the host's warm pool members for a create of this shape (the client's sandbox is
   * POOL_TAKE_SUBJECT): its id, or null when the host has none or could not be asked (the
   * create then goes the normal way).
   */
  async poolTake(request: PoolRequest): Promise<string | null> {
    const answer = (await this.call("pool-take", request, POOL_TAKE_MS).catch(() => null)) as { id?: unknown } | null;
    return typeof answer?.id === "string" && POOL_MEMBER_ID.test(answer.id) ? answer.id : null;
  }

  /** Gives back the member this client names (taken by poolTake, never recorded); best effort. */
  async poolRelease(): Promise<void> {
    await this.call("pool-release", {}, POOL_TAKE_MS).catch(() => undefined);
  }

  async growWorkspace(_id: string, capacityGiB: number): Promise<void> {
    await this.call("grow", { capacity_gib: capacityGiB }, SLOW_OPERATION_MS).catch(unavailableWhenLost);
  }

  async setNetwork(_id: string, mode: NetworkMode): Promise<NetworkApplied> {
    return (await this.call("network", { mode }, SLOW_OPERATION_MS).catch(unavailableWhenLost)) as NetworkApplied;
  }

  private authorization(operation: RoutedOperation, body: Buffer | string): string {
    const { grants, orgId, sandboxId, hostId } = this.options;
    const epoch = this.target.epoch;
    return `${GRANT_SCHEME} ${grants.sign({ operation, orgId, sandboxId, hostId, epoch, body })}`;
  }

  private url(operation: RoutedOperation): URL {
    return new URL(`${INTERNAL_PREFIX}${encodeURIComponent(this.options.sandboxId)}/${operation}`, this.target.baseUrl);
  }

  /**
   * One request, under ONE grant for every copy of it: the owner accepts a grant once (its
   * replay guard), and one epoch of a host is one process, so no copy of a request ever runs
   * twice, wherever the copies went. A copy re-sent after a reused keep-alive connection was
   * reset as it went out (`send`) may have arrived: from then on a refusal (a replay, or a
   * grant another epoch refused) or a failure is an answer lost after the request went out.
   * On a cached route, a request the owner refused (401) before any copy may have arrived, or
   * that never reached it, is tried once more on the row read again (the same grant: its host
   * and epoch are the sandbox row's, which the fresh row must still name).
   */
  private async call(operation: RoutedOperation, payload: unknown, timeoutMs: number): Promise<unknown> {
    const body = Buffer.from(JSON.stringify(payload));
    const authorization = this.authorization(operation, body);
    const copies = { maybeDelivered: false };
    try {
      return await this.send(operation, body, timeoutMs, authorization, copies);
    } catch (error) {
      const revalidate = this.revalidate;
      this.revalidate = undefined;
      const ranNothing =
        (error instanceof GrantRefused && !copies.maybeDelivered) || (error instanceof NodeUnreachable && !error.sent);
      const fresh = revalidate && ranNothing ? await revalidate() : null;
      if (!fresh || fresh.epoch !== this.target.epoch) throw this.answerOf(error, operation, copies.maybeDelivered);
      this.target = fresh;
      return this.send(operation, body, timeoutMs, authorization, copies).catch((again: unknown) => {
        throw this.answerOf(again, operation, copies.maybeDelivered);
      });
    }
  }

  /**
   * What the caller is told of a failed request: a refused grant is host_unavailable (another
   * epoch since the route was read, a key it does not share) unless a copy may have arrived,
   * and then, as a replay or a failure, the answer was lost after the request went out.
   */
  private answerOf(error: unknown, operation: RoutedOperation, maybeDelivered: boolean): unknown {
    const lost = new NodeUnreachable("the connection to the owner host broke after the request went out", true);
    if (error instanceof RequestReplayed) return lost;
    if (error instanceof NotOwner) return maybeDelivered ? lost : error;
    if (error instanceof NodeUnreachable) return maybeDelivered && !error.sent ? lost : error;
    if (!(error instanceof GrantRefused)) return error;
    if (maybeDelivered) return lost;
    this.options.log.warn({ host_id: this.options.hostId, operation }, "the owner host refused a routed grant");
    return hostUnavailable();
  }

  /**
   * Posts one copy of the request; a reused keep-alive connection reset as it went out
   * (ECONNRESET: the owner closed it idle at that moment, or the copy arrived and the
   * connection broke after) is posted once more, and `copies` records that a copy may have
   * arrived. The owner runs a copy that arrives first and refuses any other as a replay.
   */
  private async send(
    operation: RoutedOperation,
    body: Buffer,
    timeoutMs: number,
    authorization: string,
    copies: { maybeDelivered: boolean },
  ): Promise<unknown> {
    try {
      return await this.post(operation, body, timeoutMs, authorization);
    } catch (error) {
      if (!(error instanceof NodeUnreachable && (error as { retryable?: boolean }).retryable)) throw error;
      copies.maybeDelivered = true;
    }
    return this.post(operation, body, timeoutMs, authorization);
  }

  private post(operation: RoutedOperation, body: Buffer, timeoutMs: number, authorization: string): Promise<unknown> {
    return new Promise((resolve, reject) => {
      let connected = false;
      const req = http.request(this.url(operation), {
        method: "POST",
        agent: this.options.agent,
        headers: {
          authorization,
          "content-type": "application/json",
          "content-length": body.length,
        },
      });
      const connectTimer = setTimeout(
        () => req.destroy(Object.assign(new Error("connect timeout"), { code: "ECONNABORTED" })),
        CONNECT_TIMEOUT_MS,
      );
      const answerTimer = setTimeout(() => req.destroy(new Error("the owner did not answer in time")), timeoutMs);
      const done = () => {
        clearTimeout(connectTimer);
        clearTimeout(answerTimer);
      };
      req.on("socket", (socket) => {
        if (!socket.connecting) {
          connected = true;
          clearTimeout(connectTimer);
        } else {
          socket.once("connect", () => {
            connected = true;
            clearTimeout(connectTimer);
          });
        }
      });
      req.on("error", (error: NodeJS.ErrnoException) => {
        done();
        const unsent = !connected || UNSENT.has(error.code ?? "");
        const lost = new NodeUnreachable(`the owner host could not be reached: ${error.message}`, !unsent);
        if (req.reusedSocket && error.code === "ECONNRESET") Object.assign(lost, { retryable: true });
        reject(lost);
      });
      req.on("response", (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_RESPONSE_BYTES) req.destroy(new Error("the owner's answer is larger than allowed"));
          else chunks.push(chunk);
        });
        res.on("end", () => {
          done();
          let parsed: unknown;
          try {
            parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"));
          } catch {
            reject(new NodeUnreachable("the owner host's answer could not be read", true));
            return;
          }
          if (res.statusCode === 200) resolve((parsed as { result?: unknown }).result);
          else if (res.statusCode === 401) reject(new GrantRefused());
          else if (isReplayRefusal(parsed)) reject(new RequestReplayed());
          else if (isNotOwnerRefusal(parsed)) reject(new NotOwner());
          else reject(decodeError(parsed));
        });
        res.on("error", () => undefined);
      });
      req.end(body);
    });
  }

  /** A session on the owner, streamed over an HTTP Upgrade (SandboxRuntime.openSession's contract). */
  async openSession(_id: string, request: SessionRequest, handlers: SessionHandlers): Promise<SandboxSession> {
    // A session is not retried once opening it failed: a cached route is read again first.
    const revalidate = this.revalidate;
    this.revalidate = undefined;
    const fresh = revalidate ? await revalidate() : null;
    if (fresh) this.target = fresh;
    return this.openSessionAt(request, handlers);
  }

  private openSessionAt(request: SessionRequest, handlers: SessionHandlers): Promise<SandboxSession> {
    const json = JSON.stringify(request);
    return new Promise((resolve, reject) => {
      const req = http.request(this.url("session"), {
        method: "GET",
        agent: false,
        headers: {
          connection: "Upgrade",
          upgrade: SESSION_UPGRADE,
          authorization: this.authorization("session", json),
          [SESSION_HEADER]: Buffer.from(json).toString("base64url"),
        },
      });
      const connectTimer = setTimeout(() => req.destroy(new Error("connect timeout")), CONNECT_TIMEOUT_MS);
      req.on("error", (error) => {
        clearTimeout(connectTimer);
        this.options.log.warn({ sandbox_id: this.options.sandboxId, err: error.message }, "routed session failed");
        reject(hostUnavailable());
      });
      req.on("response", (res) => {
        clearTimeout(connectTimer);
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.length < 64 && chunks.push(chunk));
        res.on("end", () => {
          try {
            reject(decodeError(JSON.parse(Buffer.concat(chunks).toString("utf8"))));
          } catch {
            reject(hostUnavailable());
          }
        });
      });
      req.on("upgrade", (_res, socket, head) => {
        clearTimeout(connectTimer);
        socket.setNoDelay(true);
        let ended = false;
        const end = (result: { exit: number | null; lost?: string }) => {
          if (ended) return;
          ended = true;
          socket.destroy();
          handlers.onEnd(result);
        };
        const ack = () => {
          if (!socket.destroyed) socket.write(frame(FRAME.ack));
        };
        const reader = new FrameReader((type, payload) => {
          if (type === FRAME.stdout) handlers.onStdout(Buffer.from(payload), ack);
          else if (type === FRAME.stderr) handlers.onStderr(Buffer.from(payload), ack);
          else if (type === FRAME.drain) handlers.onDrain?.();
          else if (type === FRAME.end) {
            const parsed = JSON.parse(payload.toString("utf8")) as { exit: number | null; lost?: string };
            end(parsed.lost ? { exit: parsed.exit, lost: parsed.lost } : { exit: parsed.exit });
          }
        });
        const feed = (data: Buffer) => {
          try {
            reader.push(data);
          } catch {
            end({ exit: null, lost: "the owner host's session stream broke" });
          }
        };
        socket.on("data", feed);
        socket.on("error", () => undefined);
        socket.on("drain", () => handlers.onDrain?.());
        socket.on("close", () => end({ exit: null, lost: "the connection to the owner host closed" }));
        if (head.length > 0) feed(head);
        resolve({
          write: (data) => (socket.destroyed ? true : socket.write(frame(FRAME.stdin, data))),
          end: () => {
            if (!socket.destroyed) socket.write(frame(FRAME.stdinEnd));
          },
          resize: (rows, cols) => {
            if (!socket.destroyed) socket.write(frame(FRAME.resize, Buffer.from(JSON.stringify({ rows, cols }))));
          },
          kill: () => {
            if (!socket.destroyed) socket.write(frame(FRAME.kill));
          },
        });
      });
      req.end();
    });
  }

  /**
   * A TCP stream to the sandbox's `port`, connected by the owner (an SSH `direct-tcpip` forward
   * through this server), over an HTTP Upgrade. Rejects with the owner's refusal (AppError) or,
   * when the owner cannot be reached or does not answer in time, host_unavailable.
   */
  openForward(port: number): Promise<Socket> {
    const json = JSON.stringify({ port });
    return new Promise((resolve, reject) => {
      const req = http.request(this.url("forward"), {
        method: "GET",
        agent: false,
        headers: {
          connection: "Upgrade",
          upgrade: FORWARD_UPGRADE,
          authorization: this.authorization("forward", json),
          [FORWARD_HEADER]: Buffer.from(json).toString("base64url"),
        },
      });
      const connectTimer = setTimeout(() => req.destroy(new Error("connect timeout")), CONNECT_TIMEOUT_MS);
      const answerTimer = setTimeout(
        () => req.destroy(new Error("the owner did not answer in time")),
        FORWARD_ANSWER_MS,
      );
      const done = () => {
        clearTimeout(connectTimer);
        clearTimeout(answerTimer);
      };
      req.on("socket", (socket) => socket.once("connect", () => clearTimeout(connectTimer)));
      req.on("error", (error) => {
        done();
        this.options.log.warn({ sandbox_id: this.options.sandboxId, err: error.message }, "routed forward failed");
        reject(hostUnavailable());
      });
      req.on("response", (res) => {
        done();
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size <= MAX_REFUSAL_BYTES) chunks.push(chunk);
        });
        res.on("error", () => undefined);
        res.on("end", () => {
          if (res.statusCode === 401) {
            this.options.log.warn(
              { host_id: this.options.hostId, operation: "forward" },
              "the owner host refused a routed grant",
            );
            reject(hostUnavailable());
            return;
          }
          try {
            reject(decodeError(JSON.parse(Buffer.concat(chunks).toString("utf8"))));
          } catch {
            reject(hostUnavailable());
          }
        });
      });
      req.on("upgrade", (_res, socket, head) => {
        done();
        socket.setNoDelay(true);
        // An owner that vanished without a word (partitioned, powered off) is found out.
        socket.setKeepAlive(true, 30_000);
        if (head.length > 0) socket.unshift(head);
        resolve(socket);
      });
      req.end();
    });
  }
}
