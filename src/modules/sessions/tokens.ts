// Short-lived credentials scoped to one sandbox (and, for an endpoint, one port), signed
// with HMAC-SHA256 under a key derived from the master key and never stored. The session
// plane's endpoint tokens use it; the SSH gateway reuses it with its own audience, so a
// token of one can never be replayed at the other.
//
// Form: `wst1.<payload>.<signature>`, both base64url; payload = `aud|org|sandbox|port|exp`
// (exp in Unix seconds; port 0 when the audience has none). Tokens cannot be revoked one by
// one: they expire (at most MAX_TOKEN_TTL_SECONDS), die with their sandbox (the plane
// checks the row), and all at once with a master key rotation.
import { createHmac, timingSafeEqual } from "node:crypto";
import { AppError } from "../../lib/errors.js";

export const TOKEN_PREFIX = "wst1.";
/** A token longer than this is not one of ours (the check is before any decoding). */
export const MAX_TOKEN_LENGTH = 512;
export const DEFAULT_TOKEN_TTL_SECONDS = 900;
export const MAX_TOKEN_TTL_SECONDS = 86_400;
/** The HKDF label of the signing key (Keyring.deriveKey). */
export const SESSION_TOKEN_KEY_LABEL = "warren session tokens v1";

export type TokenAudience = "endpoint" | "ssh";

export interface SessionTokenClaims {
  audience: TokenAudience;
  orgId: string;
  sandboxId: string;
  /** The guest port an endpoint token opens; 0 for an audience without ports. */
  port: number;
  expiresAt: Date;
}

const FIELD = /^[A-Za-z0-9_-]{1,80}$/;

export function isSessionToken(value: string): boolean {
  return value.startsWith(TOKEN_PREFIX);
}

export class SessionTokenSigner {
  constructor(private readonly key: Buffer) {
    if (key.length < 32) throw new Error("the session token key needs at least 32 bytes");
  }

  sign(claims: SessionTokenClaims): string {
    for (const value of [claims.orgId, claims.sandboxId]) {
      if (!FIELD.test(value)) throw new Error("a token field holds an unexpected character");
    }
    const exp = Math.floor(claims.expiresAt.getTime() / 1000);
    const payload = Buffer.from(
      [claims.audience, claims.orgId, claims.sandboxId, String(claims.port), String(exp)].join("|"),
    ).toString("base64url");
    return `${TOKEN_PREFIX}${payload}.${this.mac(payload)}`;
  }

  /**
   * The claims of a token signed here for `audience` and not expired at `now`; otherwise
   * AppError unauthenticated (one message whatever failed, so nothing is learnt by probing).
   */
  verify(token: string, audience: TokenAudience, now: Date): SessionTokenClaims {
    const refused = new AppError("unauthenticated", "the session token is invalid or expired");
    if (token.length > MAX_TOKEN_LENGTH || !token.startsWith(TOKEN_PREFIX)) throw refused;
    const [payload = "", signature = "", ...rest] = token.slice(TOKEN_PREFIX.length).split(".");
    if (rest.length > 0 || !/^[A-Za-z0-9_-]+$/.test(payload) || !/^[A-Za-z0-9_-]{43}$/.test(signature)) throw refused;
    // Compared as text: base64url's last character has spare bits, so two spellings decode alike.
    const expected = Buffer.from(this.mac(payload));
    const given = Buffer.from(signature);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw refused;
    const fields = Buffer.from(payload, "base64url").toString("utf8").split("|");
    const [aud, orgId = "", sandboxId = "", port = "", exp = ""] = fields;
    if (fields.length !== 5 || aud !== audience || !FIELD.test(orgId) || !FIELD.test(sandboxId)) throw refused;
    if (!/^\d{1,5}$/.test(port) || !/^\d{1,12}$/.test(exp)) throw refused;
    const expiresAt = new Date(Number(exp) * 1000);
    if (expiresAt.getTime() <= now.getTime()) throw refused;
    return { audience, orgId, sandboxId, port: Number(port), expiresAt };
  }

  private mac(payload: string): string {
    return createHmac("sha256", this.key).update(TOKEN_PREFIX).update(payload).digest("base64url");
  }
}
