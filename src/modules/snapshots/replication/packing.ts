// A ChunkStore that appends the chunks a replication stores into packs (pack.ts) and writes
// each pack with one put when it is full and at flush(). put() returns once the chunk is in
// the pack being filled, so reading, hashing and compressing go on while a pack is written;
// at most `maxWriting` packs are written at once (a put waits for a slot), which bounds the
// memory to about (maxWriting + 1) packs. Nothing is durable before flush() resolves.
//
// How a pack is stored and recorded, and how has() and get() are answered, is the caller's
// (writePack, has, get): the server's records it in the database (packed-chunks.ts); a
// blob-store-only one (blobPackStore, for tests and benchmarks) keeps an index in memory.
import { createHash } from "node:crypto";
import type { BlobStore } from "../../../drivers/blobs/interface.js";
import { blobChunkStore, MAX_STORED_CHUNK_BYTES } from "./chunk-store.js";
import { type ChunkLocation, PACK_TARGET_BYTES, PackBuilder, type SealedPack } from "./pack.js";
import type { ChunkStore, Digest } from "./types.js";

export type { SealedPack } from "./pack.js";

export interface PackingOptions {
  prefix: string;
  has(digest: Digest): Promise<boolean>;
  /** Stores the pack (durably) and records where its chunks are; called at most `maxWriting` at once. */
  writePack(pack: SealedPack): Promise<void>;
  get(digest: Digest): Promise<Buffer | null>;
  /** A pack is written once its chunks reach this many bytes (default PACK_TARGET_BYTES). */
  targetBytes?: number;
  /** Packs written at once (default 2). */
  maxWriting?: number;
  /** Makes the builder of each pack (default a plain PackBuilder). */
  newBuilder?: () => PackBuilder;
}

export class PackingChunkStore implements ChunkStore {
  private filling: PackBuilder;
  private readonly writing = new Set<Promise<void>>();
  private failure: { error: unknown } | null = null;
  private readonly putDigests = new Set<Digest>();
  private readonly targetBytes: number;
  private readonly maxWriting: number;
  /** Packs written so far (what flush() made durable). */
  packsWritten = 0;

  constructor(private readonly options: PackingOptions) {
    this.targetBytes = options.targetBytes ?? PACK_TARGET_BYTES;
    this.maxWriting = options.maxWriting ?? 2;
    if (!Number.isInteger(this.maxWriting) || this.maxWriting < 1) throw new RangeError("maxWriting must be >= 1");
    this.filling = this.newBuilder();
  }

  private newBuilder(): PackBuilder {
    return this.options.newBuilder?.() ?? new PackBuilder();
  }

  has(digest: Digest): Promise<boolean> {
    return this.options.has(digest);
  }

  get(digest: Digest): Promise<Buffer | null> {
    return this.options.get(digest);
  }

  put(digest: Digest, compressed: Uint8Array, plainSize: number): Promise<void> {
    return this.add(digest, (pack) => pack.append(digest, plainSize, compressed));
  }

  putRaw(digest: Digest, plain: Uint8Array): Promise<void> {
    return this.add(digest, (pack) => pack.appendRawFrame(digest, plain));
  }

  private async add(digest: Digest, append: (pack: PackBuilder) => void): Promise<void> {
    if (this.failure) throw this.failure.error;
    // The same bytes in two images of one snapshot (both asked has() before either was
    // stored): stored once.
    if (this.putDigests.has(digest)) return;
    this.putDigests.add(digest);
    append(this.filling);
    if (this.filling.isFull(this.targetBytes)) await this.rotate();
  }

  /** Writes the pack being filled (if any) and waits for every pack written; rethrows the first failure. */
  async flush(): Promise<void> {
    if (this.filling.count > 0) await this.rotate();
    while (this.writing.size > 0) await Promise.race(this.writing);
    if (this.failure) throw this.failure.error;
  }

  private async rotate(): Promise<void> {
    const full = this.filling;
    this.filling = this.newBuilder();
    while (this.writing.size >= this.maxWriting) await Promise.race(this.writing);
    if (this.failure) throw this.failure.error;
    const pack = full.seal(this.options.prefix);
    const write: Promise<void> = this.options
      .writePack(pack)
      .then(
        () => {
          this.packsWritten++;
        },
        (error: unknown) => {
          this.failure ??= { error };
        },
      )
      .finally(() => this.writing.delete(write));
    this.writing.add(write);
  }
}

/** The hex SHA-256 of `parts` as one byte string (what a store over a network checks a put against). */
export function sha256Of(parts: readonly Uint8Array[]): string {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(part);
  return hash.digest("hex");
}

/**
 * Reads a chunk at its location: a range of a pack, or (stored before packs) its own object.
 * Null when the object is gone or shorter than the location says.
 */
export async function readChunkAt(blobs: BlobStore, location: ChunkLocation): Promise<Buffer | null> {
  if (location.pack === null) return blobs.get(location.key, { maxBytes: MAX_STORED_CHUNK_BYTES });
  const data = await blobs.getRange(location.pack, location.offset, location.length);
  if (data === null || data.length !== location.length) return null;
  return data;
}

/**
 * A PackingChunkStore over the blob store alone, its index in memory (this object's
 * lifetime): for library tests and benchmarks. A chunk it does not know is looked for as a
 * per-chunk object (stored before packs).
 */
export function blobPackStore(
  blobs: BlobStore,
  prefix: string,
  options: { verifyWrites?: boolean; targetBytes?: number; maxWriting?: number } = {},
): PackingChunkStore & { locations: Map<Digest, ChunkLocation> } {
  const verifyWrites = options.verifyWrites ?? blobs.kind !== "fs";
  const locations = new Map<Digest, ChunkLocation>();
  const legacy = blobChunkStore(blobs, prefix);
  const store = new PackingChunkStore({
    prefix,
    ...(options.targetBytes !== undefined ? { targetBytes: options.targetBytes } : {}),
    ...(options.maxWriting !== undefined ? { maxWriting: options.maxWriting } : {}),
    has: async (digest) => locations.has(digest) || legacy.has(digest),
    async writePack(pack) {
      const sha256 = verifyWrites ? sha256Of(pack.parts) : undefined;
      await blobs.putIfAbsent(pack.key, pack.parts, sha256 === undefined ? {} : { sha256 });
      for (const entry of pack.entries)
        if (!locations.has(entry.digest))
          locations.set(entry.digest, { pack: pack.key, offset: entry.offset, length: entry.length });
    },
    async get(digest) {
      const location = locations.get(digest);
      return location ? readChunkAt(blobs, location) : legacy.get(digest);
    },
  });
  return Object.assign(store, { locations });
}
