// The host's cache of volume versions: each version materialized once, as a read-only tree
// under <cacheDir>/<org>/<version hex>, and bound read-only into every sandbox that pins it
// (a version mounted by ten sandboxes is stored once). Entries are immutable; a sweep
// (collector.ts) removes those no sandbox that has not ended pins, so deleting a volume
// never pulls files from under a sandbox. A one-chunk file whose blob is a file of the fs
// blob store on the same filesystem is a hard link to it (no copy: ARCHITECTURE.md "Volume
// cache"); every other file is copied and checked against its BLAKE3 digest as it is written
// (a one-chunk file's digest is its chunk's). What an organization's entries may cost the host
// (bytes copied, files and directories) is bounded by its budget (cache-budget.ts): a cold
// version evicts the organization's own unused entries, least recently used first, and a
// version that still does not fit is refused (`volume_cache_exhausted`).
import { randomBytes } from "node:crypto";
import { chmod, link, lstat, mkdir, open, readdir, readFile, rename, rm, stat, unlink } from "node:fs/promises";
import path from "node:path";
import { Blake3Hasher } from "@napi-rs/blake-hash";
import { FsBlobStore } from "../../drivers/blobs/fs.js";
import { BlobError, type BlobStore } from "../../drivers/blobs/interface.js";
import { writeFileAtomically } from "../../lib/fs.js";
import { PRIVATE_FILE_MODE } from "../../lib/private-dir.js";
import { mapLimit, volumeKeys } from "./blobs.js";
import {
  addCost,
  type CacheCost,
  type EvictionCandidate,
  fits,
  formatBytes,
  formatMarker,
  materializationCost,
  NO_COST,
  parseMarker,
  planEviction,
} from "./cache-budget.js";
import { DIGEST_PATTERN, digestOf, type ManifestFile, readStoredManifest } from "./manifest.js";

/** Files written at once while materializing a version. */
const FILE_CONCURRENCY = 8;

/** `volume_cache_exhausted`: the organization's cache budget cannot hold the version (a sandbox's state_reason code). */
export type VolumeCacheErrorCode = "runtime_error" | "volume_cache_exhausted";

export class VolumeCacheError extends Error {
  constructor(
    message: string,
    readonly code: VolumeCacheErrorCode = "runtime_error",
  ) {
    super(message);
  }
}

export interface VolumeCacheOptions {
  /** What one organization's entries may cost the host (WARREN_VOLUME_CACHE_ORG_BYTES, _INODES). */
  budget: CacheCost;
  /** `<org>/<version>` of every version a sandbox that has not ended pins: never evicted. */
  pinned: () => Promise<Set<string>>;
}

/** A materialization under way: what it holds of its organization's budget. */
interface Reservation {
  org: string;
  cost: CacheCost;
}

/** The largest version manifest read back (WARREN_VOLUME_MAX_MANIFEST_BYTES's own upper bound). */
const MAX_STORED_MANIFEST_BYTES = 1024 * 1_048_576;

export class VolumeCache {
  private readonly inflight = new Map<string, Promise<string>>();
  /** Entries being removed by a sweep: an ensure() of one waits, then materializes it again. */
  private readonly removing = new Map<string, Promise<void>>();
  /** When each entry was last asked for, as a count of ensure() calls. */
  private readonly lastUse = new Map<string, number>();
  private uses = 0;
  /** The fs blob store whose files may be linked into entries; null once a link fails across filesystems. */
  private linkable: FsBlobStore | null;
  /** Links under way, by blob file. */
  private readonly linking = new Map<string, Promise<void>>();
  /** Every entry on disk (this boot's or not) and what it costs, by directory. */
  private readonly entries = new Map<string, { org: string; cost: CacheCost }>();
  private readonly reservations = new Set<Reservation>();
  /** Organizations whose entries on disk have been counted (once per process). */
  private readonly loaded = new Map<string, Promise<void>>();
  private readonly budget: CacheCost;
  private readonly pinned: () => Promise<Set<string>>;

