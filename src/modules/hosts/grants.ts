// Grants of the node internal API (docs/hosts.md "Routing"): a server routing an operation
// to a sandbox's owner signs, for that one request, a grant naming the operation, the
// organization, the sandbox, the owner's host id and epoch, a digest of the request body, a
// nonce and an expiry (GRANT_TTL_SECONDS). HMAC-SHA256 under a key of the deployment sealed in
// the store (deployment-keys.ts, `internal-grant-key`), so every server on one database
// signs and checks with the same key and nothing outside the store can make one.
//
// Form: `wig1.<payload>.<signature>`, both base64url; payload =
// `op|org|sandbox|host|epoch|exp|nonce|digest` (exp in Unix milliseconds). The node refuses a
// grant for another host, another epoch, another operation, another body, an expired one and
// one whose nonce it saw before (GrantReplayGuard).
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Clock } from "../../lib/clock.js";
import { AppError } from "../../lib/errors.js";
import type { Queryable } from "../../store/db.js";
import { openDeploymentKey } from "../secrets/deployment-keys.js";
import type { Keyring } from "../secrets/keyring.js";

export const GRANT_PREFIX = "wig1.";
export const GRANT_TTL_SECONDS = 30;
const MAX_GRANT_LENGTH = 1024;
const FIELD = /^[A-Za-z0-9_-]{1,80}$/;
const NONCE_BYTES = 16;
/** Nonces drawn from one buffer of random bytes at a time (a call into the CSPRNG per 256 grants, not per grant). */
const NONCE_POOL_BYTES = NONCE_BYTES * 256;
let noncePool = Buffer.alloc(0);
let nonceOffset = 0;

function nextNonce(): string {
  if (nonceOffset + NONCE_BYTES > noncePool.length) {
    noncePool = randomBytes(NONCE_POOL_BYTES);
    nonceOffset = 0;
  }
  const nonce = noncePool.toString("base64url", nonceOffset, nonceOffset + NONCE_BYTES);
  nonceOffset += NONCE_BYTES;
  return nonce;
}

export const ROUTED_OPERATIONS = [
  "exec",
  "session",
  "forward",
  "snapshot",
  "grow",
  "network",
  "pool-take",
  "pool-release",
] as const;
export type RoutedOperation = (typeof ROUTED_OPERATIONS)[number];

export interface GrantClaims {
  operation: RoutedOperation;
  orgId: string;
  sandboxId: string;
  hostId: string;
  epoch: number;
  /** base64url SHA-256 of the request body the grant was signed for. */
  digest: string;
  nonce: string;
  expiresAt: number;
}

/** What the node expects a grant to name (all but the expiry and nonce). */
export interface GrantExpectation {
  operation: RoutedOperation;
  sandboxId: string;
  hostId: string;
  epoch: number;
  body: Buffer;
}

export function bodyDigest(body: Buffer | string): string {
  return createHash("sha256").update(body).digest("base64url");
}

export class GrantSigner {
  constructor(private readonly key: Buffer) {
    if (key.length < 32) throw new Error("the internal grant key needs at least 32 bytes");
  }

  sign(
    claims: Omit<GrantClaims, "nonce" | "expiresAt" | "digest"> & { body: Buffer | string },
    now = Date.now(),
  ): string {
    for (const value of [claims.orgId, claims.sandboxId, claims.hostId]) {
      if (!FIELD.test(value)) throw new Error("a grant field holds an unexpected character");
    }
    const fields = [
      claims.operation,
      claims.orgId,
      claims.sandboxId,
      claims.hostId,
      String(claims.epoch),
      String(now + GRANT_TTL_SECONDS * 1000),
      nextNonce(),
      bodyDigest(claims.body),
    ];
    const payload = Buffer.from(fields.join("|")).toString("base64url");
    return `${GRANT_PREFIX}${payload}.${this.mac(payload)}`;
  }

  /**
   * The claims of a grant signed here that names exactly `expected` and has not expired at
   * `now`; otherwise AppError unauthenticated (one message whatever failed).
   */
  verify(grant: string, expected: GrantExpectation, now = Date.now()): GrantClaims {
    const refused = new AppError("unauthenticated", "the internal grant is invalid, expired or not for this request");
    if (grant.length > MAX_GRANT_LENGTH || !grant.startsWith(GRANT_PREFIX)) throw refused;
    const [payload = "", signature = "", ...rest] = grant.slice(GRANT_PREFIX.length).split(".");
    if (rest.length > 0 || !/^[A-Za-z0-9_-]+$/.test(payload) || !/^[A-Za-z0-9_-]{43}$/.test(signature)) throw refused;
    const wanted = Buffer.from(this.mac(payload));
    const given = Buffer.from(signature);
    if (given.length !== wanted.length || !timingSafeEqual(given, wanted)) throw refused;
    const fields = Buffer.from(payload, "base64url").toString("utf8").split("|");
    if (fields.length !== 8) throw refused;
    const [operation = "", orgId = "", sandboxId = "", hostId = "", epoch = "", exp = "", nonce = "", digest = ""] =
      fields;
    if (!(ROUTED_OPERATIONS as readonly string[]).includes(operation)) throw refused;
    if (![orgId, sandboxId, hostId, nonce].every((value) => FIELD.test(value))) throw refused;
    if (!/^\d{1,12}$/.test(epoch) || !/^\d{1,15}$/.test(exp)) throw refused;
    const claims: GrantClaims = {
      operation: operation as RoutedOperation,
      orgId,
      sandboxId,
      hostId,
      epoch: Number(epoch),
      digest,
      nonce,
      expiresAt: Number(exp),
    };
    if (claims.expiresAt <= now) throw refused;
    if (
      claims.operation !== expected.operation ||
      claims.sandboxId !== expected.sandboxId ||
      claims.hostId !== expected.hostId ||
      claims.epoch !== expected.epoch ||
      claims.digest !== bodyDigest(expected.body)
    ) {
      throw refused;
    }
    return claims;
  }

  private mac(payload: string): string {
    return createHmac("sha256", this.key).update(GRANT_PREFIX).update(payload).digest("base64url");
  }
}

/** The nonces of grants accepted and not yet expired: a grant is accepted once. Bounded by the TTL. */
export class GrantReplayGuard {
  private readonly seen = new Map<string, number>();

  constructor(private readonly maxEntries = 100_000) {}

  /** False when the nonce was seen (or too many grants are live to remember one more). */
  accept(claims: Pick<GrantClaims, "nonce" | "expiresAt">, now = Date.now()): boolean {
    if (this.seen.has(claims.nonce)) return false;
    if (this.seen.size >= this.maxEntries) {
      for (const [nonce, expiresAt] of this.seen) if (expiresAt <= now) this.seen.delete(nonce);
      if (this.seen.size >= this.maxEntries) return false;
    }
    this.seen.set(claims.nonce, claims.expiresAt);
    return true;
  }
}

/** The deployment's grant signer: its key from the store (made by the first server that needs it). */
export async function openGrantSigner(q: Queryable, keyring: Keyring, clock: Clock): Promise<GrantSigner> {
  const key = await openDeploymentKey(q, keyring, clock, "internal-grant-key", async () => ({
    publicPart: "",
    privatePart: randomBytes(32),
  }));
  return new GrantSigner(key.privatePart);
}
