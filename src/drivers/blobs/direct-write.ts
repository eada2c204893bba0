// Writing an object's temp file with O_DIRECT: the bytes go from an aligned buffer straight
// to the disk instead of through the page cache. A buffered write costs the kernel a copy
// into the page cache, the dirty-page accounting and the writeback the fsync then waits for
// (measured here for 1 GiB in 4 MiB writes plus fsync: 420-3,240 ms of system CPU buffered,
// 70-95 ms direct), and an upload of gigabytes would fill the host's page cache with pages
// nobody reads again, throttling every other writer on the host meanwhile.
//
// Direct I/O wants the memory, the file offset and the length aligned to the file system's
// sector size (at most 4096 here); JavaScript cannot see an address, so each buffer's
// aligned place is found by probing (the kernel answers EINVAL for misaligned memory). The
// pieces written are copied into two such buffers in turn (one filled while the other is
// written); the tail is written padded to a whole sector and the file truncated to its size.
// Where the file system refuses O_DIRECT (or no aligned place is found) the caller writes
// buffered as before.
import { constants } from "node:fs";
import { type FileHandle, open, unlink } from "node:fs/promises";

/** Alignment asked of memory, offsets and lengths (the largest sector size in use). */
const ALIGN = 4096;
/** Bytes per direct write. */
export const DIRECT_WRITE_BYTES = 4 * 1_048_576;
/**
 * Objects smaller than this are written buffered: a direct write pays a whole sector per
 * object and its two buffers, for a copy the page cache makes cheaply at this size.
 */
export const DIRECT_WRITE_MIN_BYTES = 4 * 1_048_576;
/**
 * Buffers kept for reuse across writes (a fresh one pays a page fault per 4 KiB and a probe):
 * two per object written at once, eight objects; dropped after a minute with no direct write.
 */
const KEEP = 16;
const IDLE_MS = 60_000;

interface AlignedBuffer {
  raw: Buffer;
  /** The aligned DIRECT_WRITE_BYTES of `raw`; null until probed, false when no place was found. */
  view: Buffer | null | false;
}

const free: AlignedBuffer[] = [];
let idle: NodeJS.Timeout | null = null;

function takeBuffer(): AlignedBuffer {
  if (idle) clearTimeout(idle);
  idle = setTimeout(() => free.splice(0), IDLE_MS);
  idle.unref();
  return free.pop() ?? { raw: Buffer.allocUnsafeSlow(DIRECT_WRITE_BYTES + ALIGN), view: null };
}

function giveBack(buffer: AlignedBuffer): void {
  if (free.length < KEEP && buffer.view !== false) free.push(buffer);
}

/**
 * The aligned view of `buffer` for direct writes to `handle`'s file (probed once per buffer
 * with a write of one sector at offset 0 of that file, which the object's own bytes or its
 * final truncation replace), or null.
 */
async function aligned(buffer: AlignedBuffer, handle: FileHandle): Promise<Buffer | null> {
  if (buffer.view === null) {
    buffer.view = false;
    for (let offset = 0; offset < ALIGN; offset += 16) {
      try {
        await handle.write(buffer.raw, offset, ALIGN, 0);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "EINVAL") continue;
        throw error;
      }
      buffer.view = buffer.raw.subarray(offset, offset + DIRECT_WRITE_BYTES);
      break;
    }
  }
  return buffer.view === false ? null : buffer.view;
}

/**
 * A temp file being written directly. open() answers null when direct writes cannot be used
 * there (the caller then opens the file itself); the file it made is then removed by the
 * caller as any temp file.
 */
export class DirectWriter {
  private readonly buffers: [AlignedBuffer, AlignedBuffer];
  private current = 0;
  private filled = 0;
  private position = 0;
  private size = 0;
  /** The write of the other buffer, under way. */
  private writing: Promise<unknown> = Promise.resolve();

  private constructor(
    readonly handle: FileHandle,
    private readonly views: [Buffer, Buffer],
    buffers: [AlignedBuffer, AlignedBuffer],
  ) {
    this.buffers = buffers;
  }

  /**
   * Creates `file` (O_EXCL, `mode`) for direct writes; null when they cannot be used there,
   * with no file left at `file` (the kernel may create it before it refuses O_DIRECT).
   */
  static async open(file: string, mode: number): Promise<DirectWriter | null> {
    let handle: FileHandle;
    try {
      handle = await open(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_DIRECT, mode);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EINVAL") throw error;
      await unlink(file).catch(() => undefined);
      return null;
    }
    const buffers: [AlignedBuffer, AlignedBuffer] = [takeBuffer(), takeBuffer()];
    try {
      const first = await aligned(buffers[0], handle);
      const second = first && (await aligned(buffers[1], handle));
      if (first && second) return new DirectWriter(handle, [first, second], buffers);
    } catch (error) {
      await handle.close().catch(() => undefined);
      throw error;
    }
    for (const buffer of buffers) giveBack(buffer);
    await handle.close();
    await unlink(file);
    return null;
  }

  /** Appends `piece` (copied: the caller may reuse it once this resolves). */
  async write(piece: Uint8Array): Promise<void> {
    let at = 0;
    while (at < piece.length) {
      const view = this.views[this.current] as Buffer;
      const take = Math.min(piece.length - at, view.length - this.filled);
      view.set(piece.subarray(at, at + take), this.filled);
      this.filled += take;
      at += take;
      this.size += take;
      if (this.filled === view.length) await this.flip();
    }
  }

  /**
   * Writes what is left (padded to a whole sector), truncates the file to its size and
   * fsyncs it; answers the size. The handle is closed by close().
   */
  async finish(): Promise<number> {
    if (this.filled > 0) {
      const view = this.views[this.current] as Buffer;
      const padded = Math.ceil(this.filled / ALIGN) * ALIGN;
      view.fill(0, this.filled, padded);
      await this.writing;
      await this.writeAll(view, padded, this.position);
    } else await this.writing;
    await this.handle.truncate(this.size);
    await this.handle.sync();
    return this.size;
  }

  async close(): Promise<void> {
    await this.writing.catch(() => undefined);
    await this.handle.close();
    for (const buffer of this.buffers) giveBack(buffer);
  }

  /** Starts writing the full current buffer and switches to the other once its own write is done. */
  private async flip(): Promise<void> {
    const view = this.views[this.current] as Buffer;
    const position = this.position;
    await this.writing;
    this.writing = this.writeAll(view, view.length, position);
    // Reported by finish() or the next flip; never unhandled meanwhile.
    this.writing.catch(() => undefined);
    this.position += view.length;
    this.current = 1 - this.current;
    this.filled = 0;
  }

  private async writeAll(view: Buffer, length: number, position: number): Promise<void> {
    let done = 0;
    while (done < length) {
      const { bytesWritten } = await this.handle.write(view, done, length - done, position + done);
      if (bytesWritten <= 0 || bytesWritten % ALIGN !== 0)
        throw new Error(`a direct write wrote ${bytesWritten} bytes`);
      done += bytesWritten;
    }
  }
}
