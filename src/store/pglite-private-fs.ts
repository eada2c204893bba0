// PGlite's data directory with owner-only modes. PGlite's Emscripten NODEFS creates files
// with the modes the WASM side asks for (0666 for what initdb writes, then chmods them to
// it), so neither Postgres's own 0600 nor a process umask keeps the files private. Masking
// the group and other bits in NODEFS's mknod and setattr does, whatever the umask, without
// a process-wide umask (the runtime's host tools and sandbox files need the usual one).
import type { PGlite } from "@electric-sql/pglite";
import { NodeFS } from "@electric-sql/pglite/nodefs";

type Attr = { mode?: number | null } & Record<string, unknown>;
type SetAttr = (target: unknown, attr: Attr) => unknown;
type MkNod = (parent: unknown, name: string, mode: number, dev: number) => unknown;

/** The parts of Emscripten's NODEFS this relies on (guarded by src/store/contract.test.ts). */
export interface NodefsOps {
  node_ops: { mknod: MkNod; setattr: SetAttr };
  stream_ops: { setattr: SetAttr };
}

const GROUP_AND_OTHER = 0o077;

function masked(attr: Attr): Attr {
  return typeof attr.mode === "number" ? { ...attr, mode: attr.mode & ~GROUP_AND_OTHER } : attr;
}

/** Makes every file and directory NODEFS creates or chmods owner-only. */
export function makeNodefsPrivate(nodefs: NodefsOps): void {
  const { mknod, setattr } = nodefs.node_ops;
  const streamSetattr = nodefs.stream_ops.setattr;
  nodefs.node_ops.mknod = (parent, name, mode, dev) => mknod(parent, name, mode & ~GROUP_AND_OTHER, dev);
  nodefs.node_ops.setattr = (node, attr) => setattr(node, masked(attr));
  nodefs.stream_ops.setattr = (stream, attr) => streamSetattr(stream, masked(attr));
}

export class PrivateNodeFS extends NodeFS {
  override async init(pg: PGlite, opts: Parameters<NodeFS["init"]>[1]) {
    const result = await super.init(pg, opts);
    const preRun = result.emscriptenOpts.preRun ?? [];
    result.emscriptenOpts.preRun = [
      ...preRun,
      (mod: { NODEFS: unknown }) => makeNodefsPrivate(mod.NODEFS as NodefsOps),
    ];
    return result;
  }
}
