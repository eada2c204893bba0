// A small streaming tar reader (ustar, GNU long names, PAX) and writer. Our own rather than
// an npm parser because PAX xattr values are binary (security.capability) and must reach
// setxattr byte for byte, and because PAX uid/gid/mtime must win over the ustar fields.
import type { EntryType } from "./path-safety.js";

export type TarEntryType = EntryType | { unsupported: string };

export interface TarHeader {
  name: string;
  type: TarEntryType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Seconds since the epoch; fractional when a PAX record gave sub-second precision. */
  mtime: number;
  linkname: string;
  devmajor: number;
  devminor: number;
  /** Extended attributes from PAX `SCHILY.xattr.*` (raw) and `LIBARCHIVE.xattr.*` (base64). */
  xattrs: Map<string, Buffer>;
  /** PAX records the reader did not interpret (e.g. `GNU.sparse.*`), keyed by name. */
  otherPax: Map<string, Buffer>;
}

export interface TarEntry {
  header: TarHeader;
  /** The entry's data; read it or not, the reader skips whatever is left. */
  body(): AsyncGenerator<Buffer>;
}

export class TarFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TarFormatError";
  }
}

const BLOCK = 512;
const MAX_META_BYTES = 1024 * 1024;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The bytes as a Buffer, without a copy when they already are bytes. */
export function asBuffer(value: Buffer | Uint8Array | string): Buffer {
  if (typeof value === "string") return Buffer.from(value);
  return Buffer.isBuffer(value) ? value : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}

/**
 * Buffers an async byte source so the reader can take exact-size pieces from it. The source
 * must not reuse a chunk's memory once it yielded it (chunks are kept, not copied).
 */
class ByteSource {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private readonly iterator: AsyncIterator<Buffer | Uint8Array | string>;

  constructor(source: AsyncIterable<Buffer | Uint8Array | string>) {
    this.iterator = source[Symbol.asyncIterator]();
  }

  private async fill(): Promise<boolean> {
    for (;;) {
      const next = await this.iterator.next();
      if (next.done) return false;
      const chunk = asBuffer(next.value);
      if (chunk.length === 0) continue;
      this.chunks.push(chunk);
      this.buffered += chunk.length;
      return true;
    }
  }

  private take(n: number): Buffer {
    const first = this.chunks[0];
    if (first && first.length === n) {
      this.chunks.shift();
      this.buffered -= n;
      return first;
    }
    if (first && first.length > n) {
      this.chunks[0] = first.subarray(n);
      this.buffered -= n;
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const chunk = this.chunks[0] as Buffer;
      const piece = Math.min(chunk.length, n - filled);
      chunk.copy(out, filled, 0, piece);
      filled += piece;
      if (piece === chunk.length) this.chunks.shift();
      else this.chunks[0] = chunk.subarray(piece);
    }
    this.buffered -= n;
    return out;
  }

  /** Exactly n bytes, or null at a clean end of input (no byte left). */
  async readExact(n: number): Promise<Buffer | null> {
    while (this.buffered < n) {
      if (!(await this.fill())) {
        if (this.buffered === 0) return null;
        throw new TarFormatError("unexpected end of archive");
      }
    }
    return this.take(n);
  }

  /** Up to the next `max` bytes as they arrive (at least one byte). */
  async readSome(max: number): Promise<Buffer> {
    if (this.buffered === 0 && !(await this.fill())) throw new TarFormatError("unexpected end of archive");
    const first = this.chunks[0] as Buffer;
    return this.take(Math.min(first.length, max));
  }

  async skip(n: number): Promise<void> {
    let left = n;
    while (left > 0) left -= (await this.readSome(left)).length;
  }

  /** Consumes the rest of the input (trailing zero blocks count towards a layer's diff ID). */
  async drain(): Promise<void> {
    this.chunks = [];
    this.buffered = 0;
    while (await this.fill()) {
      this.chunks = [];
      this.buffered = 0;
    }
  }
}

function cString(block: Buffer, start: number, length: number): Buffer {
  const field = block.subarray(start, start + length);
  const nul = field.indexOf(0);
  return nul === -1 ? field : field.subarray(0, nul);
}

function decodeName(bytes: Buffer, what: string): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new TarFormatError(`${what} is not valid UTF-8`);
  }
}

