// `sandbox.files`: the file API (docs/api-decisions.md "Files"): uploads and downloads streamed
// (never held whole here, progress reported as bytes move), stat, list, mkdir, remove, rename
// and watch (an async iterator of the server-sent events). read/readText/write/list keep the
// names of the exec-based methods they replace.
import { errorFromResponse } from "./errors.js";
import { parseSse } from "./tail.js";
import type { CallOptions, Transport } from "./transport.js";
import type { Ok } from "./types.js";

export type FileInfo = Ok<"StatSandboxFile">;

export interface FileEntry {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** The full record (mode, times, owner, a symlink's target). */
  info: FileInfo;
}

export interface TransferProgress {
  /** Bytes moved so far. */
  bytes: number;
  /** The whole size when known (a download of a file; an upload of a buffer). */
  total: number | null;
}

export type UploadSource = string | Uint8Array | AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>;

export interface UploadOptions extends CallOptions {
  /** Octal permission bits (default 644 for a file). */
  mode?: string | number;
  onProgress?: (progress: TransferProgress) => void;
}

export interface Download {
  kind: "file" | "directory";
  /** A file's size; null for a directory (a tar stream). */
  size: number | null;
  /** The bytes (a directory's as tar); read it once. */
  stream: AsyncIterable<Uint8Array>;
}

export type FileEvent =
  | { type: "ready"; path: string; entries: number }
  | { type: "created" | "modified" | "deleted"; entry: FileInfo };

export class SandboxFiles {
  constructor(
    private readonly transport: Transport,
    private readonly sandboxId: string,
  ) {}

