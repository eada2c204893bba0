import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { AppError } from "../../lib/errors.js";
import { MAX_TOKEN_LENGTH, SessionTokenSigner } from "./tokens.js";

const now = new Date("2026-01-01T00:00:00Z");
const claims = {
  audience: "endpoint" as const,
  orgId: "org_abc",
  sandboxId: `sbx-${"a".repeat(40)}`,
  port: 8080,
  expiresAt: new Date(now.getTime() + 60_000),
};

function refused(fn: () => unknown): void {
  assert.throws(fn, (error: unknown) => error instanceof AppError && error.code === "unauthenticated");
}

describe("session tokens", () => {
  const signer = new SessionTokenSigner(randomBytes(32));

  it("round-trips its claims until they expire", () => {
    const token = signer.sign(claims);
    assert.match(token, /^wst1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
    assert.deepEqual(signer.verify(token, "endpoint", now), claims);
    refused(() => signer.verify(token, "endpoint", claims.expiresAt));
    refused(() => signer.verify(token, "endpoint", new Date(claims.expiresAt.getTime() + 1)));
  });

  it("refuses another audience, another key, and any altered byte", () => {
    const token = signer.sign(claims);
    refused(() => signer.verify(token, "ssh", now));
    refused(() => new SessionTokenSigner(randomBytes(32)).verify(token, "endpoint", now));
    for (let i = "wst1.".length; i < token.length; i++) {
      // B and A differ in the lowest bit: the spare bits of the last base64url character included.
      const replacement = token[i] === "A" ? "B" : "A";
      const altered = `${token.slice(0, i)}${replacement}${token.slice(i + 1)}`;
      if (altered === token) continue;
      refused(() => signer.verify(altered, "endpoint", now));
    }
    // A payload re-encoded for another port keeps no valid signature.
    const [, , signature] = token.split(".");
    const forged = Buffer.from(
      `endpoint|org_abc|${claims.sandboxId}|22|${Math.floor(claims.expiresAt.getTime() / 1000)}`,
    );
    refused(() => signer.verify(`wst1.${forged.toString("base64url")}.${signature}`, "endpoint", now));
  });

  it("refuses malformed and oversized input before decoding it", () => {
    for (const bad of ["", "wst1.", "wst1..", "wst1.a.b", "wk_apikey", `wst1.${"a".repeat(MAX_TOKEN_LENGTH)}.x`]) {
      refused(() => signer.verify(bad, "endpoint", now));
    }
    assert.throws(() => signer.sign({ ...claims, orgId: "org|evil" }));
    assert.throws(() => new SessionTokenSigner(randomBytes(16)));
  });
});
