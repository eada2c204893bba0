// Host-wide kernel counters that one sandbox could fill for everyone, where the kernel also
// charges what they count to the memory cgroup of whoever made it. Sandbox root is host root
// to the per-uid epoll count (ids map one to one, user-namespace.ts) and no sandbox has
// CAP_SYS_ADMIN to pass fs.file-max, so at their defaults (sized from the host's memory,
// e.g. 5.4M epoll watches: ~1.1 GB) one sandbox of a few GiB could take every epoll watch of
// root (the server's Node aborts without one) or every open file of the host (other
// sandboxes get ENFILE). Raised to the most the kernel takes, as systemd does for
// fs.file-max, each sandbox is bounded by its own memory limit instead, and reaches that
// long before any shared counter.
import { readFile, writeFile } from "node:fs/promises";

/** LONG_MAX: the largest value both files take (systemd writes it to fs.file-max at boot). */
export const UNBOUNDED = 9_223_372_036_854_775_807n;

export const MEMCG_ACCOUNTED_LIMITS = ["/proc/sys/fs/epoll/max_user_watches", "/proc/sys/fs/file-max"] as const;

/**
 * Raises each of MEMCG_ACCOUNTED_LIMITS to UNBOUNDED when it is lower (never lowers one an
 * operator set higher). Resolves with the files changed.
 */
export async function raiseMemcgAccountedLimits(): Promise<string[]> {
  const raised: string[] = [];
  for (const file of MEMCG_ACCOUNTED_LIMITS) {
    const current = BigInt((await readFile(file, "utf8")).trim().split(/\s+/)[0] ?? "0");
    if (current >= UNBOUNDED) continue;
    await writeFile(file, `${UNBOUNDED}\n`);
    raised.push(file);
  }
  return raised;
}

/**
 * kernel.pid_max bounds every task of the host together (32768 by default on a small
 * machine): 64 sandboxes at their pids limit of 512 would take them all, and the server could
 * no longer spawn runc. Each sandbox is bounded by its own pids cgroup; the shared count is
 * raised to the most a 64-bit kernel takes (PID_MAX_LIMIT), so no set of sandboxes admitted
 * by memory reaches it first.
 */
export const PID_MAX_FILE = "/proc/sys/kernel/pid_max";
export const PID_MAX_LIMIT = 4_194_304;

/** Raises kernel.pid_max to PID_MAX_LIMIT when it is lower; true when it changed it. */
export async function raisePidMax(): Promise<boolean> {
  const current = Number((await readFile(PID_MAX_FILE, "utf8")).trim());
  if (current >= PID_MAX_LIMIT) return false;
  await writeFile(PID_MAX_FILE, `${PID_MAX_LIMIT}\n`);
  return true;
}
