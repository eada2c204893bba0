// Each sandbox's user namespace (userns-helper.c). Without one, root in a sandbox is host
// root for the kernel's per-user counts, and one sandbox could take every inotify watch of
// host root (the server's, every other sandbox's). The namespace is owned by an unprivileged
// host uid of the sandbox's own (namespace-owners.ts hands them out), so those counts (the ucounts: inotify instances and watches,
// fanotify, namespaces) are charged to that uid in the initial namespace; ids map one to one,
// so files keep their host owners (the shared image layers, snapshots and volumes need no
// change). Its network namespace is made inside it (runc joins the user namespace first and
// may then join only namespaces it owns).
import { mkdir, statfs } from "node:fs/promises";
import path from "node:path";
import { projectFile } from "../../../lib/paths.js";
import { run, runOrFail } from "./host.js";
import type { SandboxPaths } from "./layout.js";
import { buildStaticBinary } from "./static-binary.js";

const HELPER_SOURCE = projectFile("src/drivers/runtime/local/userns-helper.c");

/** The file pinning the sandbox's user namespace (a bind mount of its nsfs file). */
export function userNamespacePin(paths: SandboxPaths): string {
  return path.join(paths.dir, "userns");
}

/**
 * Makes a sandbox's user namespace, owned by host uid `ownerUid`, and, owned by it, its network
 * namespace, pinned at `userPin` and `netnsPath`. Neither pin may exist. `mapped`: ids
 * 0..65535 inside map to `ownerUid`.. outside (id-mapping.ts) instead of one to one.
 */
export async function makeSandboxNamespaces(
  ownerUid: number,
  userPin: string,
  netnsPath: string,
  mapped = false,
): Promise<void> {
  await mkdir(path.dirname(netnsPath), { recursive: true, mode: 0o755 });
  const helper = await buildStaticBinary(HELPER_SOURCE, "warren-userns");
  await runOrFail("making the sandbox's user and network namespaces", helper, [
    mapped ? "make-mapped" : "make",
    String(ownerUid),
    userPin,
    netnsPath,
  ]);
}

/** The host uid owning the user namespace pinned at `userPin` (the kernel's answer, not a record). */
export async function namespaceOwnerOf(userPin: string): Promise<number> {
  const helper = await buildStaticBinary(HELPER_SOURCE, "warren-userns");
  return Number((await run(helper, ["owner", userPin])).trim());
}

const NSFS_MAGIC = 0x6e736673;

/** True when `file` is a namespace's pin (after a reboot it is an empty file, or gone). */
export async function pinsNamespace(file: string): Promise<boolean> {
  const info = await statfs(file).catch(() => null);
  return info?.type === NSFS_MAGIC;
}
