// The content-addressed image cache on local disk, shared by every sandbox of this host:
//
//   <root>/blobs/sha256/<hex>            manifests, indexes and image configs, as served
//   <root>/layers/sha256/<diffid-hex>/   rootfs/ (one unpacked layer, an overlay lower dir)
//                                        + layer.json
//   <root>/images/sha256/<hex>.json      ImageRecord of a platform manifest, written last
//   <root>/tmp/                          downloads and unpacks in progress
//
// Everything is built under tmp/ and renamed into place, so a reader sees an entry whole or
// not at all. In-process, concurrent pulls of one image or one layer share a single promise.
// Across processes no lock is needed: two processes may both build an entry, the first
// rename wins and the loser discards its copy (a directory rename onto a non-empty one fails).

import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { exists } from "../../../lib/fs.js";
import { ImageError } from "./errors.js";
import { formatImageReference, type ImageReference, isSha256Digest, parseImageReference } from "./reference.js";
import {
  type Descriptor,
  type FetchedManifest,
  MEDIA_TYPES,
  type Platform,
  parseManifestDocument,
  type RegistryClient,
  type ResolvedImage,
  selectPlatformManifest,
} from "./registry-client.js";
import type { UnpackResult } from "./unpack.js";
import { unpackLayerInThread } from "./unpack-thread.js";

/** The parts of an image's config a sandbox needs to start its process. */
export interface ImageConfig {
  entrypoint: string[] | null;
  cmd: string[] | null;
  env: string[];
  workingDir: string;
  user: string;
  exposedPorts: string[];
  labels: Record<string, string>;
  stopSignal: string | null;
}

export interface LayerRecord {
  /** Digest of the blob as stored in the registry (usually gzip). */
  digest: string;
  /** Digest of the uncompressed tar; the layer's directory is named after it. */
  diffId: string;
  mediaType: string;
  size: number;
  /** The unpacked layer: use as an overlay lower dir, read-only. */
  dir: string;
}

export interface ImageRecord {
  /** Canonical reference as pulled (the stored record keeps the first one). */
  reference: string;
  /** Digest of the platform-specific image manifest: the image's identity. */
  digest: string;
  /** Digest of the index the manifest was chosen from, when there was one. */
  indexDigest: string | null;
  configDigest: string;
  platform: Platform;
  config: ImageConfig;
  /** Bottom layer first. */
  layers: LayerRecord[];
  /** Top layer first: `lowerdir=${lowerDirs.join(":")}` for overlayfs. */
  lowerDirs: string[];
  pulledAt: string;
}

export interface PullResult {
  image: ImageRecord;
  /** False when the image was already complete in the cache. */
  downloaded: boolean;
}

/** How far a pull has come: bytes of the image's layer blobs received and in all. */
export interface PullProgress {
  bytesDone: number;
  bytesTotal: number;
}

export interface PullOptions {
  /**
   * Hears of the progress of the pull (also of one this call joined), at most every
   * chunk received; layers already cached count as done.
   */
  onProgress?: (progress: PullProgress) => void;
}

export interface LayerCacheOptions {
  root: string;
  client: RegistryClient;
  /** Layers fetched and unpacked at once per image. */
  layerConcurrency?: number;
  /**
   * How long a tag's resolution to a digest is reused before the registry is asked again
   * (0: every pull asks). References by digest never ask once the image is cached.
   */
  tagTtlMs?: number;
  /** Milliseconds since the epoch for the tag TTL (tests step it); default Date.now. */
  now?: () => number;
}

const SUPPORTED_LAYER_TYPES = new Set<string>([
  MEDIA_TYPES.ociLayer,
  MEDIA_TYPES.ociLayerGzip,
  MEDIA_TYPES.dockerLayerGzip,
]);

function hexOf(digest: string): string {
  if (!isSha256Digest(digest)) throw new ImageError("unsupported", `unsupported digest "${digest}" (only sha256)`);
  return digest.slice("sha256:".length);
}

function isAlreadyThere(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  return code === "ENOTEMPTY" || code === "EEXIST";
}

function stringArray(value: unknown): string[] | null {
  return Array.isArray(value) && value.every((item) => typeof item === "string") ? value : null;
}

