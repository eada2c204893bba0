// Where a volume's objects live in the blob store, one namespace per organization, and the
// check of a stored blob against its address. Blobs are raw bytes (not compressed): a
// client PUTs them as they are and Warren reads them back to verify BLAKE3 and size.
import { BlobError, type BlobStore } from "../../drivers/blobs/interface.js";
import { type Digest, digestOf, MAX_CHUNK_BYTES } from "./manifest.js";

const hexOf = (digest: string) => digest.slice("blake3:".length);

export const volumeKeys = {
  blob: (orgId: string, digest: string) => `volumes/${orgId}/blobs/${hexOf(digest)}`,
  pushManifest: (orgId: string, pushId: string) => `volumes/${orgId}/pushes/${pushId}/manifest.json`,
  versionManifest: (orgId: string, version: string) => `volumes/${orgId}/manifests/${hexOf(version)}.json`,
};

/** A blob's key: its organization and the hex of its BLAKE3. */
export const BLOB_KEY = /^volumes\/([A-Za-z0-9_-]+)\/blobs\/([0-9a-f]{64})$/;

export type BlobCheck = { kind: "verified"; size: number } | { kind: "missing" } | { kind: "corrupt"; size: number };

/**
 * Reads the stored blob back and checks its BLAKE3. A blob whose bytes do not match its
 * address is deleted, so its upload URL (or a new one) can store the right bytes.
 */
export async function checkStoredBlob(store: BlobStore, orgId: string, digest: Digest): Promise<BlobCheck> {
  const key = volumeKeys.blob(orgId, digest);
  let bytes: Buffer | null;
  try {
    bytes = await store.get(key, { maxBytes: MAX_CHUNK_BYTES });
  } catch (error) {
    // Larger than any blob a manifest may name: not what its address says.
    if (!(error instanceof BlobError) || error.code !== "too_large") throw error;
    await store.delete(key);
    return { kind: "corrupt", size: MAX_CHUNK_BYTES + 1 };
  }
  if (!bytes) return { kind: "missing" };
  if (digestOf(bytes) === digest) return { kind: "verified", size: bytes.length };
  await store.delete(key);
  return { kind: "corrupt", size: bytes.length };
}

/** Runs `fn` over `items` with at most `limit` at a time, in order of the results. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i] as T);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
