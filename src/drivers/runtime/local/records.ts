// The local driver's on-disk records of a sandbox. State on disk is the truth: a restarted
// server (a second driver on the same root) reads these and adopts what the first one made.
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { exists, writeFileAtomically } from "../../../lib/fs.js";
import {
  type NetworkMode,
  type ResourceSpec,
  RuntimeError,
  type SandboxMount,
  type StorageClass,
} from "../interface.js";
import { isSandboxId, type Layout, type SandboxPaths } from "./layout.js";
import type { ProcessIdentity } from "./oci-config.js";

/** What create() fixed, in `<sandbox>/sandbox.json` (written last: its presence means create finished). */
export interface SandboxRecord {
  version: 1;
  id: string;
  createdAt: string;
  image: { reference: string; digest: string; lowerDirs: string[] };
  /** Host directories bound in (SandboxSpec.mounts); absent when none. */
  mounts?: SandboxMount[];
  /** The egress CA's files bound read-only over the image's (trust.ts); absent without a CA. */
  trust?: SandboxMount[];
  args: string[];
  identity: ProcessIdentity;
  resources: ResourceSpec;
  storage: { class: StorageClass };
  hostname: string;
  /** The sandbox runs in a user namespace of its own (user-namespace.ts); absent: the host's. */
  userNamespace?: true;
  /**
   * Its ids 0..65535 map to a host block of its own (id-mapping.ts; the block's first uid in
   * `userns.range`): its files are seen through idmapped mounts, its bundle names its mapped tree.
   */
  idMapping?: true;
  /** SandboxSpec.cpuGroup (its organization); absent for a pooled sandbox not yet claimed. */
  cpuGroup?: string;
}

/** Mutable network state, in `<sandbox>/network.json` (written before anything is attached). */
export interface NetworkRecord {
  mode: NetworkMode;
  slot: number | null;
}

/** A JSON file replaced whole (private to the server, like every file under the root). */
export function writeJson(file: string, value: unknown): Promise<void> {
  return writeFileAtomically(file, `${JSON.stringify(value, null, 2)}\n`, 0o600);
}

/** The sandbox's record, or RuntimeError not_found when create never finished. */
export async function loadRecord(layout: Layout, id: string): Promise<{ record: SandboxRecord; paths: SandboxPaths }> {
  const paths = layout.sandbox(id);
  let text: string;
  try {
    text = await readFile(paths.record, "utf8");
  } catch {
    throw new RuntimeError("not_found", `no sandbox ${id}`);
  }
  return { record: JSON.parse(text) as SandboxRecord, paths };
}

export function networkFile(paths: SandboxPaths): string {
  return path.join(paths.dir, "network.json");
}

export async function readNetworkRecord(paths: SandboxPaths): Promise<NetworkRecord> {
  return JSON.parse(await readFile(networkFile(paths), "utf8")) as NetworkRecord;
}

export function writeNetworkRecord(paths: SandboxPaths, record: NetworkRecord): Promise<void> {
  return writeJson(networkFile(paths), record);
}

/** Ids whose create finished (a record exists). */
export async function recordIds(layout: Layout): Promise<string[]> {
  const ids: string[] = [];
  for (const id of await readdir(layout.sandboxesDir).catch(() => [] as string[])) {
    if (isSandboxId(id) && (await exists(layout.sandbox(id).record))) ids.push(id);
  }
  return ids;
}
