// How one chunk is named and stored: BLAKE3 of the plain bytes, zstd of them.
import { createRequire } from "node:module";
import { blake3 } from "@napi-rs/blake-hash";
import type { Digest } from "./types.js";

interface ZstdBindings {
  compress(data: Buffer, level?: number): Promise<Buffer>;
  decompress(data: Buffer): Promise<Buffer>;
}

// The package's index.js drops the level argument (every call compresses at zstd's default,
// 3); its native bindings take it. Both run on the libuv threadpool.
const zstd = createRequire(import.meta.url)("@mongodb-js/zstd/bindings.js") as ZstdBindings;

/**
 * zstd level for chunks. Measured on this host (bench/replication.ts, 256 KiB pieces, 4 at a
 * time): random data is stored raw at ~1.0-1.3 GB/s at either level; JavaScript sources
 * compressed at 385 MB/s to 0.214 at level 1, 310 MB/s to 0.200 at level 3. Replication
 * speed matters more than 7% of the size of what deduplication leaves.
 */
export const ZSTD_LEVEL = 1;

export const DIGEST_PATTERN = /^blake3:[0-9a-f]{64}$/;

export function digestOf(plain: Uint8Array): Digest {
  return `blake3:${blake3(plain).toString("hex")}`;
}

export function compressChunk(plain: Uint8Array): Promise<Buffer> {
  return zstd.compress(Buffer.from(plain.buffer, plain.byteOffset, plain.byteLength), ZSTD_LEVEL);
}

export function decompressChunk(compressed: Buffer): Promise<Buffer> {
  return zstd.decompress(compressed);
}
