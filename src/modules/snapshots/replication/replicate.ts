// Replication of one image file to the chunk store: its data extents only (holes are never
// read), cut into content-defined chunks, each stored once, zstd-compressed, under the BLAKE3
// of its plain bytes. With a base (an earlier image this one was reflinked from, and its
// manifest), the ranges both files map to the same physical blocks are known without reading
// them: the base's chunks there are reused as they are and its gaps there are zeros.
//
// Pipelined: the file is read in windows one ahead of the chunker; a window's chunks are
// named and asked of the store at once (one has() batch, one statement for the server's
// store), then stored by up to `concurrency` tasks at once (compress on the libuv
// threadpool, put into a pack), so reading, hashing, compressing and writing packs overlap.
import { constants, readSync } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import { isZero, MAX_CHUNK_BYTES, nextCut } from "./chunker.js";
import { digestOf, looksIncompressible, rawZstdFrame, rawZstdFrameLength, zstdChunk } from "./codec.js";
import { type Extent, listExtents } from "./extents.js";
import { validateManifest } from "./manifest.js";
import type { ChunkRef, ChunkStore, Digest, ImageManifest, ReplicationStats } from "./types.js";

export interface ReplicateInput {
  path: string;
  /** An earlier image sharing extents with this one, and the manifest it was replicated as. */
  base?: { path: string; manifest: ImageManifest };
  chunks: ChunkStore;
  signal?: AbortSignal;
  /**
   * Chunks stored at once (default 8). Each store holds a libuv threadpool thread through
   * its fsyncs; `make run` and the benchmarks start the server with UV_THREADPOOL_SIZE=16
   * so reads and compressions still find free ones.
   */
  concurrency?: number;
  /**
   * Leave the chunk store unflushed: the caller flushes it once after several images (so
   * their new chunks share packs) before it relies on the manifests returned.
   */
  deferFlush?: boolean;
  /** Read windows to reuse (the images of one snapshot can share one); a new pool by default. */
  windows?: WindowPool;
  /**
   * How a file's extents are listed (default listExtents, a run of xfs_io through the
   * spawner): a worker thread asks the server's thread, whose spawner runs host tools.
   */
  listExtents?: (path: string) => Promise<Extent[]>;
}

/** A byte range [start, end). */
export interface Range {
  start: number;
  end: number;
}

export const DEFAULT_CONCURRENCY = 8;
/** How much of the file one read takes. */
const READ_WINDOW_BYTES = 8 * 1024 * 1024;
const CARRY_ROOM_BYTES = MAX_CHUNK_BYTES;
const WINDOW_BUFFER_BYTES = CARRY_ROOM_BYTES + READ_WINDOW_BYTES;

/** The logically contiguous data of `extents`, merged, whatever their physical placement. */
export function dataRanges(extents: readonly Extent[]): Range[] {
  const ranges: Range[] = [];
  for (const extent of extents) {
    const last = ranges[ranges.length - 1];
    const end = extent.offset + extent.length;
    if (last && extent.offset <= last.end) last.end = Math.max(last.end, end);
    else ranges.push({ start: extent.offset, end });
  }
  return ranges;
}

/**
 * The ranges where both files read the same physical blocks: overlapping extents of known
 * location whose physical address minus logical offset is equal (same offset → same block).
 */
export function sameMapping(a: readonly Extent[], b: readonly Extent[]): Range[] {
  const ranges: Range[] = [];
  let j = 0;
  for (const x of a) {
    const xEnd = x.offset + x.length;
    while (j < b.length && (b[j] as Extent).offset + (b[j] as Extent).length <= x.offset) j++;
    for (let k = j; k < b.length && (b[k] as Extent).offset < xEnd; k++) {
      const y = b[k] as Extent;
      if (x.physical === null || y.physical === null || x.physical - x.offset !== y.physical - y.offset) continue;
      const start = Math.max(x.offset, y.offset);
      const end = Math.min(xEnd, y.offset + y.length);
      if (start >= end) continue;
      const last = ranges[ranges.length - 1];
      if (last && start <= last.end) last.end = Math.max(last.end, end);
      else ranges.push({ start, end });
    }
  }
  return ranges;
}

