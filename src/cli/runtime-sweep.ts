// `warren admin runtime sweep`: releases what the local runtime holds on the host after the
// server stopped (or, with --purge, removes the root). It works on this host's runtime root
// (WARREN_RUNTIME_ROOT, default <data dir>/runtime) and refuses while a server runs on it.
import { access } from "node:fs/promises";
import type { Config } from "../config.js";
import { releaseRoot, sweepRoot } from "../drivers/runtime/local/sweep.js";
import { readServerLock } from "../lib/server-lock.js";

export async function sweepRuntime(config: Config, purge: boolean): Promise<Record<string, unknown>> {
  const root = config.sandbox.runtimeRoot;
  const server = await readServerLock(config.dataDir);
  if (server) {
    throw new Error(
      `a server (pid ${server.pid}) runs on ${config.dataDir}: stop it first (the sweep ends its sandboxes)`,
    );
  }
  if (
    !(await access(root).then(
      () => true,
      () => false,
    ))
  ) {
    return { root, swept: false, reason: "no runtime root here" };
  }
  if (purge) {
    const report = await sweepRoot(root);
    if (report.errors.length > 0) throw new Error(`purge of ${root} left: ${report.errors.join("; ")}`);
    return { root, purged: true, destroyed: report.destroyed };
  }
  const report = await releaseRoot(root);
  if (report.errors.length > 0) throw new Error(`sweep of ${root} left: ${report.errors.join("; ")}`);
  return { root, swept: true, released: report.released };
}
