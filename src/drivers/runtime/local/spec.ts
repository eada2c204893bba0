// Checks of a SandboxSpec before anything touches the host, and small reads of the host and
// of an image's rootfs that create() needs.
import { lstat, readFile } from "node:fs/promises";
import path from "node:path";
import { RuntimeError, type SandboxMount, type SandboxSpec } from "../interface.js";
import { assertSandboxId } from "./layout.js";
import { mergeEnv, validateMounts, validateResources } from "./oci-config.js";
import { assertSnapshotId } from "./snapshots.js";
import { assertCapacity } from "./storage/images.js";

const MAX_ARGS = 4096;

/** Reads a file of the image's rootfs without following symlinks out of it (empty when absent or a link). */
export async function readRootfsFile(rootfs: string, relative: string): Promise<string> {
  let current = rootfs;
  for (const part of relative.split("/")) {
    current = path.join(current, part);
    const info = await lstat(current).catch(() => null);
    if (!info || info.isSymbolicLink()) return "";
  }
  return readFile(current, "utf8").catch(() => "");
}

export async function hostMaxOpenFiles(): Promise<number> {
  const limits = await readFile("/proc/self/limits", "utf8").catch(() => "");
  const match = /^Max open files\s+\S+\s+(\d+)/m.exec(limits);
  return Math.min(1_048_576, match ? Number(match[1]) : 1_048_576);
}

/** Each mount's source must be a directory (not a symlink to one) when the sandbox is made. */
export async function assertMountSources(mounts: readonly SandboxMount[]): Promise<void> {
  for (const mount of mounts) {
    const info = await lstat(mount.source).catch(() => null);
    if (!info?.isDirectory()) {
      throw new RuntimeError("invalid_spec", `mount source ${mount.source} is not a directory`);
    }
  }
}

export function validateSpec(spec: SandboxSpec): void {
  assertSandboxId(spec.id);
  validateResources(spec.resources);
  if (spec.storageClass !== "standard" && spec.storageClass !== "durable") {
    throw new RuntimeError("invalid_spec", `unknown storage class "${spec.storageClass}"`);
  }
  if (spec.storageClass === "durable") assertCapacity(spec.workspaceCapacityGiB);
  if (spec.network !== "none" && spec.network !== "public" && spec.network !== "gateway_only") {
    throw new RuntimeError("invalid_spec", `unknown network mode "${spec.network}"`);
  }
  if (spec.env !== undefined) mergeEnv(spec.env);
  if (spec.source?.kind !== "image" && spec.source?.kind !== "snapshot") {
    throw new RuntimeError("invalid_spec", "source must be an image or a snapshot");
  }
  if (spec.source.kind === "snapshot") assertSnapshotId(spec.source.snapshotId);
  validateMounts(spec.mounts ?? []);
  if (spec.command !== undefined) {
    if (!Array.isArray(spec.command) || spec.command.length > MAX_ARGS || spec.command.some((a) => a.includes("\0"))) {
      throw new RuntimeError("invalid_spec", "command must be an array of strings without NUL");
    }
  }
}