/** `from` minus `remove`; both sorted and disjoint. */
export function subtractRanges(from: readonly Range[], remove: readonly Range[]): Range[] {
  const result: Range[] = [];
  let j = 0;
  for (const range of from) {
    let start = range.start;
    while (j < remove.length && (remove[j] as Range).end <= start) j++;
    for (let k = j; k < remove.length && (remove[k] as Range).start < range.end; k++) {
      const cut = remove[k] as Range;
      if (cut.start > start) result.push({ start, end: cut.start });
      start = Math.max(start, cut.end);
    }
    if (start < range.end) result.push({ start, end: range.end });
  }
  return result;
}

/**
 * What a replication with a base must still read. `same` is where both files share blocks,
 * `baseChunks` the base's manifest (trusted to describe the base file). A base chunk entirely
 * inside `same` is reused; inside `same`, what no base chunk covers is zeros in the base and
 * so in this file; everything else of `data` is read.
 */
export function planDelta(
  data: readonly Range[],
  same: readonly Range[],
  baseChunks: readonly ChunkRef[],
): { reused: ChunkRef[]; read: Range[] } {
  const reused: ChunkRef[] = [];
  const notReused: Range[] = [];
  let j = 0;
  for (const chunk of baseChunks) {
    const end = chunk.offset + chunk.size;
    while (j < same.length && (same[j] as Range).end <= chunk.offset) j++;
    const range = same[j];
    if (range && range.start <= chunk.offset && end <= range.end) reused.push(chunk);
    else notReused.push({ start: chunk.offset, end });
  }
  const known = subtractRanges(same, notReused);
  return { reused, read: subtractRanges(data, known) };
}

/**
 * Direct I/O (O_DIRECT) wants memory, file offsets and lengths aligned to the filesystem's
 * sector size (512 or 4096 bytes); an image's data extents are whole 4 KiB blocks.
 */
const DIRECT_ALIGN = 4096;

/**
 * A window's memory: `raw` with room to place `buffer` (WINDOW_BUFFER_BYTES) at an address
 * direct reads accept, found by probing (JavaScript cannot see an address): `aligned` once a
 * probe has placed it.
 */
interface WindowMemory {
  raw: Buffer;
  buffer: Buffer;
  aligned: boolean;
}

/**
 * Read windows, reused: a window goes back to the pool once nothing reads it any more (the
 * chunker has moved past it and every chunk cut from it is compressed), so a replication
 * allocates a few windows, not one per 8 MiB read (buffers that size are what the garbage
 * collector spent its time on, and each new one pays a page fault per 4 KiB when first
 * written). A window in use is never waited for: when none is free a new one is made, and at
 * most `keep` are kept for reuse.
 */
export class WindowPool {
  private readonly free: WindowMemory[] = [];
  /** Windows made (for tests and the benchmark: how many a replication needed). */
  made = 0;

  constructor(private readonly keep = 4) {}

  /**
   * A window; with `directFd`, its buffer placed where direct reads of that file accept it, if
   * the probe finds such a place. A probe that finds none leaves the memory unplaced, not
   * marked unusable: the pool outlives the file (the worker's serves every job), and the next
   * file may allow direct reads.
   */
  acquire(directFd?: number): Window {
    const memory = this.free.pop() ?? this.make();
    if (directFd !== undefined && !memory.aligned) alignForDirectReads(memory, directFd);
    return new Window(memory, this);
  }

  /** Called by a window whose last user let go of it. */
  recycle(memory: WindowMemory): void {
    if (this.free.length < this.keep) this.free.push(memory);
  }

  /** Lets go of the windows kept for reuse. */
  drain(): void {
    this.free.splice(0);
  }

  private make(): WindowMemory {
    this.made++;
    const raw = Buffer.allocUnsafeSlow(WINDOW_BUFFER_BYTES + DIRECT_ALIGN);
    return { raw, buffer: raw.subarray(0, WINDOW_BUFFER_BYTES), aligned: false };
  }
}

