// Idempotency-Key: the first request with a key claims it; a retry with the same key and the
// same request replays the stored response; the same key with a different request is 409
// idempotency_conflict. Keys are scoped per organization and operation and kept for the
// configured retention. Server faults (5xx) release the key so a retry runs again.
// Each claim names the process holding it (`holder`): a retry takes over, and runs anew, a
// pending claim whose holder is gone (a crash). On the embedded store only one process ever
// uses the data dir, so every other holder is gone; on PostgreSQL a holder is alive while its
// `server_instances` row has a heartbeat younger than HOLDER_STALE_SECONDS (database clock).
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Clock } from "../lib/clock.js";
import { AppError } from "../lib/errors.js";
import { canonicalJson, sha256Hex } from "../lib/hash.js";
import { newUlid } from "../lib/ids.js";
import type { Db } from "../store/db.js";
import type { IdempotencyClaim } from "./types.js";

const KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;
// A claim still pending after this long belongs to a request that died or hung, whatever its
// holder (and claims made before migration 0029 have none); a retry may take it over.
const ABANDONED_AFTER_MS = 5 * 60 * 1000;
/** How often a process on PostgreSQL renews its heartbeat. */
export const HEARTBEAT_INTERVAL_MS = 2_000;
/** A holder whose heartbeat is older than this is gone (several missed heartbeats). */
export const HOLDER_STALE_SECONDS = 10;
// Rows of processes gone for this long are dropped (their claims are abandoned either way).
const INSTANCE_PURGE_HOURS = 24;

export const IDEMPOTENCY_HEADER = "idempotency-key";
export const REPLAYED_HEADER = "idempotent-replayed";

interface StoredRow {
  request_hash: string;
  state: "pending" | "done";
  status_code: number | null;
  response_body: string | null;
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
  /** This process's holder id, stored on every claim it makes. */
  readonly instanceId = newUlid();
  private heartbeat: NodeJS.Timeout | null = null;
  private beating: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly retentionHours: number,
  ) {}

  /**
   * Registers this process as a claim holder. On PostgreSQL: its `server_instances` row and a
   * heartbeat every HEARTBEAT_INTERVAL_MS until stop(). The embedded store needs neither.
   */
  async start(): Promise<void> {
    if (this.db.kind !== "postgres" || this.heartbeat) return;
    await this.beat();
    await this.db.query(`DELETE FROM server_instances WHERE heartbeat_at < now() - make_interval(hours => $1)`, [
      INSTANCE_PURGE_HOURS,
    ]);
    this.heartbeat = setInterval(() => {
      this.beating = this.beat().catch(() => undefined);
    }, HEARTBEAT_INTERVAL_MS);
    this.heartbeat.unref();
  }

  async stop(): Promise<void> {
    if (!this.heartbeat) return;
    clearInterval(this.heartbeat);
    this.heartbeat = null;
    await this.beating;
    // A clean stop leaves no claim behind; the row goes so the next retry need not wait.
    await this.db.query("DELETE FROM server_instances WHERE id = $1", [this.instanceId]).catch(() => undefined);
  }

  private async beat(): Promise<void> {
    await this.db.query(
      `INSERT INTO server_instances (id) VALUES ($1)
       ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`,
      [this.instanceId],
    );
  }

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
      `INSERT INTO idempotency_keys (org_id, operation, idempotency_key, request_hash, state, created_at, expires_at, holder)
       VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7) ON CONFLICT DO NOTHING RETURNING 1 AS claimed`,
      [orgId, operation, key, requestHash, now, expiresAt, this.instanceId],
    );
    if (inserted.rows.length > 0) {
      request.idempotencyClaim = claim;
      return true;
    }
    const { rows } = await this.db.query<StoredRow>(
      `SELECT request_hash, state, status_code, response_body FROM idempotency_keys
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
    // Taken over when its holder is gone, or after ABANDONED_AFTER_MS whoever holds it (a request
    // that hung, or a claim from before holders were recorded); one statement, so of
    // two retries racing for it only one wins (the other sees a live holder: itself).
    const holderGone =
      this.db.kind === "postgres"
        ? `NOT EXISTS (SELECT 1 FROM server_instances s
                        WHERE s.id = k.holder AND s.heartbeat_at > now() - make_interval(secs => ${HOLDER_STALE_SECONDS}))`
        : "TRUE";
    const taken = await this.db.query(
      `UPDATE idempotency_keys k SET created_at = $4, expires_at = $5, holder = $6
        WHERE org_id = $1 AND operation = $2 AND idempotency_key = $3 AND state = 'pending' AND request_hash = $8
          AND (k.created_at < $7 OR (k.holder <> $6 AND ${holderGone}))
        RETURNING 1 AS claimed`,
      [
        orgId,
        operation,
        key,
        now,
        expiresAt,
        this.instanceId,
        new Date(now.getTime() - ABANDONED_AFTER_MS),
        requestHash,
      ],
    );
    if (taken.rows.length > 0) {
      request.idempotencyClaim = claim;
      return true;
    }
    throw new AppError("operation_conflict", "a request with this Idempotency-Key is still in progress", {
      retryAfterSeconds: 1,
    });
  }

  async finish(claim: IdempotencyClaim, statusCode: number, body: string): Promise<void> {
    if (statusCode >= 500) {
      await this.db.query(
        `DELETE FROM idempotency_keys
          WHERE org_id = $1 AND operation = $2 AND idempotency_key = $3 AND state = 'pending' AND holder = $4`,
        [claim.orgId, claim.operation, claim.key, this.instanceId],
      );
      return;
    }
    await this.db.query(
      // Only while this process still holds the claim: a retry that took it over answers instead.
      `UPDATE idempotency_keys SET state = 'done', status_code = $4, response_body = $5
        WHERE org_id = $1 AND operation = $2 AND idempotency_key = $3 AND state = 'pending' AND holder = $6`,
      [claim.orgId, claim.operation, claim.key, statusCode, body, this.instanceId],
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
