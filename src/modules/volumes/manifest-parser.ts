// Parsing and checking an uploaded manifest off the event loop (docs/volumes.md): a 64 MiB
// manifest takes seconds of CPU and hundreds of MB of heap to parse, check and canonicalize,
// which on the server's thread would stall every other request. Each parse runs in a worker
// thread of its own (manifest-worker.ts), at most `perServer` at once and `perOrg` at once for
// one organization; the others wait their turn (FIFO), and past `maxWaiting` waiting a publish
// answers 503 `unavailable` with Retry-After.
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { AppError, type ErrorCode } from "../../lib/errors.js";
import { projectFile } from "../../lib/paths.js";
import type { Digest } from "./manifest.js";

export interface ParseRequest {
  bytes: Uint8Array;
  maxFiles: number;
  /** The push's parent version digest, part of the canonical bytes. */
  parent: string;
}

/** What a publish needs of a checked manifest. */
export interface ParsedManifest {
  fileCount: number;
  sizeBytes: number;
  blobs: Map<Digest, number>;
  contentDigest: Digest;
  /** The canonical bytes stored as the version's manifest; their BLAKE3 is the version digest. */
  canonical: Uint8Array;
}

export type ParseReply = ({ ok: true } & ParsedManifest) | { ok: false; code: ErrorCode | "internal"; message: string };

export interface ParserLimits {
  perServer: number;
  perOrg: number;
  maxWaiting: number;
}

export const PARSER_LIMITS: ParserLimits = { perServer: 2, perOrg: 1, maxWaiting: 16 };
const RETRY_AFTER_SECONDS = 5;

/**
 * The worker's module. Under tsx (tests): a shim that registers tsx, then loads the worker.
 * Bundled: the bundle's third entry, beside it (`<bundle>.manifest-worker.mjs`,
 * scripts/server-bundle.ts).
 */
function workerFile(): string {
  const self = fileURLToPath(import.meta.url);
  if (self.endsWith(".ts")) return projectFile("src", "modules", "volumes", "manifest-worker-tsx.mjs");
  return self.replace(/\.mjs$/, ".manifest-worker.mjs");
}

interface Waiter {
  orgId: string;
  start: () => void;
}

export class ManifestParser {
  private running = 0;
  private readonly runningByOrg = new Map<string, number>();
  private readonly waiting: Waiter[] = [];

  constructor(private readonly limits: ParserLimits = PARSER_LIMITS) {}

  async parse(orgId: string, request: ParseRequest): Promise<ParsedManifest> {
    await this.acquire(orgId);
    try {
      return await this.runWorker(request);
    } finally {
      this.release(orgId);
    }
  }

  private canStart(orgId: string): boolean {
    return this.running < this.limits.perServer && (this.runningByOrg.get(orgId) ?? 0) < this.limits.perOrg;
  }

  private take(orgId: string): void {
    this.running++;
    this.runningByOrg.set(orgId, (this.runningByOrg.get(orgId) ?? 0) + 1);
  }

  private acquire(orgId: string): Promise<void> {
    if (this.canStart(orgId) && !this.waiting.some((w) => w.orgId === orgId)) {
      this.take(orgId);
      return Promise.resolve();
    }
    if (this.waiting.length >= this.limits.maxWaiting) {
      return Promise.reject(
        new AppError("unavailable", "too many volume manifests are being checked on this server; retry shortly", {
          retryAfterSeconds: RETRY_AFTER_SECONDS,
        }),
      );
    }
    return new Promise((resolve) => this.waiting.push({ orgId, start: resolve }));
  }

  private release(orgId: string): void {
    this.running--;
    const left = (this.runningByOrg.get(orgId) ?? 1) - 1;
    if (left > 0) this.runningByOrg.set(orgId, left);
    else this.runningByOrg.delete(orgId);
    // The first waiter that may start now, in arrival order.
    for (let i = 0; i < this.waiting.length; i++) {
      const waiter = this.waiting[i];
      if (!waiter || !this.canStart(waiter.orgId)) continue;
      this.waiting.splice(i, 1);
      this.take(waiter.orgId);
      waiter.start();
      i--;
    }
  }

  private runWorker(request: ParseRequest): Promise<ParsedManifest> {
    return new Promise((resolve, reject) => {
      let settled = false;
      const worker = new Worker(workerFile(), { workerData: request });
      const done = (fn: () => void) => {
        if (settled) return;
        settled = true;
        fn();
        void worker.terminate();
      };
      worker.once("message", (reply: ParseReply) =>
        done(() => {
          if (reply.ok) {
            const { ok: _, ...parsed } = reply;
            resolve(parsed);
          } else {
            reject(
              new AppError(reply.code, reply.code === "internal" ? "the manifest could not be checked" : reply.message),
            );
          }
        }),
      );
      worker.once("error", (error) =>
        done(() => reject(new AppError("internal", "the manifest could not be checked", { cause: error }))),
      );
      worker.once("exit", (code) =>
        done(() =>
          reject(new AppError("internal", "the manifest could not be checked", { cause: new Error(`exit ${code}`) })),
        ),
      );
    });
  }
}
