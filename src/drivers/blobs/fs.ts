// The embedded blob store: objects as files under a private directory of the data dir.
// A write goes to a temp file in the same filesystem, is fsynced and then published with
// link(2), which never replaces an existing file, so concurrent writers of one key are safe
// and a reader sees a whole object or none. Presigned URLs are HMAC-signed URLs that
// Warren's own route serves (signed-url.ts, modules/blobs).
//
// Layout: `<dir>/objects/<seg>/<seg>/<last seg>@` (the `@`, outside the key charset, lets
// key `a` and key `a/b` coexist as the file `a@` and the directory `a`) and `<dir>/tmp/`
// for writes in flight, named `<pid>-<random>.tmp` so a restart can tell a dead writer's.
import { createHash, randomBytes } from "node:crypto";
import type { Dirent } from "node:fs";
import { chmod, type FileHandle, link, mkdir, open, readdir, rm, rmdir, stat, unlink } from "node:fs/promises";
import path from "node:path";
import type { Readable } from "node:stream";
import { fsyncPath } from "../../lib/fs.js";
import { PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from "../../lib/private-dir.js";
import { DIRECT_WRITE_MIN_BYTES, DirectWriter } from "./direct-write.js";
import { BlobError, type BlobInfo, type BlobStore, checkRange, type PresignOptions, tooLarge } from "./interface.js";
import { checkKey, keyProblem } from "./keys.js";
import {
  checkBlobUrl,
  checkPresignSeconds,
  type SignatureCheck,
  type SignedMethod,
  signBlobUrl,
} from "./signed-url.js";

const OBJECT_SUFFIX = "@";
const TEMP_SUFFIX = ".tmp";
/** How often a publish retries when a concurrent delete removed the directory it made. */
const PUBLISH_ATTEMPTS = 5;

export interface FsBlobStoreOptions {
  /** The store's directory (made private, 0700); the server uses `<dataDir>/blobs`. */
  dir: string;
  /** HMAC key of the presigned URLs. */
  signingKey: Buffer;
  /** Base URL the presigned URLs point at: this server as its clients reach it. */
  publicBaseUrl: string;
  /** The clock of presigned URLs' expiry (tests move it). */
  now?: () => Date;
  /**
   * Which objects are written with O_DIRECT where the file system allows: `large` (the
   * default: those expected to be DIRECT_WRITE_MIN_BYTES or more), `always` or `never` (all
   * through the page cache). The contract tests run the last two.
   */
  directWrites?: "large" | "always" | "never";
}

const errnoOf = (error: unknown) => (error as NodeJS.ErrnoException).code;
const isMissing = (error: unknown) => errnoOf(error) === "ENOENT" || errnoOf(error) === "ENOTDIR";

/** Runs one I/O step, turning its failure into BlobError unavailable naming the step. */
async function io<T>(what: string, step: Promise<T>): Promise<T> {
  try {
    return await step;
  } catch (error) {
    throw unavailable(what, error);
  }
}

function unavailable(what: string, error: unknown): BlobError {
  if (error instanceof BlobError) return error;
  return new BlobError("unavailable", `blob store: could not ${what}: ${errnoOf(error) ?? (error as Error).message}`, {
    cause: error,
  });
}

/** Whether the process that named a temp file may still be writing it. */
function writerAlive(pid: number): boolean {
  // This process is only opening the store: nothing of its own is in flight here yet.
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return errnoOf(error) === "EPERM";
  }
}

/** A directory's fsync under way, and the next one, which callers arriving meanwhile share. */
interface DirSync {
  current: Promise<void>;
  queued: Promise<void> | null;
}

const settled = () => undefined;
/** How many directories the store remembers as existing (each chunk shard is one). */
const KNOWN_DIRS = 4096;

/** A staged object: a complete, fsynced temp file and what it holds. */
interface Staged {
  temp: string;
  size: number;
  /** Hex sha256 of what was written; null when the caller had none to check. */
  sha256: string | null;
}

