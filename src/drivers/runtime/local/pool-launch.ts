// The launcher of a pooled sandbox (pool.ts): its first run starts as tini -> busybox sh
// reading a FIFO, so a claim only has to write the claiming sandbox's command and
// environment there (a few ms) instead of waiting for `runc run` (30-40 ms). The shell
// replaces itself with `busybox env -i <env> <argv>`, which replaces itself with the
// command: it runs as tini's child with exactly the environment the normal start would give.
import { constants } from "node:fs";
import { lstat, open, readlink } from "node:fs/promises";
import path from "node:path";
import { LAUNCH_DIR } from "./oci-config.js";

/** A static busybox on the host (the tests' busybox package); without it there is no pool. */
export const POOL_BUSYBOX = "/usr/bin/busybox";

/**
 * `waiting`: the next or current run waits in the launcher; `unclaimed`: the record is still
 * the pool's placeholder (no sandbox's command yet). Both are markers in the sandbox's host
 * dir, seen whether or not its root image is mounted (after a reboot). `bound` is what the
 * sandbox sees at LAUNCH_DIR: a directory on its root image (beside the overlay's upper dir),
 * so the sandbox's mountinfo names no host path for it, holding the FIFO `spec` and the empty
 * `busybox` the host's busybox is bound over.
 */
export function launchPaths(paths: { dir: string; layer: string }): {
  dir: string;
  waiting: string;
  unclaimed: string;
  bound: string;
  spec: string;
  busybox: string;
} {
  const dir = path.join(paths.dir, "launch");
  const bound = path.join(paths.layer, "launch");
  return {
    dir,
    waiting: path.join(dir, "waiting"),
    unclaimed: path.join(dir, "unclaimed"),
    bound,
    spec: path.join(bound, "spec"),
    busybox: path.join(bound, "busybox"),
  };
}

const quote = (value: string) => `'${value.replaceAll("'", `'\\''`)}'`;

/**
 * The script the launcher sources, or null when `argv` cannot go through `env` unchanged
 * (a program name with `=` would be read as an assignment): then the sandbox starts normally.
 */
export function launchScript(argv: readonly string[], env: readonly string[]): string | null {
  if (argv.length === 0 || !argv[0] || argv[0].includes("=")) return null;
  if ([...argv, ...env].some((value) => value.includes("\0"))) return null;
  return `exec ${LAUNCH_DIR}/busybox env -i ${[...env, ...argv].map(quote).join(" ")}\n`;
}

/** `target` inside `root`, following symlinks as the sandbox would see them (null: missing or a loop). */
async function resolveInRoot(root: string, target: string): Promise<string | null> {
  const pending = target.split("/").filter(Boolean);
  const resolved: string[] = [];
  for (let hops = 0; pending.length > 0; ) {
    const part = pending.shift() as string;
    if (part === ".") continue;
    if (part === "..") {
      resolved.pop();
      continue;
    }
    const host = path.join(root, ...resolved, part);
    const info = await lstat(host).catch(() => null);
    if (!info) return null;
    if (!info.isSymbolicLink()) {
      resolved.push(part);
      continue;
    }
    if (++hops > 40) return null;
    const link = await readlink(host);
    if (link.startsWith("/")) resolved.length = 0;
    pending.unshift(...link.split("/").filter(Boolean));
  }
  return path.join(root, ...resolved);
}

/**
 * Whether `argv[0]` names an executable file in the sandbox's root, looked up as runc does
 * (PATH of the environment, or relative to `cwd`). A start that runc would refuse must not
 * go through the launcher, where it would run and exit 127 instead of failing to start.
 */
export async function executableInRoot(
  rootfs: string,
  argv0: string,
  env: readonly string[],
  cwd: string,
): Promise<boolean> {
  const candidates = argv0.includes("/")
    ? [argv0.startsWith("/") ? argv0 : path.posix.join(cwd, argv0)]
    : (env.find((entry) => entry.startsWith("PATH="))?.slice(5) ?? "")
        .split(":")
        .filter((dir) => dir.startsWith("/"))
        .map((dir) => path.posix.join(dir, argv0));
  for (const candidate of candidates) {
    const file = await resolveInRoot(rootfs, candidate);
    const info = file ? await lstat(file).catch(() => null) : null;
    if (info?.isFile() && (info.mode & 0o111) !== 0) return true;
  }
  return false;
}

/**
 * Hands `script` to the launcher waiting on `fifo`. False when no launcher reads it (the
 * sandbox's first run is gone): nothing was sent.
 */
export async function sendLaunch(fifo: string, script: string): Promise<boolean> {
  // The non-blocking open fails at once (ENXIO) without a reader; with one, the blocking
  // open below returns at once too, and writes the whole script however long it is.
  const probe = await open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => null);
  if (!probe) return false;
  try {
    const writer = await open(fifo, constants.O_WRONLY);
    try {
      await writer.writeFile(script);
    } finally {
      await writer.close();
    }
  } finally {
    await probe.close();
  }
  return true;
}
