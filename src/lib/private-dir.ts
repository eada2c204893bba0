// The data directory holds the store (its WAL keeps exec output and other secrets), the
// master key file and the server lock: only the server's user may read or write any of it.
import { chmod, lstat, mkdir, readdir } from "node:fs/promises";
import path from "node:path";

export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

/**
 * Creates `dir` when missing and makes it and everything in it private (dirs 0700, files
 * 0600), repairing what an older version, a permissive umask or a copy left readable.
 * Subtrees in `keep` are left as they are (their parent is private already): the runtime
 * root holds image layers and sandbox roots whose modes are what a sandbox sees. Symlinks
 * are not followed. Returns how many entries were changed.
 */
export async function makeDirPrivate(dir: string, keep: string[] = []): Promise<number> {
  await mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const kept = new Set(keep.map((entry) => path.resolve(entry)));
  let changed = 0;
  const visit = async (entry: string): Promise<void> => {
    const stat = await lstat(entry);
    if (stat.isSymbolicLink()) return;
    const wanted = stat.isDirectory() ? PRIVATE_DIR_MODE : PRIVATE_FILE_MODE;
    if ((stat.mode & 0o7777) !== wanted) {
      await chmod(entry, wanted);
      changed++;
    }
    if (!stat.isDirectory()) return;
    for (const name of await readdir(entry)) {
      const child = path.join(entry, name);
      if (!kept.has(child)) await visit(child);
    }
  };
  await visit(path.resolve(dir));
  return changed;
}