/**
 * Bytes gathered before a write while staging a stream. Each write is a trip through the
 * thread pool, and on a busy host each trip's wake-up of a pool thread cost the event loop
 * more than the copy it asks for: 4 MiB (four trips for a 16 MiB volume chunk) rather than 1.
 */
const WRITE_BATCH_BYTES = 4 * 1_048_576;

export class FsBlobStore implements BlobStore {
  readonly kind = "fs" as const;
  private readonly objects: string;
  private readonly tmp: string;
  private readonly now: () => Date;
  /**
   * Directories objects were published into, their entries synced up to `objects/`: no mkdir
   * and no parent fsyncs for the next object in one. A delete forgets a directory before it
   * tries to remove it, and is added back only by a publish whose syncs are done.
   */
  private readonly knownDirs = new Set<string>();
  /** Directory fsyncs in flight, and the one queued behind each. */
  private readonly dirSyncs = new Map<string, DirSync>();

  /** Use `FsBlobStore.open`, which makes the directories and clears what a crash left. */
  private constructor(private readonly options: FsBlobStoreOptions) {
    this.objects = path.join(options.dir, "objects");
    this.tmp = path.join(options.dir, "tmp");
    this.now = options.now ?? (() => new Date());
  }

  /**
   * Opens the store in `options.dir`, creating it private (0700), and removes the temp
   * files of writers that are gone (a crash mid-write leaves one; it was never published).
   */
  static async open(options: FsBlobStoreOptions): Promise<FsBlobStore> {
    const store = new FsBlobStore(options);
    await mkdir(options.dir, { recursive: true, mode: PRIVATE_DIR_MODE });
    await chmod(options.dir, PRIVATE_DIR_MODE);
    await mkdir(store.objects, { recursive: true, mode: PRIVATE_DIR_MODE });
    await mkdir(store.tmp, { recursive: true, mode: PRIVATE_DIR_MODE });
    for (const name of await readdir(store.tmp)) {
      const pid = Number(/^(\d+)-/.exec(name)?.[1] ?? Number.NaN);
      if (!Number.isInteger(pid) || !writerAlive(pid)) await rm(path.join(store.tmp, name), { force: true });
    }
    return store;
  }

  async putIfAbsent(
    key: string,
    data: Uint8Array | readonly Uint8Array[],
    options: { sha256?: string } = {},
  ): Promise<{ written: boolean }> {
    checkKey(key);
    const parts = data instanceof Uint8Array ? [data] : data;
    const size = parts.reduce((sum, part) => sum + part.length, 0);
    const staged = await this.stage(parts, options.sha256 !== undefined, size);
    return this.publish(key, staged, options.sha256);
  }

  /**
   * putIfAbsent for a body that arrives as a stream (the presigned PUT route): written to
   * the temp file as it comes, never held whole. An error of `source` (a size limit, a
   * dropped connection) is rethrown as it is, after the temp file is removed. `sizeHint` (the
   * declared length) chooses direct or buffered writing; it is not enforced here.
   */
  async putStream(
    key: string,
    source: AsyncIterable<Uint8Array> | Readable,
    options: { sha256?: string; sizeHint?: number } = {},
  ): Promise<{ written: boolean; size: number }> {
    checkKey(key);
    const staged = await this.stage(source, options.sha256 !== undefined, options.sizeHint);
    const { written } = await this.publish(key, staged, options.sha256);
    return { written, size: staged.size };
  }

