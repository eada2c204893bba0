// The blob store: where snapshot chunks and manifests (and, next, volume blobs) are kept
// off the host. One interface, two drivers (the local filesystem under the data dir, the
// embedded default; S3), both passing contract.test.ts. Keys are `/`-separated paths of
// [A-Za-z0-9._:-] segments chosen by Warren, never by a user.

export interface BlobInfo {
  key: string;
  size: number;
  modifiedAt: Date;
}

export interface PresignOptions {
  /** How long the URL stays valid (1 to 604800 seconds). */
  expiresInSeconds: number;
}

export type BlobErrorCode =
  /** The key is malformed (a segment outside the charset, `..`, empty). */
  | "invalid_key"
  /** What was written does not match the digest it was written under. */
  | "digest_mismatch"
  /** The object is larger than the reader allowed (get's maxBytes): nothing of it was kept. */
  | "too_large"
  /** The store did not answer or refused (the message says which); the call may be retried. */
  | "unavailable";

export class BlobError extends Error {
  readonly code: BlobErrorCode;

  constructor(code: BlobErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "BlobError";
    this.code = code;
  }
}

export interface BlobStore {
  readonly kind: "fs" | "s3";
  /**
   * Stores `data` under `key` unless an object is already there (then nothing is written
   * and `written` is false). Atomic: no reader ever sees a partly written object. With
   * `sha256` (hex of `data`) the store verifies what it received against it and refuses a
   * mismatch with BlobError digest_mismatch, leaving nothing behind. `data` may be a list of
   * pieces, stored as their concatenation (the fs store writes them as they are, with writev;
   * a pack is stored this way without being copied into one buffer).
   */
  putIfAbsent(
    key: string,
    data: Uint8Array | readonly Uint8Array[],
    options?: { sha256?: string },
  ): Promise<{ written: boolean }>;
  /**
   * The whole object, or null when there is none. With `maxBytes`, an object larger than that
   * is BlobError too_large, found before more than `maxBytes` + 1 of it is held in memory
   * (a store, S3 especially, is not trusted to hold only what Warren wrote).
   */
  get(key: string, options?: { maxBytes?: number }): Promise<Buffer | null>;
  /**
   * Bytes [offset, offset + length) of the object: shorter when the object ends first (empty
   * when it ends before `offset`), null when there is no object. Offset and length are
   * non-negative safe integers (RangeError otherwise). A pack's chunk is read this way.
   */
  getRange(key: string, offset: number, length: number): Promise<Buffer | null>;
  head(key: string): Promise<{ size: number } | null>;
  /** Removes the object; an absent one is fine. */
  delete(key: string): Promise<void>;
  /** Every object whose key starts with `prefix`, in key order. */
  list(prefix: string): AsyncIterable<BlobInfo>;
  /** A URL that PUTs this one object without further credentials until it expires. */
  presignPut(key: string, options: PresignOptions): Promise<string>;
  /** A URL that GETs this one object without further credentials until it expires. */
  presignGet(key: string, options: PresignOptions): Promise<string>;
  /** Releases connections. */
  close(): Promise<void>;
}

/** Checks getRange's arguments (both drivers). */
export function checkRange(offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0)
    throw new RangeError("a blob range is a non-negative integer offset and length");
}

/** get's refusal of an object over the reader's bound (both drivers). */
export function tooLarge(key: string, maxBytes: number): BlobError {
  return new BlobError("too_large", `object ${key} is larger than the ${maxBytes} bytes its reader allows`);
}
