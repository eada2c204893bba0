// Idempotency-Key: the first request with a key claims it; a retry with the same key and the
// same request replays the stored response; the same key with a different request is 409
// idempotency_conflict. Keys are scoped per organization and operation and kept for the
// configured retention. Server faults (5xx) release the key so a retry runs again.
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Clock } from "../lib/clock.js";
import { AppError } from "../lib/errors.js";
import { canonicalJson, sha256Hex } from "../lib/hash.js";
import type { Db } from "../store/db.js";
import type { IdempotencyClaim } from "./types.js";

const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;
// A claim still pending after this long belongs to a request that died; a retry may take it over.
const ABANDONED_AFTER_MS = 5 * 60 * 1000;

export const IDEMPOTENCY_HEADER = "idempotency-key";
export const REPLAYED_HEADER = "idempotent-replayed";

interface StoredRow {
  request_hash: string;
  state: "pending" | "done";
  status_code: number | null;
  response_body: string | null;
  created_at: Date;
}

/** The request's Idempotency-Key, undefined when absent; 400 when malformed. */
export function idempotencyKeyOf(request: FastifyRequest): string | undefined {
  const raw = request.headers[IDEMPOTENCY_HEADER];
  if (raw === undefined) return undefined;
  const key = Array.isArray(raw) ? raw[0] : raw;
  if (!key || !KEY_PATTERN.test(key)) {
    throw new AppError("invalid_argument", "Idempotency-Key must be 1 to 255 visible ASCII characters");
  }
  return key;
}

export class IdempotencyStore {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly retentionHours: number,
  ) {}

  /** Returns true when the handler should run; false when a stored response was replayed. */
  async begin(request: FastifyRequest, reply: FastifyReply, orgId: string, operation: string): Promise<boolean> {
    const key = idempotencyKeyOf(request);
    if (key === undefined) return true;
    const requestHash = sha256Hex(
      `${request.method} ${request.url.split("?")[0]}\n${canonicalJson(request.query ?? {})}\n${canonicalJson(request.body ?? null)}`,
    );
    const now = this.clock.now();
    const expiresAt = new Date(now.getTime() + this.retentionHours * 3600_000);
    const claim: IdempotencyClaim = { orgId, operation, key };

    await this.db.query(
      "DELETE FROM idempotency_keys WHERE org_id = $1 AND operation = $2 AND idempotency_key = $3 AND expires_at < $4",
      [orgId, operation, key, now],
    );
    const inserted = await this.db.query(
      `INSERT INTO idempotency_keys (org_id, operation, idempotency_key, request_hash, state, created_at, expires_at)
       VALUES ($1, $2, $3, $4, 'pending', $5, $6) ON CONFLICT DO NOTHING RETURNING 1 AS claimed`,
      [orgId, operation, key, requestHash, now, expiresAt],
    );
    if (inserted.rows.length > 0) {
      request.idempotencyClaim = claim;
      return true;
    }
    const { rows } = await this.db.query<StoredRow>(
      `SELECT request_hash, state, status_code, response_body, created_at FROM idempotency_keys
        WHERE org_id = $1 AND operation = $2 AND idempotency_key = $3`,
      [orgId, operation, key],
    );
    const stored = rows[0];
    if (!stored) return this.begin(request, reply, orgId, operation);
    if (stored.request_hash !== requestHash) {
      throw new AppError(
        "idempotency_conflict",
        "this Idempotency-Key was already used with a different request; use a new key",
      );
    }
    if (stored.state === "done" && stored.status_code !== null) {
      reply
        .code(stored.status_code)
        .header(REPLAYED_HEADER, "true")
        .type("application/json; charset=utf-8")
        .send(stored.response_body ?? "");
      return false;
    }
    if (now.getTime() - stored.created_at.getTime() > ABANDONED_AFTER_MS) {
      const taken = await this.db.query(
        `UPDATE idempotency_keys SET created_at = $4, expires_at = $5
          WHERE org_id = $1 AND operation = $2 AND idempotency_key = $3 AND state = 'pending' AND created_at = $6
          RETURNING 1 AS claimed`,
        [orgId, operation, key, now, expiresAt, stored.created_at],
      );
      if (taken.rows.length > 0) {
        request.idempotencyClaim = claim;
        return true;
      }
    }
    throw new AppError("operation_conflict", "a request with this Idempotency-Key is still in progress", {
      retryAfterSeconds: 1,
    });
  }

  async finish(claim: IdempotencyClaim, statusCode: number, body: string): Promise<void> {
    if (statusCode >= 500) {
      await this.db.query(
        "DELETE FROM idempotency_keys WHERE org_id = $1 AND operation = $2 AND idempotency_key = $3 AND state = 'pending'",
        [claim.orgId, claim.operation, claim.key],
      );
      return;
    }
    await this.db.query(
      `UPDATE idempotency_keys SET state = 'done', status_code = $4, response_body = $5
        WHERE org_id = $1 AND operation = $2 AND idempotency_key = $3`,
      [claim.orgId, claim.operation, claim.key, statusCode, body],
    );
  }

  /** Drops records past their retention; run periodically by the GC controller. */
  async purgeExpired(): Promise<number> {
    const { rows } = await this.db.query<{ n: string }>(
      "WITH gone AS (DELETE FROM idempotency_keys WHERE expires_at < $1 RETURNING 1) SELECT count(*)::text AS n FROM gone",
      [this.clock.now()],
    );
    return Number(rows[0]?.n ?? 0);
  }
}
