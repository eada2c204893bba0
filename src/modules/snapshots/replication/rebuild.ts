// Rebuilds an image file from its manifest: a sparse file of the image's size with each
// chunk fetched, decompressed, checked against its digest and size, and written at its
// offset. The file is built under a temporary name beside `path` and renamed into place only
// once complete and synced, so `path` never holds a partial image.
import { randomBytes } from "node:crypto";
import { open, rename, unlink } from "node:fs/promises";
import path from "node:path";
import { fsyncPath } from "../../../lib/fs.js";
import { decompressChunk, digestOf } from "./codec.js";
import { validateManifest } from "./manifest.js";
import { DEFAULT_CONCURRENCY } from "./replicate.js";
import { ChunkError, type ChunkSource, type Digest, type ImageManifest } from "./types.js";

export interface RebuildInput {
  manifest: ImageManifest;
  path: string;
  chunks: ChunkSource;
  /** Chunks fetched at once (default 4). */
  concurrency?: number;
  signal?: AbortSignal;
}

/** The plain bytes of one chunk, checked: ChunkError missing or corrupt otherwise. */
async function fetchChunk(chunks: ChunkSource, digest: Digest, size: number): Promise<Buffer> {
  const compressed = await chunks.get(digest);
  if (compressed === null) throw new ChunkError(digest, "missing", `chunk ${digest} is missing from the blob store`);
  return checkChunk(digest, size, compressed);
}

/** The plain bytes of a stored chunk checked against its digest and plain size: ChunkError corrupt otherwise. */
export async function checkChunk(digest: Digest, size: number, compressed: Buffer): Promise<Buffer> {
  let plain: Buffer;
  try {
    // Generous beside what the compressor emits (the chunk's size in 128 KiB blocks); a
    // hostile blob is refused before it is decoded.
    plain = await decompressChunk(compressed, size + 16 * 128 * 1024);
  } catch (error) {
    throw new ChunkError(digest, "corrupt", `chunk ${digest} does not decompress: ${(error as Error).message}`);
  }
  if (plain.length !== size)
    throw new ChunkError(digest, "corrupt", `chunk ${digest} holds ${plain.length} bytes, the manifest says ${size}`);
  if (digestOf(plain) !== digest) throw new ChunkError(digest, "corrupt", `chunk ${digest} does not match its digest`);
  return plain;
}

/**
 * Writes the image `manifest` describes to `path` (replacing any file there only on
 * success). Throws a ManifestError for a malformed manifest, a ChunkError for a chunk that
 * is missing or corrupt; on any failure nothing is left at `path` or beside it.
 */
export async function rebuildImage(input: RebuildInput): Promise<void> {
  const manifest = validateManifest(input.manifest);
  const concurrency = input.concurrency ?? DEFAULT_CONCURRENCY;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64)
    throw new RangeError("concurrency must be an integer from 1 to 64");
  input.signal?.throwIfAborted();
  // A chunk that recurs (the same bytes at several offsets) is fetched once.
  const offsets = new Map<Digest, { size: number; offsets: number[] }>();
  for (const ref of manifest.chunks) {
    const entry = offsets.get(ref.digest);
    if (entry && entry.size !== ref.size)
      throw new ChunkError(ref.digest, "corrupt", `the manifest gives chunk ${ref.digest} two sizes`);
    if (entry) entry.offsets.push(ref.offset);
    else offsets.set(ref.digest, { size: ref.size, offsets: [ref.offset] });
  }
  const temporary = path.join(
    path.dirname(input.path),
    `.${path.basename(input.path)}.rebuild-${randomBytes(6).toString("hex")}`,
  );
  const file = await open(temporary, "wx", 0o600);
  let closed = false;
  try {
    await file.truncate(manifest.size);
    const queue = [...offsets.entries()];
    const worker = async () => {
      try {
        for (let next = queue.shift(); next; next = queue.shift()) {
          input.signal?.throwIfAborted();
          const [digest, { size, offsets: at }] = next;
          const plain = await fetchChunk(input.chunks, digest, size);
          for (const offset of at) {
            let done = 0;
            while (done < size) done += (await file.write(plain, done, size - done, offset + done)).bytesWritten;
          }
        }
      } catch (error) {
        queue.length = 0; // the other workers stop after their current chunk
        throw error;
      }
    };
    const workers = Array.from({ length: Math.min(concurrency, Math.max(1, queue.length)) }, worker);
    // Every worker settles before the file is closed; the first failure is the one reported.
    const results = await Promise.allSettled(workers);
    const failed = results.find((result): result is PromiseRejectedResult => result.status === "rejected");
    if (failed) throw failed.reason;
    await file.sync();
    closed = true;
    await file.close();
    await rename(temporary, input.path);
    await fsyncPath(path.dirname(input.path));
  } catch (error) {
    if (!closed) await file.close().catch(() => undefined);
    await unlink(temporary).catch(() => undefined);
    throw error;
  }
}
