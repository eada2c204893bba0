// Packs: many compressed chunks in one blob-store object, so a replication pays one
// put (one set of fsyncs on the fs store, one PUT on S3) per ~16 MiB instead of per chunk.
// A pack is named by the BLAKE3 of its bytes (`<prefix>/packs/<2 hex>/<64 hex>`), so it is
// verifiable, and is self-describing: an index and a trailer at its end list its chunks, so
// the chunk index the database keeps can be rebuilt from the blob store alone.
//
// Layout (integers big-endian):
//   chunk bytes, back to back (each a chunk's zstd frame)
//   index: per chunk, in offset order: digest (32 bytes, BLAKE3 of the plain bytes),
//          offset (u64), stored length (u32), plain size (u32)
//   trailer (40 bytes): magic "WRNPACK1", index offset (u64), chunk count (u32), 0 (u32),
//                       16 random bytes
// The random bytes make every pack written a key of its own, even one of the same chunks in
// the same order as an earlier pack (a retried replication): a key is never written again
// once the collector may be deleting it.
import { randomBytes } from "node:crypto";
import { Blake3Hasher, blake3 } from "@napi-rs/blake-hash";
import type { BlobStore } from "../../../drivers/blobs/interface.js";
import { MAX_CHUNK_BYTES } from "./chunker.js";
import { DIGEST_PATTERN, rawZstdFrame, rawZstdFrameLength, writeRawZstdFrame } from "./codec.js";
import type { Digest } from "./types.js";

const MAGIC = Buffer.from("WRNPACK1", "latin1");
export const PACK_TRAILER_BYTES = 40;
const ENTRY_BYTES = 48;
/** A pack is flushed once its chunks reach this many bytes (the last one of a replication may be smaller). */
export const PACK_TARGET_BYTES = 16 * 1024 * 1024;
/**
 * The most chunks a pack may list (what a reader accepts, ~3 MiB of index); a pack of chunks
 * that compress very well is written when it reaches this count, below its target size.
 */
export const MAX_PACK_CHUNKS = 65_536;
/** A stored chunk is a zstd frame of at most MAX_CHUNK_BYTES: a raw frame plus its headers. */
export const MAX_STORED_CHUNK_BYTES = MAX_CHUNK_BYTES + 64 * 1024;
const PACK_KEY_PATTERN = /\/packs\/([0-9a-f]{2})\/([0-9a-f]{64})$/;

/** Where one chunk lies in one pack. */
export interface PackEntry {
  digest: Digest;
  offset: number;
  /** Stored (compressed) length. */
  length: number;
  /** Plain length. */
  plainSize: number;
}

export class PackFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PackFormatError";
  }
}

export function packKey(prefix: string, packDigestHex: string): string {
  if (!/^[0-9a-f]{64}$/.test(packDigestHex)) throw new Error("not a pack digest");
  return `${prefix}/packs/${packDigestHex.slice(0, 2)}/${packDigestHex}`;
}

/** Whether `key` names a pack (and so can be checked against its own bytes). */
export function isPackKey(key: string): boolean {
  const match = PACK_KEY_PATTERN.exec(key);
  return match !== null && match[2]?.startsWith(match[1] as string) === true;
}

/** Whether `data` is the pack `key` names (its BLAKE3). */
export function packMatchesKey(key: string, data: Uint8Array): boolean {
  const match = PACK_KEY_PATTERN.exec(key);
  return match !== null && blake3(data).toString("hex") === match[2];
}

/**
 * A pack ready to store: its bytes as a list of pieces (the chunks as they were appended,
 * then the index and trailer), never copied into one buffer; the fs store writes them with
 * writev.
 */
export interface SealedPack {
  key: string;
  parts: Buffer[];
  /** The pack's length in bytes (the sum of `parts`). */
  size: number;
  entries: PackEntry[];
}

/** A sealed pack's bytes in one buffer (a copy: for tests and small packs). */
export function packData(pack: SealedPack): Buffer {
  return Buffer.concat(pack.parts, pack.size);
}

/**
 * Collects compressed chunks into one pack, hashing each as it is appended (so sealing
 * hashes only the index). Without `into`, the chunks are kept as they are (not copied);
 * with it, each is copied into `into` while it has room (a buffer the caller reuses, such
 * as a SharedArrayBuffer another thread writes from without a copy), the rest kept as is.
 */
export class PackBuilder {
  private readonly parts: Buffer[] = [];
  private readonly entries: PackEntry[] = [];
  private readonly hasher = new Blake3Hasher();
  private size = 0;
  /** Bytes of `into` used (the chunks copied into it are its prefix). */
  private filled = 0;

  constructor(private readonly into?: Buffer) {}

