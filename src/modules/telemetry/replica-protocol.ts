// Messages between the server's thread (replica.ts) and the telemetry replica's (replica-worker.ts).
import type { TableChanges } from "./replica-capture.js";
import type { Layer2Limits, ReaderResult } from "./repo.js";

export type ReplicaRequest =
  | { id: number; type: "open"; files: ArrayBuffer; dataDir: string | null }
  | { id: number; type: "apply"; batch: TableChanges[] }
  | { id: number; type: "query"; orgId: string; sql: string; params: unknown[]; limits: Layer2Limits }
  | { id: number; type: "close" };

export type ReplicaReply =
  | { id: number; ok: true; value: unknown }
  | {
      id: number;
      ok: false;
      error: { name: string; message: string; code?: string; estimatedCost?: number; maxCost?: number };
    };

export type { ReaderResult };
