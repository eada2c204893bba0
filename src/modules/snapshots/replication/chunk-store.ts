// Chunks in the blob store as they were stored before packs (packing.ts): one object per chunk under the organization's prefix, at
// `<prefix>/chunks/<first 2 hex>/<64 hex>` (sharded so no listing holds every chunk at once).
import { createHash } from "node:crypto";
import type { BlobStore } from "../../../drivers/blobs/interface.js";
import { MAX_CHUNK_BYTES } from "./chunker.js";
import { DIGEST_PATTERN } from "./codec.js";
import type { ChunkStore, Digest } from "./types.js";

/**
 * The most a stored chunk object may hold: a chunk is at most MAX_CHUNK_BYTES plain, and zstd
 * grows incompressible input by well under 1%; a larger object is refused unread (a store is
 * not trusted with Warren's memory), and a rebuild then fails the restore.
 */
export const MAX_STORED_CHUNK_BYTES = 2 * MAX_CHUNK_BYTES;

/** How many digests known stored the positive cache of has() keeps (~100 bytes each). */
export const HAS_CACHE_ENTRIES = 50_000;

export function chunkKey(prefix: string, digest: Digest): string {
  if (!DIGEST_PATTERN.test(digest)) throw new Error(`not a chunk digest: ${JSON.stringify(digest)}`);
  const hex = digest.slice("blake3:".length);
  return `${prefix}/chunks/${hex.slice(0, 2)}/${hex}`;
}

/**
 * A ChunkStore over `blobs` under `prefix` (one organization's). has() remembers the chunks
 * it saw or stored, so replicating the next snapshot of the same sandbox skips most heads;
 * only positive answers are cached, and only for this store object's lifetime, so a chunk
 * collected later must be collected by something that does not share this object.
 *
 * `verifyWrites` (default: for every store but the local filesystem) passes the sha256 of
 * each chunk's compressed bytes so the store checks what it received. Over a network that
 * catches a damaged upload; the fs driver receives the very buffer this process holds, and
 * hashing it twice (here and in the store) took ~130 ms of event loop per 100 MB, a third
 * of a fresh replication's time. Corruption at rest is caught either way: a rebuild checks
 * every chunk's BLAKE3.
 */
export function blobChunkStore(blobs: BlobStore, prefix: string, options: { verifyWrites?: boolean } = {}): ChunkStore {
  const verifyWrites = options.verifyWrites ?? blobs.kind !== "fs";
  const known = new Set<Digest>();
  const remember = (digest: Digest) => {
    if (known.has(digest)) return;
    if (known.size >= HAS_CACHE_ENTRIES) {
      const oldest = known.values().next();
      if (!oldest.done) known.delete(oldest.value);
    }
    known.add(digest);
  };
  return {
    async has(digest) {
      const key = chunkKey(prefix, digest);
      if (known.has(digest)) return true;
      const head = await blobs.head(key);
      if (head === null) return false;
      remember(digest);
      return true;
    },
    async put(digest, compressed) {
      const key = chunkKey(prefix, digest);
      // (WebCrypto's digest, though asynchronous, took twice createHash's event-loop time
      // copying its input.)
      const sha256 = verifyWrites ? createHash("sha256").update(compressed).digest("hex") : undefined;
      await blobs.putIfAbsent(key, compressed, sha256 === undefined ? {} : { sha256 });
      remember(digest);
    },
    get(digest) {
      return blobs.get(chunkKey(prefix, digest), { maxBytes: MAX_STORED_CHUNK_BYTES });
    },
    // Each put is durable when it resolves.
    async flush() {},
  };
}