  get bytes(): number {
    return this.size;
  }

  get count(): number {
    return this.entries.length;
  }

  /** Whether the pack should be written now: `targetBytes` of chunks, or as many chunks as a pack may list. */
  isFull(targetBytes: number): boolean {
    return this.size >= targetBytes || this.entries.length >= MAX_PACK_CHUNKS;
  }

  /** Appends `compressed` (kept as it is, not copied: the caller must not reuse its memory). */
  append(digest: Digest, plainSize: number, compressed: Uint8Array): PackEntry {
    if (this.entries.length >= MAX_PACK_CHUNKS) throw new Error("a pack holds at most MAX_PACK_CHUNKS chunks");
    const entry = { digest, offset: this.size, length: compressed.byteLength, plainSize };
    const into = this.into;
    if (into && this.filled === this.size && this.filled + compressed.byteLength <= into.length) {
      into.set(compressed, this.filled);
      const copied = into.subarray(this.filled, this.filled + compressed.byteLength);
      this.filled += compressed.byteLength;
      // One part for the whole copied prefix.
      if (this.parts.length === 0) this.parts.push(copied);
      else this.parts[0] = into.subarray(0, this.filled);
    } else this.parts.push(Buffer.from(compressed.buffer, compressed.byteOffset, compressed.byteLength));
    this.hasher.update(compressed);
    this.entries.push(entry);
    this.size += compressed.byteLength;
    return entry;
  }

  /**
   * Appends `plain` framed as raw zstd blocks (codec.ts), written straight into `into` when it
   * has room (no buffer of its own per chunk); `plain` is copied before this returns.
   */
  appendRawFrame(digest: Digest, plain: Uint8Array): PackEntry {
    const length = rawZstdFrameLength(plain.length);
    const into = this.into;
    if (
      !into ||
      this.filled !== this.size ||
      this.filled + length > into.length ||
      this.entries.length >= MAX_PACK_CHUNKS
    )
      return this.append(digest, plain.length, rawZstdFrame(plain));
    writeRawZstdFrame(plain, into, this.filled);
    const stored = into.subarray(this.filled, this.filled + length);
    const entry = { digest, offset: this.size, length, plainSize: plain.length };
    this.filled += length;
    if (this.parts.length === 0) this.parts.push(stored);
    else this.parts[0] = into.subarray(0, this.filled);
    this.hasher.update(stored);
    this.entries.push(entry);
    this.size += length;
    return entry;
  }

  /** The pack's pieces, its key under `prefix`, and its entries. The builder is spent. */
  seal(prefix: string): SealedPack {
    const index = Buffer.alloc(this.entries.length * ENTRY_BYTES + PACK_TRAILER_BYTES);
    this.entries.forEach((entry, i) => {
      const at = i * ENTRY_BYTES;
      Buffer.from(entry.digest.slice("blake3:".length), "hex").copy(index, at);
      index.writeBigUInt64BE(BigInt(entry.offset), at + 32);
      index.writeUInt32BE(entry.length, at + 40);
      index.writeUInt32BE(entry.plainSize, at + 44);
    });
    const trailer = this.entries.length * ENTRY_BYTES;
    MAGIC.copy(index, trailer);
    index.writeBigUInt64BE(BigInt(this.size), trailer + 8);
    index.writeUInt32BE(this.entries.length, trailer + 16);
    randomBytes(16).copy(index, trailer + 24);
    const digest = this.hasher.update(index).digest("hex");
    return {
      key: packKey(prefix, digest),
      parts: [...this.parts, index],
      size: this.size + index.length,
      entries: [...this.entries],
    };
  }
}

/** Where the index of a pack of `packSize` bytes starts and how many entries it has, from its trailer. */
export function parsePackTrailer(trailer: Uint8Array, packSize: number): { indexOffset: number; count: number } {
  const view = Buffer.from(trailer.buffer, trailer.byteOffset, trailer.byteLength);
  if (view.length !== PACK_TRAILER_BYTES || packSize < PACK_TRAILER_BYTES)
    throw new PackFormatError("the pack is too short for its trailer");
  if (!view.subarray(0, 8).equals(MAGIC)) throw new PackFormatError("the pack's trailer has no pack magic");
  const indexOffset = view.readBigUInt64BE(8);
  const count = view.readUInt32BE(16);
  if (view.readUInt32BE(20) !== 0) throw new PackFormatError("the pack's trailer has an unknown flag");
  if (count > MAX_PACK_CHUNKS) throw new PackFormatError(`the pack claims ${count} chunks`);
  if (indexOffset + BigInt(count * ENTRY_BYTES + PACK_TRAILER_BYTES) !== BigInt(packSize))
    throw new PackFormatError("the pack's index does not end where its trailer starts");
  return { indexOffset: Number(indexOffset), count };
}

