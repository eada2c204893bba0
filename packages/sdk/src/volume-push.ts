// Pushes a local directory as a new version of a volume (docs/volumes.md "Pushing a
// directory"): cuts every regular file into 16 MiB chunks and hashes them (BLAKE3), uploads
// the manifest and tries to publish; when blobs are missing, asks which blobs the volume's
// organization lacks, uploads only those (in parallel, to their presigned URLs) and publishes. A rerun after an interruption
// uploads only what did not land (stored blobs answer `present`). A publish that lost a
// race to another push is rebased: a new push over the new current version.
//
// One implementation for the SDK (`warren.volumes.push`), the CLI (`warren volume push`) and
// scripts/volume-push.ts.
import { createHash } from "node:crypto";
import { statSync } from "node:fs";
import { mkdir, open, readdir, readFile, rename, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Blake3Hasher, blake3 } from "@napi-rs/blake-hash";
import type { VolumePusher } from "./resources.js";
import { type Chunk, EarlyUploads, PushError, putChunk } from "./volume-upload.js";

export { PushError } from "./volume-upload.js";

/**
 * The chunk size: the largest a manifest may name. Fewer, larger blobs cost fewer requests
 * and fsyncs per pushed byte, and a file of one chunk is one blob that a host can link into
 * its volume cache instead of copying (docs/volumes.md). Versions pushed with 4 MiB chunks
 * stay readable (a manifest names each chunk's size), and a hash cache's entries keep them.
 */
export const CHUNK_BYTES = 16 * 1_048_576;
const BLOBS_PER_REQUEST = 1000;

const MAX_REBASES = 5;

export interface PushOptions {
  apiUrl: string;
  apiKey: string;
  volumeId: string;
  dir: string;
  /** Uploads (and files hashed) at once; default 8. */
  concurrency?: number;
  /** A human line per step; `progress` tells the phase and, while uploading, the bytes done of the total. */
  onProgress?: (line: string, progress: PushProgress) => void;
  signal?: AbortSignal;
  /**
   * A file of the digests of this directory's files from earlier pushes, keyed by path and
   * reused while size, mtime, ctime and inode are unchanged (as git's index does); none:
   * every file is read and hashed.
   */
  hashCache?: string;
}

export interface PushProgress {
  phase: "hash" | "upload" | "publish" | "done";
  doneBytes?: number;
  totalBytes?: number;
}

interface CachedFile {
  size: string;
  mtimeNs: string;
  ctimeNs: string;
  ino: string;
  digest: string;
  chunks: { digest: string; size: number }[];
}

/** Where the CLI keeps the hash cache of `dir`: under $XDG_CACHE_HOME (or ~/.cache). */
export function defaultHashCache(dir: string): string {
  const base = process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache");
  const name = createHash("sha256").update(path.resolve(dir)).digest("hex").slice(0, 32);
  return path.join(base, "warren", "volume-push", `${name}.json`);
}

async function readHashCache(file: string | undefined): Promise<Map<string, CachedFile>> {
  if (!file) return new Map();
  try {
    const parsed = JSON.parse(await readFile(file, "utf8")) as { version?: number; files?: Record<string, CachedFile> };
    return parsed.version === 1 && parsed.files ? new Map(Object.entries(parsed.files)) : new Map();
  } catch {
    return new Map();
  }
}

export interface PushResult {
  version: Record<string, string>;
  files: number;
  bytes: number;
  blobs: number;
  uploadedBlobs: number;
  uploadedBytes: number;
  rebases: number;
}

interface FileEntry {
  path: string;
  mode: number;
  size: number;
  digest: string;
  chunks: { digest: string; size: number }[];
}

/** Regular files under `dir` (relative, `/`-separated); symlinks and special files are skipped. */
async function walk(dir: string, skipped: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    const full = path.join(entry.parentPath, entry.name);
    if (entry.isFile()) out.push(path.relative(dir, full).split(path.sep).join("/"));
    else if (!entry.isDirectory()) skipped.push(path.relative(dir, full));
  }
  return out.sort();
}

