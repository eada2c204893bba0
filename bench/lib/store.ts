// The per-store setup the benchmark drivers share: a temp dir holding the server's data dir
// and log, a bootstrap API key, the server env, and for PostgreSQL a throwaway cluster with a
// warren_bench database. Servers, the cluster and the temp dirs are always cleaned up: at
// exit, on SIGINT/SIGTERM (installCleanup), and when main() settles (runMain).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { type PgCluster, startPgCluster } from "../../test/support/pg-cluster.js";
import { postgresPids } from "./cpu.js";
import { killAllServers } from "./server.js";

export type Store = "pglite" | "postgres";

export interface StoreSetup {
  /** The temp dir (removed at cleanup unless kept). */
  dir: string;
  /** WARREN_DATA_DIR. */
  dataDir: string;
  /** The server's stdout and stderr. */
  logFile: string;
  /** The bootstrap API key. */
  key: string;
  /** The server env: WARREN_DATA_DIR, WARREN_BOOTSTRAP_API_KEY, WARREN_LOG_LEVEL=info, and DATABASE_URL on PostgreSQL. */
  env: Record<string, string>;
  /** Pids of the PostgreSQL cluster (none on PGlite), for CPU accounting. */
  dbPids: () => number[];
}

let cluster: PgCluster | null = null;
const tempDirs: string[] = [];
let keepTempDirs = false;

/** Stops every server and the cluster, and removes the temp dirs (unless kept). */
export function cleanup(): void {
  killAllServers();
  try {
    cluster?.stop();
  } catch {
    // best effort
  }
  cluster = null;
  if (!keepTempDirs) for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** Runs cleanup() at exit and on SIGINT/SIGTERM; `keep` leaves the temp dirs in place. */
export function installCleanup(log: (line: string) => void, opts: { keep?: boolean } = {}): void {
  keepTempDirs = opts.keep ?? false;
  process.on("exit", cleanup);
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      log(`${signal}: stopping the server and the cluster`);
      cleanup();
      process.exit(130);
    });
  }
}

/** Creates `<tmp>/<prefix>-<store>-XXXXXX` and, for PostgreSQL, starts the cluster. */
export interface StoreOptions {
  /**
   * PostgreSQL only: Warren's database user is not a superuser but a role with CREATEROLE
   * owning the database (a managed PostgreSQL's shape), so telemetry SQL runs on reader logins.
   */
  nonSuperuserOwner?: boolean;
}

export async function prepareStore(
  store: Store,
  prefix: string,
  log: (line: string) => void,
  options: StoreOptions = {},
): Promise<StoreSetup> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `${prefix}-${store}-`));
  tempDirs.push(dir);
  const logFile = path.join(dir, "server.log");
  const key = `wrn_${randomBytes(32).toString("base64url")}`;
  const dataDir = path.join(dir, "data");
  const env: Record<string, string> = {
    WARREN_DATA_DIR: dataDir,
    WARREN_BOOTSTRAP_API_KEY: key,
    WARREN_LOG_LEVEL: process.env.WARREN_BENCH_LOG_LEVEL_EXPERIMENT ?? "info",
  };
  let dbPids = () => [] as number[];
  if (store === "postgres") {
    log("starting a throwaway PostgreSQL cluster");
    cluster = await startPgCluster();
    const admin = new pg.Client({ connectionString: cluster.url });
    await admin.connect();
    const url = new URL(cluster.url);
    if (options.nonSuperuserOwner) {
      await admin.query("CREATE ROLE warren_bench_owner LOGIN CREATEROLE NOSUPERUSER");
      await admin.query("CREATE DATABASE warren_bench OWNER warren_bench_owner");
      url.username = "warren_bench_owner";
    } else {
      await admin.query("CREATE DATABASE warren_bench");
    }
    await admin.end();
    url.pathname = "/warren_bench";
    env.DATABASE_URL = url.toString();
    const port = Number(url.port);
    dbPids = () => postgresPids(port);
  }
  return { dir, dataDir, logFile, key, env, dbPids };
}

/** Stops the PostgreSQL cluster of the store just measured (nothing on PGlite). */
export function stopCluster(): void {
  cluster?.stop();
  cluster = null;
}

/** Runs a driver's main(), then cleans up and exits: 0 on success, 1 (with the error logged) on failure. */
export function runMain(main: () => Promise<void>, log: (line: string) => void): void {
  main()
    .then(() => {
      cleanup();
      process.exit(0);
    })
    .catch((error: unknown) => {
      log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      cleanup();
      process.exit(1);
    });
}
