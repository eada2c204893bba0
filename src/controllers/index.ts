// Background controllers: the sandbox reconciler (with its idle, expiry and retention
// sweep), the snapshot replicator (replication, chunk GC), the volume collector (unreferenced
// blobs, unpinned cache entries), the retention GC of idempotency records and the embedded store's VACUUM.
import type { Container } from "../container.js";
import { PooledRuntime } from "../drivers/runtime/local/pool.js";
import { VolumeCollector } from "../modules/volumes/collector.js";
import { SandboxReconciler } from "./sandbox-reconciler.js";
import { SnapshotReplicator } from "./snapshot-replicator.js";
import { StoreMaintenance } from "./store-maintenance.js";

const GC_INTERVAL_MS = 10 * 60 * 1000;

export async function startControllers(c: Container): Promise<{ stop(): Promise<void> }> {
  const reconciler = c.runtime
    ? new SandboxReconciler(c, c.runtime, {
        pids: c.config.sandbox.pids,
        retentionSeconds: c.config.sandbox.retentionSeconds,
        gatewayAddress: c.config.egress.gatewayAddress,
      })
    : null;
  await reconciler?.start();
  const replicator = c.runtime
    ? new SnapshotReplicator(c, c.runtime, {
        gcIntervalSeconds: c.config.snapshots.gcIntervalSeconds,
        gcGraceSeconds: c.config.snapshots.gcGraceSeconds,
      })
    : null;
  await replicator?.start();
  // After the start-up cleanup, which removes whatever the store does not know.
  if (c.runtime instanceof PooledRuntime) c.runtime.startFilling();
  const gc = setInterval(() => {
    c.idempotency
      .purgeExpired()
      .then((purged) => {
        if (purged > 0) c.log.info({ purged }, "purged expired idempotency records");
      })
      .catch((error: unknown) => c.log.warn({ err: (error as Error).message }, "idempotency GC failed"));
  }, GC_INTERVAL_MS);
  gc.unref();
  const volumeCollector = new VolumeCollector(c.db, c.clock, c.log, c.blobs, c.config.volumes);
  let volumePass: Promise<void> | null = null;
  const volumeGc = setInterval(() => {
    if (volumePass) return;
    volumePass = (async () => {
      await volumeCollector.collectBlobs();
      // Only a host that runs sandboxes has a cache of mounted versions.
      if (c.runtime) await volumeCollector.sweepCache(c.volumeCache);
    })()
      .catch((error: unknown) => c.log.warn({ err: (error as Error).message }, "volume collection failed"))
      .finally(() => {
        volumePass = null;
      });
  }, c.config.volumes.gcIntervalSeconds * 1000);
  volumeGc.unref();
  const maintenance = new StoreMaintenance(c.db, c.log, {
    intervalMs: c.config.pgliteVacuumIntervalSeconds * 1000,
  });
  maintenance.start();
  return {
    stop: async () => {
      clearInterval(gc);
      clearInterval(volumeGc);
      await volumePass;
      await maintenance.stop();
      await replicator?.stop();
      await reconciler?.stop();
    },
  };
}
