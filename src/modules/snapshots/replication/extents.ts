// Where a file's data lives on disk: its data extents (holes and unwritten extents left
// out, since they read as zeros) with their physical location, from `xfs_io -c "fiemap -v"`.
// Two reflinked images share physical extents; replication compares them to skip what an
// earlier image already stored.
import { open } from "node:fs/promises";
import { run, TOOLS } from "../../../drivers/runtime/local/host.js";

export interface Extent {
  /** Byte offset in the file. */
  offset: number;
  length: number;
  /** Byte address on the device, or null when unknown (delayed allocation, inline, encoded, or no fiemap). */
  physical: number | null;
  /** Shared with another file (reflink); informative, the comparison goes by `physical`. */
  shared: boolean;
}

const SECTOR_BYTES = 512;

// FIEMAP_EXTENT_* flags (linux/fiemap.h).
const UNKNOWN = 0x2;
const DELALLOC = 0x4;
const ENCODED = 0x8;
const DATA_ENCRYPTED = 0x80;
const NOT_ALIGNED = 0x100;
const DATA_INLINE = 0x200;
const DATA_TAIL = 0x400;
const UNWRITTEN = 0x800;
const SHARED = 0x2000;
/** Extents whose physical address does not name where their bytes are. */
const PHYSICAL_UNRELIABLE = UNKNOWN | DELALLOC | ENCODED | DATA_ENCRYPTED | NOT_ALIGNED | DATA_INLINE | DATA_TAIL;

// "   3: [40960..61439]:  33040..53519     20480 0x2001" or "   0: [0..7999]:  hole  8000"
const LINE = /^\s*\d+:\s*\[(\d+)\.\.(\d+)\]:\s*(?:hole|(\d+)\.\.(\d+))\s+(\d+)(?:\s+(0x[0-9a-fA-F]+))?\s*$/;

const HEADER = /^\s*EXT:\s+FILE-OFFSET/m;

export class FiemapParseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FiemapParseError";
  }
}

/**
 * The data extents in the output of `xfs_io -r -c "fiemap -v" <path>` (512-byte sectors),
 * clipped to `size`. Any line it does not understand is an error rather than skipped: a
 * skipped data extent would be data silently left out of a replica.
 */
export function parseFiemap(output: string, size: number): Extent[] {
  const extents: Extent[] = [];
  const lines = output.split("\n");
  let previousEnd = 0;
  for (const [index, line] of lines.entries()) {
    // The first line names the file (any characters), the second is the column header.
    if (index === 0 || line.trim() === "" || HEADER.test(line)) continue;
    const match = LINE.exec(line);
    if (!match) throw new FiemapParseError(`unexpected fiemap line: ${JSON.stringify(line.slice(0, 200))}`);
    const [, first, last, physicalFirst, physicalLast, total, flagText] = match;
    const start = Number(first) * SECTOR_BYTES;
    const end = (Number(last) + 1) * SECTOR_BYTES;
    if (start < previousEnd || end <= start || Number(total) * SECTOR_BYTES !== end - start)
      throw new FiemapParseError(`inconsistent fiemap line: ${JSON.stringify(line)}`);
    previousEnd = end;
    if (physicalFirst === undefined || start >= size) continue;
    if ((Number(physicalLast) - Number(physicalFirst) + 1) * SECTOR_BYTES !== end - start)
      throw new FiemapParseError(`inconsistent fiemap line: ${JSON.stringify(line)}`);
    const flags = flagText === undefined ? 0 : Number.parseInt(flagText, 16);
    if (flags & UNWRITTEN) continue;
    extents.push({
      offset: start,
      length: Math.min(end, size) - start,
      physical: flags & PHYSICAL_UNRELIABLE ? null : Number(physicalFirst) * SECTOR_BYTES,
      shared: (flags & SHARED) !== 0,
    });
  }
  return extents;
}

/** The whole file as one data extent of unknown location: correct for any file, no delta. */
export function wholeFile(size: number): Extent[] {
  return size === 0 ? [] : [{ offset: 0, length: size, physical: null, shared: false }];
}

/**
 * The data extents of the file at `path`, in offset order. Where fiemap is unavailable (no
 * xfs_io, a filesystem without it), the whole file counts as data: replication then reads
 * everything, zeros included, and finds no delta.
 */
export async function listExtents(path: string): Promise<Extent[]> {
  // Write back dirty pages first, so the mapping fiemap reports is where the bytes read next
  // live (a copy-on-write of a shared block still in the page cache would otherwise show the
  // old, shared extent). Cheap when the file is clean, as a sealed image is.
  const file = await open(path, "r");
  let info: Awaited<ReturnType<typeof file.stat>>;
  try {
    await file.datasync();
    info = await file.stat();
  } finally {
    await file.close();
  }
  if (info.size === 0) return [];
  let output: string;
  try {
    output = await run(TOOLS.xfsIo, ["-r", "-c", "fiemap -v", path]);
  } catch {
    return wholeFile(info.size);
  }
  // No column header: either no extent at all (a file of holes) or a failure xfs_io did not
  // report in its exit status; a file with allocated blocks is read whole then.
  if (!HEADER.test(output) && info.blocks > 0) return wholeFile(info.size);
  return parseFiemap(output, info.size);
}
