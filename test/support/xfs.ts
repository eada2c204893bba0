// A scratch XFS with reflink for tests of image files: a sparse file in `dir`, formatted and
// loop-mounted at `<dir>/mnt`; unmount() detaches it (lazily if busy), safe to call twice.
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { run, TOOLS } from "../../src/drivers/runtime/local/host.js";

export interface ScratchXfs {
  mountPoint: string;
  unmount(): Promise<void>;
}

export async function mountScratchXfs(dir: string, size: string): Promise<ScratchXfs> {
  const pool = path.join(dir, "pool.xfs");
  await writeFile(pool, "");
  await run(TOOLS.sh, ["-c", `truncate -s ${size} "$1"`, "sh", pool]);
  await run(TOOLS.mkfsXfs, ["-q", "-m", "reflink=1", pool]);
  const mountPoint = path.join(dir, "mnt");
  await mkdir(mountPoint);
  await run(TOOLS.mount, ["-o", "loop", pool, mountPoint]);
  let mounted = true;
  return {
    mountPoint,
    async unmount() {
      if (!mounted) return;
      mounted = false;
      await run(TOOLS.umount, [mountPoint]).catch(() => run(TOOLS.umount, ["-l", mountPoint]));
    },
  };
}
