// A throwaway PostgreSQL cluster for tests: initdb into a temp dir, pg_ctl start on a free
// loopback port, removed again on stop. As root, the server runs as the `postgres` user
// (initdb refuses root). Installs Debian's postgresql when no initdb is found.
import { execFileSync, spawnSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { freePort } from "./ports.js";

export interface PgCluster {
  /** Connection string of the cluster's `postgres` database (superuser). */
  url: string;
  /** Its temp dir (data directory, socket, log), removed on stop. */
  dir: string;
  stop(): void;
}

function findBinDir(): string | null {
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(path.join(root, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? path.join(root, versions[0], "bin") : null;
}

export function ensurePostgresInstalled(): string {
  let bin = findBinDir();
  if (bin) return bin;
  const result = spawnSync("apt-get", ["install", "-y", "--no-install-recommends", "postgresql"], {
    stdio: "inherit",
    env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
  });
  if (result.status !== 0) throw new Error("could not install postgresql with apt-get");
  bin = findBinDir();
  if (!bin) throw new Error("postgresql installed but no initdb found under /usr/lib/postgresql");
  return bin;
}

/** The file in a cluster's temp dir naming the process that started it. */
const STARTER = "started-by.pid";

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Stops the clusters of processes that died without stopping them (a SIGKILLed test run
 * never runs its after hooks), and removes their temp dirs.
 */
function stopOrphans(bin: string, asOwner: (file: string, args: string[]) => void): void {
  for (const name of readdirSync(os.tmpdir())) {
    if (!name.startsWith("warren-pg-")) continue;
    const dir = path.join(os.tmpdir(), name);
    let starter: number;
    try {
      starter = Number(readFileSync(path.join(dir, STARTER), "utf8"));
    } catch {
      continue; // not one of ours, or still being made
    }
    if (!Number.isInteger(starter) || starter <= 0 || alive(starter)) continue;
    const dataDir = path.join(dir, "data");
    if (existsSync(path.join(dataDir, "postmaster.pid"))) {
      try {
        asOwner(path.join(bin, "pg_ctl"), ["-D", dataDir, "-m", "immediate", "-w", "stop"]);
      } catch {
        // already stopped
      }
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function startPgCluster(): Promise<PgCluster> {
  const bin = ensurePostgresInstalled();
  const isRoot = process.getuid?.() === 0;
  const dir = mkdtempSync(path.join(os.tmpdir(), "warren-pg-"));
  const dataDir = path.join(dir, "data");
  const port = await freePort();
  const asOwner = (file: string, args: string[]) => {
    const cmd = isRoot ? "runuser" : file;
    const argv = isRoot ? ["-u", "postgres", "--", file, ...args] : args;
    execFileSync(cmd, argv, { stdio: "pipe" });
  };
  stopOrphans(bin, asOwner);
  writeFileSync(path.join(dir, STARTER), String(process.pid));
  if (isRoot) {
    const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
    chownSync(dir, uid, gid);
  }
  try {
    asOwner(path.join(bin, "initdb"), ["-D", dataDir, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
    asOwner(path.join(bin, "pg_ctl"), [
      "-D",
      dataDir,
      "-l",
      path.join(dir, "server.log"),
      "-o",
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200`,
      "-w",
      "start",
    ]);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  let stopped = false;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    dir,
    stop: () => {
      if (stopped) return;
      stopped = true;
      try {
        asOwner(path.join(bin, "pg_ctl"), ["-D", dataDir, "-m", "immediate", "-w", "stop"]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
