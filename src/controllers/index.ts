// Background controllers: the sandbox reconciler (with its idle, expiry and retention
// sweep), the snapshot replicator (replication, chunk GC), the host sweeper (other hosts'
// heartbeats), the volume collector (unreferenced blobs, unpinned cache entries), the
// retention GC of idempotency records and the embedded store's VACUUM. Blob and volume
// collection and store maintenance run on one server of the deployment at a time: the holder
// of the collection lease (modules/hosts/leader.ts).
import type { Container } from "../container.js";
import { PooledRuntime } from "../drivers/runtime/local/pool.js";
import { holderName, LeaderLease } from "../modules/hosts/leader.js";
import type { HostMembership } from "../modules/hosts/membership.js";
import { getHost } from "../modules/hosts/repo.js";
import { VolumeCollector } from "../modules/volumes/collector.js";
import { HostSweeper } from "./host-sweeper.js";
import { SandboxReconciler } from "./sandbox-reconciler.js";
import { SnapshotReplicator } from "./snapshot-replicator.js";
import { StoreMaintenance } from "./store-maintenance.js";
import { volumeCollectionPass } from "./volume-collection.js";

const GC_INTERVAL_MS = 10 * 60 * 1000;

export interface Controllers {
  /** The collection lease of this server (whether it leads now). */
  leader: LeaderLease;
  stop(): Promise<void>;
}

export async function startControllers(c: Container): Promise<Controllers> {
  const leader = new LeaderLease(c.db, c.log, { holder: holderName(c.host?.id ?? null) });
  await leader.start();
  const leads = () => leader.isLeader();
  const reconciler = c.runtime
    ? new SandboxReconciler(c, c.runtime, {
        pids: c.config.sandbox.pids,
        retentionSeconds: c.config.sandbox.retentionSeconds,
        gatewayAddress: c.config.egress.gatewayAddress,
        placement: {
          policy: {
            memoryOvercommit: c.config.sandbox.memoryOvercommit,
            cpuOvercommit: c.config.sandbox.cpuOvercommit,
          },
          mode: c.config.sandbox.placement,
        },
      })
    : null;
  await reconciler?.start();
  const replicator = c.runtime
    ? new SnapshotReplicator(c, c.runtime, {
        gcIntervalSeconds: c.config.snapshots.gcIntervalSeconds,
        gcGraceSeconds: c.config.snapshots.gcGraceSeconds,
        collects: leads,
      })
    : null;
  await replicator?.start();
  if (c.host && reconciler && replicator) followHostMembership(c, c.host, reconciler, replicator);
  // Every host, and every api replica, judges the hosts' heartbeats (conditional writes:
  // judges at once agree).
  const hostSweeper =
    c.host || c.config.role === "api"
      ? new HostSweeper(c, { retentionSeconds: c.config.sandbox.retentionSeconds })
      : null;
  hostSweeper?.start();
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
    volumePass = volumeCollectionPass({
      leads,
      collector: volumeCollector,
      // Only a host that runs sandboxes has a cache of mounted versions.
      cache: c.runtime ? c.volumeCache : null,
      hostId: c.host?.id ?? null,
    })
      .then(() => undefined)
      .catch((error: unknown) => c.log.warn({ err: (error as Error).message }, "volume collection failed"))
      .finally(() => {
        volumePass = null;
      });
  }, c.config.volumes.gcIntervalSeconds * 1000);
  volumeGc.unref();
  const maintenance = new StoreMaintenance(c.db, c.log, {
    intervalMs: c.config.pgliteVacuumIntervalSeconds * 1000,
    runs: leads,
  });
  maintenance.start();
  return {
    leader,
    stop: async () => {
      clearInterval(gc);
      clearInterval(volumeGc);
      await volumePass;
      await maintenance.stop();
      await hostSweeper?.stop();
      await replicator?.stop();
      await reconciler?.stop();
      await leader.stop();
    },
  };
}

/**
 * What the host's controllers do as its membership changes: work put off while the lease
 * had lapsed goes on once it is renewed; a host fenced because it was declared dead re-joins
 * with a new epoch and runs its start-up passes again (removing what it no longer owns). A
 * host fenced because another process joined under its id (two servers on one data dir)
 * stays fenced: that process is the host now.
 */
function followHostMembership(
  c: Container,
  host: HostMembership,
  reconciler: SandboxReconciler,
  replicator: SnapshotReplicator,
): void {
  host.onRenewedAfterLapse(() => {
    reconciler.resumeDeferred();
    replicator.kick();
  });
  host.onFenced(() => {
    void (async () => {
      const row = await getHost(c.db, host.id);
      if (row?.state !== "dead") {
        c.log.error(
          { host_id: host.id },
          "another server joined under this host's id (two servers on one data dir?); this one stays fenced",
        );
        return;
      }
      await host.join();
      await reconciler.rejoined();
      await replicator.rejoined();
    })().catch((error: unknown) =>
      c.log.error({ host_id: host.id, err: (error as Error).message }, "re-joining after a fence failed"),
    );
  });
}
