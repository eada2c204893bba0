// Small C helpers of the driver (the exec agent, the clone helper), compiled with
// `gcc -static` on first use and cached by the source's hash in a private directory shared
// by every driver on the host.
import { createHash, randomBytes } from "node:crypto";
import { chmod, lstat, mkdir, readFile, rename, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { run } from "./host.js";

export const COMPILER = "/usr/bin/gcc";

/** The default cache: root-owned, 0700, in the temp dir. */
export function defaultBinaryCacheDir(): string {
  return path.join(os.tmpdir(), "warren-exec-agent");
}

const builds = new Map<string, Promise<string>>();

/**
 * The path of the binary built from `sourceFile`, compiling it when the cache has none for
 * this source's hash. Builds go to a temp name and are renamed into place, so concurrent
 * builders (two test files) never see half a binary. The cache dir must belong to this user
 * and be writable by no one else (it is refused otherwise).
 */
export async function buildStaticBinary(
  sourceFile: string,
  name: string,
  cacheDir = defaultBinaryCacheDir(),
): Promise<string> {
  const source = await readFile(sourceFile);
  const hash = createHash("sha256").update(source).digest("hex").slice(0, 12);
  const binary = path.join(cacheDir, `${name}-${hash}`);
  const existing = await lstat(binary).catch(() => null);
  if (existing?.isFile() && existing.uid === process.getuid?.() && (existing.mode & 0o022) === 0) return binary;
  let building = builds.get(binary);
  if (!building) {
    building = compile(sourceFile, cacheDir, binary).finally(() => builds.delete(binary));
    builds.set(binary, building);
  }
  return building;
}

async function compile(sourceFile: string, cacheDir: string, binary: string): Promise<string> {
  await mkdir(cacheDir, { recursive: true, mode: 0o700 });
  const dir = await lstat(cacheDir);
  if (!dir.isDirectory() || dir.uid !== process.getuid?.() || (dir.mode & 0o022) !== 0) {
    throw new Error(`${cacheDir} is not a private directory of this user`);
  }
  const temp = `${binary}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    await run(COMPILER, ["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o", temp, sourceFile]);
    await chmod(temp, 0o755);
    await rename(temp, binary);
  } finally {
    await rm(temp, { force: true });
  }
  return binary;
}