  constructor(
    private readonly blobs: BlobStore,
    readonly dir: string,
    options?: VolumeCacheOptions,
  ) {
    this.linkable = blobs instanceof FsBlobStore ? blobs : null;
    this.budget = options?.budget ?? { bytes: Number.POSITIVE_INFINITY, inodes: Number.POSITIVE_INFINITY };
    // Without a budget nothing is ever evicted, so no pin needs reading.
    this.pinned = options?.pinned ?? (async () => new Set());
  }

  /** What an organization's entries and materializations under way hold of its budget. */
  usage(orgId: string): CacheCost {
    let used = NO_COST;
    for (const entry of this.entries.values()) if (entry.org === orgId) used = addCost(used, entry.cost);
    for (const reservation of this.reservations) if (reservation.org === orgId) used = addCost(used, reservation.cost);
    return used;
  }

  /** Versions with an entry on this host, most recently used first, at most `limit` (placement's hint). */
  cachedVersions(limit: number): string[] {
    return [...this.entries.keys()]
      .sort((a, b) => (this.lastUse.get(b) ?? 0) - (this.lastUse.get(a) ?? 0))
      .slice(0, limit)
      .map((dir) => `blake3:${path.basename(dir)}`);
  }

  /** The directory of an organization's version, materialized first when this host has none. */
  ensure(orgId: string, version: string): Promise<string> {
    if (!DIGEST_PATTERN.test(version) || !/^[A-Za-z0-9_-]+$/.test(orgId)) {
      throw new VolumeCacheError(`not a volume version: ${version.slice(0, 80)}`);
    }
    const dir = path.join(this.dir, orgId, version.slice("blake3:".length));
    this.lastUse.set(dir, ++this.uses);
    const running = this.inflight.get(dir);
    if (running) return running;
    const removal = this.removing.get(dir) ?? Promise.resolve();
    const job = removal.then(() => this.materialize(orgId, version, dir)).finally(() => this.inflight.delete(dir));
    this.inflight.set(dir, job);
    return job;
  }

  private async materialize(orgId: string, version: string, dir: string): Promise<string> {
    await this.load(orgId);
    if ((await stat(dir).catch(() => null))?.isDirectory()) {
      // An entry of this boot is whole (renamed into place after its last write, and the page
      // cache outlives a crashed process). One from before a reboot may have lost unflushed
      // data, since nothing is fsynced: it is written again.
      const marker = parseMarker(await readFile(bootMarker(dir), "utf8").catch(() => ""));
      if (marker.boot === (await bootId()) && this.entries.has(dir)) return dir;
      await this.remove(dir);
    }
    const bytes = await this.blobs.get(volumeKeys.versionManifest(orgId, version), {
      maxBytes: MAX_STORED_MANIFEST_BYTES,
    });
    if (!bytes) throw new VolumeCacheError(`the manifest of volume version ${version} is not in the blob store`);
    if (digestOf(bytes) !== version) throw new VolumeCacheError(`the stored manifest of ${version} is corrupt`);
    const { files } = readStoredManifest(bytes);
    const reservation = await this.admit(orgId, version, dir, materializationCost(files, this.linkable !== null));
    const tmp = `${dir}.tmp-${randomBytes(6).toString("hex")}`;
    try {
      await mkdir(tmp, { recursive: true, mode: 0o755 });
      const dirs = new Set<string>();
      for (const file of files) {
        for (let at = path.posix.dirname(file.path); at !== "."; at = path.posix.dirname(at)) dirs.add(at);
      }
      // Parents before children.
      for (const sub of [...dirs].sort()) await mkdir(path.join(tmp, sub), { recursive: true, mode: 0o755 });
      await mapLimit(files, FILE_CONCURRENCY, (file) => this.writeFile(orgId, tmp, file, reservation));
      // Directories read-only too, deepest first (the bind mount is read-only besides).
      for (const sub of [...dirs].sort().reverse()) await chmod(path.join(tmp, sub), 0o555);
      await chmod(tmp, 0o555);
      await rename(tmp, dir).catch(async (error: NodeJS.ErrnoException) => {
        // Another server process materialized it meanwhile: theirs is as good.
        if (error.code !== "ENOTEMPTY" && error.code !== "EEXIST") throw error;
        await this.remove(tmp);
      });
      this.entries.set(dir, { org: orgId, cost: reservation.cost });
      await writeFileAtomically(bootMarker(dir), formatMarker(await bootId(), reservation.cost));
      return dir;
    } catch (error) {
      await this.remove(tmp);
      throw error;
    } finally {
      this.reservations.delete(reservation);
    }
  }

