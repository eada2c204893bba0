// Where a sandbox may mount volumes: absolute, normalized paths, none over another, none
// over what Warren itself provides. Pure, so every case is tested without a sandbox.
import path from "node:path";
import { invalid } from "../../lib/errors.js";

const RESERVED = ["/proc", "/sys", "/dev", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"];
export const MAX_TARGET_BYTES = 1024;

/** Why `target` cannot be a mount point, or null when it can. */
export function targetProblem(target: string): string | null {
  if (target.includes("\0")) return "may not contain NUL";
  if (!target.startsWith("/")) return "must be absolute";
  if (Buffer.byteLength(target) > MAX_TARGET_BYTES) return `must be at most ${MAX_TARGET_BYTES} bytes`;
  if (path.posix.normalize(target) !== target || target.endsWith("/") || target.includes("/./")) {
    return "must be normalized (no trailing /, no . or .. segments, no //)";
  }
  if (target === "/") return "may not replace /";
  if (target === "/workspace") return "may not replace /workspace";
  for (const reserved of RESERVED) {
    if (target === reserved || target.startsWith(`${reserved}/`)) return `may not be under ${reserved}`;
  }
  return null;
}

const within = (inner: string, outer: string) => inner === outer || inner.startsWith(`${outer}/`);

/** Refuses invalid targets and any two that are equal or nested (an overlap). */
export function checkMountTargets(targets: readonly string[]): void {
  for (const [i, target] of targets.entries()) {
    const problem = targetProblem(target);
    if (problem) throw invalid(`volumes[${i}].target_path ${problem}`);
    for (const [j, other] of targets.entries()) {
      if (j !== i && within(target, other)) {
        throw invalid(`volumes[${i}].target_path overlaps volumes[${j}].target_path (${other})`);
      }
    }
  }
}
