// A volume version's manifest (docs/volumes.md): the files of the tree, each with its path,
// mode, size, content digest and chunk list. Pure: parse and check what a client uploaded,
// then the canonical form whose BLAKE3 is the version's digest.
import { blake3 } from "@napi-rs/blake-hash";
import { AppError } from "../../lib/errors.js";

export type Digest = `blake3:${string}`;
export const DIGEST_PATTERN = /^blake3:[0-9a-f]{64}$/;
/** BLAKE3 of no bytes: the content digest of an empty file. */
export const EMPTY_DIGEST: Digest = `blake3:${blake3(Buffer.alloc(0)).toString("hex")}`;

export const MANIFEST_VERSION = 1;
/** Largest chunk (blob) a manifest may name; the push helper cuts files into chunks of this size. */
export const MAX_CHUNK_BYTES = 16 * 1_048_576;
/** The helper's chunk size: a 1-byte change to a large file uploads one chunk of this size. */
export const CHUNK_BYTES = 16 * 1_048_576;
export const MAX_FILES = 1_000_000;
export const MAX_PATH_BYTES = 4096;
export const MAX_SEGMENT_BYTES = 255;
/** Largest file: the largest volume quota (2 TiB). */
export const MAX_FILE_BYTES = 2 * 1024 ** 4;

export interface ManifestChunk {
  digest: Digest;
  size: number;
}

export interface ManifestFile {
  path: string;
  /** Permission bits (0 to 0o777); a mounted copy keeps only the execute bits, read-only. */
  mode: number;
  size: number;
  /** BLAKE3 of the whole file. */
  digest: Digest;
  chunks: ManifestChunk[];
}

export interface Manifest {
  version: 1;
  files: ManifestFile[];
}

/** A checked manifest in canonical order, with what a version records of it. */
export interface CanonicalManifest {
  files: ManifestFile[];
  fileCount: number;
  sizeBytes: number;
  /** Each distinct chunk once, with its size. */
  blobs: Map<Digest, number>;
  /** Digest of the files alone. */
  contentDigest: Digest;
}

const LONE_SURROGATE = /\p{Surrogate}/u;

const bad = (message: string) => new AppError("invalid_argument", `invalid manifest: ${message}`);

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

function wholeNumber(value: unknown, max: number, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0 || value > max) {
    throw bad(`${what} must be a whole number from 0 to ${max}`);
  }
  return value;
}

function digest(value: unknown, what: string): Digest {
  if (typeof value !== "string" || !DIGEST_PATTERN.test(value)) throw bad(`${what} must be blake3:<64 hex>`);
  return value as Digest;
}

/**
 * The normal form of a relative path: `/`-separated, `.` segments and repeated slashes
 * dropped. Refuses absolute paths, `..`, NUL, empty paths and over-long ones.
 */
export function normalizeManifestPath(raw: unknown, index: number): string {
  const where = `files[${index}].path`;
  if (typeof raw !== "string" || raw.length === 0) throw bad(`${where} must be a non-empty string`);
  if (raw.includes("\0")) throw bad(`${where} may not contain NUL`);
  // A lone surrogate has no UTF-8 form: two of them would name one file on the host.
  if (LONE_SURROGATE.test(raw)) throw bad(`${where} is not valid Unicode (a lone surrogate)`);
  if (raw.startsWith("/")) throw bad(`${where} must be relative, not absolute`);
  if (raw.includes("\\")) throw bad(`${where} must use / as its separator`);
  const segments = raw.split("/").filter((segment) => segment !== "" && segment !== ".");
  if (segments.length === 0) throw bad(`${where} names no file`);
  for (const segment of segments) {
    if (segment === "..") throw bad(`${where} may not contain ..`);
    if (Buffer.byteLength(segment) > MAX_SEGMENT_BYTES)
      throw bad(`${where} has a name over ${MAX_SEGMENT_BYTES} bytes`);
  }
  const normal = segments.join("/");
  if (Buffer.byteLength(normal) > MAX_PATH_BYTES) throw bad(`${where} is over ${MAX_PATH_BYTES} bytes`);
  return normal;
}

