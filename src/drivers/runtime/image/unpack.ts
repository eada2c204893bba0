// Extracts one image layer (plain or gzip tar) into an empty directory in overlayfs form, so
// the directory can serve as an overlay lower dir: OCI whiteouts become 0:0 character
// devices, opaque markers the `trusted.overlay.opaque` xattr. Every decision about a path
// is made by planEntry (path-safety.ts); this file only carries the decisions out.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  futimesSync,
  lchownSync,
  linkSync,
  lutimesSync,
  mkdirSync,
  openSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { readdir } from "node:fs/promises";
import path from "node:path";
import { Readable } from "node:stream";
import { createGunzip } from "node:zlib";
import { ImageError } from "./errors.js";
import { type EntryType, type NodeKind, planEntry } from "./path-safety.js";
import { asBuffer, readTar, TarFormatError, type TarHeader } from "./tar.js";

export interface UnpackOptions {
  /** The layer's diff ID (`sha256:` of the uncompressed tar); a mismatch fails the unpack. */
  expectedDiffId?: string;
}

export interface UnpackResult {
  /** `sha256:` of the uncompressed tar stream. */
  diffId: string;
  entries: number;
  /** Things that were skipped or could not be kept (device nodes mknod refused, xattrs). */
  notes: string[];
}

interface Metadata {
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
}

const GZIP_MAGIC = [0x1f, 0x8b];
const GUNZIP_CHUNK_BYTES = 256 * 1024;
const ZSTD_MAGIC = [0x28, 0xb5, 0x2f, 0xfd];
const OVERLAY_XATTR_PREFIX = "trusted.overlay.";
const XATTR_NAME_RE = /^[\x21-\x3c\x3e-\x7e]+$/;

