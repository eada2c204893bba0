// The rules of the fs blob store's presigned URLs as Warren serves them: the signature is
// the credential (checked before anything else is looked at), a PUT body is bounded and
// streamed to the store, never held whole, and a PUT of a present key changes nothing.
import type { Readable } from "node:stream";
import { Blake3Hasher } from "@napi-rs/blake-hash";
import type { FsBlobStore } from "../../drivers/blobs/fs.js";
import { BlobError } from "../../drivers/blobs/interface.js";
import { keyProblem } from "../../drivers/blobs/keys.js";
import type { SignedMethod } from "../../drivers/blobs/signed-url.js";
import { AppError } from "../../lib/errors.js";

export interface SignedQuery {
  method?: string;
  expires?: string;
  signature?: string;
}

function fromBlobError(error: unknown): unknown {
  if (!(error instanceof BlobError)) return error;
  if (error.code === "invalid_key") return new AppError("invalid_argument", error.message);
  if (error.code === "digest_mismatch") return new AppError("invalid_argument", error.message);
  return new AppError("unavailable", "the blob store is not available; retry later");
}

/** Passes `source` through, failing with payload_too_large once it exceeds `maxBytes`. */
async function* bounded(source: AsyncIterable<Uint8Array>, maxBytes: number): AsyncGenerator<Uint8Array> {
  let total = 0;
  for await (const chunk of source) {
    total += chunk.length;
    if (total > maxBytes) throw tooLarge(maxBytes);
    yield chunk;
  }
}

const tooLarge = (maxBytes: number) =>
  new AppError("payload_too_large", `a blob upload may be at most ${maxBytes} bytes (WARREN_BLOB_MAX_PUT_BYTES)`);

/**
 * Told about objects stored through a presigned PUT whose key it accepts, with the BLAKE3 of
 * the bytes as they streamed in (volumes verify their blobs this way instead of reading them
 * back at publish). It may refuse them (the object is then its to delete).
 */
export interface UploadObserver {
  accepts(key: string): boolean;
  stored(key: string, blake3Hex: string, size: number): Promise<void>;
}

/** Passes `source` through, feeding every chunk to `hasher` and counting its bytes. */
async function* hashed(
  source: AsyncIterable<Uint8Array>,
  hasher: Blake3Hasher,
  seen: { bytes: number },
): AsyncGenerator<Uint8Array> {
  for await (const chunk of source) {
    hasher.update(chunk);
    seen.bytes += chunk.length;
    yield chunk;
  }
}

export class SignedBlobService {
  private observer: UploadObserver | null = null;

  constructor(
    private readonly store: FsBlobStore,
    private readonly maxPutBytes: number,
  ) {}

  observeUploads(observer: UploadObserver): void {
    this.observer = observer;
  }

  /** Refuses a request whose URL this server did not sign for its method and key, or that expired. */
  authorize(method: SignedMethod, key: string, query: SignedQuery): void {
    const check = this.store.checkSignedUrl(method, key, query);
    if (check === "expired") throw new AppError("signature_invalid", "the presigned URL has expired");
    if (check !== "valid") {
      throw new AppError("signature_invalid", `the presigned URL's signature is not valid for ${method} of this key`);
    }
    // Only valid keys are ever signed; this holds should that change.
    const problem = keyProblem(key);
    if (problem) throw new AppError("invalid_argument", `invalid blob key: ${problem}`);
  }

  async read(key: string): Promise<{ size: number; stream: Readable }> {
    let found: { size: number; stream: Readable } | null;
    try {
      found = await this.store.openRead(key);
    } catch (error) {
      throw fromBlobError(error);
    }
    if (!found) throw new AppError("not_found", "blob not found");
    return found;
  }

  /**
   * Stores the body under `key` unless an object is there. `declaredBytes` (the
   * Content-Length, when sent) over the limit is refused before a byte is read.
   */
  async write(
    key: string,
    body: AsyncIterable<Uint8Array>,
    declaredBytes: number | undefined,
  ): Promise<{ written: boolean }> {
    if (declaredBytes !== undefined && declaredBytes > this.maxPutBytes) throw tooLarge(this.maxPutBytes);
    const observer = this.observer?.accepts(key) ? this.observer : null;
    const hasher = observer ? new Blake3Hasher() : null;
    const seen = { bytes: 0 };
    let written: boolean;
    try {
      const source = bounded(body, this.maxPutBytes);
      ({ written } = await this.store.putStream(
        key,
        hasher ? hashed(source, hasher, seen) : source,
        declaredBytes === undefined ? {} : { sizeHint: declaredBytes },
      ));
    } catch (error) {
      if (error instanceof AppError || error instanceof BlobError) throw fromBlobError(error);
      // The body stream failed: the client went away or sent a malformed chunked body.
      throw new AppError("invalid_argument", "the request body was not received whole");
    }
    // An object already there is not what this body carried: nothing to tell.
    if (observer && hasher && written) await observer.stored(key, hasher.digest("hex"), seen.bytes);
    return { written };
  }
}
