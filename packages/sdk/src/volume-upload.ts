// Uploads of a push's blobs: one chunk PUT to its presigned URL, and the uploads a push
// starts while its files are still being hashed (asked for in batches as files are hashed).
import { open } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import { pipeline } from "node:stream/promises";

export class PushError extends Error {
  override name = "PushError";
}

/** A chunk of a file: where to read it from, and its address. */
export interface Chunk {
  digest: string;
  size: number;
  file: string;
  offset: number;
}

/** Bytes read from a file at a time while uploading a chunk. */
const UPLOAD_READ_BYTES = 1_048_576;
/** A batch of hashed blobs is asked for once it holds this many bytes or blobs. */
const ASK_BATCH_BYTES = 64 * 1_048_576;
const ASK_BATCH_BLOBS = 1000;

/**
 * PUTs one chunk to its upload URL, streamed from its file with Node's http client: no 16
 * MiB buffer per chunk, and none of fetch's copy of a buffer body (a third of the helper's
 * CPU at 1 GiB). A file changed since it was hashed sends other bytes, which the store
 * refuses (Warren hashes every upload against its address).
 */
export async function putChunk(url: string, chunk: Chunk, signal: AbortSignal | undefined): Promise<void> {
  const target = new URL(url);
  const client = target.protocol === "https:" ? https : http;
  const handle = await open(chunk.file, "r");
  const body = handle.createReadStream({
    start: chunk.offset,
    end: chunk.offset + chunk.size - 1,
    highWaterMark: UPLOAD_READ_BYTES,
  });
  const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const request = client.request(target, {
      method: "PUT",
      headers: { "content-type": "application/octet-stream", "content-length": chunk.size },
      ...(signal ? { signal } : {}),
    });
    request.once("response", (response) => {
      const parts: Buffer[] = [];
      response.on("data", (part: Buffer) => parts.push(part));
      response.once("end", () =>
        resolve({ status: response.statusCode ?? 0, text: Buffer.concat(parts).toString("utf8").slice(0, 2000) }),
      );
      response.once("error", reject);
    });
    request.once("error", reject);
    let sent = 0;
    body.on("data", (part) => {
      sent += part.length;
    });
    body.once("end", () => {
      if (sent !== chunk.size) request.destroy(new PushError(`${chunk.file} changed while it was pushed`));
    });
    pipeline(body, request).catch(reject);
  });
  try {
    const { status, text } = await answer;
    if (status >= 300) throw new PushError(`upload refused: ${status} ${text}`);
  } finally {
    body.destroy();
    await handle.close().catch(() => undefined);
  }
}

type Ask = (
  blobs: { digest: string; size_bytes: string }[],
) => Promise<{ status: number; json: Record<string, unknown> }>;

/**
 * Uploads started during the hashing: hashed chunks are asked for in batches (one
 * RequestVolumeBlobUploads per ~64 MiB or 1000 blobs, one at a time), and the missing ones
 * PUT at most `concurrency` at a time. The first failure stops further work and is thrown
 * by the next add() and by finish().
 */
export class EarlyUploads {
  private readonly asked = new Set<string>();
  private batch: Chunk[] = [];
  private batchBytes = 0;
  private asking: Promise<void> = Promise.resolve();
  private readonly running = new Set<Promise<void>>();
  private readonly waiting: (() => void)[] = [];
  private active = 0;
  private failure: unknown = null;
  private queuedBytes = 0;
  private doneBytes = 0;

  constructor(
    private readonly options: {
      concurrency: number;
      ask: Ask;
      put: (url: string, chunk: Chunk) => Promise<void>;
      uploaded: (chunk: Chunk, queuedBytes: number, doneBytes: number) => void;
    },
  ) {}

  add(chunks: Chunk[]): void {
    if (this.failure) throw this.failure;
    for (const chunk of chunks) {
      if (this.asked.has(chunk.digest)) continue;
      this.asked.add(chunk.digest);
      this.batch.push(chunk);
      this.batchBytes += chunk.size;
    }
    if (this.batchBytes >= ASK_BATCH_BYTES || this.batch.length >= ASK_BATCH_BLOBS) this.flush();
  }

  async finish(): Promise<void> {
    this.flush();
    await this.asking;
    while (this.running.size > 0) await Promise.all(this.running);
    if (this.failure) throw this.failure;
  }

  private flush(): void {
    if (this.batch.length === 0) return;
    const batch = this.batch;
    this.batch = [];
    this.batchBytes = 0;
    this.asking = this.asking.then(() => (this.failure ? undefined : this.askFor(batch))).catch(this.fail);
  }

  private async askFor(batch: Chunk[]): Promise<void> {
    const res = await this.options.ask(
      batch.map((chunk) => ({ digest: chunk.digest, size_bytes: String(chunk.size) })),
    );
    if (res.status !== 200) throw new PushError(`RequestVolumeBlobUploads: ${res.status} ${JSON.stringify(res.json)}`);
    const byDigest = new Map(batch.map((chunk) => [chunk.digest, chunk]));
    for (const upload of res.json.uploads as { digest: string; present: boolean; upload_url: string }[]) {
      const chunk = byDigest.get(upload.digest);
      if (upload.present || !chunk) continue;
      this.queuedBytes += chunk.size;
      const job: Promise<void> = this.upload(upload.upload_url, chunk)
        .catch(this.fail)
        .finally(() => this.running.delete(job));
      this.running.add(job);
    }
  }

  private async upload(url: string, chunk: Chunk): Promise<void> {
    if (this.active >= this.options.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.active++;
    try {
      if (this.failure) return;
      await this.options.put(url, chunk);
      this.doneBytes += chunk.size;
      this.options.uploaded(chunk, this.queuedBytes, this.doneBytes);
    } finally {
      this.active--;
      this.waiting.shift()?.();
    }
  }

  private readonly fail = (error: unknown): void => {
    this.failure ??= error;
  };
}
