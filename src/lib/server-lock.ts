// PGlite admits one process per data directory. The server records its pid and address in
// the data dir so the admin CLI goes through the running server instead of opening the
// store beside it.
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";

export interface ServerLock {
  pid: number;
  url: string;
}

const LOCK_FILE = "server.json";

export async function writeServerLock(dataDir: string, url: string): Promise<() => Promise<void>> {
  const file = path.join(dataDir, LOCK_FILE);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await writeFile(file, JSON.stringify({ pid: process.pid, url } satisfies ServerLock), { mode: 0o600 });
  return () => rm(file, { force: true });
}

/** The running server of this data dir, or null when none is alive. */
export async function readServerLock(dataDir: string): Promise<ServerLock | null> {
  try {
    const lock = JSON.parse(await readFile(path.join(dataDir, LOCK_FILE), "utf8")) as ServerLock;
    process.kill(lock.pid, 0);
    return lock;
  } catch {
    return null;
  }
}