/**
 * Finds the offset into `memory.raw` at which a direct read of `fd` succeeds (the kernel
 * answers EINVAL for misaligned memory: tried every 16 bytes, malloc's alignment, over one
 * DIRECT_ALIGN). Not found (a file system without direct I/O, a short file): left unplaced,
 * and reads of this window stay buffered.
 */
function alignForDirectReads(memory: WindowMemory, fd: number): void {
  for (let offset = 0; offset < DIRECT_ALIGN; offset += 16) {
    try {
      if (readSync(fd, memory.raw, offset, DIRECT_ALIGN, 0) !== DIRECT_ALIGN) return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EINVAL") continue;
      return;
    }
    memory.buffer = memory.raw.subarray(offset, offset + WINDOW_BUFFER_BYTES);
    memory.aligned = true;
    return;
  }
}

/** One read window and its users: the chunker (one hold) and each chunk being compressed. */
export class Window {
  private users = 1;

  constructor(
    private readonly memory: WindowMemory,
    private readonly pool: WindowPool,
  ) {}

  get buffer(): Buffer {
    return this.memory.buffer;
  }

  /** Whether direct reads may fill this window. */
  get aligned(): boolean {
    return this.memory.aligned;
  }

  hold(): void {
    if (this.users === 0) throw new Error("a released window was held again");
    this.users++;
  }

  release(): void {
    if (this.users === 0) throw new Error("a window was released twice");
    if (--this.users === 0) this.pool.recycle(this.memory);
  }
}

/**
 * An image opened for reading: buffered, and with O_DIRECT where the file system allows.
 * Direct reads matter here: a sealed snapshot's file shares its blocks with the live image
 * but not its page cache, so a buffered read goes through the loop device a readahead at a
 * time and fills a page cache nobody reads again (measured on the pool: 100 MB just written
 * and cloned read in 55-134 ms buffered, 13-16 ms direct).
 */
export class ImageFile {
  private constructor(
    readonly handle: FileHandle,
    private direct: FileHandle | null,
  ) {}

  static async open(path: string): Promise<ImageFile> {
    const handle = await open(path, "r");
    const direct = await open(path, constants.O_RDONLY | constants.O_DIRECT).catch(() => null);
    return new ImageFile(handle, direct);
  }

  /** The descriptor direct reads use (for aligning windows), if any. */
  get directFd(): number | undefined {
    return this.direct?.fd;
  }

  /**
   * Reads into `buffer` at `at` from `position`: directly when the window is aligned and the
   * range is whole sectors, buffered otherwise (or after the kernel refused a direct read).
   */
  async read(window: Window, at: number, length: number, position: number): Promise<number> {
    const direct = this.direct;
    if (direct && window.aligned && (at | length | position) % DIRECT_ALIGN === 0) {
      try {
        return (await direct.read(window.buffer, at, length, position)).bytesRead;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EINVAL") throw error;
        this.direct = null;
        await direct.close().catch(() => undefined);
      }
    }
    return (await this.handle.read(window.buffer, at, length, position)).bytesRead;
  }

  async close(): Promise<void> {
    await Promise.all([this.handle.close(), this.direct?.close()]);
  }
}

/** Reads `ranges` in windows, the next read under way while the caller handles the current one. */
async function* readWindows(
  file: ImageFile,
  ranges: readonly Range[],
  pool: WindowPool,
): AsyncGenerator<{ offset: number; length: number; window: Window; rangeEnds: boolean }> {
  const windows: { offset: number; length: number; rangeEnds: boolean }[] = [];
  for (const range of ranges)
    for (let at = range.start; at < range.end; at += READ_WINDOW_BYTES) {
      const length = Math.min(READ_WINDOW_BYTES, range.end - at);
      windows.push({ offset: at, length, rangeEnds: at + length === range.end });
    }
  const read = async (window: { offset: number; length: number }) => {
    // The window is read after CARRY_ROOM_BYTES of room, where the caller puts the unfinished
    // chunk of the window before (copying at most a chunk, not the window).
    const held = pool.acquire(file.directFd);
    let done = 0;
    try {
      while (done < window.length) {
        const at = CARRY_ROOM_BYTES + done;
        const bytesRead = await file.read(held, at, window.length - done, window.offset + done);
        if (bytesRead === 0)
          throw new Error(`the image ended at ${window.offset + done} while being read (it changed)`);
        done += bytesRead;
      }
    } catch (error) {
      held.release();
      throw error;
    }
    return held;
  };
  let next = windows.length > 0 ? read(windows[0] as (typeof windows)[0]) : null;
  for (let i = 0; i < windows.length; i++) {
    const window = windows[i] as (typeof windows)[0];
    const held = await (next as Promise<Window>);
    const following = windows[i + 1];
    next = following ? read(following) : null;
    // A failed read-ahead is reported when its window comes; until then it must not go unhandled.
    next?.catch(() => undefined);
    yield { offset: window.offset, length: window.length, window: held, rangeEnds: window.rangeEnds };
  }
}

