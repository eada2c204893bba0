// The HTTP/1.1 framing secret egress needs, over bytes a sandbox (or an upstream) controls:
// a buffered reader with bounded reads, head parsing with bounded sizes, and the body
// framing rules of RFC 9112 (Content-Length, chunked, or until close). A malformed or
// oversized input throws HttpError, which ends that one connection.
import type { Duplex } from "node:stream";

export const MAX_HEAD_BYTES = 64 * 1024;
export const MAX_HEADER_LINES = 128;
const MAX_CHUNK_LINE_BYTES = 1024;
/** Bytes read ahead of the parser before the source is paused. */
const READ_AHEAD_BYTES = 256 * 1024;
const CRLFCRLF = Buffer.from("\r\n\r\n");
const CRLF = Buffer.from("\r\n");

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Pull-style reads over a readable stream, with read-ahead bounded by pausing the source. */
export class StreamReader {
  private buf: Buffer = Buffer.alloc(0);
  private ended = false;
  private failure: Error | null = null;
  private wake: (() => void) | null = null;

  constructor(private readonly stream: Duplex) {
    stream.on("data", (chunk: Buffer) => {
      this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
      if (this.buf.length > READ_AHEAD_BYTES) stream.pause();
      this.notify();
    });
    stream.on("end", () => {
      this.ended = true;
      this.notify();
    });
    stream.on("close", () => {
      this.ended = true;
      this.notify();
    });
    stream.on("error", (error: Error) => {
      this.failure = error;
      this.notify();
    });
  }

  private notify() {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  private async more(): Promise<boolean> {
    if (this.failure) throw this.failure;
    if (this.ended) return false;
    if (this.stream.isPaused()) this.stream.resume();
    await new Promise<void>((resolve) => {
      this.wake = resolve;
    });
    if (this.failure) throw this.failure;
    return true;
  }

  private take(n: number): Buffer {
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    if (this.buf.length <= READ_AHEAD_BYTES && this.stream.isPaused() && !this.ended) this.stream.resume();
    return out;
  }

  /** Bytes up to and including `delim`; null at a clean end before any byte; throws past `max`. */
  async readUntil(delim: Buffer, max: number, what: string): Promise<Buffer | null> {
    let from = 0;
    for (;;) {
      const at = this.buf.indexOf(delim, from);
      if (at !== -1) {
        if (at + delim.length > max) throw new HttpError(431, `${what} is larger than ${max} bytes`);
        return this.take(at + delim.length);
      }
      if (this.buf.length > max) throw new HttpError(431, `${what} is larger than ${max} bytes`);
      from = Math.max(0, this.buf.length - delim.length + 1);
      if (!(await this.more())) {
        if (this.buf.length === 0) return null;
        throw new HttpError(400, `the stream ended inside ${what}`);
      }
    }
  }

  /** Up to `max` bytes as soon as any are there; null at the end. */
  async readSome(max: number): Promise<Buffer | null> {
    while (this.buf.length === 0) if (!(await this.more())) return null;
    return this.take(Math.min(max, this.buf.length));
  }

  /** Whether the source ended (an idle keep-alive peer that closed). */
  get isEnded(): boolean {
    return this.ended || this.failure !== null;
  }

  /** Whether unread bytes are buffered (a pipelined request). */
  get buffered(): number {
    return this.buf.length;
  }
}

export interface Head {
  /** Request: method, target, version; response: version, status, reason. */
  startLine: string;
  /** Field lines as received (name as sent, value trimmed). */
  fields: { name: string; value: string }[];
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
// Field values: visible ASCII, obs-text, space and tab; never CR, LF or NUL.
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

export function parseHead(raw: Buffer): Head {
  const text = raw.subarray(0, raw.length - 4).toString("latin1");
  const lines = text.split("\r\n");
  if (lines.length - 1 > MAX_HEADER_LINES) throw new HttpError(431, `more than ${MAX_HEADER_LINES} header lines`);
  const startLine = lines[0] ?? "";
  const fields: Head["fields"] = [];
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    const name = colon > 0 ? line.slice(0, colon) : "";
    const value = line.slice(colon + 1).trim();
    // No obsolete line folding, no whitespace before the colon (request smuggling vectors).
    if (!TOKEN.test(name) || !FIELD_VALUE.test(value)) throw new HttpError(400, "a malformed header line");
    fields.push({ name, value });
  }
  return { startLine, fields };
}

export function serializeHead(head: Head): Buffer {
  return Buffer.from(
    `${[head.startLine, ...head.fields.map((f) => `${f.name}: ${f.value}`)].join("\r\n")}\r\n\r\n`,
    "latin1",
  );
}

export function fieldValues(head: Head, name: string): string[] {
  const lower = name.toLowerCase();
  return head.fields.filter((f) => f.name.toLowerCase() === lower).map((f) => f.value);
}

export function withoutFields(head: Head, names: string[]): Head {
  const drop = new Set(names.map((n) => n.toLowerCase()));
  return { startLine: head.startLine, fields: head.fields.filter((f) => !drop.has(f.name.toLowerCase())) };
}

export function readHead(reader: StreamReader, what: string): Promise<Buffer | null> {
  return reader.readUntil(CRLFCRLF, MAX_HEAD_BYTES, what);
}

function hasToken(values: string[], token: string): boolean {
  return values.some((v) =>
    v
      .toLowerCase()
      .split(",")
      .some((t) => t.trim() === token),
  );
}

/** Whether the peer asked for the connection to close after this message. */
export function wantsClose(head: Head, version: string): boolean {
  const connection = fieldValues(head, "connection");
  return version === "HTTP/1.0" ? !hasToken(connection, "keep-alive") : hasToken(connection, "close");
}

export type Framing = { kind: "none" } | { kind: "length"; length: number } | { kind: "chunked" } | { kind: "close" };

/** The body framing of a message (RFC 9112 section 6.3), refusing the ambiguous forms. */
export function bodyFraming(head: Head, isRequest: boolean): Framing {
  const te = fieldValues(head, "transfer-encoding");
  const cl = fieldValues(head, "content-length");
  if (te.length > 0) {
    if (cl.length > 0) throw new HttpError(400, "both Transfer-Encoding and Content-Length");
    const codings = te.flatMap((v) =>
      v
        .toLowerCase()
        .split(",")
        .map((t) => t.trim()),
    );
    if (codings.length !== 1 || codings[0] !== "chunked")
      throw new HttpError(501, "only Transfer-Encoding: chunked is supported");
    return { kind: "chunked" };
  }
  if (cl.length > 0) {
    const values = new Set(cl.flatMap((v) => v.split(",").map((t) => t.trim())));
    const [only] = [...values];
    if (values.size !== 1 || only === undefined || !/^\d{1,15}$/.test(only))
      throw new HttpError(400, "an invalid Content-Length");
    const length = Number(only);
    return length === 0 ? { kind: "none" } : { kind: "length", length };
  }
  return isRequest ? { kind: "none" } : { kind: "close" };
}

/** Writes, then waits for the stream to drain (or close) when its buffer is full; throws when it is gone. */
export function write(stream: Duplex, bytes: Buffer): Promise<void> {
  if (stream.destroyed || stream.writableEnded) return Promise.reject(new HttpError(502, "the connection closed"));
  if (bytes.length === 0 || stream.write(bytes)) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      stream.off("drain", done);
      stream.off("close", done);
      resolve();
    };
    stream.on("drain", done);
    stream.on("close", done);
  });
}

