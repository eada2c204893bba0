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

/** Largest block a zstd frame may regenerate (RFC 8878 3.1.1.2.4: Block_Maximum_Size). */
const ZSTD_BLOCK_MAX = 128 * 1024;
const ZSTD_MAGIC = 0xfd2fb528;

/**
 * The most bytes `compressed` can decompress to, from its frame and block headers alone
 * (raw and RLE blocks give their size, a compressed block at most 128 KiB), or null when the
 * headers are malformed. The decoder behind decompress() grows its output without limit, so
 * this is what keeps a hostile blob (one that names a chunk's digest but holds a
 * decompression bomb) from exhausting the server's memory.
 */
export function zstdOutputBound(compressed: Uint8Array): number | null {
  const view = new DataView(compressed.buffer, compressed.byteOffset, compressed.byteLength);
  let at = 0;
  let bound = 0;
  while (at < compressed.length) {
    if (at + 8 > compressed.length) return null;
    const magic = view.getUint32(at, true);
    if ((magic & 0xfffffff0) === 0x184d2a50) {
      // A skippable frame: a 4-byte length, no output.
      at += 8 + view.getUint32(at + 4, true);
      continue;
    }
    if (magic !== ZSTD_MAGIC) return null;
    const descriptor = compressed[at + 4] as number;
    const singleSegment = (descriptor & 0x20) !== 0;
    const checksum = (descriptor & 0x04) !== 0;
    const contentSizeBytes = [singleSegment ? 1 : 0, 2, 4, 8][descriptor >> 6] as number;
    const dictionaryBytes = [0, 1, 2, 4][descriptor & 0x03] as number;
    at += 5 + (singleSegment ? 0 : 1) + dictionaryBytes + contentSizeBytes;
    for (;;) {
      if (at + 3 > compressed.length) return null;
      const header =
        (compressed[at] as number) | ((compressed[at + 1] as number) << 8) | ((compressed[at + 2] as number) << 16);
      const last = (header & 1) === 1;
      const type = (header >> 1) & 3;
      const size = header >>> 3;
      if (type === 3) return null;
      at += 3 + (type === 1 ? 1 : size);
      bound += type === 2 ? ZSTD_BLOCK_MAX : size;
      if (at > compressed.length) return null;
      if (last) break;
    }
    if (checksum) at += 4;
  }
  return at === compressed.length ? bound : null;
}

/**
 * The plain bytes of a stored chunk; refused before decoding when its headers are malformed
 * or could regenerate more than `maxBytes`.
 */
export function decompressChunk(compressed: Buffer, maxBytes: number): Promise<Buffer> {
  const bound = zstdOutputBound(compressed);
  if (bound === null) return Promise.reject(new Error("the chunk is not a well-formed zstd frame"));
  if (bound > maxBytes) {
    return Promise.reject(new Error(`the chunk could decompress to ${bound} bytes, more than ${maxBytes}`));
  }
  return zstd.decompress(compressed);
}
