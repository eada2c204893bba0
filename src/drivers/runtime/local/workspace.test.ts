// Durable workspaces on a real loop-mounted ext4: offline growth waits for the last mount of
// the old device to go (as a stopped sandbox's dying mount namespace holds one for a moment).
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, statfs, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { RuntimeError } from "../interface.js";
import { run, TOOLS } from "./host.js";
import { isMounted, loopDeviceOf, unmountUnder } from "./mounts.js";
import { createDurableWorkspace, growDurableWorkspace } from "./workspace.js";

const GIB = 1024 ** 3;

describe("durable workspace growth", () => {
  let dir = "";
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "warren-workspace-"));
  });
  after(async () => {
    await unmountUnder(dir).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  });

  async function workspace(name: string) {
    const image = path.join(dir, `${name}.img`);
    const mountPoint = path.join(dir, name, "mnt");
    const holder = path.join(dir, name, "holder");
    await mkdir(holder, { recursive: true });
    await createDurableWorkspace({ image, mountPoint, capacityGiB: 1, owner: { uid: 0, gid: 0 } });
    await writeFile(path.join(mountPoint, "kept"), "kept\n");
    // A second mount of the same filesystem, as a sandbox's mount namespace has.
    await run(TOOLS.mount, ["--bind", mountPoint, holder]);
    return { image, mountPoint, holder };
  }
  const sizeGiB = async (mountPoint: string) => {
    const stats = await statfs(mountPoint);
    return (stats.blocks * stats.bsize) / GIB;
  };

  it("waits for the last other mount to go, then grows and mounts the new size", async () => {
    const ws = await workspace("released");
    const device = await loopDeviceOf(ws.image);
    assert.ok(device);
    const growing = growDurableWorkspace({ image: ws.image, mountPoint: ws.mountPoint, capacityGiB: 2, online: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(await isMounted(ws.mountPoint), false, "unmounted while it waits");
    await run(TOOLS.umount, [ws.holder]);
    await growing;
    assert.ok((await sizeGiB(ws.mountPoint)) > 1.9, `${await sizeGiB(ws.mountPoint)} GiB`);
    assert.equal(await readFile(path.join(ws.mountPoint, "kept"), "utf8"), "kept\n");
    await run(TOOLS.umount, [ws.mountPoint]);
  });

  it("refuses with a retryable host failure, touching nothing, while another mount stays", async () => {
    const ws = await workspace("held");
    const refused = await growDurableWorkspace({
      image: ws.image,
      mountPoint: ws.mountPoint,
      capacityGiB: 2,
      online: false,
      releaseTimeoutMs: 200,
    }).then(
      () => null,
      (error: unknown) => error,
    );
    assert.ok(refused instanceof RuntimeError);
    assert.equal(refused.code, "host_failure");
    assert.match(refused.message, /still attached/);
    assert.ok((await sizeGiB(ws.holder)) < 1.01, "the filesystem was not grown under the other mount");
    assert.equal(await readFile(path.join(ws.holder, "kept"), "utf8"), "kept\n");
    assert.equal(await isMounted(ws.mountPoint), true, "mounted again as it was");
    await run(TOOLS.umount, [ws.holder]);
    await run(TOOLS.umount, [ws.mountPoint]);
    assert.equal(await loopDeviceOf(ws.image), null, "no loop device left");
  });
});