/** The image config fields we use, from the config JSON (absent fields become defaults). */
export function parseImageConfig(json: unknown): { config: ImageConfig; diffIds: string[]; platform: Platform } {
  const doc = (json ?? {}) as {
    os?: unknown;
    architecture?: unknown;
    variant?: unknown;
    config?: Record<string, unknown> | null;
    rootfs?: { type?: unknown; diff_ids?: unknown };
  };
  const c = doc.config ?? {};
  const diffIds = stringArray(doc.rootfs?.diff_ids);
  if (!diffIds?.every(isSha256Digest)) {
    throw new ImageError("unsupported", "image config has no usable rootfs.diff_ids (only sha256)");
  }
  const labels: Record<string, string> = {};
  if (c.Labels && typeof c.Labels === "object") {
    for (const [key, value] of Object.entries(c.Labels)) if (typeof value === "string") labels[key] = value;
  }
  const platform: Platform = { os: String(doc.os ?? ""), architecture: String(doc.architecture ?? "") };
  if (typeof doc.variant === "string") platform.variant = doc.variant;
  return {
    config: {
      entrypoint: stringArray(c.Entrypoint),
      cmd: stringArray(c.Cmd),
      env: stringArray(c.Env) ?? [],
      workingDir: typeof c.WorkingDir === "string" ? c.WorkingDir : "",
      user: typeof c.User === "string" ? c.User : "",
      exposedPorts: c.ExposedPorts && typeof c.ExposedPorts === "object" ? Object.keys(c.ExposedPorts).sort() : [],
      labels,
      stopSignal: typeof c.StopSignal === "string" ? c.StopSignal : null,
    },
    diffIds,
    platform,
  };
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to another user.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

export class LayerCache {
  readonly root: string;
  private readonly client: RegistryClient;
  private readonly layerConcurrency: number;
  private readonly tagTtlMs: number;
  private readonly now: () => number;
  /** Tag (formatted reference) -> digest it resolved to, and when. */
  private readonly resolvedTags = new Map<string, { digest: string; at: number }>();
  private readonly inflight = new Map<string, Promise<unknown>>();
  /** Image pull key -> who hears of its progress. */
  private readonly progressListeners = new Map<string, Set<(progress: PullProgress) => void>>();
  /** The start-up removal of abandoned temp entries; pulls wait for it. */
  readonly opened: Promise<number>;

  constructor(options: LayerCacheOptions) {
    this.root = path.resolve(options.root);
    this.client = options.client;
    this.layerConcurrency = options.layerConcurrency ?? 3;
    this.tagTtlMs = options.tagTtlMs ?? 0;
    this.now = options.now ?? Date.now;
    // A pull killed mid-download leaves its partial blob (possibly hundreds of MB) in tmp/;
    // it is removed when the cache opens rather than an hour later by sweepTemp.
    this.opened = this.removeAbandonedTemp().catch(() => 0);
  }

  blobPath(digest: string): string {
    return path.join(this.root, "blobs", "sha256", hexOf(digest));
  }

  layerDir(diffId: string): string {
    return path.join(this.root, "layers", "sha256", hexOf(diffId), "rootfs");
  }

  private imageRecordPath(digest: string): string {
    return path.join(this.root, "images", "sha256", `${hexOf(digest)}.json`);
  }

  /** Bytes this cache's registry client has received (image pulls, for metrics). */
  receivedBytes(): number {
    return this.client.receivedBytes;
  }

  /** The record of a pulled image by manifest digest, or null when it is not (fully) cached. */
  async getImage(digest: string): Promise<ImageRecord | null> {
    try {
      return JSON.parse(await readFile(this.imageRecordPath(digest), "utf8")) as ImageRecord;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw error;
    }
  }

  /**
   * Makes an image available locally: resolves the reference (a tag always asks the
   * registry; a digest whose documents are cached does not), fetches and unpacks what is
   * missing, and returns its record. Concurrent pulls of one reference share one pull.
   */
  async pull(reference: string | ImageReference, options: PullOptions = {}): Promise<PullResult> {
    const ref = typeof reference === "string" ? parseImageReference(reference) : reference;
    const key = `image:${formatImageReference(ref)}`;
    const listener = options.onProgress;
    if (!listener) return this.singleFlight(key, () => this.pullUncached(ref, key));
    let listeners = this.progressListeners.get(key);
    if (!listeners) {
      listeners = new Set();
      this.progressListeners.set(key, listeners);
    }
    listeners.add(listener);
    try {
      return await this.singleFlight(key, () => this.pullUncached(ref, key));
    } finally {
      listeners.delete(listener);
      if (listeners.size === 0 && this.progressListeners.get(key) === listeners) this.progressListeners.delete(key);
    }
  }

  private reportProgress(key: string, progress: PullProgress): void {
    for (const listener of this.progressListeners.get(key) ?? []) {
      try {
        listener({ ...progress });
      } catch {
        // A listener's failure is not the pull's.
      }
    }
  }

  /** Removes temp entries older than `olderThanMs` that a crashed process left behind. */
  async sweepTemp(olderThanMs = 60 * 60 * 1000): Promise<number> {
    const tmp = path.join(this.root, "tmp");
    let removed = 0;
    for (const name of await readdir(tmp).catch(() => [] as string[])) {
      const entry = path.join(tmp, name);
      const info = await stat(entry).catch(() => null);
      if (info && Date.now() - info.mtimeMs > olderThanMs) {
        await rm(entry, { recursive: true, force: true });
        removed++;
      }
    }
    return removed;
  }

  /**
   * Removes the temp entries of processes that are no longer running (the pid is part of
   * each name, see tempPath). A live process's entries are kept, since caches of several
   * processes may share a root; so are this process's, which another cache on the root may
   * be writing.
   */
  async removeAbandonedTemp(): Promise<number> {
    const tmp = path.join(this.root, "tmp");
    let removed = 0;
    for (const name of await readdir(tmp).catch(() => [] as string[])) {
      const pid = Number(/^[a-z]+-(\d+)-/.exec(name)?.[1]);
      if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || processAlive(pid)) continue;
      await rm(path.join(tmp, name), { recursive: true, force: true });
      removed++;
    }
    return removed;
  }

  private singleFlight<T>(key: string, work: () => Promise<T>): Promise<T> {
    const running = this.inflight.get(key);
    if (running) return running as Promise<T>;
    const promise = work().finally(() => this.inflight.delete(key));
    this.inflight.set(key, promise);
    return promise;
  }

  private async pullUncached(ref: ImageReference, key: string): Promise<PullResult> {
    await this.opened;
    const name = formatImageReference(ref);
    const recent = ref.digest ? undefined : this.resolvedTags.get(name);
    if (recent && this.now() - recent.at < this.tagTtlMs) {
      const cached = await this.getImage(recent.digest);
      if (cached && (await this.isComplete(cached)))
        return { image: { ...cached, reference: name }, downloaded: false };
    }
    const resolved = (ref.digest && (await this.resolveFromCache(ref.digest))) || (await this.client.resolve(ref));
    if (!ref.digest && this.tagTtlMs > 0) this.resolvedTags.set(name, { digest: resolved.digest, at: this.now() });
    const cached = await this.getImage(resolved.digest);
    if (cached && (await this.isComplete(cached))) {
      return { image: { ...cached, reference: name }, downloaded: false };
    }
    for (const document of resolved.documents) await this.storeBlob(document.digest, document.bytes);

    const manifest = resolved.manifest;
    const configBytes = await this.singleFlight(`blob:${manifest.config.digest}`, () =>
      this.ensureSmallBlob(ref, manifest.config.digest),
    );
    let configJson: unknown;
    try {
      configJson = JSON.parse(configBytes.toString("utf8"));
    } catch (error) {
      throw new ImageError("registry_error", `image config ${manifest.config.digest} is not JSON`, { cause: error });
    }
    const { config, diffIds, platform } = parseImageConfig(configJson);
    const wanted = this.client.targetPlatform;
    if (platform.os !== wanted.os || platform.architecture !== wanted.architecture) {
      throw new ImageError(
        "unsupported",
        `${formatImageReference(ref)} is a ${platform.os}/${platform.architecture} image, not ${wanted.os}/${wanted.architecture}`,
      );
    }
    if (diffIds.length !== manifest.layers.length) {
      throw new ImageError("registry_error", "image config and manifest disagree on the number of layers");
    }
    for (const layer of manifest.layers) {
      if (!SUPPORTED_LAYER_TYPES.has(layer.mediaType)) {
        throw new ImageError("unsupported", `layer media type ${layer.mediaType} is not supported`);
      }
    }

    const progress: PullProgress = {
      bytesDone: 0,
      bytesTotal: manifest.layers.reduce((sum, layer) => sum + layer.size, 0),
    };
    this.reportProgress(key, progress);
    const layers: LayerRecord[] = new Array(manifest.layers.length);
    let next = 0;
    let failure: { error: unknown } | null = null;
    // Workers stop taking layers after a failure, and the pull fails only once all have
    // stopped, so nothing is still writing under tmp/ when the caller hears of it.
    const worker = async () => {
      while (next < manifest.layers.length && !failure) {
        const index = next++;
        const descriptor = manifest.layers[index] as Descriptor;
        const diffId = diffIds[index] as string;
        try {
          let received = 0;
          const onBytes = (bytes: number) => {
            received += bytes;
            progress.bytesDone += bytes;
            this.reportProgress(key, progress);
          };
          const dir = await this.singleFlight(`layer:${diffId}`, () =>
            this.ensureLayer(ref, descriptor, diffId, onBytes),
          );
          // A cached layer (or one another pull fetched) counts as done once it is there.
          progress.bytesDone += Math.max(0, descriptor.size - received);
          this.reportProgress(key, progress);
          layers[index] = {
            digest: descriptor.digest,
            diffId,
            mediaType: descriptor.mediaType,
            size: descriptor.size,
            dir,
          };
        } catch (error) {
          failure ??= { error };
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.layerConcurrency, layers.length) }, worker));
    if (failure) throw (failure as { error: unknown }).error;

    const indexDocument = resolved.documents.length > 1 ? resolved.documents[0] : undefined;
    const image: ImageRecord = {
      reference: formatImageReference(ref),
      digest: resolved.digest,
      indexDigest: indexDocument?.digest ?? null,
      configDigest: manifest.config.digest,
      platform,
      config,
      layers,
      lowerDirs: layers.map((layer) => layer.dir).reverse(),
      pulledAt: new Date().toISOString(),
    };
    await this.writeAtomically(this.imageRecordPath(image.digest), `${JSON.stringify(image, null, 2)}\n`);
    return { image, downloaded: true };
  }

  /** A record whose layer dirs were removed behind our back is pulled again. */
  private async isComplete(image: ImageRecord): Promise<boolean> {
    for (const layer of image.layers) if (!(await exists(layer.dir))) return false;
    return true;
  }

  /** Resolves a digest reference from cached manifests alone; null when something is missing. */
  private async resolveFromCache(digest: string): Promise<ResolvedImage | null> {
    const documents: FetchedManifest[] = [];
    let current = digest;
    for (let depth = 0; depth < 3; depth++) {
      const bytes = await readFile(this.blobPath(current)).catch(() => null);
      if (!bytes) return null;
      const fetched: FetchedManifest = { digest: current, mediaType: "", bytes };
      documents.push(fetched);
      const doc = parseManifestDocument(fetched);
      if (doc.kind === "manifest") return { digest: current, manifest: doc.manifest, documents };
      current = selectPlatformManifest(doc.index, this.client.targetPlatform).digest;
    }
    return null;
  }

  private async tempPath(prefix: string): Promise<string> {
    const tmp = path.join(this.root, "tmp");
    await mkdir(tmp, { recursive: true });
    return path.join(tmp, `${prefix}-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`);
  }

  private async writeAtomically(file: string, content: string | Buffer): Promise<void> {
    await mkdir(path.dirname(file), { recursive: true });
    const temp = await this.tempPath("write");
    await writeFile(temp, content);
    await rename(temp, file);
  }

  private async storeBlob(digest: string, bytes: Buffer): Promise<void> {
    if (!(await exists(this.blobPath(digest)))) await this.writeAtomically(this.blobPath(digest), bytes);
  }

  /** A config blob from the cache or the registry (verified by the client). */
  private async ensureSmallBlob(ref: ImageReference, digest: string): Promise<Buffer> {
    const cached = await readFile(this.blobPath(digest)).catch(() => null);
    if (cached) return cached;
    const bytes = await this.client.fetchBlobBytes(ref, digest);
    await this.storeBlob(digest, bytes);
    return bytes;
  }

  /**
   * One unpacked layer, keyed by diff ID. The blob is streamed from the registry straight
   * through the sha256 of the blob, then (in the unpack thread, unpack-thread.ts) gunzip and
   * the unpacker into a temp dir (nothing of it is
   * kept whole in memory or on disk); the blob digest is checked when its last byte is read
   * and the diff ID when the tar ends, and the temp dir is discarded unless both match. Only
   * then is it renamed into place.
   */
  private async ensureLayer(
    ref: ImageReference,
    descriptor: Descriptor,
    diffId: string,
    onBytes?: (bytes: number) => void,
  ): Promise<string> {
    const dir = this.layerDir(diffId);
    if (await exists(dir)) return dir;
    const work = await mkdtemp(await this.tempPath("layer"));
    try {
      await mkdir(path.join(work, "rootfs"));
      const blob = this.client.streamBlob(ref, descriptor.digest, descriptor.size, onBytes);
      let result: UnpackResult;
      try {
        result = await unpackLayerInThread(blob, path.join(work, "rootfs"), { expectedDiffId: diffId });
        // The unpacker drains its input, so the blob's digest has been checked; make sure.
        if (!(await blob.next()).done) throw new ImageError("registry_error", `blob ${descriptor.digest}: extra data`);
      } finally {
        await blob.return(undefined);
      }
      const meta = {
        digest: descriptor.digest,
        diffId,
        mediaType: descriptor.mediaType,
        entries: result.entries,
        notes: result.notes,
      };
      await writeFile(path.join(work, "layer.json"), `${JSON.stringify(meta, null, 2)}\n`);
      const final = path.dirname(dir);
      await mkdir(path.dirname(final), { recursive: true });
      try {
        await rename(work, final);
      } catch (error) {
        if (!isAlreadyThere(error)) throw error;
      }
      return dir;
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }
}
