// `warren admin runtime sweep`: after a clean shutdown the runtime still holds the storage
// pool's loop mount, the nftables table, veths and cgroups on the host; the sweep releases
// them all and keeps every file, so the next start runs the sandbox again with its data.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { cgroupDirs } from "../src/drivers/runtime/local/cgroups.js";
import { LocalRuntimeDriver } from "../src/drivers/runtime/local/driver.js";
import { run, TOOLS } from "../src/drivers/runtime/local/host.js";
import { mountsUnder, readMounts } from "../src/drivers/runtime/local/mounts.js";
import { loopDevicesUnder } from "../src/drivers/runtime/local/storage/pool.js";
import {
  closeFixtureLeavingNothing,
  type RuntimeFixture,
  startRuntimeFixture,
  startSandbox,
  testSubnetPool,
  vethsOf,
} from "../src/drivers/runtime/local/test-support.js";
import { exists } from "../src/lib/fs.js";
import { runCli } from "./support/cli.js";

const EXEC = { timeoutSeconds: 60, maxOutputBytes: 4096 };

describe("warren admin runtime sweep", () => {
  let f: RuntimeFixture | undefined;
  let reopened: LocalRuntimeDriver | undefined;
  const made: string[] = [];
  let home = "";

  before(async () => {
    f = await startRuntimeFixture("sweep");
    home = await mkdtemp(path.join(os.tmpdir(), "warren-sweep-home-"));
  });

  after(async () => {
    if (reopened) {
      for (const id of made) await reopened.destroy(id).catch(() => undefined);
      await reopened.close();
    }
    await closeFixtureLeavingNothing(f, made);
    await rm(home, { recursive: true, force: true });
  });

  it("releases the pool's loop mount, the nftables table, veths and cgroups after a clean shutdown, keeping the data", async () => {
    const fixture = f as RuntimeFixture;
    const id = await startSandbox(fixture, made, { network: "public" });
    const wrote = await fixture.driver.exec(id, { argv: ["sh", "-c", "echo kept > /workspace/marker"], ...EXEC });
    assert.equal(wrote.kind === "completed" && wrote.exit, 0, JSON.stringify(wrote));
    const layout = fixture.driver.layout;
    // A clean shutdown: the server closes its driver; the host state stays.
    await fixture.driver.close();
    assert.notDeepEqual(mountsUnder(await readMounts(), fixture.root), [], "the pool is mounted before the sweep");
    await run(TOOLS.nft, ["list", "table", "inet", layout.nftTable]);

    const swept = await runCli(["admin", "runtime", "sweep"], {
      home,
      env: { WARREN_RUNTIME_ROOT: fixture.root, WARREN_DATA_DIR: path.join(home, "data") },
      timeoutMs: 300_000,
    });
    assert.equal(swept.code, 0, swept.stderr);
    assert.deepEqual((JSON.parse(swept.stdout) as { released: string[] }).released, [id]);

    assert.deepEqual(mountsUnder(await readMounts(), fixture.root), [], "no mount left under the root");
    assert.deepEqual(await loopDevicesUnder(fixture.root), [], "no loop device left");
    const table = await run(TOOLS.nft, ["list", "table", "inet", layout.nftTable]).then(
      () => "still there",
      () => "gone",
    );
    assert.equal(table, "gone", "the nftables table");
    assert.deepEqual(await vethsOf(layout), [], "no veth left");
    for (const dir of await cgroupDirs(layout.cgroupParent)) assert.equal(await exists(dir), false, dir);
    assert.ok(await exists(fixture.root), "the root and its files stay");

    // The next start (the server's driver) runs the sandbox again, with its workspace.
    reopened = await LocalRuntimeDriver.open({ root: fixture.root, subnetPool: testSubnetPool(fixture.root) });
    await reopened.start(id);
    const read = await reopened.exec(id, { argv: ["cat", "/workspace/marker"], ...EXEC });
    assert.equal(read.kind === "completed" && read.stdout, "kept\n", JSON.stringify(read));
  });

  it("refuses while a server runs on the data dir", async () => {
    const fixture = f as RuntimeFixture;
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "warren-sweep-data-"));
    try {
      const { writeServerLock } = await import("../src/lib/server-lock.js");
      const release = await writeServerLock(dataDir, "http://127.0.0.1:1");
      const refused = await runCli(["admin", "runtime", "sweep"], {
        home,
        env: { WARREN_RUNTIME_ROOT: fixture.root, WARREN_DATA_DIR: dataDir },
      });
      await release();
      assert.notEqual(refused.code, 0);
      assert.match(refused.stderr, /stop it first/);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