  /**
   * Makes room for `need` in the organization's budget, removing its entries that no sandbox
   * that has not ended pins and nothing asked for since the pins were read (least recently
   * used first), and reserves it; refuses the version when that cannot make room. Only the
   * organization's own entries are ever removed for it.
   */
  private async admit(orgId: string, version: string, dir: string, need: CacheCost): Promise<Reservation> {
    const wants = `volume version ${version} needs ${formatBytes(need.bytes)} and ${need.inodes} files and directories in this host's volume cache`;
    const budget = `${formatBytes(this.budget.bytes)} and ${this.budget.inodes} files and directories`;
    if (!fits(need, this.budget)) {
      throw new VolumeCacheError(
        `${wants}, more than the organization's budget there (${budget})`,
        "volume_cache_exhausted",
      );
    }
    const reserve = () => {
      const reservation: Reservation = { org: orgId, cost: { ...need } };
      this.reservations.add(reservation);
      return reservation;
    };
    // Room without evicting anything: no pins to read.
    if (fits(addCost(this.usage(orgId), need), this.budget)) return reserve();
    const since = this.uses;
    const keep = await this.pinned();
    // From here to the reservation nothing is awaited: no other materialization can count the same room.
    const candidates: EvictionCandidate[] = [];
    for (const [key, entry] of this.entries) {
      if (entry.org !== orgId || key === dir || this.inflight.has(key) || this.removing.has(key)) continue;
      const lastUse = this.lastUse.get(key) ?? 0;
      if (lastUse > since || keep.has(`${orgId}/blake3:${path.basename(key)}`)) continue;
      candidates.push({ key, cost: entry.cost, lastUse });
    }
    const used = this.usage(orgId);
    const evict = planEviction(used, need, this.budget, candidates);
    if (!evict) {
      throw new VolumeCacheError(
        `${wants}; the organization's budget there is ${budget}, and versions mounted by its sandboxes that have not ended (or being mounted) hold ${formatBytes(used.bytes)} and ${used.inodes} of it: end some of those sandboxes or try again later`,
        "volume_cache_exhausted",
      );
    }
    const reservation = reserve();
    try {
      await Promise.all(
        evict.map((key) => {
          const removal = this.remove(key).finally(() => this.removing.delete(key));
          this.removing.set(key, removal);
          this.lastUse.delete(key);
          return removal;
        }),
      );
    } catch (error) {
      this.reservations.delete(reservation);
      throw error;
    }
    return reservation;
  }

  /** Counts the organization's entries already on disk (left by an earlier process), once. */
  private load(orgId: string): Promise<void> {
    let loading = this.loaded.get(orgId);
    if (!loading) {
      loading = (async () => {
        const orgDir = path.join(this.dir, orgId);
        for (const name of await readdir(orgDir).catch(() => [] as string[])) {
          if (!/^[0-9a-f]{64}$/.test(name)) continue;
          const dir = path.join(orgDir, name);
          if (!(await stat(dir).catch(() => null))?.isDirectory()) continue;
          const marker = parseMarker(await readFile(bootMarker(dir), "utf8").catch(() => ""));
          this.entries.set(dir, { org: orgId, cost: marker.cost ?? (await measure(dir)) });
        }
      })().catch((error: unknown) => {
        // Counted again by the next ensure(), not refused forever.
        this.loaded.delete(orgId);
        throw error;
      });
      this.loaded.set(orgId, loading);
    }
    return loading;
  }

