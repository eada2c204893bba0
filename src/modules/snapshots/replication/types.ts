// What the replication of a snapshot's image files deals in: chunks addressed by the
// BLAKE3 of their plain bytes, stored zstd-compressed once per organization, and one
// manifest per image that lists them by offset.

export type Digest = `blake3:${string}`;

/** One image file of a snapshot (`root` or `workspace`) as stored in the blob store. */
export interface ImageManifest {
  version: 1;
  /** The file's length in bytes (holes included). */
  size: number;
  /** Data ranges in offset order, not overlapping; every byte not covered is zero (a hole). */
  chunks: ChunkRef[];
}

export interface ChunkRef {
  offset: number;
  /** Plain (uncompressed) length. */
  size: number;
  digest: Digest;
}

export interface ReplicationStats {
  chunks: number;
  /** Chunks this replication stored (the rest were there already). */
  newChunks: number;
  /** Plain bytes the manifest covers. */
  bytes: number;
  /** Compressed bytes this replication stored. */
  uploadedBytes: number;
}

/** Where a rebuild reads chunks from. */
export interface ChunkSource {
  /** The compressed bytes, or null when missing. */
  get(digest: Digest): Promise<Buffer | null>;
}

/** Where chunks live: the blob store under one organization's prefix. */
export interface ChunkStore extends ChunkSource {
  /** Whether the chunk is stored (a cached answer may say true only for chunks known stored). */
  has(digest: Digest): Promise<boolean>;
  /**
   * Stores the compressed bytes of the chunk whose plain bytes (`plainSize` long) hash to
   * `digest`, once. Durable only once flush() resolved (a packing store batches them).
   */
  put(digest: Digest, compressed: Uint8Array, plainSize: number): Promise<void>;
  /**
   * Stores `plain` framed as raw zstd blocks (a chunk that does not compress), copying it
   * before the returned promise is made (the caller may reuse its memory at once). Optional:
   * without it the caller frames the chunk itself and calls put().
   */
  putRaw?(digest: Digest, plain: Uint8Array): Promise<void>;
  /** Makes every chunk put so far durable; rethrows a failed store. */
  flush(): Promise<void>;
}

export type ChunkFailure = "missing" | "corrupt";

/** A chunk a rebuild could not use: the snapshot cannot be restored from the blob store. */
export class ChunkError extends Error {
  readonly digest: Digest;
  readonly reason: ChunkFailure;

  constructor(digest: Digest, reason: ChunkFailure, message: string) {
    super(message);
    this.name = "ChunkError";
    this.digest = digest;
    this.reason = reason;
  }
}