/** The entries of an index (the bytes between the chunks and the trailer), checked to lie within the chunk area. */
export function parsePackIndex(index: Uint8Array, indexOffset: number, count: number): PackEntry[] {
  const view = Buffer.from(index.buffer, index.byteOffset, index.byteLength);
  if (view.length !== count * ENTRY_BYTES) throw new PackFormatError("the pack's index has the wrong length");
  const entries: PackEntry[] = [];
  let end = 0;
  for (let i = 0; i < count; i++) {
    const at = i * ENTRY_BYTES;
    const digest = `blake3:${view.subarray(at, at + 32).toString("hex")}` as Digest;
    const offset = Number(view.readBigUInt64BE(at + 32));
    const length = view.readUInt32BE(at + 40);
    const plainSize = view.readUInt32BE(at + 44);
    if (!DIGEST_PATTERN.test(digest)) throw new PackFormatError("the pack's index names a malformed digest");
    if (offset < end || offset + length > indexOffset || length === 0 || length > MAX_STORED_CHUNK_BYTES)
      throw new PackFormatError(`the pack's index entry ${i} lies outside the chunk area or overlaps another`);
    if (plainSize === 0 || plainSize > MAX_CHUNK_BYTES)
      throw new PackFormatError(`the pack's index entry ${i} has an impossible plain size`);
    entries.push({ digest, offset, length, plainSize });
    end = offset + length;
  }
  return entries;
}

/** The entries of a whole pack held in memory. */
export function packEntries(data: Uint8Array): PackEntry[] {
  const { indexOffset, count } = parsePackTrailer(data.subarray(data.length - PACK_TRAILER_BYTES), data.length);
  return parsePackIndex(data.subarray(indexOffset, data.length - PACK_TRAILER_BYTES), indexOffset, count);
}

/** The entries of the pack at `key`, read by two ranges (trailer, then index); null when there is no pack. */
export async function readPackIndex(blobs: BlobStore, key: string): Promise<PackEntry[] | null> {
  const head = await blobs.head(key);
  if (head === null) return null;
  if (head.size < PACK_TRAILER_BYTES) throw new PackFormatError("the pack is too short for its trailer");
  const trailer = await blobs.getRange(key, head.size - PACK_TRAILER_BYTES, PACK_TRAILER_BYTES);
  if (trailer === null) return null;
  const { indexOffset, count } = parsePackTrailer(trailer, head.size);
  const index = await blobs.getRange(key, indexOffset, count * ENTRY_BYTES);
  if (index === null) return null;
  return parsePackIndex(index, indexOffset, count);
}

/** Where a chunk is stored: in a pack, or (chunks stored before packs) as an object of its own. */
export type ChunkLocation =
  | { pack: string; offset: number; length: number }
  | { pack: null; key: string; length: number };

/**
 * The chunk index of one organization rebuilt from the blob store alone: every pack's own
 * index, and the per-chunk objects stored before packs. A chunk found in several places
 * keeps the first (packs in key order, then per-chunk objects); a pack whose index does not
 * parse is reported in `unreadable` and skipped.
 */
export async function rebuildChunkIndex(
  blobs: BlobStore,
  prefix: string,
): Promise<{
  chunks: Map<Digest, ChunkLocation & { plainSize: number | null }>;
  packs: string[];
  unreadable: string[];
}> {
  const chunks = new Map<Digest, ChunkLocation & { plainSize: number | null }>();
  const packs: string[] = [];
  const unreadable: string[] = [];
  for await (const info of blobs.list(`${prefix}/packs/`)) {
    if (!isPackKey(info.key)) continue;
    let entries: PackEntry[] | null;
    try {
      entries = await readPackIndex(blobs, info.key);
    } catch (error) {
      if (!(error instanceof PackFormatError)) throw error;
      unreadable.push(info.key);
      continue;
    }
    if (entries === null) continue;
    packs.push(info.key);
    for (const entry of entries)
      if (!chunks.has(entry.digest))
        chunks.set(entry.digest, {
          pack: info.key,
          offset: entry.offset,
          length: entry.length,
          plainSize: entry.plainSize,
        });
  }
  for await (const info of blobs.list(`${prefix}/chunks/`)) {
    const hex = /\/chunks\/[0-9a-f]{2}\/([0-9a-f]{64})$/.exec(info.key)?.[1];
    if (!hex) continue;
    const digest = `blake3:${hex}` as Digest;
    if (!chunks.has(digest)) chunks.set(digest, { pack: null, key: info.key, length: info.size, plainSize: null });
  }
  return { chunks, packs, unreadable };
}
