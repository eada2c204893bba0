// Server-issued identifiers: a short type prefix and a ULID, so ids sort by creation time
// and a glance tells what an id names. Sandbox ids follow the contract's own form.
import { randomBytes, randomFillSync } from "node:crypto";
import { monotonicFactory } from "ulid";

// The random part comes from a pooled CSPRNG buffer: ulid's default source makes one
// crypto.getRandomValues call per character (16 per millisecond), ~5% of an annotate's CPU.
const randomPool = new Uint8Array(4096);
let randomPoolAt = randomPool.length;
const nextUlid = monotonicFactory(() => {
  if (randomPoolAt >= randomPool.length) {
    randomFillSync(randomPool);
    randomPoolAt = 0;
  }
  return (randomPool[randomPoolAt++] ?? 0) / 256;
});

export type IdPrefix =
  | "org"
  | "prn"
  | "key"
  | "prj"
  | "run"
  | "fb"
  | "req"
  | "wl"
  | "fed"
  | "sec"
  | "dek"
  | "sch"
  | "exe"
  | "vol"
  | "vpu"
  | "proc";

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${nextUlid().toLowerCase()}`;
}

/** A bare 26-character ULID (Crockford base32, upper case), as used for event ids. */
export function newUlid(): string {
  return nextUlid();
}

const ULID_PATTERN = /^[0-9A-HJKMNP-TV-Z]{26}$/;

export function isUlid(value: string): boolean {
  return ULID_PATTERN.test(value);
}

/** A fresh API key secret: shown once, stored only as a hash. */
export function newApiKeySecret(): string {
  return `wrn_${randomBytes(32).toString("base64url")}`;
}
