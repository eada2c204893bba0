// A snapshot in the blob store: one manifest naming, per image file (root layer and
// workspace), the chunks that rebuild it, by digest only. Chunks are the organization's,
// stored once, in packs (replication/pack.ts); the store's index of them (blob_chunks,
// packed-chunks.ts) tells a replication which chunks it must still upload, a rebuild where
// each lies, and the collector what it may delete.
import { BlobError, type BlobStore } from "../../drivers/blobs/interface.js";
import { RuntimeError, type SnapshotImages } from "../../drivers/runtime/interface.js";
import type { Db } from "../../store/db.js";
import { IndexedChunkSource } from "./packed-chunks.js";
import { validateManifest } from "./replication/manifest.js";
import { rebuildImage } from "./replication/rebuild.js";
import type { ReplicationWorker, ThreadedJob } from "./replication/threaded.js";
import { ChunkError, type Digest, type ImageManifest, type ReplicationStats } from "./replication/types.js";

export const IMAGE_NAMES = ["root", "workspace"] as const;
export type ImageName = (typeof IMAGE_NAMES)[number];
const MAX_MANIFEST_BYTES = 64 * 1024 * 1024;

export interface SnapshotManifest {
  version: 1;
  snapshot_id: string;
  images: Record<ImageName, ImageManifest>;
}

export { chunkPrefix } from "./packed-chunks.js";

/** Reads and checks a snapshot's manifest; a missing or malformed one is snapshot_not_restorable. */
export async function readSnapshotManifest(
  blobs: BlobStore,
  key: string,
  snapshotId: string,
): Promise<SnapshotManifest> {
  const data = await blobs.get(key, { maxBytes: MAX_MANIFEST_BYTES }).catch((error: unknown) => {
    if (error instanceof BlobError && error.code === "too_large")
      throw new RuntimeError("snapshot_not_restorable", "the snapshot's manifest is malformed: too large");
    throw error;
  });
  if (!data)
    throw new RuntimeError("snapshot_not_restorable", "the snapshot's manifest is missing from the blob store");
  try {
    if (data.length > MAX_MANIFEST_BYTES) throw new Error("too large");
    const parsed = JSON.parse(data.toString("utf8")) as { version?: unknown; snapshot_id?: unknown; images?: unknown };
    if (parsed?.version !== 1 || parsed.snapshot_id !== snapshotId) throw new Error("not this snapshot's");
    const images = (parsed.images ?? {}) as Record<string, unknown>;
    return {
      version: 1,
      snapshot_id: snapshotId,
      images: { root: validateManifest(images.root), workspace: validateManifest(images.workspace) },
    };
  } catch (error) {
    throw new RuntimeError(
      "snapshot_not_restorable",
      `the snapshot's manifest is malformed: ${(error as Error).message}`,
    );
  }
}

/** Rebuilds both image files at `staging`, verifying every chunk; a bad chunk is snapshot_not_restorable. */
export async function rebuildSnapshot(
  deps: { db: Db; blobs: BlobStore },
  orgId: string,
  manifest: SnapshotManifest,
  staging: SnapshotImages,
): Promise<void> {
  const chunks = new IndexedChunkSource(deps.db, deps.blobs, orgId);
  try {
    await chunks.preload(manifestDigests(manifest) as Digest[]);
    for (const name of IMAGE_NAMES) {
      await rebuildImage({ manifest: manifest.images[name], path: staging[name], chunks });
    }
  } catch (error) {
    if (error instanceof ChunkError) {
      throw new RuntimeError(
        "snapshot_not_restorable",
        `chunk ${error.digest} of the snapshot is ${error.reason} in the blob store`,
        { cause: error },
      );
    }
    if (error instanceof RuntimeError) throw error;
    throw new RuntimeError(
      "snapshot_not_restorable",
      `the snapshot could not be rebuilt: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
}

export interface ReplicatedSnapshot {
  manifest: SnapshotManifest;
  stats: ReplicationStats;
}

/**
 * Replicates both images of a sealed local snapshot, the reading, chunking, hashing,
 * compressing and packing in the worker thread (threaded.ts); `store` answers has() and
 * stores and records each pack here. With a base (an earlier replicated snapshot whose
 * local copy shares extents with this one) only what changed is read. Both images' new
 * chunks share packs, all stored and recorded before this resolves.
 */
export async function replicateSnapshotInWorker(input: {
  snapshotId: string;
  images: SnapshotImages;
  base: { images: SnapshotImages; manifest: SnapshotManifest } | null;
  worker: ReplicationWorker;
  store: ThreadedJob["store"];
  signal?: AbortSignal;
}): Promise<ReplicatedSnapshot> {
  const results = await input.worker.replicate({
    images: IMAGE_NAMES.map((name) => imageInput(input, name)),
    store: input.store,
    ...(input.signal ? { signal: input.signal } : {}),
  });
  if (results.length !== IMAGE_NAMES.length) throw new Error("the replication worker answered for other images");
  // Checked like a stored one: the worker's answer is not trusted blindly.
  for (const result of results) validateManifest(result.manifest);
  return replicated(input.snapshotId, results);
}

function imageInput(
  input: { images: SnapshotImages; base: { images: SnapshotImages; manifest: SnapshotManifest } | null },
  name: ImageName,
): { path: string; base?: { path: string; manifest: ImageManifest } } {
  return {
    path: input.images[name],
    ...(input.base ? { base: { path: input.base.images[name], manifest: input.base.manifest.images[name] } } : {}),
  };
}

function replicated(
  snapshotId: string,
  results: { manifest: ImageManifest; stats: ReplicationStats }[],
): ReplicatedSnapshot {
  const stats: ReplicationStats = { chunks: 0, newChunks: 0, bytes: 0, uploadedBytes: 0 };
  const images = {} as Record<ImageName, ImageManifest>;
  IMAGE_NAMES.forEach((name, i) => {
    const result = results[i] as (typeof results)[0];
    images[name] = result.manifest;
    stats.chunks += result.stats.chunks;
    stats.newChunks += result.stats.newChunks;
    stats.bytes += result.stats.bytes;
    stats.uploadedBytes += result.stats.uploadedBytes;
  });
  return { manifest: { version: 1, snapshot_id: snapshotId, images }, stats };
}

/** Every chunk digest a manifest names, once. */
export function manifestDigests(manifest: SnapshotManifest): string[] {
  const digests = new Set<string>();
  for (const name of IMAGE_NAMES) for (const chunk of manifest.images[name].chunks) digests.add(chunk.digest);
  return [...digests];
}