/**
 * Copies one message body from `reader` to `sink` as `framing` says: raw bytes as they came
 * (a chunked body keeps its chunking), or, with `decode`, only the payload bytes handed to
 * `decode` (the caller re-frames them). Returns the payload bytes copied.
 */
export async function copyBody(
  reader: StreamReader,
  framing: Framing,
  sink: (bytes: Buffer) => Promise<void>,
  options: { decode: boolean },
): Promise<number> {
  let payload = 0;
  if (framing.kind === "none") return 0;
  if (framing.kind === "length" || framing.kind === "close") {
    let left = framing.kind === "length" ? framing.length : Number.POSITIVE_INFINITY;
    while (left > 0) {
      const chunk = await reader.readSome(Math.min(left, 64 * 1024));
      if (chunk === null) {
        if (framing.kind === "close") break;
        throw new HttpError(400, "the stream ended inside a body");
      }
      left -= chunk.length;
      payload += chunk.length;
      await sink(chunk);
    }
    return payload;
  }
  for (;;) {
    const line = await reader.readUntil(CRLF, MAX_CHUNK_LINE_BYTES, "a chunk size line");
    if (line === null) throw new HttpError(400, "the stream ended inside a chunked body");
    const sizeText =
      line
        .toString("latin1", 0, line.length - 2)
        .split(";")[0]
        ?.trim() ?? "";
    if (!/^[0-9a-fA-F]{1,12}$/.test(sizeText)) throw new HttpError(400, "a malformed chunk size");
    const size = Number.parseInt(sizeText, 16);
    if (!options.decode) await sink(line);
    if (size === 0) {
      // Trailer fields up to the empty line, bounded like a head.
      let trailerBytes = 0;
      for (;;) {
        const trailer = await reader.readUntil(CRLF, MAX_HEAD_BYTES, "the trailer");
        if (trailer === null) throw new HttpError(400, "the stream ended inside the trailer");
        trailerBytes += trailer.length;
        if (trailerBytes > MAX_HEAD_BYTES) throw new HttpError(431, "the trailer is too large");
        if (!options.decode) await sink(trailer);
        if (trailer.length === 2) return payload;
      }
    }
    let left = size;
    while (left > 0) {
      const chunk = await reader.readSome(Math.min(left, 64 * 1024));
      if (chunk === null) throw new HttpError(400, "the stream ended inside a chunk");
      left -= chunk.length;
      payload += chunk.length;
      await sink(chunk);
    }
    const end = await reader.readUntil(CRLF, 2, "a chunk's end");
    if (end === null || end.length !== 2) throw new HttpError(400, "a chunk without its CRLF");
    if (!options.decode) await sink(end);
  }
}

/** One chunk of a chunked body ("" ends it). */
export function chunk(bytes: Buffer): Buffer {
  if (bytes.length === 0) return Buffer.from("0\r\n\r\n");
  return Buffer.concat([Buffer.from(`${bytes.length.toString(16)}\r\n`), bytes, CRLF]);
}
