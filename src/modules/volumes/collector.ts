// The volume collector: releases the references (and the manifests no other volume has) of
// deleted volumes no sandbox or snapshot pins any more, removes verified blobs no volume references once they have been unused for
// the grace period, and sweeps the host's cache of entries no sandbox pins.
//
// A blob is collected in two steps, like snapshot chunks (snapshots/repo.ts): candidates
// are read without locks, then, in one transaction, the rows still unreferenced and
// untouched since the cutoff are deleted under their row locks and their objects deleted
// before it commits. A publish touches every blob it references in its own transaction
// (service.ts `record`) and an upload request touches the blobs it answers present, so a
// concurrent one either touched first (the collector's re-check of the locked row skips it)
// or waits for the collector and finds the row gone (the publish is refused naming the
// blobs, which the client uploads again; the upload request answers them missing). Blobs a
// push is uploading have no row until they are verified, so the collector never sees them;
// an expired push's unverified uploads are removed by `collectExpiredPushes`. The grace
// period is at least the push TTL and the upload URL lifetime, so a blob answered present to
// an open push stays until that push could publish, and no upload URL for a collected blob
// can still be in use.
import type { BlobStore } from "../../drivers/blobs/interface.js";
import type { Clock } from "../../lib/clock.js";
import type { Logger } from "../../lib/logger.js";
import type { Db } from "../../store/db.js";
import { mapLimit, volumeKeys } from "./blobs.js";
import type { VolumeCache } from "./cache.js";
import * as gc from "./gc-repo.js";
import { UPLOAD_URL_SECONDS } from "./service.js";

const BATCH = 500;

export interface CollectStats {
  releasedVolumes: number;
  /** Manifests of released volumes' versions that no other volume has. */
  manifests: number;
  blobs: number;
}

export class VolumeCollector {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly blobs: BlobStore,
    private readonly settings: { pushTtlSeconds: number; gcGraceSeconds: number },
  ) {}

  /** The grace period in force: the setting, but never less than a push or an upload URL can live. */
  get graceSeconds(): number {
    return Math.max(this.settings.gcGraceSeconds, this.settings.pushTtlSeconds, UPLOAD_URL_SECONDS);
  }

  /** One pass over the store; `graceSeconds` overrides the grace period (tests). */
  async collectBlobs(graceSeconds = this.graceSeconds): Promise<CollectStats> {
    let releasedVolumes = 0;
    let manifests = 0;
    for (;;) {
      const tombstones = await gc.releasableTombstones(this.db, BATCH);
      for (const tombstone of tombstones) {
        manifests += await this.db.tx(async (q) => {
          const unused = await gc.releaseTombstone(q, tombstone);
          for (const version of unused) await this.blobs.delete(volumeKeys.versionManifest(tombstone.org_id, version));
          return unused.length;
        });
      }
      releasedVolumes += tombstones.length;
      if (tombstones.length < BATCH) break;
    }
    let blobs = 0;
    for (;;) {
      const cutoff = new Date(this.clock.now().getTime() - graceSeconds * 1000);
      const marked = await gc.markGarbageBlobs(this.db, cutoff, BATCH);
      blobs += await this.db.tx(async (q) => {
        const rows = await gc.takeGarbageBlobs(q, marked, cutoff);
        await mapLimit(rows, 16, (row) => this.blobs.delete(volumeKeys.blob(row.org_id, row.digest)));
        return rows.length;
      });
      if (marked.length < BATCH) break;
    }
    if (releasedVolumes > 0 || blobs > 0) {
      this.log.info({ released_volumes: releasedVolumes, manifests, blobs }, "collected unreferenced volume blobs");
    }
    return { releasedVolumes, manifests, blobs };
  }

  /** Removes the entries of `cache` (this host's) that no live sandbox of `hostId` pins; null: any host's. */
  async sweepCache(cache: VolumeCache, hostId: string | null = null): Promise<number> {
    const removed = await cache.sweep(() => gc.pinnedVersions(this.db, hostId));
    if (removed > 0) this.log.info({ entries: removed }, "removed unpinned volume cache entries");
    return removed;
  }
}
