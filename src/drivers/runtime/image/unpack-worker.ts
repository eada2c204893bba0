// The layer unpack thread (unpack-thread.ts is the server's side): gunzip, the tar reader,
// the diff ID's sha256 and every fs call of an unpack run here, off the server's event loop.
// One thread serves every unpack of the process; jobs interleave on its event loop. The
// server sends a job's compressed bytes as chunks, and each chunk is acknowledged when the
// unpacker takes it, so the server never has more than a small window of a layer in flight.
import { parentPort } from "node:worker_threads";
import { ImageError } from "./errors.js";
import { unpackLayer } from "./unpack.js";
import type { ToServer, ToUnpacker } from "./unpack-thread.js";

interface Job {
  chunks: Uint8Array[];
  ended: boolean;
  aborted: string | null;
  wake: (() => void) | null;
}

const port = parentPort;
if (!port) throw new Error("unpack-worker.ts runs as a worker thread");
const jobs = new Map<number, Job>();
const send = (message: ToServer) => port.postMessage(message);

async function* chunksOf(id: number, job: Job): AsyncGenerator<Uint8Array> {
  for (;;) {
    if (job.aborted !== null) throw new Error(job.aborted);
    const chunk = job.chunks.shift();
    if (chunk) {
      send({ type: "ack", id });
      yield chunk;
      continue;
    }
    if (job.ended) return;
    await new Promise<void>((resolve) => {
      job.wake = resolve;
    });
    job.wake = null;
  }
}

async function run(id: number, targetDir: string, expectedDiffId: string | undefined): Promise<void> {
  const job: Job = { chunks: [], ended: false, aborted: null, wake: null };
  jobs.set(id, job);
  try {
    const result = await unpackLayer(chunksOf(id, job), targetDir, expectedDiffId ? { expectedDiffId } : {});
    send({ type: "done", id, result });
  } catch (error) {
    const failure =
      error instanceof ImageError
        ? { image: true, code: error.code, message: error.message }
        : {
            image: false,
            code: (error as NodeJS.ErrnoException).code ?? null,
            message: error instanceof Error ? error.message : String(error),
          };
    send({ type: "failed", id, ...failure });
  } finally {
    jobs.delete(id);
  }
}

port.on("message", (message: ToUnpacker) => {
  if (message.type === "start") {
    void run(message.id, message.targetDir, message.expectedDiffId);
    return;
  }
  const job = jobs.get(message.id);
  if (!job) return;
  if (message.type === "chunk") job.chunks.push(message.bytes);
  else if (message.type === "end") job.ended = true;
  else job.aborted = message.reason;
  job.wake?.();
});
