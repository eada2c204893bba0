// What the host's volume cache (cache.ts) may hold per organization, and the pure decisions
// about it: what materializing a version costs, and which of the organization's unused
// entries (least recently used first) make room for it. An organization's entries are only
// ever evicted for its own mounts, so one organization cannot push another's out.
import path from "node:path";
import type { ManifestFile } from "./manifest.js";

/**
 * What cached versions cost the host. `bytes`: file content written to the cache (a hard
 * link to a blob of the fs store writes none: those bytes are the blob store's, counted in
 * the volume's quota). `inodes`: every file and directory of an entry, a hard link too (a
 * directory entry of its own), so the count bounds the inodes and directory blocks it takes.
 */
export interface CacheCost {
  bytes: number;
  inodes: number;
}

export const NO_COST: CacheCost = { bytes: 0, inodes: 0 };

export const addCost = (a: CacheCost, b: CacheCost): CacheCost => ({
  bytes: a.bytes + b.bytes,
  inodes: a.inodes + b.inodes,
});

export const fits = (cost: CacheCost, budget: CacheCost): boolean =>
  cost.bytes <= budget.bytes && cost.inodes <= budget.inodes;

/**
 * What materializing `files` costs: each file, each directory and the entry's own root are an
 * inode; the bytes of every file that is copied. With `linksOneChunkFiles` (the fs blob store
 * on the cache's filesystem) a one-chunk file is expected to be a hard link; one that must be
 * copied after all (its blob has the other mode) is charged when it is (cache.ts).
 */
export function materializationCost(files: readonly ManifestFile[], linksOneChunkFiles: boolean): CacheCost {
  const dirs = new Set<string>();
  let bytes = 0;
  for (const file of files) {
    for (let at = path.posix.dirname(file.path); at !== "."; at = path.posix.dirname(at)) dirs.add(at);
    if (!(linksOneChunkFiles && file.chunks.length === 1)) bytes += file.size;
  }
  return { bytes, inodes: files.length + dirs.size + 1 };
}

export interface EvictionCandidate {
  key: string;
  cost: CacheCost;
  /** When it was last asked for (a counter: larger is more recent). */
  lastUse: number;
}

/**
 * The entries to remove, least recently used first, so that `need` fits `budget` beside
 * `used` (what the organization's entries and materializations under way hold now); null
 * when even removing every candidate would not make room. Candidates are the organization's
 * entries no sandbox that has not ended pins and nothing is asking for.
 */
export function planEviction(
  used: CacheCost,
  need: CacheCost,
  budget: CacheCost,
  candidates: readonly EvictionCandidate[],
): string[] | null {
  let after = addCost(used, need);
  const evict: string[] = [];
  for (const candidate of [...candidates].sort((a, b) => a.lastUse - b.lastUse || a.key.localeCompare(b.key))) {
    if (fits(after, budget)) break;
    evict.push(candidate.key);
    after = { bytes: after.bytes - candidate.cost.bytes, inodes: after.inodes - candidate.cost.inodes };
  }
  return fits(after, budget) ? evict : null;
}

/** A byte count for a tenant's message: "3.0 GiB", "512 KiB", "17 bytes". */
export function formatBytes(bytes: number): string {
  const units = ["KiB", "MiB", "GiB", "TiB"];
  if (bytes < 1024) return `${bytes} bytes`;
  let value = bytes;
  let unit = "bytes";
  for (const next of units) {
    if (value < 1024) break;
    value /= 1024;
    unit = next;
  }
  return `${value.toFixed(1)} ${unit}`;
}

/** The marker beside an entry: the boot it was written in, then its cost (`<bytes> <inodes>`). */
export function formatMarker(boot: string, cost: CacheCost): string {
  return `${boot}\n${cost.bytes} ${cost.inodes}\n`;
}

/** A marker's boot and cost; the cost is null in a marker written before costs were recorded. */
export function parseMarker(text: string): { boot: string; cost: CacheCost | null } {
  const [boot = "", costLine = ""] = text.split("\n");
  const match = costLine.match(/^(\d{1,16}) (\d{1,16})$/);
  return { boot: boot.trim(), cost: match ? { bytes: Number(match[1]), inodes: Number(match[2]) } : null };
}