function parseFile(raw: unknown, index: number): ManifestFile {
  if (!isObject(raw)) throw bad(`files[${index}] must be an object`);
  const known = new Set(["path", "mode", "size", "digest", "chunks"]);
  const extra = Object.keys(raw).find((key) => !known.has(key));
  if (extra) throw bad(`files[${index}] has an unknown field "${extra.slice(0, 64)}"`);
  const path = normalizeManifestPath(raw.path, index);
  const mode = wholeNumber(raw.mode, 0o777, `files[${index}].mode`);
  const size = wholeNumber(raw.size, MAX_FILE_BYTES, `files[${index}].size`);
  const fileDigest = digest(raw.digest, `files[${index}].digest`);
  if (!Array.isArray(raw.chunks)) throw bad(`files[${index}].chunks must be an array`);
  let total = 0;
  const chunks = raw.chunks.map((chunk: unknown, c: number): ManifestChunk => {
    const where = `files[${index}].chunks[${c}]`;
    if (!isObject(chunk)) throw bad(`${where} must be an object`);
    const chunkSize = wholeNumber(chunk.size, MAX_CHUNK_BYTES, `${where}.size`);
    if (chunkSize === 0) throw bad(`${where}.size must be at least 1`);
    total += chunkSize;
    return { digest: digest(chunk.digest, `${where}.digest`), size: chunkSize };
  });
  if (total !== size) throw bad(`files[${index}]: its chunks hold ${total} bytes, its size says ${size}`);
  // What can be checked without reading the content (a multi-chunk file's digest is checked when mounted).
  if (chunks.length === 0 && fileDigest !== EMPTY_DIGEST) throw bad(`files[${index}] is empty but its digest is not`);
  if (chunks.length === 1 && chunks[0]?.digest !== fileDigest) {
    throw bad(`files[${index}] has one chunk, so its digest must be that chunk's`);
  }
  return { path, mode, size, digest: fileDigest, chunks };
}

const byPath = (a: ManifestFile, b: ManifestFile) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0);

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Checks an uploaded manifest (JSON bytes) and puts it in canonical order. `maxFiles` bounds
 * what mounting the version costs the host in inodes (its size is bounded by the quota at publish).
 */
export function parseManifest(bytes: Buffer, maxFiles = MAX_FILES): CanonicalManifest {
  let text: string;
  try {
    // Invalid UTF-8 is refused, not decoded to U+FFFD (two paths would become one).
    text = utf8.decode(bytes);
  } catch {
    throw bad("not valid UTF-8");
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw bad("not valid JSON");
  }
  if (!isObject(raw)) throw bad("must be a JSON object");
  if (raw.version !== MANIFEST_VERSION) throw bad(`version must be ${MANIFEST_VERSION}`);
  if (!Array.isArray(raw.files)) throw bad("files must be an array");
  if (raw.files.length > maxFiles) throw bad(`at most ${maxFiles} files`);
  const files = raw.files.map(parseFile).sort(byPath);
  const blobs = new Map<Digest, number>();
  let sizeBytes = 0;
  for (const [i, file] of files.entries()) {
    const next = files[i + 1];
    if (next?.path === file.path) throw bad(`"${file.path.slice(0, 256)}" is listed twice`);
    sizeBytes += file.size;
    for (const chunk of file.chunks) blobs.set(chunk.digest, chunk.size);
  }
  checkPrefixConflicts(files);
  return { files, fileCount: files.length, sizeBytes, blobs, contentDigest: digestOfJson({ version: 1, files }) };
}

/** Refuses a path that is a file and also a directory holding another file. */
function checkPrefixConflicts(files: ManifestFile[]): void {
  const paths = new Set(files.map((file) => file.path));
  for (const file of files) {
    const segments = file.path.split("/");
    for (let i = 1; i < segments.length; i++) {
      const dir = segments.slice(0, i).join("/");
      if (paths.has(dir))
        throw bad(`"${dir.slice(0, 256)}" is a file and also a directory of "${file.path.slice(0, 256)}"`);
    }
  }
}

/** The bytes of the version's manifest as stored: canonical order, the parent included. */
export function canonicalBytes(manifest: CanonicalManifest, parent: string): Buffer {
  return Buffer.from(JSON.stringify({ version: MANIFEST_VERSION, parent, files: manifest.files.map(canonicalFile) }));
}

function canonicalFile(file: ManifestFile) {
  return {
    path: file.path,
    mode: file.mode,
    size: file.size,
    digest: file.digest,
    chunks: file.chunks.map((chunk) => ({ digest: chunk.digest, size: chunk.size })),
  };
}

function digestOfJson(value: { version: number; files: ManifestFile[] }): Digest {
  const bytes = Buffer.from(JSON.stringify({ version: value.version, files: value.files.map(canonicalFile) }));
  return digestOf(bytes);
}

export function digestOf(bytes: Uint8Array): Digest {
  return `blake3:${blake3(bytes).toString("hex")}`;
}

/** Reads a stored (canonical) manifest back; it was checked when published. */
export function readStoredManifest(bytes: Buffer): { parent: string; files: ManifestFile[] } {
  const value = JSON.parse(bytes.toString("utf8")) as { parent: string; files: ManifestFile[] };
  return { parent: value.parent, files: value.files };
}
