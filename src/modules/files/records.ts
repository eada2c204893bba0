// Parsing what the file scripts print (scripts.ts): everything from inside a sandbox is hostile,
// so every record is bounded and checked, and a malformed one is an error of its own stream.
import { AppError } from "../../lib/errors.js";

export type FileType = "file" | "directory" | "symlink" | "fifo" | "socket" | "char_device" | "block_device";

/** One file as the API answers it (FileInfo in the OpenAPI document). */
export interface FileInfo {
  path: string;
  name: string;
  type: FileType;
  size: string;
  /** Permission bits in octal, four digits (`0644`, `1777`). */
  mode: string;
  modified_at: string;
  accessed_at: string;
  uid: number;
  gid: number;
  links: number;
  /** A symlink's target, as stored (never followed). */
  link_target?: string;
}

/** The longest stat record line a script may print (seven decimal/hex fields). */
export const MAX_RECORD_LINE = 160;
/** Paths and names, as PATH_MAX. */
export const MAX_PATH_BYTES = 4096;

// A Map, not an object literal: a formatter rewrites numeric keys (and got octal ones wrong).
const TYPES = new Map<number, FileType>([
  [0o100000, "file"],
  [0o040000, "directory"],
  [0o120000, "symlink"],
  [0o010000, "fifo"],
  [0o140000, "socket"],
  [0o020000, "char_device"],
  [0o060000, "block_device"],
]);

export const malformed = (what: string) =>
  new AppError("failed_precondition", `the sandbox answered a malformed ${what}`, {
    details: { reason: "malformed_output" },
  });

const UINT = /^[0-9]{1,20}$/;

/** `%f %s %X %Y %u %g %h` (scripts.ts STAT_FORMAT) as a FileInfo of `path`. */
export function parseStatLine(line: string, path: string): FileInfo {
  const fields = line.split(" ");
  if (line.length > MAX_RECORD_LINE || fields.length !== 7) throw malformed("stat record");
  const [rawMode, size, atime, mtime, uid, gid, links] = fields as [
    string,
    string,
    string,
    string,
    string,
    string,
    string,
  ];
  if (!/^[0-9a-f]{1,8}$/.test(rawMode) || ![size, atime, mtime, uid, gid, links].every((f) => UINT.test(f))) {
    throw malformed("stat record");
  }
  const mode = Number.parseInt(rawMode, 16);
  const type = TYPES.get(mode & 0o170000);
  if (!type) throw malformed("file type");
  const slash = path.lastIndexOf("/");
  return {
    path,
    name: path === "/" ? "/" : path.slice(slash + 1),
    type,
    size: BigInt(size).toString(),
    mode: (mode & 0o7777).toString(8).padStart(4, "0"),
    modified_at: isoSeconds(mtime),
    accessed_at: isoSeconds(atime),
    uid: Number(uid),
    gid: Number(gid),
    links: Number(links),
  };
}

function isoSeconds(seconds: string): string {
  const ms = Number(seconds) * 1000;
  if (!Number.isSafeInteger(ms) || ms > 8.64e15) throw malformed("time");
  return new Date(ms).toISOString();
}

/** A name as the API shows it: UTF-8 text when it is that, else invalid bytes replaced (names are bytes). */
export function nameText(bytes: Buffer): string {
  return bytes.toString("utf8");
}

/**
 * Splits LIST's output (`STAT\n./NAME\0` records) incrementally: `push` returns the records
 * complete so far; a record longer than its bounds is malformed. `end` is the record `.`/`.`
 * (WATCH's end of a pass).
 */
export class RecordSplitter {
  private pending: Buffer = Buffer.alloc(0);

  push(data: Buffer): ({ line: string; name: Buffer } | "end")[] {
    this.pending = this.pending.length === 0 ? data : Buffer.concat([this.pending, data]);
    const out: ({ line: string; name: Buffer } | "end")[] = [];
    for (;;) {
      const newline = this.pending.indexOf(0x0a);
      if (newline < 0) {
        if (this.pending.length > MAX_RECORD_LINE) throw malformed("listing");
        break;
      }
      if (newline > MAX_RECORD_LINE) throw malformed("listing");
      const nul = this.pending.indexOf(0x00, newline + 1);
      if (nul < 0) {
        if (this.pending.length - newline > MAX_PATH_BYTES + 3) throw malformed("listing");
        break;
      }
      if (nul - newline - 1 > MAX_PATH_BYTES + 2) throw malformed("listing");
      const line = this.pending.subarray(0, newline).toString("latin1");
      const name = this.pending.subarray(newline + 1, nul);
      this.pending = this.pending.subarray(nul + 1);
      if (line === "." && name.length === 1 && name[0] === 0x2e) {
        out.push("end");
        continue;
      }
      if (name.length < 3 || name[0] !== 0x2e || name[1] !== 0x2f || name.indexOf(0x2f, 2) >= 0) {
        throw malformed("listing");
      }
      out.push({ line, name: Buffer.from(name.subarray(2)) });
    }
    return out;
  }

  /** Whether a partial record is left (the output ended inside one). */
  get partial(): boolean {
    return this.pending.length > 0;
  }
}

/** A directory path joined with an entry's name. */
export function childPath(dir: string, name: string): string {
  return dir === "/" ? `/${name}` : `${dir}/${name}`;
}
