// PGlite's file systems as the store opens them, with what the store needs of each
// instance's Emscripten module (a filesystem's init() is where PGlite lets its options in).
//
// Owner-only modes: NODEFS creates files with the modes the WASM side asks for (0666 for
// what initdb writes, then chmods them to it), so neither Postgres's own 0600 nor a process
// umask keeps the files private. Masking the group and other bits in NODEFS's mknod and
// setattr does, whatever the umask, without a process-wide umask (the runtime's host tools
// and sandbox files need the usual one).
//
// Dropping an instance without running it: one interrupted by a statement deadline
// (pglite-deadline.ts) must not run close(). What it still holds outside its heap is
// released by ModuleHandles: the host descriptors NODEFS opened (`stream.nfd`), and the
// interval timers PostgreSQL armed (statement_timeout is a SIGALRM timer, which Emscripten
// implements with setTimeout; the interrupted backend's handler re-arms it forever, which
// would keep the module, its heap and the process alive).
import { closeSync } from "node:fs";
import { MemoryFS, type PGlite } from "@electric-sql/pglite";
import { NodeFS } from "@electric-sql/pglite/nodefs";

type Attr = { mode?: number | null } & Record<string, unknown>;
type SetAttr = (target: unknown, attr: Attr) => unknown;
type MkNod = (parent: unknown, name: string, mode: number, dev: number) => unknown;
/** An open file of NODEFS: its host descriptor and the count dup() shares it by. */
interface Stream {
  nfd?: number;
  shared?: { refcount?: number };
}
type StreamOp = (stream: Stream) => unknown;

/** The parts of Emscripten's NODEFS this relies on (guarded by src/store/contract.test.ts). */
export interface NodefsOps {
  node_ops: { mknod: MkNod; setattr: SetAttr };
  stream_ops: { setattr: SetAttr; open: StreamOp; close: StreamOp };
}

/** Emscripten's setitimer (which, milliseconds): 0 clears the timer, in JavaScript alone. */
type SetItimer = (which: number, timeoutMs: number) => number;
type InstantiateWasm = (imports: { env: Record<string, unknown> }, done: (...args: unknown[]) => void) => unknown;
type EmscriptenOpts = Awaited<ReturnType<NodeFS["init"]>>["emscriptenOpts"];

/** ITIMER_REAL, ITIMER_VIRTUAL, ITIMER_PROF. */
const ITIMERS = [0, 1, 2];

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

/** Records in `open` every host descriptor NODEFS holds (each PGlite instance has its own NODEFS). */
export function trackNodefsDescriptors(nodefs: NodefsOps, open: Set<number>): void {
  const { open: openStream, close: closeStream } = nodefs.stream_ops;
  nodefs.stream_ops.open = (stream) => {
    const result = openStream(stream);
    if (typeof stream.nfd === "number") open.add(stream.nfd);
    return result;
  };
  nodefs.stream_ops.close = (stream) => {
    const result = closeStream(stream);
    // NODEFS closes the descriptor when the last dup of the stream is closed.
    if (typeof stream.nfd === "number" && !stream.shared?.refcount) open.delete(stream.nfd);
    return result;
  };
}

/** What one instance holds outside its WASM heap, so it can be dropped without running it. */
export class ModuleHandles {
  /** The host descriptors the instance's NODEFS has open. */
  readonly descriptors = new Set<number>();
  private setitimer: SetItimer | null = null;

  /** Amends an instance's Emscripten options to record its descriptors and timers. */
  hook(opts: EmscriptenOpts, nodefs: boolean): EmscriptenOpts {
    const instantiate = opts.instantiateWasm as InstantiateWasm | undefined;
    if (!instantiate) throw new Error("PGlite no longer instantiates its module through instantiateWasm");
    return {
      ...opts,
      instantiateWasm: ((imports, done) => {
        const setitimer = imports.env._setitimer_js;
        if (typeof setitimer !== "function") throw new Error("Emscripten's _setitimer_js import is missing");
        this.setitimer = setitimer as SetItimer;
        return instantiate(imports, done);
      }) satisfies InstantiateWasm as EmscriptenOpts["instantiateWasm"],
      preRun: [
        ...(opts.preRun ?? []),
        ...(nodefs
          ? [
              (mod: { NODEFS: unknown }) => {
                makeNodefsPrivate(mod.NODEFS as NodefsOps);
                trackNodefsDescriptors(mod.NODEFS as NodefsOps, this.descriptors);
              },
            ]
          : []),
      ],
    };
  }

  /** Clears the instance's timers and closes its descriptors; none of its code runs. */
  release(): void {
    for (const which of ITIMERS) this.setitimer?.(which, 0);
    for (const fd of this.descriptors) {
      try {
        closeSync(fd);
      } catch {
        // Already closed: nothing of it left to release.
      }
    }
    this.descriptors.clear();
  }
}

/** A data directory on the host, owner-only. */
export class PrivateNodeFS extends NodeFS {
  readonly handles = new ModuleHandles();

  override async init(pg: PGlite, opts: Parameters<NodeFS["init"]>[1]) {
    const result = await super.init(pg, opts);
    return { ...result, emscriptenOpts: this.handles.hook(result.emscriptenOpts, true) };
  }
}

/** PGlite's default in-memory file system (tests), with its module's timers recorded. */
export class TrackedMemoryFS extends MemoryFS {
  readonly handles = new ModuleHandles();

  override async init(pg: PGlite, opts: Parameters<MemoryFS["init"]>[1]) {
    const result = await super.init(pg, opts);
    return { ...result, emscriptenOpts: this.handles.hook(result.emscriptenOpts, false) };
  }
}
