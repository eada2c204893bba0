// Removes everything a driver root has on the host: every sandbox (as destroy() does),
// then whatever is left under the root's tag (veths, namespaces, the nftables table, the
// cgroup parent), the storage pool (unmounted, its loop devices detached) and the root itself. For tests (in after hooks, even when a test failed)
// and for an operator retiring a root.
import { rm, rmdir } from "node:fs/promises";
import { cgroupDirs, removeCgroup } from "./cgroups.js";
import { LocalRuntimeDriver } from "./driver.js";
import { unmountUnder } from "./mounts.js";
import { deleteLink } from "./network.js";
import { StoragePool } from "./storage/pool.js";

export interface SweepReport {
  destroyed: string[];
  errors: string[];
}

export async function sweepRoot(root: string, options: { keepRoot?: boolean } = {}): Promise<SweepReport> {
  const report: SweepReport = { destroyed: [], errors: [] };
  const driver = await LocalRuntimeDriver.open({ root, installPackages: false });
  try {
    for (const id of await driver.list()) {
      try {
        await driver.destroy(id);
        report.destroyed.push(id);
      } catch (error) {
        report.errors.push(`${id}: ${(error as Error).message}`);
      }
    }
    for (const veth of await driver.network.listVeths()) {
      await deleteLink(veth).catch((error) => report.errors.push(`${veth}: ${(error as Error).message}`));
    }
    await driver.network.deleteTable();
    const left = await removeCgroup(driver.layout.cgroupParent);
    if (left.length > 0) report.errors.push(`cgroups left: ${left.join(", ")}`);
    // The shared parent goes only when no other root uses it (rmdir fails on a non-empty cgroup).
    for (const dir of await cgroupDirs("/warren")) await rmdir(dir).catch(() => undefined);
  } finally {
    await driver.close();
  }
  await StoragePool.detach(driver.layout).catch((error) => report.errors.push((error as Error).message));
  await unmountUnder(driver.layout.root).catch((error) => report.errors.push((error as Error).message));
  if (!options.keepRoot) await rm(driver.layout.root, { recursive: true, force: true });
  return report;
}
