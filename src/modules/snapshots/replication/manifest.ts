// The manifest of an image as stored: JSON, checked field by field on the way in, since a
// manifest read back from the blob store drives where a rebuild writes.
import { MAX_CHUNK_BYTES } from "./chunker.js";
import { DIGEST_PATTERN } from "./codec.js";
import type { ChunkRef, ImageManifest } from "./types.js";

/** The largest image a manifest may describe (16 TiB): a bound on the sparse file a rebuild creates. */
export const MAX_IMAGE_BYTES = 2 ** 44;

/** An encoded manifest larger than this is refused (~5M chunks, a >1 TiB image). */
export const MAX_MANIFEST_BYTES = 512 * 1024 * 1024;

export class ManifestError extends Error {
  constructor(message: string) {
    super(`invalid image manifest: ${message}`);
    this.name = "ManifestError";
  }
}

function isByteCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/**
 * `value` as an ImageManifest, or a ManifestError naming the first problem: version 1, a
 * size, chunks in ascending offset order, not overlapping, inside the size, each 1 to
 * MAX_CHUNK_BYTES long, with a `blake3:<64 hex>` digest and no other fields.
 */
export function validateManifest(value: unknown): ImageManifest {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new ManifestError("not an object");
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record))
    if (key !== "version" && key !== "size" && key !== "chunks") throw new ManifestError(`unknown field ${key}`);
  if (record.version !== 1) throw new ManifestError("version is not 1");
  if (!isByteCount(record.size) || record.size > MAX_IMAGE_BYTES)
    throw new ManifestError(`size is not a byte count up to ${MAX_IMAGE_BYTES}`);
  if (!Array.isArray(record.chunks)) throw new ManifestError("chunks is not an array");
  const size = record.size;
  const chunks: ChunkRef[] = [];
  let previousEnd = 0;
  for (const [index, item] of record.chunks.entries()) {
    if (typeof item !== "object" || item === null || Array.isArray(item))
      throw new ManifestError(`chunk ${index} is not an object`);
    const ref = item as Record<string, unknown>;
    for (const key of Object.keys(ref))
      if (key !== "offset" && key !== "size" && key !== "digest")
        throw new ManifestError(`chunk ${index} has an unknown field ${key}`);
    const { offset, size: length, digest } = ref;
    if (!isByteCount(offset)) throw new ManifestError(`chunk ${index}: offset is not a byte count`);
    if (!isByteCount(length) || length === 0 || length > MAX_CHUNK_BYTES)
      throw new ManifestError(`chunk ${index}: size is not 1 to ${MAX_CHUNK_BYTES} bytes`);
    if (typeof digest !== "string" || !DIGEST_PATTERN.test(digest))
      throw new ManifestError(`chunk ${index}: digest is not blake3:<64 hex digits>`);
    if (offset < previousEnd) throw new ManifestError(`chunk ${index} overlaps or precedes the one before it`);
    if (offset + length > size) throw new ManifestError(`chunk ${index} ends past the image size`);
    previousEnd = offset + length;
    chunks.push({ offset, size: length, digest: digest as ChunkRef["digest"] });
  }
  return { version: 1, size, chunks };
}

export function encodeManifest(manifest: ImageManifest): Buffer {
  return Buffer.from(JSON.stringify(validateManifest(manifest)));
}

export function decodeManifest(bytes: Uint8Array): ImageManifest {
  if (bytes.length > MAX_MANIFEST_BYTES) throw new ManifestError(`larger than ${MAX_MANIFEST_BYTES} bytes`);
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8"));
  } catch {
    throw new ManifestError("not JSON");
  }
  return validateManifest(value);
}