/** Chunk buffers reused across files: a fresh 16 MiB buffer per small file costs more than hashing it. */
const spareBuffers: Buffer[] = [];

async function hashFile(root: string, rel: string): Promise<{ entry: FileEntry; chunks: Chunk[] }> {
  const full = path.join(root, rel);
  const handle = await open(full, "r");
  const buffer = spareBuffers.pop() ?? Buffer.allocUnsafe(CHUNK_BYTES);
  try {
    const info = await handle.stat();
    const whole = new Blake3Hasher();
    const single = info.size > 0 && info.size <= CHUNK_BYTES;
    const chunks: Chunk[] = [];
    let offset = 0;
    for (;;) {
      let filled = 0;
      while (filled < CHUNK_BYTES) {
        const { bytesRead } = await handle.read(buffer, filled, CHUNK_BYTES - filled, offset + filled);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      if (filled === 0) break;
      const piece = buffer.subarray(0, filled);
      if (single && chunks.length > 0) throw new PushError(`${full} changed while it was pushed`);
      // A one-chunk file's digest is its chunk's: hashed once.
      if (!single) whole.update(piece);
      chunks.push({ digest: `blake3:${blake3(piece).toString("hex")}`, size: filled, file: full, offset });
      offset += filled;
      if (filled < CHUNK_BYTES) break;
    }
    const entry: FileEntry = {
      path: rel,
      mode: info.mode & 0o777,
      size: offset,
      digest: single && chunks[0] ? chunks[0].digest : `blake3:${whole.digest("hex")}`,
      chunks: chunks.map((c) => ({ digest: c.digest, size: c.size })),
    };
    return { entry, chunks };
  } finally {
    spareBuffers.push(buffer);
    await handle.close();
  }
}

async function pool<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

export async function pushDirectory(options: PushOptions): Promise<PushResult> {
  const concurrency = options.concurrency ?? 8;
  const report = options.onProgress ?? (() => undefined);
  let phase: PushProgress["phase"] = "hash";
  const progress = (line: string, bytes?: { doneBytes: number; totalBytes: number }) =>
    report(line, { phase, ...bytes });
  const signal = options.signal;
  const base = options.apiUrl.replace(/\/+$/, "");
  const api = async (method: string, route: string, body?: unknown) => {
    const res = await fetch(`${base}${route}`, {
      method,
      headers: { authorization: `Bearer ${options.apiKey}`, "content-type": "application/json" },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal,
    });
    const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
    return { status: res.status, json };
  };
  const put = async (url: string, data: Uint8Array) => {
    const res = await fetch(url, {
      method: "PUT",
      body: data as unknown as BodyInit,
      headers: { "content-type": "application/octet-stream" },
      signal,
    });
    if (res.status >= 300) throw new PushError(`upload refused: ${res.status} ${await res.text()}`);
    await res.arrayBuffer().catch(() => undefined);
  };

  const skipped: string[] = [];
  const paths = await walk(options.dir, skipped);
  if (skipped.length > 0) progress(`skipping ${skipped.length} entries that are not regular files or directories`);
  const files: FileEntry[] = [];
  const chunkOf = new Map<string, Chunk>();
  let bytes = 0;
  const cached = await readHashCache(options.hashCache);
  const fresh = new Map<string, CachedFile>();
  // Files changed this close to the hashing may change again within the same mtime: not cached (git's racy clean).
  const racyAfterNs = (BigInt(Date.now()) - 2000n) * 1_000_000n;
  let reused = 0;
  const toHash: string[] = [];
  for (const rel of paths) {
    const info = statSync(path.join(options.dir, rel), { bigint: true });
    const key = {
      size: String(info.size),
      mtimeNs: String(info.mtimeNs),
      ctimeNs: String(info.ctimeNs),
      ino: String(info.ino),
    };
    const hit = cached.get(rel);
    if (
      hit &&
      hit.size === key.size &&
      hit.mtimeNs === key.mtimeNs &&
      hit.ctimeNs === key.ctimeNs &&
      hit.ino === key.ino
    ) {
      const full = path.join(options.dir, rel);
      files.push({
        path: rel,
        mode: Number(info.mode) & 0o777,
        size: Number(info.size),
        digest: hit.digest,
        chunks: hit.chunks,
      });
      bytes += Number(info.size);
      // Offsets from the chunks' own sizes: an entry cached under another chunk size holds.
      let offset = 0;
      for (const chunk of hit.chunks) {
        if (!chunkOf.has(chunk.digest)) chunkOf.set(chunk.digest, { ...chunk, file: full, offset });
        offset += chunk.size;
      }
      fresh.set(rel, hit);
      reused++;
    } else toHash.push(rel);
  }
  // Files to hash are new or changed, so their blobs are likely missing: the push starts
  // first, and they are asked for and uploaded while later files are still being hashed.
  const startPush = async () => {
    const start = await api("POST", `/v1/volumes/${encodeURIComponent(options.volumeId)}/pushes`, {});
    if (start.status !== 200) throw new PushError(`StartVolumePush: ${start.status} ${JSON.stringify(start.json)}`);
    return start.json;
  };
  let uploadedBlobs = 0;
  let uploadedBytes = 0;
  let started = toHash.length > 0 ? await startPush() : null;
  let lastEarlyReport = 0;
  const early = started
    ? new EarlyUploads({
        concurrency,
        ask: (blobs) => api("POST", `/v1/volume-pushes/${String(started?.push_id)}/blob-uploads`, { blobs }),
        put: (url, chunk) => putChunk(url, chunk, signal),
        uploaded: (chunk, queuedBytes, doneBytes) => {
          uploadedBlobs++;
          uploadedBytes += chunk.size;
          phase = "upload";
          if (Date.now() - lastEarlyReport < 1000) return;
          lastEarlyReport = Date.now();
          // The total is what was found missing so far (it grows while files are hashed).
          progress(`uploaded ${doneBytes} of ${queuedBytes} bytes`, { doneBytes, totalBytes: queuedBytes });
        },
      })
    : null;
  await pool(toHash, concurrency, async (rel) => {
    const info = statSync(path.join(options.dir, rel), { bigint: true });
    const { entry, chunks } = await hashFile(options.dir, rel);
    files.push(entry);
    bytes += entry.size;
    early?.add(chunks);
    for (const chunk of chunks) if (!chunkOf.has(chunk.digest)) chunkOf.set(chunk.digest, chunk);
    if (info.mtimeNs < racyAfterNs && info.ctimeNs < racyAfterNs && BigInt(entry.size) === info.size) {
      const key = {
        size: String(info.size),
        mtimeNs: String(info.mtimeNs),
        ctimeNs: String(info.ctimeNs),
        ino: String(info.ino),
      };
      fresh.set(rel, { ...key, digest: entry.digest, chunks: entry.chunks });
    }
  });
  if (reused > 0) progress(`${reused} files unchanged since the last push (hash cache)`);
  const saveCache = async () => {
    // Every file found as it was cached, and nothing else cached: the file says it already.
    if (!options.hashCache || (reused === paths.length && cached.size === fresh.size)) return;
    await mkdir(path.dirname(options.hashCache), { recursive: true });
    const tmp = `${options.hashCache}.tmp-${process.pid}`;
    await writeFile(tmp, JSON.stringify({ version: 1, files: Object.fromEntries(fresh) }));
    await rename(tmp, options.hashCache);
  };
  files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  progress(`hashed ${files.length} files, ${bytes} bytes, ${chunkOf.size} distinct blobs`);
  if (early) {
    await early.finish();
    progress(`uploaded ${uploadedBlobs} blobs`);
  }
  phase = "publish";
  const manifest = Buffer.from(JSON.stringify({ version: 1, files }));

  const missingBlobs = (res: { status: number; json: Record<string, unknown> }) =>
    res.status === 400 && Boolean((res.json.details as { missing_digests?: unknown } | undefined)?.missing_digests);
  /** Asks which blobs the push lacks and uploads those. */
  const uploadMissing = async (pushId: string) => {
    const digests = [...chunkOf.keys()];
    const missing: Chunk[] = [];
    const urls = new Map<string, string>();
    for (let i = 0; i < digests.length; i += BLOBS_PER_REQUEST) {
      const blobs = digests.slice(i, i + BLOBS_PER_REQUEST).map((digest) => ({
        digest,
        size_bytes: String(chunkOf.get(digest)?.size ?? 0),
      }));
      const res = await api("POST", `/v1/volume-pushes/${pushId}/blob-uploads`, { blobs });
      if (res.status !== 200)
        throw new PushError(`RequestVolumeBlobUploads: ${res.status} ${JSON.stringify(res.json)}`);
      for (const upload of res.json.uploads as { digest: string; present: boolean; upload_url: string }[]) {
        if (upload.present) continue;
        missing.push(chunkOf.get(upload.digest) as Chunk);
        urls.set(upload.digest, upload.upload_url);
      }
    }
    const toUpload = missing.reduce((sum, chunk) => sum + chunk.size, 0);
    phase = "upload";
    progress(`${digests.length - missing.length} blobs present, uploading ${missing.length} (${toUpload} bytes)`, {
      doneBytes: 0,
      totalBytes: toUpload,
    });
    let done = 0;
    let lastReport = Date.now();
    await pool(missing, concurrency, async (chunk) => {
      await putChunk(urls.get(chunk.digest) as string, chunk, signal);
      uploadedBlobs++;
      uploadedBytes += chunk.size;
      done += chunk.size;
      if (Date.now() - lastReport > 1000) {
        lastReport = Date.now();
        progress(`uploaded ${done} of ${toUpload} bytes`, { doneBytes: done, totalBytes: toUpload });
      }
    });
    progress(`uploaded ${missing.length} blobs`, { doneBytes: toUpload, totalBytes: toUpload });
    phase = "publish";
  };
  for (let rebases = 0; rebases <= MAX_REBASES; rebases++) {
    const start = started ?? (await startPush());
    started = null;
    const pushId = String(start.push_id);
    if (manifest.length > Number(start.max_manifest_bytes)) {
      throw new PushError(`the manifest (${manifest.length} bytes) is over max_manifest_bytes`);
    }
    // The manifest and a publish first: a tree whose blobs are all stored (a re-push, or a
    // small change after one) costs no upload request. Missing blobs are named in the refusal.
    await put(String(start.manifest_upload_url), manifest);
    let published = await api("POST", `/v1/volume-pushes/${pushId}/publish`, {});
    if (missingBlobs(published)) {
      await uploadMissing(pushId);
      published = await api("POST", `/v1/volume-pushes/${pushId}/publish`, {});
    }
    if (published.status === 200) {
      const version = published.json.version as Record<string, string>;
      phase = "done";
      progress(`published ${version.version_digest}`);
      await saveCache().catch((error: unknown) =>
        progress(`the hash cache was not saved: ${(error as Error).message}`),
      );
      return { version, files: files.length, bytes, blobs: chunkOf.size, uploadedBlobs, uploadedBytes, rebases };
    }
    // Blobs answered present but collected before the publish (unreferenced past the grace period): again.
    const collected = missingBlobs(published);
    if (published.status !== 409 && !collected) {
      throw new PushError(`PublishVolumeVersion: ${published.status} ${JSON.stringify(published.json)}`);
    }
    progress(
      collected
        ? "blobs were collected meanwhile; pushing again"
        : "another push was published first; rebasing on the new current version",
    );
  }
  throw new PushError(`gave up after ${MAX_REBASES} rebases: the volume keeps changing`);
}

/** `volumes.push` in Node: pushDirectory with the client's URL and key, and the default hash cache. */
export const pushVolume: VolumePusher = (t, volumeId, dir, options) => {
  const cache = options.hashCache ?? true;
  return pushDirectory({
    apiUrl: t.baseUrl,
    apiKey: t.apiKey,
    volumeId,
    dir,
    ...(options.concurrency ? { concurrency: options.concurrency } : {}),
    ...(cache ? { hashCache: typeof cache === "string" ? cache : defaultHashCache(dir) } : {}),
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  });
};