/** Runs up to `limit` tasks at once; the first failure is rethrown by wait() and later ones dropped. */
class TaskPool {
  private running = 0;
  private failure: { error: unknown } | null = null;
  private wakers: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  async add(task: () => Promise<void>): Promise<void> {
    while (this.running >= this.limit) await new Promise<void>((resolve) => this.wakers.push(resolve));
    if (this.failure) throw this.failure.error;
    this.running++;
    task()
      .catch((error: unknown) => {
        this.failure ??= { error };
      })
      .finally(() => {
        this.running--;
        this.wakers.shift()?.();
      });
  }

  async wait(): Promise<void> {
    while (this.running > 0) await new Promise<void>((resolve) => this.wakers.push(resolve));
    if (this.failure) throw this.failure.error;
  }
}

/**
 * Replicates the image at `path` into `chunks` and returns its manifest. Reads only data
 * extents; all-zero chunks are left out (holes). With `base`, the unchanged ranges are taken
 * from the base's manifest unread; a base whose manifest does not match its file's size, or
 * that is this very file, is ignored.
 */
export async function replicateImage(
  input: ReplicateInput,
): Promise<{ manifest: ImageManifest; stats: ReplicationStats }> {
  const concurrency = input.concurrency ?? DEFAULT_CONCURRENCY;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64)
    throw new RangeError("concurrency must be an integer from 1 to 64");
  input.signal?.throwIfAborted();
  const file = await ImageFile.open(input.path);
  try {
    const info = await file.handle.stat();
    const base = input.base && { path: input.base.path, manifest: validateManifest(input.base.manifest) };
    // Both files' extents at once: each is a run of xfs_io.
    const [extents, baseExtents] = await Promise.all([
      (input.listExtents ?? listExtents)(input.path),
      base ? usableBaseExtents(base, info, input.listExtents ?? listExtents) : null,
    ]);
    let reused: ChunkRef[] = [];
    let toRead = dataRanges(extents);
    if (base && baseExtents)
      ({ reused, read: toRead } = planDelta(toRead, sameMapping(extents, baseExtents), base.manifest.chunks));
    const windows = input.windows ?? new WindowPool();
    const stored = await storeRanges(file, toRead, input.chunks, concurrency, windows, input.signal);
    // The manifest returned names only chunks that are stored (unless the caller flushes).
    if (!input.deferFlush) await input.chunks.flush();
    const chunks = [...reused, ...stored.refs].sort((a, b) => a.offset - b.offset);
    // Checked like a stored one: a planning mistake fails here, not at a restore.
    const manifest = validateManifest({ version: 1, size: info.size, chunks });
    const bytes = chunks.reduce((sum, ref) => sum + ref.size, 0);
    return {
      manifest,
      stats: { chunks: chunks.length, newChunks: stored.newChunks, bytes, uploadedBytes: stored.uploadedBytes },
    };
  } finally {
    await file.close();
  }
}

/** The base's extents, or null when the base cannot serve: this very file, or a manifest of another size. */
async function usableBaseExtents(
  base: { path: string; manifest: ImageManifest },
  info: { dev: number; ino: number },
  list: (path: string) => Promise<Extent[]>,
): Promise<Extent[] | null> {
  const baseFile = await open(base.path, "r");
  const baseInfo = await baseFile.stat().finally(() => baseFile.close());
  if (baseInfo.dev === info.dev && baseInfo.ino === info.ino) return null;
  if (baseInfo.size !== base.manifest.size) return null;
  return list(base.path);
}