function parseNumber(block: Buffer, start: number, length: number, what: string): number {
  const field = block.subarray(start, start + length);
  if (((field[0] as number) & 0x80) !== 0) {
    // GNU base-256: big-endian two's complement with the high bit of the first byte as marker.
    if (((field[0] as number) & 0x40) !== 0) throw new TarFormatError(`negative ${what}`);
    let value = (field[0] as number) & 0x3f;
    for (let i = 1; i < field.length; i++) value = value * 256 + (field[i] as number);
    if (!Number.isSafeInteger(value)) throw new TarFormatError(`${what} too large`);
    return value;
  }
  const text = field.toString("latin1").replace(/\0.*$/s, "").trim();
  if (text === "") return 0;
  if (!/^[0-7]+$/.test(text)) throw new TarFormatError(`malformed ${what} field`);
  return Number.parseInt(text, 8);
}

function checksumOk(block: Buffer): boolean {
  const stored = parseNumber(block, 148, 8, "checksum");
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 0x20 : (block[i] as number);
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  return stored === unsigned || stored === signed;
}

function typeFromFlag(flag: string, name: string): TarEntryType {
  switch (flag) {
    case "0":
    case "\0":
    case "7":
      // Pre-POSIX tars mark directories only by a trailing slash.
      return name.endsWith("/") ? "dir" : "file";
    case "1":
      return "hardlink";
    case "2":
      return "symlink";
    case "3":
      return "char-device";
    case "4":
      return "block-device";
    case "5":
      return "dir";
    case "6":
      return "fifo";
    default:
      return { unsupported: flag };
  }
}

/** PAX extended header records: `<len> <key>=<value>\n`, values kept as raw bytes. */
export function parsePaxRecords(data: Buffer): Map<string, Buffer> {
  const records = new Map<string, Buffer>();
  let offset = 0;
  while (offset < data.length) {
    if (data[offset] === 0) break;
    const space = data.indexOf(0x20, offset);
    if (space === -1) throw new TarFormatError("malformed PAX record");
    const length = Number(data.subarray(offset, space).toString("latin1"));
    if (!Number.isInteger(length) || length <= space - offset || offset + length > data.length) {
      throw new TarFormatError("malformed PAX record length");
    }
    const record = data.subarray(space + 1, offset + length);
    if (record[record.length - 1] !== 0x0a) throw new TarFormatError("PAX record without a newline");
    const equals = record.indexOf(0x3d);
    if (equals === -1) throw new TarFormatError("PAX record without '='");
    const key = decodeName(record.subarray(0, equals), "PAX key");
    records.set(key, Buffer.from(record.subarray(equals + 1, record.length - 1)));
    offset += length;
  }
  return records;
}

function paxNumber(value: Buffer, key: string): number {
  const text = value.toString("latin1");
  if (!/^-?[0-9]+(\.[0-9]+)?$/.test(text)) throw new TarFormatError(`malformed PAX ${key}`);
  return Number(text);
}

/** Applies PAX records (global first, then the entry's own) over the ustar header. */
function applyPax(header: TarHeader, records: Map<string, Buffer>): void {
  for (const [key, value] of records) {
    if (key === "path") header.name = decodeName(value, "PAX path");
    else if (key === "linkpath") header.linkname = decodeName(value, "PAX linkpath");
    else if (key === "size") header.size = paxNumber(value, key);
    else if (key === "uid") header.uid = paxNumber(value, key);
    else if (key === "gid") header.gid = paxNumber(value, key);
    else if (key === "mtime") header.mtime = paxNumber(value, key);
    else if (key.startsWith("SCHILY.xattr.")) header.xattrs.set(key.slice("SCHILY.xattr.".length), value);
    else if (key.startsWith("LIBARCHIVE.xattr.")) {
      const name = decodeURIComponent(key.slice("LIBARCHIVE.xattr.".length));
      header.xattrs.set(name, Buffer.from(value.toString("latin1"), "base64"));
    } else if (key !== "atime" && key !== "ctime" && key !== "uname" && key !== "gname" && key !== "comment") {
      header.otherPax.set(key, value);
    }
  }
}

/**
 * Reads a tar stream entry by entry. Stops at the first zero block or at a clean end of
 * input (umoci writes no footer), then drains the input so a hash of it is complete.
 */
