// Removes everything a driver root has on the host: every sandbox (as destroy() does),
// then whatever is left under the root's tag (veths, namespaces, the nftables table, the
// cgroup parent), the storage pool (unmounted, its loop devices detached) and the root itself. For tests (in after hooks, even when a test failed)
// and for an operator retiring a root.
import { rm, rmdir } from "node:fs/promises";
import { cgroupDirs, removeCgroup } from "./cgroups.js";
import { LocalRuntimeDriver } from "./driver.js";
import { removeMappedTree } from "./id-mapping.js";
import { unmountUnder } from "./mounts.js";
import { deleteLink } from "./network.js";
import { readNetworkRecord } from "./records.js";
import { StoragePool } from "./storage/pool.js";

export interface SweepReport {
  destroyed: string[];
  errors: string[];
}

export async function sweepRoot(root: string, options: { keepRoot?: boolean } = {}): Promise<SweepReport> {
  const report: SweepReport = { destroyed: [], errors: [] };
  const driver = await LocalRuntimeDriver.open({ root, installPackages: false });
  await releaseAll(driver, report.errors, async (id) => {
    await driver.destroy(id);
    report.destroyed.push(id);
  });
  if (!options.keepRoot) await rm(driver.layout.root, { recursive: true, force: true });
  return report;
}

/**
 * `each` on every sandbox of the driver's root (an error noted per sandbox), then the root's
 * shared host state: veths left over, its nftables table, its cgroup parent (and the shared
 * `/warren` parent once no other root uses it), and after the driver is closed the storage
 * pool's loop mount and whatever is still mounted under the root.
 */
async function releaseAll(driver: LocalRuntimeDriver, errors: string[], each: (id: string) => Promise<void>) {
  try {
    for (const id of await driver.list()) {
      await each(id).catch((error: Error) => errors.push(`${id}: ${error.message}`));
    }
    for (const veth of await driver.network.listVeths()) {
      await deleteLink(veth).catch((error) => errors.push(`${veth}: ${(error as Error).message}`));
    }
    await driver.network.deleteTable();
    const left = await removeCgroup(driver.layout.cgroupParent);
    if (left.length > 0) errors.push(`cgroups left: ${left.join(", ")}`);
    // rmdir fails on a non-empty cgroup: another root's sandboxes keep the shared parent.
    for (const dir of await cgroupDirs("/warren")) await rmdir(dir).catch(() => undefined);
  } finally {
    await driver.close();
  }
  await StoragePool.detach(driver.layout).catch((error) => errors.push((error as Error).message));
  await unmountUnder(driver.layout.root).catch((error) => errors.push((error as Error).message));
}

export interface ReleaseReport {
  /** Sandboxes stopped (their processes ended) and whose host state was released. */
  released: string[];
  errors: string[];
}

/**
 * What a host reboot does to a root, and nothing more: every sandbox's processes end and its
 * mounts, network namespace, veths and cgroup go, then the root's nftables table, its cgroup
 * parent and the storage pool's loop mount. Every file stays (records, workspaces, images,
 * snapshots): the next server on the root starts its sandboxes again as after a reboot. For
 * an operator after a clean shutdown (`warren admin runtime sweep`); never beside a server
 * running on the root.
 */
export async function releaseRoot(root: string): Promise<ReleaseReport> {
  const report: ReleaseReport = { released: [], errors: [] };
  const driver = await LocalRuntimeDriver.open({ root, installPackages: false });
  await releaseAll(driver, report.errors, async (id) => {
    await driver.stop(id);
    const paths = driver.layout.sandbox(id);
    await removeMappedTree(driver.mappedPaths(id));
    await unmountUnder(paths.dir);
    const network = await readNetworkRecord(paths).catch(() => null);
    await driver.network.detach(id, network?.slot ?? null);
    await driver.network.deleteNamespace(id);
    const left = await removeCgroup(driver.layout.cgroupPath(id));
    if (left.length > 0) throw new Error(`cgroups still in use: ${left.join(", ")}`);
    report.released.push(id);
  });
  return report;
}
