// Small file helpers shared by the store, the keyring and the runtime drivers.
import { randomBytes } from "node:crypto";
import { chmod, open, rename, rm, stat, writeFile } from "node:fs/promises";

/** Whether a path exists (following symlinks); any error reads as absent. */
export async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}

/**
 * Replaces `file` whole or not at all: the content goes to a temp name beside it (same
 * filesystem), gets `mode` whatever the umask, and is renamed over the old file.
 */
export async function writeFileAtomically(file: string, content: string | Buffer, mode = 0o600): Promise<void> {
  const temp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    await writeFile(temp, content, { mode });
    await chmod(temp, mode);
    await rename(temp, file);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

/** fsync(2) of a file or a directory (a directory's entries: what was linked or renamed in it). */
export async function fsyncPath(target: string): Promise<void> {
  const handle = await open(target, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
