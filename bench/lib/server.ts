// Starts the real server as `make run` does (src/main.ts bundled into build/warren.mjs, run
// by node) as a child process with its log written to a file, waits for GET /readyz, and
// stops it again.
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { buildServerBundle, SERVER_BUNDLE } from "../../scripts/server-bundle.js";
import { freePort, waitForExit } from "../../test/support/ports.js";

export interface ServerOptions {
  root: string;
  port: number;
  env: Record<string, string>;
  logFile: string;
  /** Extra node flags for the server, e.g. --cpu-prof (not allowed in NODE_OPTIONS). */
  nodeArgs?: string[];
}

export interface RunningServer {
  child: ChildProcess;
  baseUrl: string;
  /** Milliseconds from spawn until GET /readyz answered 200. */
  readyMs: number;
  stop(): Promise<void>;
}

export { freePort };

const live = new Set<ChildProcess>();

let bundled: Promise<string> | null = null;
/** Builds the server bundle once per benchmark process (from the tree as it is now). */
function bundleOnce(): Promise<string> {
  bundled ??= buildServerBundle();
  return bundled;
}

/** Kills every server still running (used on SIGINT and at exit). */
export function killAllServers(): void {
  for (const child of live) {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
  live.clear();
}

export async function startServer(opts: ServerOptions, timeoutMs = 60_000): Promise<RunningServer> {
  const baseUrl = `http://127.0.0.1:${opts.port}`;
  const logFd = openSync(opts.logFile, "a");
  await bundleOnce();
  const started = performance.now();
  // WARREN_BENCH_SERVER_NODE_ARGS adds node flags to every server a benchmark starts (e.g.
  // "--cpu-prof --cpu-prof-dir=/tmp/prof" to see where a run's server time goes).
  const extra = process.env.WARREN_BENCH_SERVER_NODE_ARGS?.split(/\s+/).filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...extra, ...(opts.nodeArgs ?? []), "--enable-source-maps", SERVER_BUNDLE], {
    cwd: opts.root,
    // As `make run` starts it: a 16-thread libuv pool unless the environment says otherwise.
    env: { UV_THREADPOOL_SIZE: "16", ...process.env, ...opts.env, WARREN_LISTEN: `127.0.0.1:${opts.port}` },
    stdio: ["ignore", logFd, logFd],
  });
  closeSync(logFd);
  live.add(child);
  let exited = false;
  child.once("exit", () => {
    exited = true;
    live.delete(child);
  });

  const stop = async () => {
    if (exited) return;
    child.kill("SIGTERM");
    if (!(await waitForExit(child, 10_000))) {
      child.kill("SIGKILL");
      await waitForExit(child, 5_000);
    }
  };

  // Poll readiness; connection refused until the server listens.
  for (;;) {
    if (exited) throw new Error(`the server exited during start-up (exit code ${child.exitCode}); see ${opts.logFile}`);
    if (performance.now() - started > timeoutMs) {
      await stop();
      throw new Error(`the server was not ready within ${timeoutMs} ms; see ${opts.logFile}`);
    }
    try {
      const response = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(1000) });
      await response.arrayBuffer();
      if (response.status === 200) break;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return { child, baseUrl, readyMs: performance.now() - started, stop };
}

/** How the benchmarks run the server, as recorded in their results. */
export const SERVER_METHOD =
  "UV_THREADPOOL_SIZE=16 node --enable-source-maps build/warren.mjs, the make run bundle (defaults; WARREN_LOG_LEVEL=info; stdout+stderr to a log file)";