  /**
   * Removes the entries (and leftovers of materializations cut short) that `pinned` does not
   * name (`<org>/<version>`). `pinned` is read after the sweep starts, so a sandbox admitted
   * later (not in it) asks ensure() later too, and the sweep leaves what it asked for alone;
   * an ensure() while an entry is being removed waits for the removal and materializes it again.
   */
  async sweep(pinned: () => Promise<Set<string>>): Promise<number> {
    const since = this.uses;
    const keep = await pinned();
    let removed = 0;
    for (const org of await readdir(this.dir).catch(() => [] as string[])) {
      for (const name of await readdir(path.join(this.dir, org)).catch(() => [] as string[])) {
        const dir = path.join(this.dir, org, name);
        const marker = name.match(/^([0-9a-f]{64})\.boot$/);
        if (marker) {
          // A marker whose entry is gone (a removal cut short).
          if (!(await stat(path.join(this.dir, org, marker[1] as string)).catch(() => null))) {
            await rm(dir, { force: true });
          }
          continue;
        }
        const entry = name.match(/^([0-9a-f]{64})(\.tmp-[0-9a-f]+)?$/);
        if (!entry) continue;
        const of = path.join(this.dir, org, entry[1] as string);
        if (this.inflight.has(of) || this.removing.has(of) || (this.lastUse.get(of) ?? 0) > since) continue;
        if (!entry[2] && keep.has(`${org}/blake3:${entry[1]}`)) continue;
        // Set before the first await: an ensure() from now on waits for it.
        const removal = this.remove(dir).finally(() => this.removing.delete(of));
        if (!entry[2]) this.removing.set(of, removal);
        await removal;
        if (!entry[2]) this.lastUse.delete(of);
        removed++;
      }
    }
    return removed;
  }

  private async writeFile(orgId: string, root: string, file: ManifestFile, reservation: Reservation): Promise<void> {
    const target = path.join(root, file.path);
    const expectedLink = file.chunks.length === 1 && this.linkable !== null;
    if (file.chunks.length === 1 && (await this.linkBlob(orgId, target, file))) return;
    if (expectedLink) this.charge(reservation, file);
    const handle = await open(target, "wx", 0o600);
    // Each byte is hashed once: a one-chunk file's digest is its chunk's, and a multi-chunk
    // file whose whole digest matches has exactly the bytes its manifest names.
    const whole = new Blake3Hasher();
    const single = file.chunks.length === 1;
    try {
      let offset = 0;
      for (const chunk of file.chunks) {
        const bytes = await this.blobs
          .get(volumeKeys.blob(orgId, chunk.digest), { maxBytes: chunk.size })
          .catch((error: unknown) => {
            if (error instanceof BlobError && error.code === "too_large") return Buffer.alloc(0);
            throw error;
          });
        if (!bytes) throw new VolumeCacheError(`blob ${chunk.digest} of ${file.path} is missing from the blob store`);
        if (bytes.length !== chunk.size || (single && digestOf(bytes) !== chunk.digest)) {
          throw new VolumeCacheError(`blob ${chunk.digest} of ${file.path} does not match its digest`);
        }
        if (!single) whole.update(bytes);
        await handle.write(bytes, 0, bytes.length, offset);
        offset += bytes.length;
      }
    } finally {
      await handle.close();
    }
    if ((single ? file.chunks[0]?.digest : `blake3:${whole.digest("hex")}`) !== file.digest) {
      throw new VolumeCacheError(`${file.path} does not match its digest in the manifest`);
    }
    // Read-only for everyone; only the execute bits of the pushed mode are kept.
    await chmod(target, file.mode & 0o111 ? 0o555 : 0o444);
  }

