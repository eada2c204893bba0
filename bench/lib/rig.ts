// What a benchmark of the real server runs on: a throwaway registry, a temporary dir with
// the runtime root and data dir, a bootstrap key, and the `make run` bundle started on
// them. close() (in the benchmark's finally, and on Ctrl-C) stops the server, sweeps the
// runtime root (sandboxes, mounts, netns, nft table) and removes everything else.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { sweepRoot } from "../../src/drivers/runtime/local/sweep.js";
import { startTestRegistry, type TestRegistry } from "../../test/support/registry.js";
import { freePort, killAllServers, type RunningServer, startServer } from "./server.js";

export interface BenchRig {
  registry: TestRegistry;
  tmp: string;
  runtimeRoot: string;
  key: string;
  /** Starts the server on the rig (data dir, runtime root, key, busybox as the default image) plus `env`. */
  start(env?: Record<string, string>): Promise<RunningServer>;
  /** Also closed by close() (a raw runc rig, say). */
  onClose(close: () => Promise<unknown>): void;
  close(): Promise<void>;
}

export async function openBenchRig(name: string, root: string): Promise<BenchRig> {
  const registry = await startTestRegistry();
  const tmp = await mkdtemp(path.join(os.tmpdir(), `warren-bench-${name}-`));
  const runtimeRoot = path.join(tmp, "runtime");
  const key = `bench-${randomBytes(12).toString("hex")}`;
  const closers: (() => Promise<unknown>)[] = [];
  let server: RunningServer | null = null;
  const close = async () => {
    await server?.stop().catch(() => undefined);
    for (const closer of closers.reverse()) await closer().catch(() => undefined);
    await sweepRoot(runtimeRoot).catch(() => undefined);
    await registry.stop().catch(() => undefined);
    await rm(tmp, { recursive: true, force: true });
  };
  process.on("SIGINT", () => {
    killAllServers();
    void close().finally(() => process.exit(130));
  });
  return {
    registry,
    tmp,
    runtimeRoot,
    key,
    async start(env = {}) {
      server = await startServer({
        root,
        port: await freePort(),
        logFile: path.join(tmp, "server.log"),
        env: {
          WARREN_DATA_DIR: path.join(tmp, "data"),
          WARREN_RUNTIME_ROOT: runtimeRoot,
          WARREN_BOOTSTRAP_API_KEY: key,
          WARREN_DEFAULT_IMAGE: `${registry.host}/test/busybox:latest`,
          ...env,
        },
      });
      return server;
    },
    onClose(closer) {
      closers.push(closer);
    },
    close,
  };
}
