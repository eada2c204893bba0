// The wire of the node internal API (docs/hosts.md "Routing"), shared by its client
// (node-client.ts) and its listener (src/http/internal/): paths, how an error crosses, and
// the frames of a session stream.
import { type PoolRequest, RuntimeError, type RuntimeErrorCode } from "../../drivers/runtime/interface.js";
import { joinFirst } from "../../lib/chunk-list.js";
import { AppError, ERROR_CODES, type ErrorCode, invalid } from "../../lib/errors.js";

export const INTERNAL_PREFIX = "/internal/v1/sandboxes/";
export const GRANT_SCHEME = "WarrenGrant";
export const SESSION_UPGRADE = "warren-session/1";
/** The session request (base64url JSON) of an Upgrade; the grant's digest is over its JSON. */
export const SESSION_HEADER = "x-warren-session";
/** An SSH port forward to the owner (a raw TCP stream to the sandbox's port once upgraded). */
export const FORWARD_UPGRADE = "warren-forward/1";
/** The forward request (base64url JSON `{"port": n}`) of an Upgrade; the grant's digest is over its JSON. */
export const FORWARD_HEADER = "x-warren-forward";
/** The largest frame of a session stream, either way. */
export const MAX_FRAME_BYTES = 1 << 20;

/** What a routed exec carries to the owner: the request, the secrets the caller released, its key. */
export interface RoutedExecRequest {
  cmd: string[];
  env: Record<string, string>;
  timeout_seconds?: number | undefined;
  idempotency_key?: string | undefined;
  request_hash: string;
  /**
   * The sandbox row as the routing server read it for this request (an unkeyed exec only):
   * the owner runs on it instead of reading the row again (docs/hosts.md "What crosses").
   */
  target?: RoutedExecTarget | undefined;
}

/** The columns of the sandbox an exec needs, as they cross (finished_at as ISO text). */
export interface RoutedExecTarget {
  id: string;
  org_id: string;
  project_id: string;
  run_id: string;
  lineage_path: string;
  state: string;
  desired_state: string;
  quarantined: boolean;
  finished_at: string | null;
  created_by: string;
  created_by_kind: string;
  created_by_key_id: string;
  host_id: string | null;
  host_epoch: number | null;
}

const TARGET_TEXT = [
  "id",
  "org_id",
  "project_id",
  "run_id",
  "lineage_path",
  "state",
  "desired_state",
  "created_by",
  "created_by_kind",
  "created_by_key_id",
] as const;

/** A routed exec's target as it arrived, or null when any column is missing or of another type. */
export function decodeExecTarget(value: unknown): RoutedExecTarget | null {
  if (typeof value !== "object" || value === null) return null;
  const t = value as Record<string, unknown>;
  if (!TARGET_TEXT.every((column) => typeof t[column] === "string" && (t[column] as string).length <= 4096))
    return null;
  if (typeof t.quarantined !== "boolean") return null;
  if (t.finished_at !== null && typeof t.finished_at !== "string") return null;
  if (t.host_id !== null && typeof t.host_id !== "string") return null;
  if (t.host_epoch !== null && !Number.isSafeInteger(t.host_epoch)) return null;
  return t as unknown as RoutedExecTarget;
}

/**
 * What a routed `pool-take` asks of a host: one of its warm pool's members for a create of
 * this shape (PoolRequest), answered `{"id": <the member's id> | null}`. The grant's sandbox
 * is POOL_TAKE_SUBJECT (the create has no id until a member is taken).
 */
export const POOL_TAKE_SUBJECT = "pool";
/** What a pool-take's answer may name: a sandbox id (the contract's form). */
export const POOL_MEMBER_ID = /^sbx-[0-9a-f]{40}$/;

/** A pool-take body as it arrived; invalid_argument when a field is missing or of another type. */
export function decodePoolRequest(value: Record<string, unknown>): PoolRequest {
  const text = (key: string) => typeof value[key] === "string" && (value[key] as string).length <= 4096;
  const count = (key: string) => Number.isSafeInteger(value[key]) && (value[key] as number) >= 0;
  const capacity = value.workspaceCapacityGiB === null || count("workspaceCapacityGiB");
  if (
    !text("image") ||
    !text("storageClass") ||
    !text("network") ||
    !count("memoryMiB") ||
    !count("cpuMillis") ||
    !capacity
  )
    throw invalid("the pool request is malformed");
  return value as unknown as PoolRequest;
}

/** What a routed port forward asks of the owner: a TCP connection to this port of the sandbox. */
export interface RoutedForwardRequest {
  port: number;
}

