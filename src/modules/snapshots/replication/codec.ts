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

/** Largest block a zstd frame may regenerate (RFC 8878 3.1.1.2.4: Block_Maximum_Size). */
const ZSTD_BLOCK_MAX = 128 * 1024;
const ZSTD_MAGIC = 0xfd2fb528;
const FRAME_HEADER_BYTES = 9;
const BLOCK_HEADER_BYTES = 3;

export const DIGEST_PATTERN = /^blake3:[0-9a-f]{64}$/;

export function digestOf(plain: Uint8Array): Digest {
  return `blake3:${blake3(plain).toString("hex")}`;
}

/**
 * The stored form of a chunk: a zstd frame. A chunk that looks incompressible (random bytes,
 * or data already compressed: archives, images, model weights) is framed as raw blocks here,
 * without calling zstd, which would store it raw anyway after paying for the attempt and the
 * binding's copies of input and output (about half of a fresh replication's CPU on such data).
 */
export function compressChunk(plain: Uint8Array): Promise<Buffer> {
  if (looksIncompressible(plain)) return Promise.resolve(rawZstdFrame(plain));
  return zstdChunk(plain);
}

/** `plain` compressed by zstd (on the libuv threadpool), whatever it holds. */
export function zstdChunk(plain: Uint8Array): Promise<Buffer> {
  return zstd.compress(Buffer.from(plain.buffer, plain.byteOffset, plain.byteLength), ZSTD_LEVEL);
}

/** Bytes sampled per chunk (eight slices of 1 KiB spread over it). */
const SAMPLE_SLICES = 8;
const SAMPLE_SLICE_BYTES = 1024;
/**
 * Shannon entropy of the sample's bytes, in bits per byte, at or above which a chunk is
 * stored without compressing it. An 8 KiB sample of random bytes reads ~7.97 (the estimate
 * is biased low by ~0.03 at this size), gzip'd or JPEG data ~7.95-7.98; text and code read
 * 4.5-6, executables ~5-6.5. Data above the line that zstd could still shrink (a short random
 * block repeated) is stored a little larger than it could be, never wrong.
 */
export const INCOMPRESSIBLE_BITS_PER_BYTE = 7.9;
const counts = new Uint32Array(256);

/** Whether a sample of `plain` has the byte entropy of random or already compressed data. */
export function looksIncompressible(plain: Uint8Array): boolean {
  if (plain.length < SAMPLE_SLICES * SAMPLE_SLICE_BYTES) return false;
  counts.fill(0);
  const last = plain.length - SAMPLE_SLICE_BYTES;
  for (let slice = 0; slice < SAMPLE_SLICES; slice++) {
    const start = Math.floor((last * slice) / (SAMPLE_SLICES - 1));
    for (let i = start; i < start + SAMPLE_SLICE_BYTES; i++) (counts[plain[i] as number] as number)++;
  }
  const total = SAMPLE_SLICES * SAMPLE_SLICE_BYTES;
  let bits = 0;
  for (const count of counts) {
    if (count === 0) continue;
    const p = count / total;
    bits -= p * Math.log2(p);
  }
  return bits >= INCOMPRESSIBLE_BITS_PER_BYTE;
}

/** The length of `plain.length` bytes framed as raw zstd blocks (rawZstdFrame). */
export function rawZstdFrameLength(plainLength: number): number {
  return FRAME_HEADER_BYTES + Math.max(1, Math.ceil(plainLength / ZSTD_BLOCK_MAX)) * BLOCK_HEADER_BYTES + plainLength;
}

/**
 * Writes `plain` as one zstd frame of raw blocks into `target` at `at` (rawZstdFrameLength
 * bytes) and returns that length: a single-segment frame with a 4-byte content size and no
 * checksum (RFC 8878), then blocks of at most 128 KiB stored as they are; what zstd itself
 * emits for data it cannot compress, and what any zstd decoder reads back.
 */
export function writeRawZstdFrame(plain: Uint8Array, target: Buffer, at: number): number {
  if (plain.length > 0xffffffff) throw new Error("a chunk larger than 4 GiB");
  const length = rawZstdFrameLength(plain.length);
  if (at + length > target.length) throw new RangeError("the frame does not fit");
  target.writeUInt32LE(ZSTD_MAGIC, at);
  // Frame_Header_Descriptor: Frame_Content_Size_flag 2 (4 bytes), Single_Segment_flag set.
  target[at + 4] = 0xa0;
  target.writeUInt32LE(plain.length, at + 5);
  let to = at + FRAME_HEADER_BYTES;
  let offset = 0;
  do {
    const size = Math.min(ZSTD_BLOCK_MAX, plain.length - offset);
    const last = offset + size === plain.length ? 1 : 0;
    // Block_Header: Last_Block, Block_Type 0 (raw), Block_Size; 3 bytes little-endian.
    target.writeUIntLE((size << 3) | last, to, BLOCK_HEADER_BYTES);
    target.set(plain.subarray(offset, offset + size), to + BLOCK_HEADER_BYTES);
    to += BLOCK_HEADER_BYTES + size;
    offset += size;
  } while (offset < plain.length);
  return length;
}

/** `plain` as one zstd frame of raw blocks, in a buffer of its own. */
export function rawZstdFrame(plain: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(rawZstdFrameLength(plain.length));
  writeRawZstdFrame(plain, frame, 0);
  return frame;
}

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
