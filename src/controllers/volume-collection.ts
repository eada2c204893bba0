// One pass of volume collection, run on every server's timer (controllers/index.ts): the
// deployment-wide blob collection only by the collection leader (modules/hosts/leader.ts),
// the sweep of a host's own cache on every host.
import type { VolumeCache } from "../modules/volumes/cache.js";
import type { CollectStats, VolumeCollector } from "../modules/volumes/collector.js";

export interface VolumeCollectionPass {
  /** What blob collection did; null when this server does not lead (it did nothing). */
  collected: CollectStats | null;
  /** Cache entries removed; null without a cache of this server's own (no runtime). */
  swept: number | null;
}

export async function volumeCollectionPass(deps: {
  leads: () => boolean;
  collector: Pick<VolumeCollector, "collectBlobs" | "sweepCache">;
  /** This host's cache of mounted versions; null on a server that runs no sandboxes. */
  cache: VolumeCache | null;
  hostId: string | null;
}): Promise<VolumeCollectionPass> {
  const collected = deps.leads() ? await deps.collector.collectBlobs() : null;
  const swept = deps.cache ? await deps.collector.sweepCache(deps.cache, deps.hostId) : null;
  return { collected, swept };
}