export type WireError =
  | { error: { code: string; message: string; retry_after_seconds?: number } }
  | { runtime_error: { code: string; message: string; permanent: boolean } }
  | { replayed: { message: string } }
  | { not_owner: { message: string } };

/**
 * The owner already accepted the grant of this request (a copy re-sent after a connection
 * broke): it ran nothing for this copy. Crosses as 409 `{"replayed": {...}}`, never as an
 * AppError a caller would pass on.
 */
export class GrantReplayed extends Error {
  constructor() {
    super("this routed request was already received");
    this.name = "GrantReplayed";
  }
}

export function isReplayRefusal(body: unknown): boolean {
  return typeof body === "object" && body !== null && "replayed" in body;
}

/**
 * The sandbox row, read by the host a request was routed to, names another host: it ran
 * nothing. Crosses as 409 `{"not_owner": {...}}`, so the routing server may read the row and
 * route again (a request routed on what it remembered of the owner, exec-service.ts).
 */
export class NotOwner extends Error {
  constructor() {
    super("this host is not the sandbox's owner");
    this.name = "NotOwner";
  }
}

export function isNotOwnerRefusal(body: unknown): boolean {
  return typeof body === "object" && body !== null && "not_owner" in body;
}

/** An error as it crosses: AppError and RuntimeError keep their codes; anything else is the node's fault. */
export function encodeError(error: unknown): { status: number; body: WireError } {
  if (error instanceof GrantReplayed) return { status: 409, body: { replayed: { message: error.message } } };
  if (error instanceof NotOwner) return { status: 409, body: { not_owner: { message: error.message } } };
  if (error instanceof AppError) {
    const retry = error.retryAfterSeconds;
    return {
      status: error.code === "unauthenticated" ? 401 : 409,
      body: { error: { code: error.code, message: error.message, ...(retry ? { retry_after_seconds: retry } : {}) } },
    };
  }
  if (error instanceof RuntimeError) {
    return {
      status: 409,
      body: { runtime_error: { code: error.code, message: error.message, permanent: error.permanent } },
    };
  }
  return { status: 500, body: { error: { code: "internal", message: "the owner host failed to serve the request" } } };
}

export function decodeError(body: unknown): Error {
  const wire = body as Partial<{ error: Record<string, unknown>; runtime_error: Record<string, unknown> }>;
  if (wire?.runtime_error && typeof wire.runtime_error.code === "string") {
    return new RuntimeError(wire.runtime_error.code as RuntimeErrorCode, String(wire.runtime_error.message ?? ""), {
      permanent: wire.runtime_error.permanent === true,
    });
  }
  if (wire?.error && (ERROR_CODES as readonly unknown[]).includes(wire.error.code)) {
    const retry = wire.error.retry_after_seconds;
    return new AppError(
      wire.error.code as ErrorCode,
      String(wire.error.message ?? ""),
      typeof retry === "number" ? { retryAfterSeconds: retry } : undefined,
    );
  }
  return new AppError("internal", "the owner host answered something this server cannot read");
}

/** Frame types of a session stream. */
export const FRAME = {
  // caller -> node
  stdin: 1,
  stdinEnd: 2,
  resize: 3,
  kill: 4,
  /** The caller passed on one output frame (the node then calls its `done`). */
  ack: 5,
  // node -> caller
  stdout: 11,
  stderr: 12,
  drain: 13,
  end: 14,
} as const;

export function frame(type: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(type, 0);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** Splits a byte stream into frames; throws on a frame larger than MAX_FRAME_BYTES. Each byte is copied at most once. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly onFrame: (type: number, payload: Buffer) => void) {}

  push(data: Buffer): void {
    if (data.length > 0) {
      this.chunks.push(data);
      this.size += data.length;
    }
    while (this.size >= 5) {
      let head = this.chunks[0] as Buffer;
      if (head.length < 5) head = joinFirst(this.chunks, 5);
      const length = head.readUInt32BE(1);
      if (length > MAX_FRAME_BYTES) throw new Error("a session frame is larger than allowed");
      if (this.size < 5 + length) return;
      if (head.length < 5 + length) head = joinFirst(this.chunks, 5 + length);
      const type = head.readUInt8(0);
      const payload = head.subarray(5, 5 + length);
      const rest = head.subarray(5 + length);
      if (rest.length > 0) this.chunks[0] = rest;
      else this.chunks.shift();
      this.size -= 5 + length;
      this.onFrame(type, payload);
    }
  }
}
