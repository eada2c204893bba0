// The messages between a replication worker thread (worker.ts: reading, chunking, BLAKE3,
// zstd, packs) and the thread that asked for the replication (threaded.ts: which chunks are
// stored, storing and recording packs). Plain data only (structured clone).
import type { Extent } from "./extents.js";
import type { PackEntry } from "./pack.js";
import type { Digest, ImageManifest, ReplicationStats } from "./types.js";

export interface WorkerImage {
  path: string;
  base?: { path: string; manifest: ImageManifest };
}

export type ToWorker =
  | {
      type: "replicate";
      job: number;
      images: WorkerImage[];
      prefix: string;
      concurrency?: number;
      targetBytes?: number;
      maxWriting?: number;
    }
  | { type: "has"; job: number; request: number; stored?: boolean[]; error?: string }
  | { type: "written"; job: number; request: number; error?: string }
  | { type: "extents"; job: number; request: number; extents?: Extent[]; error?: string }
  | { type: "abort"; job: number };

export type FromWorker =
  | { type: "has"; job: number; request: number; digests: Digest[] }
  | { type: "extents"; job: number; request: number; path: string }
  | {
      type: "pack";
      job: number;
      request: number;
      key: string;
      parts: Uint8Array[];
      size: number;
      entries: PackEntry[];
    }
  | { type: "done"; job: number; images: { manifest: ImageManifest; stats: ReplicationStats }[] }
  | { type: "failed"; job: number; name: string; message: string };