export async function* readTar(input: AsyncIterable<Buffer | Uint8Array | string>): AsyncGenerator<TarEntry> {
  const source = new ByteSource(input);
  let globalPax = new Map<string, Buffer>();
  let pax: Map<string, Buffer> | null = null;
  let longName: string | null = null;
  let longLink: string | null = null;

  for (;;) {
    const block = await source.readExact(BLOCK);
    if (block === null || block.every((byte) => byte === 0)) break;
    if (!checksumOk(block)) throw new TarFormatError("tar header checksum mismatch (not a tar stream?)");

    const flag = String.fromCharCode(block[156] as number);
    const size = parseNumber(block, 124, 12, "size");
    const padded = Math.ceil(size / BLOCK) * BLOCK;
    if (flag === "x" || flag === "g" || flag === "L" || flag === "K") {
      if (size > MAX_META_BYTES) throw new TarFormatError(`tar metadata entry of ${size} bytes`);
      const data = (await source.readExact(padded)) ?? Buffer.alloc(0);
      if (data.length < padded) throw new TarFormatError("unexpected end of archive");
      const content = data.subarray(0, size);
      if (flag === "x") pax = parsePaxRecords(content);
      else if (flag === "g") globalPax = new Map([...globalPax, ...parsePaxRecords(content)]);
      else if (flag === "L") longName = decodeName(cString(content, 0, content.length), "GNU long name");
      else longLink = decodeName(cString(content, 0, content.length), "GNU long link name");
      continue;
    }

    const magic = block.subarray(257, 263).toString("latin1");
    let name = decodeName(cString(block, 0, 100), "entry name");
    if (magic === "ustar\0") {
      const prefix = decodeName(cString(block, 345, 155), "entry name prefix");
      if (prefix !== "") name = `${prefix}/${name}`;
    }
    const header: TarHeader = {
      name: longName ?? name,
      type: "file",
      mode: parseNumber(block, 100, 8, "mode") & 0o7777,
      uid: parseNumber(block, 108, 8, "uid"),
      gid: parseNumber(block, 116, 8, "gid"),
      size,
      mtime: parseNumber(block, 136, 12, "mtime"),
      linkname: longLink ?? decodeName(cString(block, 157, 100), "link name"),
      devmajor: parseNumber(block, 329, 8, "devmajor"),
      devminor: parseNumber(block, 337, 8, "devminor"),
      xattrs: new Map(),
      otherPax: new Map(),
    };
    applyPax(header, globalPax);
    if (pax) applyPax(header, pax);
    header.type = typeFromFlag(flag, header.name);
    pax = null;
    longName = null;
    longLink = null;

    let remaining = header.size;
    const entry: TarEntry = {
      header,
      body: async function* body() {
        while (remaining > 0) {
          const chunk = await source.readSome(remaining);
          remaining -= chunk.length;
          yield chunk;
        }
      },
    };
    yield entry;
    await source.skip(remaining + (Math.ceil(header.size / BLOCK) * BLOCK - header.size));
    remaining = 0;
  }
  await source.drain();
}

export interface TarWriteEntry {
  name: string;
  type: EntryType;
  mode?: number;
  uid?: number;
  gid?: number;
  /** Seconds since the epoch (default 0, so test layers are reproducible). */
  mtime?: number;
  linkname?: string;
  data?: Buffer | string;
  devmajor?: number;
  devminor?: number;
  /** Written as PAX `SCHILY.xattr.<name>` records. */
  xattrs?: Record<string, Buffer | string>;
  /** Long names as GNU `L`/`K` entries instead of PAX `path`/`linkpath`. */
  longNames?: "pax" | "gnu";
}

const TYPE_FLAGS: Record<EntryType, string> = {
  file: "0",
  hardlink: "1",
  symlink: "2",
  "char-device": "3",
  "block-device": "4",
  dir: "5",
  fifo: "6",
};

/** Octal when it fits, else GNU base-256 (high bit set, big-endian). */
function writeNumber(block: Buffer, value: number, start: number, length: number): void {
  const text = value.toString(8).padStart(length - 1, "0");
  if (text.length <= length - 1) {
    block.write(`${text}\0`, start, length, "latin1");
    return;
  }
  let rest = value;
  for (let i = start + length - 1; i > start; i--) {
    block[i] = rest % 256;
    rest = Math.floor(rest / 256);
  }
  if (rest > 0x3f) throw new Error(`tar field too small for ${value}`);
  block[start] = 0x80 | rest;
}

function paxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`), value, Buffer.from("\n")]);
  let length = body.length + 1;
  while (String(length).length + body.length !== length) length = String(length).length + body.length;
  return Buffer.concat([Buffer.from(String(length)), body]);
}

function headerBlock(fields: {
  name: Buffer;
  flag: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtime: number;
  linkname: Buffer;
  devmajor: number;
  devminor: number;
}): Buffer {
  const block = Buffer.alloc(BLOCK);
  fields.name.copy(block, 0, 0, Math.min(fields.name.length, 100));
  writeNumber(block, fields.mode, 100, 8);
  writeNumber(block, fields.uid, 108, 8);
  writeNumber(block, fields.gid, 116, 8);
  writeNumber(block, fields.size, 124, 12);
  writeNumber(block, Math.floor(fields.mtime), 136, 12);
  block.write(fields.flag, 156, 1, "latin1");
  fields.linkname.copy(block, 157, 0, Math.min(fields.linkname.length, 100));
  block.write("ustar\0", 257, 6, "latin1");
  block.write("00", 263, 2, "latin1");
  writeNumber(block, fields.devmajor, 329, 8);
  writeNumber(block, fields.devminor, 337, 8);
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8, "latin1");
  return block;
}

function padToBlock(data: Buffer): Buffer[] {
  const rest = data.length % BLOCK;
  return rest === 0 ? [data] : [data, Buffer.alloc(BLOCK - rest)];
}

/**
 * Writes a tar archive in memory. Names are written as given (so tests can craft hostile
 * archives); long names go to PAX or GNU records. `footer: false` omits the two zero blocks.
 */
export function encodeTar(entries: readonly TarWriteEntry[], options: { footer?: boolean } = {}): Buffer {
  const out: Buffer[] = [];
  for (const entry of entries) {
    const data = entry.data === undefined ? Buffer.alloc(0) : Buffer.from(entry.data);
    let name = Buffer.from(entry.type === "dir" && !entry.name.endsWith("/") ? `${entry.name}/` : entry.name);
    let linkname = Buffer.from(entry.linkname ?? "");
    const base = {
      mode: entry.mode ?? (entry.type === "dir" ? 0o755 : 0o644),
      uid: entry.uid ?? 0,
      gid: entry.gid ?? 0,
      mtime: entry.mtime ?? 0,
      devmajor: entry.devmajor ?? 0,
      devminor: entry.devminor ?? 0,
    };
    const records: Buffer[] = [];
    if (entry.longNames === "gnu") {
      for (const [flag, value] of [
        ["L", name],
        ["K", linkname],
      ] as const) {
        if (value.length <= 100) continue;
        const content = Buffer.concat([value, Buffer.from([0])]);
        out.push(
          headerBlock({
            ...base,
            name: Buffer.from("././@LongLink"),
            flag,
            size: content.length,
            linkname: Buffer.alloc(0),
          }),
        );
        out.push(...padToBlock(content));
      }
    } else {
      if (name.length > 100) records.push(paxRecord("path", name));
      if (linkname.length > 100) records.push(paxRecord("linkpath", linkname));
    }
    for (const [key, value] of Object.entries(entry.xattrs ?? {})) {
      records.push(paxRecord(`SCHILY.xattr.${key}`, Buffer.from(value)));
    }
    if (records.length > 0) {
      const content = Buffer.concat(records);
      out.push(
        headerBlock({
          ...base,
          name: Buffer.from("PaxHeader"),
          flag: "x",
          size: content.length,
          linkname: Buffer.alloc(0),
        }),
      );
      out.push(...padToBlock(content));
    }
    if (name.length > 100) name = name.subarray(0, 100);
    if (linkname.length > 100) linkname = linkname.subarray(0, 100);
    out.push(headerBlock({ ...base, name, flag: TYPE_FLAGS[entry.type], size: data.length, linkname }));
    if (data.length > 0) out.push(...padToBlock(data));
  }
  if (options.footer !== false) out.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(out);
}