  async get(key: string, options: { maxBytes?: number } = {}): Promise<Buffer | null> {
    checkKey(key);
    let handle: FileHandle | null = null;
    try {
      // One read of the whole object where the kernel allows (readFile reads 512 KiB at a
      // time, each a trip through the thread pool).
      handle = await open(this.objectPath(key), "r");
      const { size } = await handle.stat();
      if (options.maxBytes !== undefined && size > options.maxBytes) throw tooLarge(key, options.maxBytes);
      const out = Buffer.allocUnsafe(size);
      let filled = 0;
      while (filled < size) {
        const { bytesRead } = await handle.read(out, filled, size - filled, filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      return filled === size ? out : out.subarray(0, filled);
    } catch (error) {
      if (isMissing(error)) return null;
      if (error instanceof BlobError) throw error;
      throw unavailable("read an object", error);
    } finally {
      await handle?.close().catch(() => undefined);
    }
  }

  async getRange(key: string, offset: number, length: number): Promise<Buffer | null> {
    checkKey(key);
    checkRange(offset, length);
    let handle: FileHandle | null = null;
    try {
      handle = await open(this.objectPath(key), "r");
      const out = Buffer.allocUnsafe(length);
      let filled = 0;
      while (filled < length) {
        const { bytesRead } = await handle.read(out, filled, length - filled, offset + filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      return filled === length ? out : out.subarray(0, filled);
    } catch (error) {
      if (isMissing(error)) return null;
      throw unavailable("read a range of an object", error);
    } finally {
      await handle?.close().catch(() => undefined);
    }
  }

  /** The object as a stream with its size, or null (the presigned GET route). */
  async openRead(key: string): Promise<{ size: number; stream: Readable } | null> {
    checkKey(key);
    let handle: FileHandle;
    try {
      handle = await open(this.objectPath(key), "r");
    } catch (error) {
      if (isMissing(error)) return null;
      throw unavailable("open an object", error);
    }
    try {
      const { size } = await handle.stat();
      return { size, stream: handle.createReadStream() };
    } catch (error) {
      await handle.close();
      throw unavailable("open an object", error);
    }
  }

  async head(key: string): Promise<{ size: number } | null> {
    checkKey(key);
    try {
      return { size: (await stat(this.objectPath(key))).size };
    } catch (error) {
      if (isMissing(error)) return null;
      throw unavailable("stat an object", error);
    }
  }

  async delete(key: string): Promise<void> {
    checkKey(key);
    const file = this.objectPath(key);
    try {
      await unlink(file);
    } catch (error) {
      if (isMissing(error)) return;
      throw unavailable("delete an object", error);
    }
    // Empty directories go too, so listing never walks dead branches. A concurrent publish
    // into a directory removed here retries (publish).
    for (let dir = path.dirname(file); dir !== this.objects; dir = path.dirname(dir)) {
      // Forgotten first: a publish that finds it unknown makes it and syncs its parents.
      this.knownDirs.delete(dir);
      try {
        await rmdir(dir);
      } catch {
        break;
      }
    }
  }

  async *list(prefix: string): AsyncIterable<BlobInfo> {
    // A prefix is any string: one no key can start with lists nothing.
    const cut = prefix.lastIndexOf("/");
    const dirPart = prefix.slice(0, cut + 1);
    const rest = prefix.slice(cut + 1);
    if (dirPart && keyProblem(dirPart.slice(0, -1)) !== null) return;
    if (rest && !/^[A-Za-z0-9._:-]+$/.test(rest)) return;
    yield* this.walk(dirPart, rest);
  }

  async presignPut(key: string, options: PresignOptions): Promise<string> {
    return this.presign("PUT", key, options);
  }

  async presignGet(key: string, options: PresignOptions): Promise<string> {
    return this.presign("GET", key, options);
  }

  /** Whether a request to a presigned URL of this store may proceed. */
  checkSignedUrl(
    method: SignedMethod,
    key: string,
    query: { method?: string; expires?: string; signature?: string },
  ): SignatureCheck {
    return checkBlobUrl(this.options.signingKey, { method, key, query }, Math.floor(Date.now() / 1000));
  }

  async close(): Promise<void> {}

  private presign(method: SignedMethod, key: string, options: PresignOptions): string {
    checkKey(key);
    checkPresignSeconds(options.expiresInSeconds);
    const expires = Math.floor(this.now().getTime() / 1000) + options.expiresInSeconds;
    return signBlobUrl({ ...this.options, method, key, expires });
  }

  /** The file holding `key`'s object (tests that damage a stored object on purpose; operators). */
  fileOf(key: string): string {
    checkKey(key);
    return this.objectPath(key);
  }

  private objectPath(key: string): string {
    return path.join(this.objects, `${key}${OBJECT_SUFFIX}`);
  }

  /**
   * Writes `source` to a new temp file, fsynced; hashes it on the way only when the caller
   * gave a sha256 to check (hashing 100 MB of chunks took ~60 ms of event loop that a
   * caller without a digest, the snapshot replication, never reads). An object expected to
   * be DIRECT_WRITE_MIN_BYTES or more (`sizeHint`) is written with O_DIRECT where the file
   * system allows (direct-write.ts); the rest buffered.
   */
  private async stage(
    source: Iterable<Uint8Array> | AsyncIterable<Uint8Array>,
    hashed: boolean,
    sizeHint?: number,
  ): Promise<Staged> {
    const temp = path.join(this.tmp, `${process.pid}-${randomBytes(12).toString("hex")}${TEMP_SUFFIX}`);
    const hash = hashed ? createHash("sha256") : null;
    let size = 0;
    let handle: FileHandle | null = null;
    try {
      const direct = !this.wantsDirect(sizeHint)
        ? null
        : await io("create a temp file", DirectWriter.open(temp, PRIVATE_FILE_MODE));
      if (direct) {
        try {
          for await (const chunk of source) {
            hash?.update(chunk);
            await io("write a temp file", direct.write(chunk));
          }
          size = await io("write a temp file", direct.finish());
        } finally {
          await direct.close().catch(() => undefined);
        }
        return { temp, size, sha256: hash?.digest("hex") ?? null };
      }
      handle = await io("create a temp file", open(temp, "wx", PRIVATE_FILE_MODE));
      // Small pieces (a request body arrives in 16-64 KiB ones) are written together, about
      // 4 MiB at a time: one trip through the thread pool each instead of one per piece. So a
      // source must not reuse a buffer it yielded (an HTTP body's pieces are fresh).
      let pending: Uint8Array[] = [];
      let pendingBytes = 0;
      const flush = async (file: FileHandle) => {
        let written = (await io("write a temp file", file.writev(pending))).bytesWritten;
        // A short write (rare on files): the rest one buffer at a time.
        for (const piece of pending) {
          if (written >= piece.length) {
            written -= piece.length;
            continue;
          }
          await io("write a temp file", file.write(piece.subarray(written)));
          written = 0;
        }
        pending = [];
        pendingBytes = 0;
      };
      for await (const chunk of source) {
        hash?.update(chunk);
        size += chunk.length;
        pending.push(chunk);
        pendingBytes += chunk.length;
        if (pendingBytes >= WRITE_BATCH_BYTES) await flush(handle);
      }
      if (pending.length > 0) await flush(handle);
      await io("fsync a temp file", handle.sync());
      await handle.close();
      handle = null;
      return { temp, size, sha256: hash?.digest("hex") ?? null };
    } catch (error) {
      await handle?.close().catch(() => undefined);
      await unlink(temp).catch(() => undefined);
      throw error;
    }
  }

  private wantsDirect(sizeHint: number | undefined): boolean {
    const mode = this.options.directWrites ?? "large";
    return mode === "always" || (mode === "large" && (sizeHint ?? 0) >= DIRECT_WRITE_MIN_BYTES);
  }

  /** Links a staged temp file to the key's name unless an object is there; removes the temp. */
  private async publish(key: string, staged: Staged, sha256: string | undefined): Promise<{ written: boolean }> {
    try {
      if (sha256 !== undefined && staged.sha256 !== sha256.toLowerCase()) {
        throw new BlobError("digest_mismatch", "blob store: the bytes do not match the sha256 they were written under");
      }
      const file = this.objectPath(key);
      const dir = path.dirname(file);
      for (let attempt = 1; ; attempt++) {
        // A directory this store published into before exists with its entries synced (see
        // knownDirs); a delete that removed it meanwhile shows as ENOENT at the link.
        const known = attempt === 1 && this.knownDirs.has(dir);
        if (!known) await io("make a directory", mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE }));
        try {
          await link(staged.temp, file);
        } catch (error) {
          if (errnoOf(error) === "EEXIST") return { written: false };
          this.knownDirs.delete(dir);
          if (errnoOf(error) === "ENOENT" && attempt < PUBLISH_ATTEMPTS) continue;
          throw unavailable("publish an object", error);
        }
        // The new name survives a power loss once its directory is synced. A directory not
        // known (new to this process, made now here or by a concurrent publish, or forgotten
        // by a delete meanwhile) also needs every directory above it synced; writers
        // publishing into one directory at once share these fsyncs.
        await this.syncDir(dir);
        if (!known || !this.knownDirs.has(dir)) {
          const above: string[] = [];
          for (let d = dir; d !== this.objects; d = path.dirname(d)) above.push(path.dirname(d));
          await Promise.all(above.map((parent) => this.syncDir(parent)));
        }
        this.rememberDir(dir);
        return { written: true };
      }
    } finally {
      await unlink(staged.temp).catch(() => undefined);
    }
  }

  private rememberDir(dir: string): void {
    if (this.knownDirs.size >= KNOWN_DIRS) this.knownDirs.clear();
    this.knownDirs.add(dir);
  }

  /**
   * fsyncs `dir` after the caller's change to it: joins the next fsync when one is under
   * way (that one may have started before the change), so N publishes into one directory
   * at once cost about two fsyncs, not N. Resolves once an fsync that began after the call
   * has finished.
   */
  private syncDir(dir: string): Promise<void> {
    const entry = this.dirSyncs.get(dir);
    if (!entry) {
      const fresh: DirSync = { current: Promise.resolve(), queued: null };
      this.dirSyncs.set(dir, fresh);
      return this.startDirSync(dir, fresh);
    }
    entry.queued ??= entry.current.then(settled, settled).then(() => {
      entry.queued = null;
      return this.startDirSync(dir, entry);
    });
    return entry.queued;
  }

  private startDirSync(dir: string, entry: DirSync): Promise<void> {
    const run = io("fsync a directory", fsyncPath(dir));
    entry.current = run;
    void run.then(settled, settled).then(() => {
      if (entry.current === run && entry.queued === null) this.dirSyncs.delete(dir);
    });
    return run;
  }

  /**
   * Yields the objects under the key directory `dirPart` (`""` or `a/b/`) whose remaining
   * key starts with `rest`, in key order: an object file sorts as its segment, a directory
   * as its segment plus `/`, which is how every key beneath it compares with its siblings.
   */
  private async *walk(dirPart: string, rest: string): AsyncGenerator<BlobInfo> {
    let entries: Dirent[];
    try {
      entries = await readdir(path.join(this.objects, dirPart), { withFileTypes: true });
    } catch (error) {
      if (isMissing(error)) return;
      throw unavailable("list objects", error);
    }
    const sorted: { sortKey: string; name: string; dir: boolean }[] = [];
    for (const entry of entries) {
      if (entry.isDirectory()) sorted.push({ sortKey: `${entry.name}/`, name: entry.name, dir: true });
      else if (entry.isFile() && entry.name.endsWith(OBJECT_SUFFIX)) {
        sorted.push({ sortKey: entry.name.slice(0, -OBJECT_SUFFIX.length), name: entry.name, dir: false });
      }
    }
    sorted.sort((a, b) => (a.sortKey < b.sortKey ? -1 : a.sortKey > b.sortKey ? 1 : 0));
    for (const entry of sorted) {
      if (!entry.sortKey.startsWith(rest)) continue;
      if (entry.dir) {
        yield* this.walk(`${dirPart}${entry.sortKey}`, "");
        continue;
      }
      try {
        const info = await stat(path.join(this.objects, dirPart, entry.name));
        yield { key: `${dirPart}${entry.sortKey}`, size: info.size, modifiedAt: info.mtime };
      } catch (error) {
        // Deleted since the directory was read.
        if (!isMissing(error)) throw unavailable("list objects", error);
      }
    }
  }
}
