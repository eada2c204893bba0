// Content-defined chunking of filesystem images, cut only at 4 KiB block boundaries.
//
// Why block-aligned: an image holds a filesystem (XFS, 4 KiB blocks), and a filesystem
// writes, moves and shares data in whole blocks: a changed file rewrites its blocks in
// place or (reflink, copy-on-write) at new ones, never shifting the bytes after it by an odd
// amount. A byte-granular CDC pays a gear step per byte to find boundaries that can follow
// insertions at any byte; here the insertions that matter are whole blocks, so deciding a cut
// once per block loses nothing and costs ~1/64 of a byte-wise gear pass (64 hash steps per
// 4096 bytes): a plain per-byte gear pass in JS ran at ~358 MB/s on this host, too slow for
// replicating at disk speed; this one is a few ms per 100 MB.
//
// The decision after a block depends only on that block's last 64 bytes (a gear hash of them
// finished by a 32-bit mixer) and on how far the block is from the chunk's start, so:
// - the same bytes always give the same chunks (hashes name the same chunks across images
//   and across snapshots of one sandbox);
// - after a changed, inserted or removed block, the chunks before the change are untouched
//   and the following ones resynchronize: as soon as a block that was a cut point before the
//   change is again one (its bytes did not change; only its distance from the chunk's start
//   did), every later chunk is as before. With normalized chunking (FastCDC: a harder mask
//   before the normal size, an easier one after) the distance matters a little, so a change
//   typically costs the chunk it lands in and one or two after it.
//
// Sizes: at least MIN_CHUNK_BYTES (except the last chunk of a range), at most
// MAX_CHUNK_BYTES, ~AVERAGE_CHUNK_BYTES on average. The gear table comes from a fixed seed:
// changing the seed or the masks changes every boundary, which stays correct (chunks are
// addressed by content) but loses deduplication against everything stored before.

export const BLOCK_BYTES = 4096;
export const MIN_CHUNK_BYTES = 64 * 1024;
/** The normal size: cuts are rarer before it and likelier after it. */
export const NORMAL_CHUNK_BYTES = 256 * 1024;
export const MAX_CHUNK_BYTES = 1024 * 1024;
/** Measured mean of the resulting sizes on random data: ~269 KiB (the closed form of the masks). */
export const AVERAGE_CHUNK_BYTES = 269 * 1024;
/** How many trailing bytes of a block its cut decision reads. */
export const WINDOW_BYTES = 64;

/** Per-block cut probabilities: 1/2^7 before the normal size, 1/2^4 from it on. */
const MASK_BEFORE_NORMAL = (1 << 7) - 1;
const MASK_AFTER_NORMAL = (1 << 4) - 1;

const GEAR = gearTable(0x5741_5252); // "WARR"

function gearTable(seed: number): Uint32Array {
  // splitmix32: 256 well-spread constants, the same on every host and every version.
  const table = new Uint32Array(256);
  let state = seed >>> 0;
  for (let i = 0; i < 256; i++) {
    state = (state + 0x9e37_79b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85eb_ca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2_ae35);
    table[i] = (z ^ (z >>> 16)) >>> 0;
  }
  return table;
}

/**
 * The hash of the WINDOW_BYTES bytes ending at `end`: a gear hash whose running value is
 * rotated rather than shifted (a 32-bit shift would forget all but the last 32 bytes), then
 * finished with murmur3's fmix32 so every bit of the result depends on every byte.
 */
export function blockHash(data: Uint8Array, end: number): number {
  let h = 0;
  for (let i = end - WINDOW_BYTES; i < end; i++)
    h = (((h << 1) | (h >>> 31)) + (GEAR[data[i] as number] as number)) | 0;
  h = Math.imul(h ^ (h >>> 16), 0x85eb_ca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2_ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * The length of the chunk that starts at `start`, looking at `data` up to `end`; or 0 when
 * the chunk may continue past `end` (no cut found, fewer than MAX_CHUNK_BYTES seen) and
 * `final` is false. With `final`, the range ends at `end`, so the last chunk ends there.
 */
export function nextCut(data: Uint8Array, start: number, end: number, final: boolean): number {
  const available = end - start;
  const limit = Math.min(available, MAX_CHUNK_BYTES);
  // A cut is only ever after a whole block, MIN_CHUNK_BYTES (a block multiple) or more in.
  for (let length = MIN_CHUNK_BYTES; length <= limit; length += BLOCK_BYTES) {
    const mask = length < NORMAL_CHUNK_BYTES ? MASK_BEFORE_NORMAL : MASK_AFTER_NORMAL;
    if ((blockHash(data, start + length) & mask) === 0) return length;
  }
  if (available >= MAX_CHUNK_BYTES) return MAX_CHUNK_BYTES;
  return final ? available : 0;
}

/** The lengths of the chunks of `data[start, end)`, the range being whole (the last chunk ends at `end`). */
export function chunkLengths(data: Uint8Array, start = 0, end = data.length): number[] {
  const lengths: number[] = [];
  let at = start;
  while (at < end) {
    const length = nextCut(data, at, end, true);
    lengths.push(length);
    at += length;
  }
  return lengths;
}

const ZEROS = new Uint8Array(MAX_CHUNK_BYTES);

/** Whether every byte is zero (such a chunk is stored as a hole). Native memcmp, a slice at a time. */
export function isZero(data: Uint8Array): boolean {
  for (let at = 0; at < data.length; at += ZEROS.length) {
    const part = data.subarray(at, Math.min(data.length, at + ZEROS.length));
    if (Buffer.compare(part, ZEROS.subarray(0, part.length)) !== 0) return false;
  }
  return true;
}
