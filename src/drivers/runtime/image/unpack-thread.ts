// Layer unpacks off the server's event loop: one long-lived worker thread (unpack-worker.ts),
// started by the first unpack and reused by every later one (jobs interleave in it), does the
// gunzip, the tar reader, the diff ID's hash and the fs calls. This side only moves the
// download to it: chunks gathered to CHUNK_BYTES, transferred (not copied), and at most
// WINDOW of them unacknowledged, so a slow disk holds back the download instead of filling
// memory. The thread is unref'd while idle and started again if it ever dies.
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { projectFile } from "../../../lib/paths.js";
import { ImageError, type ImageErrorCode } from "./errors.js";
import type { UnpackOptions, UnpackResult } from "./unpack.js";

export type ToUnpacker =
  | { type: "start"; id: number; targetDir: string; expectedDiffId?: string | undefined }
  | { type: "chunk"; id: number; bytes: Uint8Array }
  | { type: "end"; id: number }
  | { type: "abort"; id: number; reason: string };

export type ToServer =
  | { type: "ack"; id: number }
  | { type: "done"; id: number; result: UnpackResult }
  | { type: "failed"; id: number; image: boolean; code: string | null; message: string };

const CHUNK_BYTES = 256 * 1024;
const WINDOW = 8;

/**
 * The worker's module. Under tsx (tests): a shim that registers tsx, then loads the worker.
 * Bundled: the bundle's entry beside it (`<bundle>.unpack-worker.mjs`, scripts/server-bundle.ts).
 */
function workerFile(): string {
  const self = fileURLToPath(import.meta.url);
  if (self.endsWith(".ts")) return projectFile("src", "drivers", "runtime", "image", "unpack-worker-tsx.mjs");
  return self.replace(/\.mjs$/, ".unpack-worker.mjs");
}

interface Pending {
  onAck: () => void;
  settle: (outcome: { result: UnpackResult } | { error: Error }) => void;
}

function failure(message: Extract<ToServer, { type: "failed" }>): Error {
  if (message.image) return new ImageError(message.code as ImageErrorCode, message.message);
  return Object.assign(new Error(message.message), message.code ? { code: message.code } : {});
}

class UnpackThread {
  private worker: Worker | null = null;
  private readonly jobs = new Map<number, Pending>();
  private nextId = 1;

  private ensureWorker(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(workerFile());
    worker.on("message", (message: ToServer) => {
      const job = this.jobs.get(message.id);
      if (!job) return;
      if (message.type === "ack") job.onAck();
      else if (message.type === "done") job.settle({ result: message.result });
      else job.settle({ error: failure(message) });
    });
    const lost = (error: Error) => {
      if (this.worker !== worker) return;
      this.worker = null;
      for (const job of [...this.jobs.values()]) job.settle({ error });
    };
    worker.on("error", (error) => lost(new Error(`the unpack thread failed: ${error.message}`, { cause: error })));
    worker.on("exit", (code) => lost(new Error(`the unpack thread exited (${code})`)));
    this.worker = worker;
    return worker;
  }

  get threadId(): number | null {
    return this.worker?.threadId ?? null;
  }

  async unpack(
    source: AsyncIterable<Buffer | Uint8Array | string>,
    targetDir: string,
    options: UnpackOptions,
  ): Promise<UnpackResult> {
    const worker = this.ensureWorker();
    if (this.jobs.size === 0) worker.ref();
    const id = this.nextId++;
    let unacked = 0;
    let wakeSender: (() => void) | null = null;
    let outcome: { result: UnpackResult } | { error: Error } | null = null;
    const finished = new Promise<{ result: UnpackResult } | { error: Error }>((resolve) => {
      this.jobs.set(id, {
        onAck: () => {
          unacked--;
          wakeSender?.();
        },
        settle: (result) => {
          if (outcome) return;
          outcome = result;
          this.jobs.delete(id);
          if (this.jobs.size === 0) this.worker?.unref();
          wakeSender?.();
          resolve(result);
        },
      });
    });
    const post = (message: ToUnpacker, transfer: ArrayBuffer[] = []) => {
      if (!outcome) worker.postMessage(message, transfer);
    };
    post({ type: "start", id, targetDir, expectedDiffId: options.expectedDiffId });

    let gathered: Uint8Array[] = [];
    let gatheredBytes = 0;
    const flush = async () => {
      if (gatheredBytes === 0) return;
      const bytes = new Uint8Array(gatheredBytes);
      let at = 0;
      for (const piece of gathered) {
        bytes.set(piece, at);
        at += piece.length;
      }
      gathered = [];
      gatheredBytes = 0;
      while (unacked >= WINDOW && !outcome) {
        await new Promise<void>((resolve) => {
          wakeSender = resolve;
        });
        wakeSender = null;
      }
      unacked++;
      post({ type: "chunk", id, bytes }, [bytes.buffer]);
    };
    try {
      for await (const chunk of source) {
        if (outcome) break;
        const piece = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
        gathered.push(piece);
        gatheredBytes += piece.length;
        if (gatheredBytes >= CHUNK_BYTES) await flush();
      }
      await flush();
      post({ type: "end", id });
    } catch (error) {
      // The download failed (or its digest did not match): stop the unpack, and answer only
      // once the thread has stopped writing into targetDir.
      post({ type: "abort", id, reason: (error as Error).message ?? String(error) });
      await finished;
      throw error;
    }
    const settled = await finished;
    if ("error" in settled) throw settled.error;
    return settled.result;
  }
}

let thread: UnpackThread | null = null;

/**
 * unpackLayer (unpack.ts) in the process's unpack thread: the same result and errors
 * (ImageError with its code; fs errors with their errno code), none of its work on this thread.
 */
export function unpackLayerInThread(
  source: AsyncIterable<Buffer | Uint8Array | string>,
  targetDir: string,
  options: UnpackOptions = {},
): Promise<UnpackResult> {
  thread ??= new UnpackThread();
  return thread.unpack(source, targetDir, options);
}

/** The unpack thread's id, null before the first unpack (tests: one thread serves them all). */
export function unpackThreadId(): number | null {
  return thread?.threadId ?? null;
}