function run(file: string, args: string[], input?: string, cwd?: string): Promise<{ stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { cwd, maxBuffer: 16 * 1024 * 1024 }, (error, _stdout, stderr) => {
      if (error) reject(Object.assign(error, { stderr: String(stderr) }));
      else resolve({ stderr: String(stderr) });
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

function startsWith(bytes: Buffer, magic: number[]): boolean {
  return magic.every((byte, i) => bytes[i] === byte);
}

/** Yields the (decompressed) tar bytes of a layer, gzip detected by its magic number. */
async function* decompressed(source: AsyncIterable<Buffer | Uint8Array | string>): AsyncGenerator<Buffer> {
  const iterator = source[Symbol.asyncIterator]();
  let head = Buffer.alloc(0);
  let done = false;
  while (head.length < 4 && !done) {
    const next = await iterator.next();
    if (next.done) done = true;
    else head = Buffer.concat([head, asBuffer(next.value)]);
  }
  async function* rest(): AsyncGenerator<Buffer> {
    if (head.length > 0) yield head;
    if (done) return;
    for (;;) {
      const next = await iterator.next();
      if (next.done) return;
      yield asBuffer(next.value);
    }
  }
  if (startsWith(head, ZSTD_MAGIC)) throw new ImageError("unsupported", "zstd-compressed layers are not supported");
  if (!startsWith(head, GZIP_MAGIC)) {
    yield* rest();
    return;
  }
  // 256 KiB output chunks: with zlib's default 16 KiB, gunzip of a 234 MB layer took 2.6 s
  // instead of 1.5 s (one pass through the thread pool and the stream per chunk).
  const gunzip = createGunzip({ chunkSize: GUNZIP_CHUNK_BYTES });
  const input = Readable.from(rest());
  input.on("error", (error) => gunzip.destroy(error));
  input.pipe(gunzip);
  try {
    for await (const chunk of gunzip) yield chunk as Buffer;
  } finally {
    input.destroy();
    gunzip.destroy();
  }
}

async function* hashing(source: AsyncIterable<Buffer>, hash: ReturnType<typeof createHash>): AsyncGenerator<Buffer> {
  for await (const chunk of source) {
    hash.update(chunk);
    yield chunk;
  }
}

/** The getfattr/setfattr dump quoting: anything but printable ASCII (and `\`) as `\ooo`. */
function quoteDumpPath(relative: string): string {
  let out = "";
  for (const byte of Buffer.from(relative === "" ? "." : relative)) {
    out +=
      byte > 0x20 && byte < 0x7f && byte !== 0x5c
        ? String.fromCharCode(byte)
        : `\\${byte.toString(8).padStart(3, "0")}`;
  }
  return out;
}

/** One `setfattr --restore` run for many paths (relative to `root`); returns its complaints. */
async function restoreXattrs(root: string, xattrs: Map<string, Map<string, Buffer>>): Promise<string[]> {
  if (xattrs.size === 0) return [];
  let dump = "";
  for (const [relative, attributes] of xattrs) {
    dump += `# file: ${quoteDumpPath(relative)}\n`;
    for (const [name, value] of attributes) dump += `${name}=0s${value.toString("base64")}\n`;
    dump += "\n";
  }
  try {
    await run("setfattr", ["-h", "--restore=-"], dump, root);
    return [];
  } catch (error) {
    const { code, stderr } = error as { code?: unknown; stderr?: string };
    if (code === "ENOENT") {
      throw new ImageError("unsupported", "setting xattrs needs setfattr (Debian package attr)", { cause: error });
    }
    const lines = (stderr ?? "").split("\n").filter((line) => line.trim() !== "");
    return lines.length > 0 ? lines : [String(error)];
  }
}

function entryTypeOf(header: TarHeader): EntryType {
  if (typeof header.type === "object") {
    throw new ImageError("unsupported", `unsupported tar entry type '${header.type.unsupported}': "${header.name}"`);
  }
  for (const key of header.otherPax.keys()) {
    if (key.startsWith("GNU.sparse.")) throw new ImageError("unsupported", `sparse file in layer: "${header.name}"`);
  }
  return header.type;
}

/**
 * Unpacks a layer into `targetDir`, which must exist and be empty. Throws ImageError
 * ("unsafe_layer") on a hostile path, ("digest_mismatch") when the diff ID differs.
 */
export async function unpackLayer(
  source: AsyncIterable<Buffer | Uint8Array | string>,
  targetDir: string,
  options: UnpackOptions = {},
): Promise<UnpackResult> {
  if ((await readdir(targetDir)).length > 0) throw new Error(`unpack target ${targetDir} is not empty`);
  const isRoot = process.getuid?.() === 0;
  const kinds = new Map<string, NodeKind>([["", "dir"]]);
  const dirMetadata = new Map<string, Metadata>();
  const xattrs = new Map<string, Map<string, Buffer>>();
  const opaqueDirs = new Set<string>();
  const notes: string[] = [];
  const hash = createHash("sha256");
  const full = (relative: string) => (relative === "" ? targetDir : path.join(targetDir, relative));

  const forget = (relative: string) => {
    const prefix = `${relative}/`;
    for (const map of [kinds, dirMetadata, xattrs]) {
      for (const key of [...map.keys()]) if (key === relative || key.startsWith(prefix)) map.delete(key);
    }
    for (const key of [...opaqueDirs]) if (key === relative || key.startsWith(prefix)) opaqueDirs.delete(key);
  };

  const makeDir = (relative: string) => {
    if (kinds.get(relative) === "whiteout") {
      unlinkSync(full(relative));
      opaqueDirs.add(relative);
    }
    mkdirSync(full(relative), { mode: 0o755 });
    kinds.set(relative, "dir");
    // A parent the layer never lists: root-owned 0755 whatever our umask (as Docker does).
    dirMetadata.set(relative, { mode: 0o755, uid: 0, gid: 0, mtime: Date.now() / 1000 });
  };

  const mknod = async (relative: string, type: "c" | "b", major: number, minor: number, mode: number) => {
    await run("mknod", ["-m", (mode & 0o7777).toString(8), full(relative), type, String(major), String(minor)]);
  };

  // Synchronous fs calls: each is a few microseconds, where an awaited one costs a thread-pool
  // round trip; per-entry overhead dominated unpacking (bench/README.md "Image pull").
  const setOwnerModeTime = (relative: string, meta: Metadata, isSymlink: boolean) => {
    const target = full(relative);
    if (isRoot) lchownSync(target, meta.uid, meta.gid);
    if (!isSymlink) chmodSync(target, meta.mode);
    lutimesSync(target, meta.mtime, meta.mtime);
  };

  let entries = 0;
  const tarBytes = hashing(decompressed(source), hash);
  try {
    for await (const entry of readTar(tarBytes)) {
      const { header } = entry;
      const type = entryTypeOf(header);
      entries++;
      const plan = planEntry({ name: header.name, type, linkname: header.linkname }, (p) => kinds.get(p));
      if (plan.kind === "reject") throw new ImageError("unsafe_layer", `unsafe layer entry: ${plan.reason}`);
      if (plan.kind === "skip") {
        notes.push(`skipped ${plan.reason}`);
        continue;
      }
      for (const parent of plan.parentsToCreate) makeDir(parent);
      if (plan.kind === "opaque") {
        opaqueDirs.add(plan.dir);
        continue;
      }
      if (plan.kind === "whiteout") {
        await mknod(plan.path, "c", 0, 0, 0);
        kinds.set(plan.path, "whiteout");
        continue;
      }

      const relative = plan.path;
      const target = full(relative);
      if (plan.replace === "remove-tree") {
        rmSync(target, { recursive: true, force: true });
        forget(relative);
      } else if (plan.replace === "unlink") {
        unlinkSync(target);
        forget(relative);
      }
      const meta: Metadata = { mode: header.mode, uid: header.uid, gid: header.gid, mtime: header.mtime };
      let kind: NodeKind;
      switch (type) {
        case "dir":
          if (!plan.existingDir) mkdirSync(target, { mode: 0o700 });
          if (plan.opaque) opaqueDirs.add(relative);
          dirMetadata.set(relative, meta);
          kind = "dir";
          break;
        case "file": {
          // O_EXCL|O_NOFOLLOW: even a wrong record of the tree cannot make us write through a link.
          const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
          const fd = openSync(target, flags, 0o600);
          try {
            for await (const chunk of entry.body()) {
              let written = 0;
              while (written < chunk.length) written += writeSync(fd, chunk, written);
            }
            if (isRoot) fchownSync(fd, meta.uid, meta.gid);
            fchmodSync(fd, meta.mode);
            futimesSync(fd, meta.mtime, meta.mtime);
          } finally {
            closeSync(fd);
          }
          kind = "file";
          break;
        }
        case "hardlink": {
          const linkTarget = plan.hardlinkTarget as string;
          linkSync(full(linkTarget), target);
          kind = kinds.get(linkTarget) as NodeKind;
          const linkedXattrs = xattrs.get(linkTarget);
          if (linkedXattrs) xattrs.set(relative, linkedXattrs);
          break;
        }
        case "symlink":
          symlinkSync(header.linkname, target);
          setOwnerModeTime(relative, meta, true);
          kind = "symlink";
          break;
        case "char-device":
        case "block-device":
          try {
            await mknod(relative, type === "char-device" ? "c" : "b", header.devmajor, header.devminor, meta.mode);
          } catch (error) {
            notes.push(`skipped device "${relative}" (${header.devmajor}:${header.devminor}): ${String(error).trim()}`);
            continue;
          }
          setOwnerModeTime(relative, meta, false);
          kind = "special";
          break;
        case "fifo":
          await run("mkfifo", ["-m", (meta.mode & 0o7777).toString(8), target]);
          setOwnerModeTime(relative, meta, false);
          kind = "special";
          break;
      }
      kinds.set(relative, kind);

      const kept = new Map<string, Buffer>();
      for (const [name, value] of header.xattrs) {
        if (name.startsWith(OVERLAY_XATTR_PREFIX)) notes.push(`dropped xattr ${name} of "${relative}"`);
        else if (!XATTR_NAME_RE.test(name)) notes.push(`dropped xattr with a malformed name on "${relative}"`);
        else kept.set(name, value);
      }
      if (kept.size > 0 && type !== "hardlink") xattrs.set(relative, kept);
    }
  } catch (error) {
    if (error instanceof TarFormatError) throw new ImageError("unsafe_layer", `malformed layer: ${error.message}`);
    throw error;
  } finally {
    // Closes the gunzip stream when extraction stopped half way.
    await tarBytes.return(undefined);
  }

  const diffId = `sha256:${hash.digest("hex")}`;
  if (options.expectedDiffId !== undefined && options.expectedDiffId !== diffId) {
    throw new ImageError("digest_mismatch", `layer diff ID is ${diffId}, expected ${options.expectedDiffId}`);
  }

  for (const complaint of await restoreXattrs(targetDir, xattrs)) notes.push(`xattr not kept: ${complaint}`);
  if (opaqueDirs.size > 0) {
    const markers = new Map(
      [...opaqueDirs].map((dir) => [dir, new Map([["trusted.overlay.opaque", Buffer.from("y")]])]),
    );
    const complaints = await restoreXattrs(targetDir, markers);
    if (complaints.length > 0) throw new ImageError("unsupported", `cannot mark opaque directories: ${complaints[0]}`);
  }
  // Directories last and deepest first: creating their children changed their mtimes.
  if (!dirMetadata.has("")) dirMetadata.set("", { mode: 0o755, uid: 0, gid: 0, mtime: Date.now() / 1000 });
  const dirs = [...dirMetadata.keys()].sort((a, b) => b.split("/").length - a.split("/").length || (a < b ? 1 : -1));
  for (const dir of dirs) setOwnerModeTime(dir, dirMetadata.get(dir) as Metadata, false);
  return { diffId, entries, notes };
}
