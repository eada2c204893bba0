// Where a driver root keeps things, and the host-global names (network namespaces, veths,
// nftables table, cgroup parent) derived from it. Every global name carries a short tag
// hashed from the root, so two roots on one host (two test files at once) never collide.
//
//   <root>/runc/                    runc --root (container state)
//   <root>/images/                  the layer cache (unless one is passed in)
//   <root>/sandboxes/<id>/          sandbox.json (written last by create: the sandbox exists),
//                                   network.json (mode and subnet slot), config.json (bundle),
//                                   rootfs/ (overlay mount point), lower/ (links to its
//                                   layer dirs), layer/ (root.img mounted:
//                                   upper/ work/ of the overlay; hosts, hostname and
//                                   console.log(.1), which the sandbox writes, so they count
//                                   against its own image; launch/, a pooled sandbox's
//                                   launcher), workspace/ (workspace.img mounted),
//                                   views/ (<n>: read-only overlay of mount n, through the
//                                   links l<n>/; empty/), launch/ (pool markers), run/ (shim.pid, pid, started,
//                                   stop-requested, exit.json, runc.log),
//                                   exec/ (per-exec process.json, log, pid)
//   <root>/storage/pool.img         the sparse file holding the XFS storage pool, mounted at
//   <root>/storage/pool/            templates/ (blank images, one per size), sandboxes/<id>/
//                                   (root.img, workspace.img), snapshots/<snapshotId>/ (sealed),
//                                   staging/ (snapshots being made; removed at open)
import { createHash } from "node:crypto";
import path from "node:path";
import { RuntimeError } from "../interface.js";

const ID_RE = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/;

export function assertSandboxId(id: string): void {
  if (!ID_RE.test(id)) {
    throw new RuntimeError("invalid_spec", `invalid sandbox id "${id}" (lowercase letters, digits, "-"; 1-64 chars)`);
  }
}

export function isSandboxId(id: string): boolean {
  return ID_RE.test(id);
}

export interface SandboxPaths {
  dir: string;
  record: string;
  bundleConfig: string;
  rootfs: string;
  /** Short links to the image's layer dirs, which the overlay's options name (mounts.ts). */
  lower: string;
  /** Where root.img is mounted: it holds the overlay's upper/ and work/. */
  layer: string;
  upper: string;
  work: string;
  /** Where workspace.img is mounted (bound into the sandbox at /workspace). */
  workspace: string;
  /** Read-only overlay views of the sandbox's read-only mounts (volumes), bound in instead of their sources. */
  views: string;
  /** /etc/hosts and /etc/hostname, bound read-write: on the root image, within its size. */
  hosts: string;
  hostname: string;
  runDir: string;
  pidFile: string;
  exitFile: string;
  runcLog: string;
  /** The first process's stdout and stderr (capped, supervisor.ts): on the root image too. */
  consoleLog: string;
  execDir: string;
}

export class Layout {
  readonly root: string;
  /** 6 hex chars of sha256(root): the host-global names of this root carry it. */
  readonly tag: string;
  readonly runcRoot: string;
  readonly imagesDir: string;
  readonly sandboxesDir: string;
  /** The sparse file holding the storage pool's XFS. */
  readonly poolImage: string;
  /** Where the pool is mounted. */
  readonly poolDir: string;
  /** The nftables table (family inet) holding every rule of this root. */
  readonly nftTable: string;
  /** Prefix of this root's host-side veth names (`wr<tag>` + 4 hex of the subnet slot). */
  readonly vethPrefix: string;
  /** Prefix of this root's network namespace names (`ip netns`). */
  readonly netnsPrefix: string;
  /** Absolute cgroup path under which each sandbox gets `<cgroupParent>/<id>`. */
  readonly cgroupParent: string;

  constructor(root: string) {
    this.root = path.resolve(root);
    this.tag = createHash("sha256").update(this.root).digest("hex").slice(0, 6);
    this.runcRoot = path.join(this.root, "runc");
    this.imagesDir = path.join(this.root, "images");
    this.sandboxesDir = path.join(this.root, "sandboxes");
    this.poolImage = path.join(this.root, "storage", "pool.img");
    this.poolDir = path.join(this.root, "storage", "pool");
    this.nftTable = `warren_${this.tag}`;
    this.vethPrefix = `wr${this.tag}`;
    this.netnsPrefix = `warren-${this.tag}-`;
    this.cgroupParent = `/warren/${this.tag}`;
  }

  sandbox(id: string): SandboxPaths {
    assertSandboxId(id);
    const dir = path.join(this.sandboxesDir, id);
    const runDir = path.join(dir, "run");
    return {
      dir,
      record: path.join(dir, "sandbox.json"),
      bundleConfig: path.join(dir, "config.json"),
      rootfs: path.join(dir, "rootfs"),
      lower: path.join(dir, "lower"),
      layer: path.join(dir, "layer"),
      upper: path.join(dir, "layer", "upper"),
      work: path.join(dir, "layer", "work"),
      workspace: path.join(dir, "workspace"),
      views: path.join(dir, "views"),
      hosts: path.join(dir, "layer", "hosts"),
      hostname: path.join(dir, "layer", "hostname"),
      runDir,
      pidFile: path.join(runDir, "pid"),
      exitFile: path.join(runDir, "exit.json"),
      runcLog: path.join(runDir, "runc.log"),
      consoleLog: path.join(dir, "layer", "console.log"),
      execDir: path.join(dir, "exec"),
    };
  }

  /** The sandbox's image files in the pool. */
  sandboxImages(id: string): { dir: string; root: string; workspace: string } {
    assertSandboxId(id);
    const dir = path.join(this.poolDir, "sandboxes", id);
    return { dir, root: path.join(dir, "root.img"), workspace: path.join(dir, "workspace.img") };
  }

  runcStateDir(id: string): string {
    return path.join(this.runcRoot, id);
  }

  netnsName(id: string): string {
    return `${this.netnsPrefix}${id}`;
  }

  /** The sandbox id a netns name of this root belongs to, or null. */
  idOfNetns(name: string): string | null {
    return name.startsWith(this.netnsPrefix) ? name.slice(this.netnsPrefix.length) : null;
  }

  /** Host-side veth of the subnet slot `slot` (at most 15 characters, as the kernel requires). */
  vethName(slot: number): string {
    return `${this.vethPrefix}${slot.toString(16).padStart(4, "0")}`;
  }

  cgroupPath(id: string): string {
    return `${this.cgroupParent}/${id}`;
  }

  /** The hostname a sandbox sees: its id (at most 63 characters). */
  hostnameOf(id: string): string {
    return id.slice(0, 63);
  }
}