  private get base(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/files`;
  }

  /** Writes one file (parents created); `data` is streamed as it is read. */
  async upload(filePath: string, data: UploadSource, options: UploadOptions = {}): Promise<FileInfo> {
    const mode =
      options.mode === undefined
        ? undefined
        : typeof options.mode === "number"
          ? options.mode.toString(8)
          : options.mode;
    return this.streamUp("PUT", this.base, { path: filePath, mode }, data, options);
  }

  /** Extracts a tar stream under directory `dirPath` (created with its parents); modes kept. */
  async uploadTar(dirPath: string, tar: UploadSource, options: UploadOptions = {}): Promise<FileInfo> {
    return this.streamUp("POST", `${this.base}:upload`, { path: dirPath }, tar, options);
  }

  /** A regular file's bytes, or a directory as a tar stream. */
  async download(
    filePath: string,
    options: CallOptions & { onProgress?: (progress: TransferProgress) => void } = {},
  ): Promise<Download> {
    const response = await this.transport.send("GET", this.base, { query: { path: filePath }, signal: options.signal });
    if (!response.ok) throw await this.failure(response);
    const kind = response.headers.get("x-warren-file-type") === "directory" ? "directory" : "file";
    const length = response.headers.get("content-length");
    const size = kind === "file" && length !== null ? Number(length) : null;
    const body = response.body;
    if (!body) throw new Error("the download has no body");
    const onProgress = options.onProgress;
    async function* counted(): AsyncGenerator<Uint8Array> {
      let bytes = 0;
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        bytes += chunk.length;
        onProgress?.({ bytes, total: size });
        yield chunk;
      }
      if (size !== null && bytes !== size) throw new Error(`the download of ${filePath} was cut short`);
    }
    return { kind, size, stream: counted() };
  }

  /** A regular file's content, whole. */
  async read(filePath: string, options: CallOptions = {}): Promise<Buffer> {
    const download = await this.download(filePath, options);
    if (download.kind !== "file") throw new Error(`not a file: ${filePath}`);
    const chunks: Uint8Array[] = [];
    for await (const chunk of download.stream) chunks.push(chunk);
    return concatBytes(chunks);
  }

  async readText(filePath: string, options: CallOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(filePath, options));
  }

  async write(filePath: string, data: string | Uint8Array, options: UploadOptions = {}): Promise<void> {
    await this.upload(filePath, data, options);
  }

  async stat(filePath: string, options: CallOptions = {}): Promise<FileInfo> {
    return this.transport.json("GET", `${this.base}:stat`, { query: { path: filePath }, signal: options.signal });
  }

  /** The entries of directory `dirPath` (not recursive), sorted by name; at most `limit` (default 10,000). */
  async list(dirPath: string, options: CallOptions & { limit?: number } = {}): Promise<FileEntry[]> {
    const res = await this.transport.json<Ok<"ListSandboxFiles">>("GET", `${this.base}:list`, {
      query: { path: dirPath, limit: options.limit ?? 10_000 },
      signal: options.signal,
    });
    return res.entries.map((info) => ({
      name: info.name,
      path: info.path,
      type:
        info.type === "directory"
          ? "dir"
          : info.type === "file"
            ? "file"
            : info.type === "symlink"
              ? "symlink"
              : "other",
      size: Number(info.size),
      info,
    }));
  }

  async mkdir(dirPath: string, options: CallOptions & { mode?: string } = {}): Promise<FileInfo> {
    return this.transport.json("POST", `${this.base}:mkdir`, {
      body: { path: dirPath, ...(options.mode ? { mode: options.mode } : {}) },
      signal: options.signal,
    });
  }

  async remove(filePath: string, options: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    const response = await this.transport.send("POST", `${this.base}:remove`, {
      body: { path: filePath, ...(options.recursive ? { recursive: true } : {}) },
      signal: options.signal,
    });
    if (!response.ok) throw await this.failure(response);
    await response.body?.cancel().catch(() => undefined);
  }

  async rename(from: string, to: string, options: CallOptions & { overwrite?: boolean } = {}): Promise<FileInfo> {
    return this.transport.json("POST", `${this.base}:rename`, {
      body: { from, to, ...(options.overwrite ? { overwrite: true } : {}) },
      signal: options.signal,
    });
  }

  /** The directory's changes until `signal` aborts (or the stream ends with an error, thrown). */
  async *watch(dirPath: string, options: CallOptions & { intervalSeconds?: number } = {}): AsyncGenerator<FileEvent> {
    const response = await this.transport.send("GET", `${this.base}:watch`, {
      query: { path: dirPath, interval_seconds: options.intervalSeconds },
      headers: { accept: "text/event-stream" },
      signal: options.signal,
    });
    if (!response.ok) throw await this.failure(response);
    if (!response.body) return;
    try {
      for await (const event of parseSse(response.body)) {
        const data = event.data as Record<string, unknown>;
        if (event.event === "ready") yield { type: "ready", path: String(data.path), entries: Number(data.entries) };
        else if (event.event === "created" || event.event === "modified" || event.event === "deleted") {
          yield { type: event.event, entry: data as unknown as FileInfo };
        } else if (event.event === "error") {
          throw errorFromResponse(409, { code: data.code, message: data.message }, null);
        }
      }
    } catch (error) {
      if (options.signal?.aborted) return;
      throw error;
    }
  }

  private async streamUp(
    method: string,
    route: string,
    query: Record<string, string | undefined>,
    data: UploadSource,
    options: UploadOptions,
  ): Promise<FileInfo> {
    const whole = typeof data === "string" ? new TextEncoder().encode(data) : data instanceof Uint8Array ? data : null;
    const total = whole ? whole.length : null;
    const source: AsyncIterable<Uint8Array> | Iterable<Uint8Array> = whole
      ? [whole]
      : (data as AsyncIterable<Uint8Array>);
    const onProgress = options.onProgress;
    async function* pieces(): AsyncGenerator<Uint8Array> {
      let bytes = 0;
      for await (const chunk of source) {
        // Pieces of at most 1 MiB, so a whole buffer is reported as it goes.
        for (let at = 0; at < chunk.length; at += 1 << 20) {
          const piece = chunk.subarray(at, at + (1 << 20));
          bytes += piece.length;
          yield piece;
          onProgress?.({ bytes, total });
        }
      }
    }
    const iterator = pieces();
    // Pulled: the next piece is read only once fetch has taken the last (backpressure).
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const next = await iterator.next();
        if (next.done) controller.close();
        else controller.enqueue(next.value);
      },
      async cancel() {
        await iterator.return(undefined);
      },
    });
    const response = await fetch(this.transport.url(route, query), {
      method,
      headers: {
        // No key (a browser session): the cookie is the credential.
        ...(this.transport.apiKey ? { authorization: `Bearer ${this.transport.apiKey}` } : {}),
        "content-type": "application/octet-stream",
        accept: "application/json",
      },
      body,
      duplex: "half",
      ...(options.signal ? { signal: options.signal } : {}),
    } as RequestInit);
    const text = await response.text();
    let parsed: unknown = {};
    try {
      parsed = text ? JSON.parse(text) : {};
    } catch {
      parsed = { message: text.slice(0, 200) };
    }
    if (!response.ok) throw errorFromResponse(response.status, parsed, response.headers.get("retry-after"));
    return parsed as FileInfo;
  }

  private async failure(response: Response): Promise<Error> {
    const text = await response.text();
    let parsed: unknown = {};
    try {
      parsed = text ? JSON.parse(text) : {};
    } catch {
      parsed = { message: text.slice(0, 200) };
    }
    return this.transport.error(response, parsed);
  }
}

/** The chunks as one Buffer in Node, one Uint8Array (Buffer's base class) in a browser. */
function concatBytes(chunks: Uint8Array[]): Buffer {
  const NodeBuffer = (globalThis as { Buffer?: typeof Buffer }).Buffer;
  if (NodeBuffer) return NodeBuffer.concat(chunks);
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out as Buffer;
}