async function storeRanges(
  file: ImageFile,
  ranges: readonly Range[],
  chunks: ChunkStore,
  concurrency: number,
  windows: WindowPool,
  signal: AbortSignal | undefined,
): Promise<{ refs: ChunkRef[]; newChunks: number; uploadedBytes: number }> {
  const refs: ChunkRef[] = [];
  // One store per digest, even when the same bytes recur in the image.
  const storing = new Set<Digest>();
  let newChunks = 0;
  let uploadedBytes = 0;
  const pool = new TaskPool(concurrency);

  /**
   * The new chunks of one window: named, and asked of the store all in the same tick (a
   * store backed by the database answers them in one statement, not one per chunk).
   */
  const name = (pieces: { plain: Buffer; offset: number }[], window: Window) => {
    const fresh: { plain: Buffer; digest: Digest; stored: Promise<boolean>; window: Window }[] = [];
    for (const { plain, offset } of pieces) {
      if (isZero(plain)) continue;
      const digest = digestOf(plain);
      refs.push({ offset, size: plain.length, digest });
      if (storing.has(digest)) continue;
      storing.add(digest);
      const stored = chunks.has(digest);
      // Reported by its task; one never run (an earlier failure) must not go unhandled.
      stored.catch(() => undefined);
      fresh.push({ plain, digest, stored, window });
    }
    return fresh;
  };
  const store = async (chunk: { plain: Buffer; digest: Digest; stored: Promise<boolean>; window: Window }) => {
    const { plain, digest, stored, window } = chunk;
    // The window's bytes stay until this chunk is compressed (the compression reads them on
    // the threadpool); then the window may be read into again.
    window.hold();
    // Resolves once the task has a slot, not when it is done: the reading goes on meanwhile.
    await pool.add(async () => {
      let putting: Promise<void>;
      let storedBytes: number;
      try {
        if (await stored) return;
        if (looksIncompressible(plain)) {
          // Framed raw without zstd; written into the pack (copied) before putRaw returns.
          putting = chunks.putRaw
            ? chunks.putRaw(digest, plain)
            : chunks.put(digest, rawZstdFrame(plain), plain.length);
          storedBytes = rawZstdFrameLength(plain.length);
        } else {
          const compressed = await zstdChunk(plain);
          putting = chunks.put(digest, compressed, plain.length);
          storedBytes = compressed.length;
        }
      } finally {
        window.release();
      }
      await putting;
      newChunks++;
      uploadedBytes += storedBytes;
    });
  };

  let carry: Buffer | null = null;
  let carried: Window | null = null;
  try {
    for await (const { offset: windowOffset, length, window, rangeEnds } of readWindows(file, ranges, windows)) {
      signal?.throwIfAborted();
      const carriedBytes = carry?.length ?? 0;
      carry?.copy(window.buffer, CARRY_ROOM_BYTES - carriedBytes);
      // The window before is no longer read by the chunker.
      carried?.release();
      carried = window;
      const data = window.buffer.subarray(CARRY_ROOM_BYTES - carriedBytes, CARRY_ROOM_BYTES + length);
      const offset = windowOffset - carriedBytes;
      let at = 0;
      const pieces: { plain: Buffer; offset: number }[] = [];
      for (;;) {
        const cut = nextCut(data, at, data.length, rangeEnds);
        if (cut === 0) break;
        pieces.push({ plain: data.subarray(at, at + cut), offset: offset + at });
        at += cut;
        if (at === data.length) break;
      }
      for (const chunk of name(pieces, window)) await store(chunk);
      // An unfinished chunk (shorter than the maximum, no cut yet) continues in the next window.
      carry = at < data.length ? data.subarray(at) : null;
      if (carry && carry.length >= CARRY_ROOM_BYTES) throw new Error("chunker left a full chunk uncut");
    }
    carried?.release();
  } finally {
    // Let every started store finish (or fail) before the file is closed or an error returned.
    await pool.wait().catch(() => undefined);
  }
  await pool.wait();
  return { refs, newChunks, uploadedBytes };
}
