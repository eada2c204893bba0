// The replication worker thread: runs replicateImage for each image of a job (reading,
// chunking, BLAKE3, zstd and sealing packs, all off the server's event loop) over a packing
// store whose has() and pack writes are asked of the parent thread (threaded.ts), which
// holds the database and the blob store. A pack's bytes are handed over, not copied where
// the runtime allows (transferred), and at most `maxWriting` packs are out at once.
import { parentPort } from "node:worker_threads";
import type { Extent } from "./extents.js";
import { IdleRelease } from "./idle-release.js";
import { MAX_STORED_CHUNK_BYTES, PACK_TARGET_BYTES, PackBuilder } from "./pack.js";
import { PackingChunkStore } from "./packing.js";
import { replicateImage, WindowPool } from "./replicate.js";
import type { Digest } from "./types.js";
import type { FromWorker, ToWorker } from "./worker-protocol.js";

const port = parentPort;
if (!port) throw new Error("worker.ts runs as a worker thread");

const pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
const aborts = new Map<number, AbortController>();
let nextRequest = 1;

function ask<T>(message: Extract<FromWorker, { request: number }>, transfer: ArrayBuffer[] = []): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    pending.set(message.request, { resolve: resolve as (value: unknown) => void, reject });
    try {
      (port as NonNullable<typeof port>).postMessage(message, transfer);
    } catch {
      // Memory the runtime cannot hand over (a buffer of a shared pool): copied instead.
      (port as NonNullable<typeof port>).postMessage(message);
    }
  });
}

/** The ArrayBuffers `parts` may be moved with: each whole and used by one part only. */
function transferable(parts: readonly Uint8Array[]): ArrayBuffer[] {
  const seen = new Set<ArrayBufferLike>();
  for (const part of parts) {
    if (seen.has(part.buffer) || part.byteOffset !== 0 || part.byteLength !== part.buffer.byteLength) return [];
    seen.add(part.buffer);
  }
  return [...seen].filter((buffer): buffer is ArrayBuffer => buffer instanceof ArrayBuffer);
}

/**
 * Memory kept from one job to the next: the pack buffers and the read windows. A fresh
 * buffer costs a page fault per 4 KiB the first time it is written (~1 ms per MiB here: ~70
 * ms for the four pack buffers a replication has in flight), a reused one nothing. At most
 * four pack buffers (~68 MiB) and four windows (~36 MiB), dropped once no job has run for a
 * minute (idle-release.ts).
 */
const packBuffers: SharedArrayBuffer[] = [];
const windows = new WindowPool();
const idle = new IdleRelease(60_000, () => {
  packBuffers.splice(0);
  windows.drain();
});

function takePackBuffer(bytes: number): SharedArrayBuffer {
  for (;;) {
    const buffer = packBuffers.pop();
    if (!buffer) return new SharedArrayBuffer(bytes);
    if (buffer.byteLength === bytes) return buffer;
  }
}

async function run(message: Extract<ToWorker, { type: "replicate" }>): Promise<void> {
  const { job } = message;
  const abort = new AbortController();
  aborts.set(job, abort);
  // has() of one tick asked in one message (one statement in the parent's index).
  let batch: { digest: Digest; resolve: (stored: boolean) => void; reject: (error: unknown) => void }[] = [];
  const flushBatch = async () => {
    const asked = batch;
    batch = [];
    const request = nextRequest++;
    try {
      const stored = await ask<boolean[]>({ type: "has", job, request, digests: asked.map((entry) => entry.digest) });
      for (const [i, entry] of asked.entries()) entry.resolve(stored[i] === true);
    } catch (error) {
      for (const entry of asked) entry.reject(error);
    }
  };
  // Each pack is built in a SharedArrayBuffer (its chunks copied in as they are appended),
  // which the server's thread writes from without a copy; reused once that pack is stored.
  // zstd's outputs are external memory that cannot be transferred: posted as they are, every
  // pack would be copied and allocated again on the server's thread.
  const packBytes = (message.targetBytes ?? PACK_TARGET_BYTES) + MAX_STORED_CHUNK_BYTES;
  const chunks = new PackingChunkStore({
    prefix: message.prefix,
    newBuilder: () => new PackBuilder(Buffer.from(takePackBuffer(packBytes))),
    ...(message.targetBytes !== undefined ? { targetBytes: message.targetBytes } : {}),
    ...(message.maxWriting !== undefined ? { maxWriting: message.maxWriting } : {}),
    has: (digest) =>
      new Promise<boolean>((resolve, reject) => {
        if (batch.length === 0) setImmediate(() => void flushBatch());
        batch.push({ digest, resolve, reject });
      }),
    writePack: async (pack) => {
      const request = nextRequest++;
      await ask<void>({ type: "pack", job, request, ...pack }, transferable(pack.parts));
      // Stored: the server's thread no longer reads it.
      const shared = pack.parts[0]?.buffer;
      if (shared instanceof SharedArrayBuffer && packBuffers.length < 4) packBuffers.push(shared);
    },
    get: async () => {
      throw new Error("a replication worker reads no chunks");
    },
  });
  idle.started();
  try {
    const images = [];
    for (const image of message.images)
      images.push(
        await replicateImage({
          path: image.path,
          ...(image.base ? { base: image.base } : {}),
          chunks,
          windows,
          // xfs_io runs through the server thread's spawner (no second one forked from here).
          listExtents: (path) => ask<Extent[]>({ type: "extents", job, request: nextRequest++, path }),
          deferFlush: true,
          signal: abort.signal,
          ...(message.concurrency !== undefined ? { concurrency: message.concurrency } : {}),
        }),
      );
    // The images' new chunks share packs; all stored and recorded before the job is done.
    await chunks.flush();
    port?.postMessage({ type: "done", job, images } satisfies FromWorker);
  } catch (error) {
    const { name, message: text } = error instanceof Error ? error : new Error(String(error));
    port?.postMessage({ type: "failed", job, name, message: text } satisfies FromWorker);
  } finally {
    aborts.delete(job);
    idle.ended();
  }
}

port.on("message", (message: ToWorker) => {
  switch (message.type) {
    case "replicate":
      void run(message);
      return;
    case "abort":
      aborts.get(message.job)?.abort();
      return;
    case "has":
    case "written":
    case "extents": {
      const waiter = pending.get(message.request);
      pending.delete(message.request);
      if (!waiter) return;
      if (message.error !== undefined) waiter.reject(new Error(message.error));
      else
        waiter.resolve(
          message.type === "written" ? undefined : message.type === "has" ? message.stored : message.extents,
        );
      return;
    }
  }
});
