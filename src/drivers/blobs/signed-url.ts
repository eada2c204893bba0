// The presigned URLs of the fs driver, which Warren itself serves (modules/blobs/routes.ts):
// `<base>/v1/blobs/<key>?method=PUT&expires=<unix seconds>&signature=<hex>`, the signature
// an HMAC-SHA256 under a server key over a version tag, the method, the key and the expiry.
import { createHmac, timingSafeEqual } from "node:crypto";

export type SignedMethod = "GET" | "PUT";
export const BLOB_ROUTE_PREFIX = "/v1/blobs/";
/** The longest validity a presigned URL may have (seven days, as S3's SigV4 allows). */
export const MAX_PRESIGN_SECONDS = 604_800;

const SIGNATURE_VERSION = "warren-blob-url-v1";
const SIGNATURE_HEX = /^[0-9a-f]{64}$/;
const EXPIRES = /^\d{1,12}$/;

/** Refuses a validity outside 1 to 604800 whole seconds (a caller's bug, not a client's). */
export function checkPresignSeconds(seconds: number): void {
  if (!Number.isInteger(seconds) || seconds < 1 || seconds > MAX_PRESIGN_SECONDS) {
    throw new RangeError(`expiresInSeconds must be a whole number from 1 to ${MAX_PRESIGN_SECONDS}`);
  }
}

function mac(signingKey: Buffer, method: SignedMethod, key: string, expires: number): Buffer {
  // Newline-separated fields: none of them can hold a newline, so no two inputs sign alike.
  return createHmac("sha256", signingKey).update(`${SIGNATURE_VERSION}\n${method}\n${key}\n${expires}`).digest();
}

export function signBlobUrl(input: {
  publicBaseUrl: string;
  signingKey: Buffer;
  method: SignedMethod;
  key: string;
  /** Unix seconds after which the URL is refused. */
  expires: number;
}): string {
  const signature = mac(input.signingKey, input.method, input.key, input.expires).toString("hex");
  const base = input.publicBaseUrl.replace(/\/+$/, "");
  return `${base}${BLOB_ROUTE_PREFIX}${input.key}?method=${input.method}&expires=${input.expires}&signature=${signature}`;
}

export type SignatureCheck = "valid" | "expired" | "invalid";

/**
 * Checks a request against its URL's query: the method it was signed for must be the
 * request's, the signature must be the server's for that method, key and expiry (compared
 * in constant time), and the expiry must not have passed.
 */
export function checkBlobUrl(
  signingKey: Buffer,
  request: { method: SignedMethod; key: string; query: { method?: string; expires?: string; signature?: string } },
  nowSeconds: number,
): SignatureCheck {
  const { method, expires, signature } = request.query;
  if (method !== request.method || !expires || !EXPIRES.test(expires) || !signature || !SIGNATURE_HEX.test(signature)) {
    return "invalid";
  }
  const expected = mac(signingKey, request.method, request.key, Number(expires));
  if (!timingSafeEqual(expected, Buffer.from(signature, "hex"))) return "invalid";
  return Number(expires) < nowSeconds ? "expired" : "valid";
}
