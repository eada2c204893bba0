// The organization's chunks as the server stores and reads them: packed (replication/pack.ts)
// and indexed in the database (blob_chunks, blob_packs; pack-repo.ts). A replication asks
// the index which chunks are stored (touching them, so the collector leaves them alone),
// appends the others to packs, and records a pack's chunks only once the pack is stored; a
// rebuild looks their locations up in batches and reads byte ranges.
import type { BlobStore } from "../../drivers/blobs/interface.js";
import type { Clock } from "../../lib/clock.js";
import type { Db, Queryable } from "../../store/db.js";
import * as packRepo from "./pack-repo.js";
import { chunkKey } from "./replication/chunk-store.js";
import type { ChunkLocation } from "./replication/pack.js";
import {
  PackingChunkStore,
  type PackingOptions,
  readChunkAt,
  type SealedPack,
  sha256Of,
} from "./replication/packing.js";
import type { ChunkSource, Digest } from "./replication/types.js";
import * as repo from "./repo.js";

export function chunkPrefix(orgId: string): string {
  return `orgs/${orgId}`;
}

/** A pack recorded then chunks pointed at it only once it is stored (the order pack-repo.ts explains). */
export async function storeTrackedPack(
  deps: { db: Db; clock: Clock; blobs: BlobStore },
  orgId: string,
  pack: SealedPack,
  onStored: (q: Queryable) => Promise<void> = (q) =>
    packRepo.pointChunksAtPack(q, orgId, pack.key, pack.entries, deps.clock.now()),
): Promise<void> {
  const chunkBytes = pack.entries.reduce((sum, entry) => sum + entry.length, 0);
  const intent = { key: pack.key, orgId, chunkBytes, chunkCount: pack.entries.length };
  await packRepo.recordPackIntent(deps.db, intent, deps.clock.now());
  // Over a network the store checks what it received; the fs store receives this very buffer
  // (and a rebuild checks every chunk's BLAKE3 either way).
  const sha256 = deps.blobs.kind === "fs" ? undefined : sha256Of(pack.parts);
  await deps.blobs.putIfAbsent(pack.key, pack.parts, sha256 === undefined ? {} : { sha256 });
  const claimed = await deps.db.tx(async (q) => {
    if (await packRepo.claimPackForChunks(q, pack.key, deps.clock.now())) {
      await onStored(q);
      return true;
    }
    return false;
  });
  if (!claimed) {
    // Collected while its put outlasted the grace period: the object just put is tracked
    // again (if its row is gone) so the collector takes it, and no chunk row names it.
    await packRepo.recordPackIntent(deps.db, intent, deps.clock.now(), { ifAbsent: true });
    throw new Error("a pack was collected while it was being stored (the replication is retried)");
  }
}

/** A replication's chunk store: has() from the index (touched, batched per tick), puts into packs. */
export function trackedPackStore(
  deps: { db: Db; clock: Clock; blobs: BlobStore },
  orgId: string,
  options: { targetBytes?: number; maxWriting?: number } = {},
): PackingChunkStore {
  return new PackingChunkStore(trackedPackOptions(deps, orgId, options));
}

/** What trackedPackStore packs with (a replication worker thread asks these of the server's thread). */
export function trackedPackOptions(
  deps: { db: Db; clock: Clock; blobs: BlobStore },
  orgId: string,
  options: { targetBytes?: number; maxWriting?: number } = {},
): PackingOptions {
  let batch: { digest: Digest; resolve: (stored: boolean) => void; reject: (error: unknown) => void }[] = [];
  const flushBatch = async () => {
    const asked = batch;
    batch = [];
    try {
      const missing = await repo.touchChunks(
        deps.db,
        orgId,
        [...new Set(asked.map((entry) => entry.digest))],
        deps.clock.now(),
      );
      for (const entry of asked) entry.resolve(!missing.has(entry.digest));
    } catch (error) {
      for (const entry of asked) entry.reject(error);
    }
  };
  const source = new IndexedChunkSource(deps.db, deps.blobs, orgId);
  return {
    prefix: chunkPrefix(orgId),
    ...options,
    has: (digest) =>
      new Promise<boolean>((resolve, reject) => {
        if (batch.length === 0) setImmediate(() => void flushBatch());
        batch.push({ digest, resolve, reject });
      }),
    writePack: (pack) => storeTrackedPack(deps, orgId, pack),
    get: (digest) => source.get(digest),
  };
}

/**
 * Reads chunks where the index says they are. preload() looks many up in one query; a
 * chunk whose pack is gone is looked up once more (a repack may have moved it and its old
 * pack been collected since), then reported missing.
 */
export class IndexedChunkSource implements ChunkSource {
  private readonly locations = new Map<Digest, ChunkLocation>();

  constructor(
    private readonly db: Db,
    private readonly blobs: BlobStore,
    private readonly orgId: string,
  ) {}

  async preload(digests: readonly Digest[]): Promise<void> {
    const found = await packRepo.chunkLocations(this.db, this.orgId, chunkPrefix(this.orgId), digests);
    for (const [digest, location] of found) this.locations.set(digest, location);
  }

  async get(digest: Digest): Promise<Buffer | null> {
    let location = this.locations.get(digest) ?? (await this.lookUp(digest));
    const data = await readChunkAt(this.blobs, location);
    if (data !== null || location.pack === null) return data;
    location = await this.lookUp(digest);
    return readChunkAt(this.blobs, location);
  }

  private async lookUp(digest: Digest): Promise<ChunkLocation> {
    const found = await packRepo.chunkLocations(this.db, this.orgId, chunkPrefix(this.orgId), [digest]);
    // A chunk with no row at all is looked for where chunks were stored before packs.
    const location = found.get(digest) ?? { pack: null, key: chunkKey(chunkPrefix(this.orgId), digest), length: 0 };
    this.locations.set(digest, location);
    return location;
  }
}