  /**
   * Makes `target` a hard link to the one blob of `file` in the fs blob store, or answers
   * false (the caller copies). The blob's bytes were verified against its address before any
   * version could name it, and the store never writes an object again once it is published;
   * the shared inode is made read-only (0444, or 0555 for an executable) and owned by this
   * process's user, so nothing that can write through the cache's read-only mounts can
   * change the store. An inode already given the other mode (the same bytes pushed as
   * executable and not) is copied instead.
   */
  private linkBlob(orgId: string, target: string, file: ManifestFile): Promise<boolean> {
    const store = this.linkable;
    const chunk = file.chunks[0];
    if (!store || !chunk) return Promise.resolve(false);
    const source = store.fileOf(volumeKeys.blob(orgId, chunk.digest));
    // One link of a blob at a time in this process, so two files wanting other modes of one
    // inode cannot both change it from the store's mode.
    const turn = (this.linking.get(source) ?? Promise.resolve()).then(() =>
      this.linkOnce(source, target, chunk.size, file.mode & 0o111 ? 0o555 : 0o444),
    );
    const settled = turn.then(
      () => undefined,
      () => undefined,
    );
    this.linking.set(source, settled);
    void settled.then(() => {
      if (this.linking.get(source) === settled) this.linking.delete(source);
    });
    return turn;
  }

  private async linkOnce(source: string, target: string, size: number, wanted: number): Promise<boolean> {
    const info = await lstat(source).catch(() => null);
    if (!info?.isFile() || info.uid !== process.getuid?.() || info.size !== size) return false;
    const mode = info.mode & 0o7777;
    if (mode !== wanted) {
      // Only from the mode the store writes (one way: a linked inode keeps its mode).
      if (mode !== PRIVATE_FILE_MODE) return false;
      await chmod(source, wanted);
    }
    try {
      await link(source, target);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // Another filesystem: copies from now on. Deleted meanwhile: the copy says it is missing.
      if (code === "EXDEV") this.linkable = null;
      if (code === "EXDEV" || code === "ENOENT") return false;
      throw error;
    }
    // Another server process on this cache may have given the inode the other mode first.
    const linked = await lstat(target);
    if (linked.ino === info.ino && (linked.mode & 0o7777) === wanted) return true;
    await unlink(target);
    return false;
  }

  /** A one-chunk file copied although its cost counted a link: its bytes come out of the budget too. */
  private charge(reservation: Reservation, file: ManifestFile): void {
    const extra = { bytes: file.size, inodes: 0 };
    if (!fits(addCost(this.usage(reservation.org), extra), this.budget)) {
      throw new VolumeCacheError(
        `${file.path} must be copied into this host's volume cache, which takes the organization past its budget there (${formatBytes(this.budget.bytes)})`,
        "volume_cache_exhausted",
      );
    }
    reservation.cost = addCost(reservation.cost, extra);
  }

  private async remove(dir: string): Promise<void> {
    this.entries.delete(dir);
    // Read-only directories cannot be emptied until they are writable again.
    await chmodTree(dir).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
    await rm(bootMarker(dir), { force: true });
  }
}

/** `<entry>.boot`: the boot the entry was written in (beside it, not inside the mounted tree). */
function bootMarker(dir: string): string {
  return `${dir}.boot`;
}

let currentBoot: Promise<string> | null = null;
/** This boot's id (the kernel's random boot_id). */
function bootId(): Promise<string> {
  currentBoot ??= readFile("/proc/sys/kernel/random/boot_id", "utf8").then((text) => text.trim());
  return currentBoot;
}

/** What an entry without a recorded cost holds: a file linked from the store (nlink > 1) counts no bytes. */
async function measure(dir: string): Promise<CacheCost> {
  let cost: CacheCost = { bytes: 0, inodes: 1 };
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const at = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      cost = addCost(cost, await measure(at));
      continue;
    }
    const info = await lstat(at);
    cost = addCost(cost, { bytes: info.nlink > 1 ? 0 : info.size, inodes: 1 });
  }
  return cost;
}

async function chmodTree(dir: string): Promise<void> {
  await chmod(dir, 0o755);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await chmodTree(path.join(dir, entry.name));
  }
}
