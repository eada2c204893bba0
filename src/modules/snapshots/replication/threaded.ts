// Replication in a worker thread (worker.ts): the CPU of a replication (reading, chunking,
// BLAKE3, zstd, sealing packs) runs there, on the second core, while this thread (the
// server's event loop) answers which chunks are stored and stores and records each pack,
// through the same `has` and `writePack` a PackingChunkStore takes. One worker serves every
// replication of the process, started on first use and not keeping the process alive.
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { projectFile } from "../../../lib/paths.js";
import { listExtents } from "./extents.js";
import type { PackingOptions } from "./packing.js";
import type { ImageManifest, ReplicationStats } from "./types.js";
import type { FromWorker, ToWorker, WorkerImage } from "./worker-protocol.js";

export interface ThreadedJob {
  images: WorkerImage[];
  store: Pick<PackingOptions, "prefix" | "has" | "writePack" | "targetBytes" | "maxWriting">;
  concurrency?: number;
  signal?: AbortSignal;
}

/**
 * Where the worker's module is. Under tsx (tests): a shim that registers tsx, then loads
 * worker.ts. Bundled: the bundle's second entry, written beside it
 * (`<bundle>.replication-worker.mjs`, scripts/server-bundle.ts); found from the running
 * bundle's own name, since the crash tests run bundles of other names side by side.
 */
function workerFile(): string {
  const self = fileURLToPath(import.meta.url);
  if (self.endsWith(".ts")) return projectFile("src", "modules", "snapshots", "replication", "worker-tsx.mjs");
  return self.replace(/\.mjs$/, ".replication-worker.mjs");
}

export class ReplicationWorker {
  private worker: Worker | null = null;
  private nextJob = 1;
  private readonly jobs = new Map<number, (message: FromWorker) => void>();

  /** Replicates `job.images` in the worker; the manifests returned name only chunks stored and recorded. */
  async replicate(job: ThreadedJob): Promise<{ manifest: ImageManifest; stats: ReplicationStats }[]> {
    job.signal?.throwIfAborted();
    const worker = this.start();
    const id = this.nextJob++;
    const send = (message: ToWorker) => worker.postMessage(message);
    const onAbort = () => send({ type: "abort", job: id });
    job.signal?.addEventListener("abort", onAbort, { once: true });
    worker.ref();
    try {
      return await new Promise((resolve, reject) => {
        this.jobs.set(id, (message) => {
          switch (message.type) {
            case "has":
              // Asked in one tick: the index answers them in one statement.
              Promise.all(message.digests.map((digest) => job.store.has(digest))).then(
                (stored) => send({ type: "has", job: id, request: message.request, stored }),
                (error: unknown) => send({ type: "has", job: id, request: message.request, error: errorText(error) }),
              );
              return;
            case "extents":
              listExtents(message.path).then(
                (extents) => send({ type: "extents", job: id, request: message.request, extents }),
                (error: unknown) =>
                  send({ type: "extents", job: id, request: message.request, error: errorText(error) }),
              );
              return;
            case "pack": {
              const { key, parts, size, entries } = message;
              const buffers = parts.map((part) => Buffer.from(part.buffer, part.byteOffset, part.byteLength));
              job.store.writePack({ key, parts: buffers, size, entries }).then(
                () => send({ type: "written", job: id, request: message.request }),
                (error: unknown) =>
                  send({ type: "written", job: id, request: message.request, error: errorText(error) }),
              );
              return;
            }
            case "done":
              resolve(message.images);
              return;
            case "failed":
              if (message.name === "AbortError" && job.signal?.aborted) reject(job.signal.reason);
              else reject(Object.assign(new Error(message.message), { name: message.name }));
              return;
          }
        });
        send({
          type: "replicate",
          job: id,
          images: job.images,
          prefix: job.store.prefix,
          ...(job.concurrency !== undefined ? { concurrency: job.concurrency } : {}),
          ...(job.store.targetBytes !== undefined ? { targetBytes: job.store.targetBytes } : {}),
          ...(job.store.maxWriting !== undefined ? { maxWriting: job.store.maxWriting } : {}),
        });
      });
    } finally {
      this.jobs.delete(id);
      job.signal?.removeEventListener("abort", onAbort);
      if (this.jobs.size === 0) this.worker?.unref();
    }
  }

  /** Stops the worker (its jobs fail). */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    await worker?.terminate();
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(workerFile());
    worker.on("message", (message: FromWorker) => this.jobs.get(message.job)?.(message));
    const fail = (error: Error) => {
      if (this.worker === worker) this.worker = null;
      for (const [job, handle] of this.jobs)
        handle({ type: "failed", job, name: "Error", message: `the replication worker stopped: ${error.message}` });
    };
    worker.on("error", fail);
    worker.on("exit", (code) => fail(new Error(`exit code ${code}`)));
    worker.unref();
    this.worker = worker;
    return worker;
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
