// The storage pool's upkeep on real sandboxes, on a small host filesystem of its own (a 7 GiB
// tmpfs holding the driver's root, 1.5 GiB of it reserved, nothing overcommitted): admission
// of creates, restores and growths against what the host can back; removal of unused blank
// templates, never under a clone; sandboxes made before the storage pool (the old layout,
// built here by hand) migrated into images at their next start.
import assert from "node:assert/strict";
import { access, readdir, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { ExecOutcome, RuntimeError, SandboxSpec } from "../interface.js";
import { unmountUnder } from "./mounts.js";
import { GIB } from "./storage/images.js";
import {
  closeFixtureLeavingNothing,
  hostTraces,
  makeLegacyLayout,
  type RuntimeFixture,
  startRuntimeFixture,
  startSandbox,
  testId,
} from "./test-support.js";

function completed(outcome: ExecOutcome): Extract<ExecOutcome, { kind: "completed" }> {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  return outcome as Extract<ExecOutcome, { kind: "completed" }>;
}

const refusal = (promise: Promise<unknown>) =>
  promise.then(
    () => "ok",
    (error: RuntimeError) => `${error.code}${error.permanent ? " (permanent)" : ""}`,
  );

describe("local storage upkeep", () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  const sandbox = (overrides: Partial<SandboxSpec> = {}) => startSandbox(f, made, overrides);
  const sh = async (id: string, script: string) =>
    completed(await f.driver.exec(id, { argv: ["sh", "-c", script], timeoutSeconds: 120, maxOutputBytes: 1 << 20 }));
  const destroyAll = async () => {
    for (const id of made.splice(0)) await f.driver.destroy(id);
  };
  const templates = async () => (await readdir(path.join(f.driver.layout.poolDir, "templates"))).sort();

  before(async () => {
    f = await startRuntimeFixture(
      "storage-upkeep",
      { rootLayerGiB: 1, standardWorkspaceGiB: 1, storageReserveGiB: 1.5, storageOvercommit: 1 },
      { tmpfsMiB: 7 * 1024 },
    );
  });
  after(() => closeFixtureLeavingNothing(f, made));

  it("admits creates, restores and growths only while the host can back every sandbox filling its filesystems", async () => {
    // The host: ~7 GiB free, 1.5 reserved: ~5.4 GiB to back. Every sandbox holds 1 GiB of root layer.
    const a = await sandbox({ storageClass: "durable", workspaceCapacityGiB: 1 });
    const b = await sandbox();
    const report = await f.driver.storageReport();
    assert.ok(report);
    assert.equal(report.promisedBytes, 4 * GIB);
    assert.ok(report.backableBytes > 5 * GIB && report.backableBytes < 5.5 * GIB, `${report.backableBytes}`);

    // What the check costs (statfs, a stat per image, template and snapshot file): logged, not asserted.
    const timings: number[] = [];
    for (let i = 0; i < 20; i++) {
      const started = performance.now();
      await f.driver.admitStorage({ storageClass: "durable", workspaceCapacityGiB: 1 }).catch(() => undefined);
      timings.push(performance.now() - started);
    }
    console.log(
      `[storage-upkeep] admission check p50 ${timings.sort((x, y) => x - y)[10]?.toFixed(2)} ms (2 sandboxes)`,
    );
    // A third 2 GiB sandbox would promise 6: refused at the API's check and on the host, leaving nothing.
    assert.equal(await refusal(f.driver.admitStorage({ storageClass: "standard" })), "storage_exhausted");
    const refused = f.spec();
    assert.equal(await refusal(f.driver.create(refused)), "storage_exhausted");
    assert.deepEqual(await hostTraces(f.driver.layout, refused.id), []);
    // More than this host could back with no other sandbox at all: permanent.
    assert.equal(
      await refusal(f.driver.admitStorage({ storageClass: "durable", workspaceCapacityGiB: 8 })),
      "storage_exhausted (permanent)",
    );

    // Growth counts the same way: 1 -> 2 GiB fits (5 promised), 2 -> 3 does not, and changes nothing.
    await f.driver.growWorkspace(a, 2);
    assert.equal(await refusal(f.driver.growWorkspace(a, 3)), "storage_exhausted");
    const df = (await sh(a, "df -k /workspace | tail -1")).stdout.trim().split(/\s+/);
    assert.ok(Number(df[1]) / (1024 * 1024) <= 2, `df: ${df.join(" ")}`);

    // What a sandbox wrote is on the host already: it may still write that much less.
    const beforeWrite = (await f.driver.storageReport())?.mayStillWriteBytes ?? 0;
    await sh(a, "dd if=/dev/urandom of=/workspace/data bs=1M count=200 2>/dev/null; sync");
    const afterWrite = (await f.driver.storageReport())?.mayStillWriteBytes ?? 0;
    assert.ok(beforeWrite - afterWrite > 150 * 1024 ** 2, `${beforeWrite} -> ${afterWrite}`);

    // A restore of a snapshot of a (2 GiB-workspace) sandbox is a 3 GiB sandbox: refused while a and b hold 5.
    const snapshotId = testId("snp");
    await f.driver.snapshot(a, snapshotId);
    const restore = f.spec({
      source: { kind: "snapshot", image: f.image, snapshotId },
      storageClass: "durable",
      workspaceCapacityGiB: 2,
    });
    assert.equal(await refusal(f.driver.create(restore)), "storage_exhausted");
    // Admitted once they are gone.
    await f.driver.destroy(b);
    made.splice(made.indexOf(b), 1);
    await f.driver.destroy(a);
    made.splice(made.indexOf(a), 1);
    made.push(restore.id);
    await f.driver.create(restore);
    await f.driver.start(restore.id);
    assert.match((await sh(restore.id, "ls -l /workspace/data")).stdout, /209715200/);
    await f.driver.dropLocalSnapshot(snapshotId);
    await destroyAll();
  });

  it("a decision made after its measure counts what was reserved, and what ended, since", async () => {
    // The API measures before its transaction and decides under its lock: a pool member's
    // reservation made in between must count, and so must one that ended in between (its
    // images may be on disk now, which that measure did not read).
    const measure = await f.driver.measureStorage();
    const request = { id: testId("sbx"), bytes: 2 * GIB };
    assert.equal(measure.decide(new Map(), request).admitted, true);
    const release = f.driver.reserveStorage(testId("sbx"), 4 * GIB);
    assert.equal(measure.decide(new Map(), request).admitted, false, "the reservation made after the measure");
    release();
    assert.equal(measure.decide(new Map(), request).admitted, false, "ended after the measure: still counted");
    const later = await f.driver.measureStorage();
    assert.equal(later.decide(new Map(), request).admitted, true, "a measure after its end: nothing on disk");
  });

  it("removes a template unused for the idle time, never one a create is cloning", async () => {
    await sandbox();
    assert.deepEqual(await templates(), ["xfs-1g.img"]);
    const pool = f.driver.storage.pool;
    assert.deepEqual(await pool.collectTemplates(Date.now()), [], "just used: kept");
    assert.deepEqual(await pool.collectTemplates(Date.now() + 11 * 60_000), [1]);
    assert.deepEqual(await templates(), []);
    await destroyAll();
    // Creates racing the collector (which sees every template idle) all get their images.
    const specs = Array.from({ length: 2 }, () => f.spec());
    made.push(...specs.map((spec) => spec.id));
    await Promise.all([
      ...specs.map((spec) => f.driver.create(spec)),
      ...[0, 1, 3, 6, 10, 20].map((delay) =>
        new Promise((resolve) => setTimeout(resolve, delay)).then(() =>
          pool.collectTemplates(Date.now() + 11 * 60_000),
        ),
      ),
    ]);
    for (const spec of specs) {
      await f.driver.start(spec.id);
      assert.equal((await sh(spec.id, "echo ok > /workspace/f && cat /workspace/f")).stdout, "ok\n");
    }
    await destroyAll();
  });

  for (const storageClass of ["standard", "durable"] as const) {
    it(`${storageClass}: a sandbox of the old layout (upper/ and ${storageClass === "durable" ? "an ext4 workspace.img" : "a plain workspace/"} in its dir) is migrated once at its next start`, async () => {
      const id = await sandbox({ storageClass, workspaceCapacityGiB: storageClass === "durable" ? 1 : undefined });
      await sh(
        id,
        "echo root-kept > /etc/kept; rm -f /bin/true; echo ws-kept > /workspace/kept; chmod 640 /workspace/kept",
      );
      await f.driver.stop(id);
      await makeLegacyLayout(f.driver.layout, id, storageClass);
      const paths = f.driver.layout.sandbox(id);

      await f.driver.start(id);
      assert.equal((await sh(id, "cat /etc/kept /workspace/kept")).stdout, "root-kept\nws-kept\n");
      assert.equal((await sh(id, "test -e /bin/true; echo $?")).stdout, "1\n", "a whiteout survives the copy");
      assert.match((await sh(id, "ls -l /workspace/kept")).stdout, /^-rw-r-----/);
      const df = (await sh(id, "df -k / /workspace | tail -2")).stdout.trim().split("\n");
      for (const line of df) assert.ok(Number(line.split(/\s+/)[1]) <= 1024 * 1024, line);
      await assert.rejects(access(path.join(paths.dir, "legacy-storage")), "the old state is gone once copied");
      await assert.rejects(access(path.join(paths.dir, "upper")));
      // Stop and start again: the images are there, nothing is copied twice.
      await sh(id, "echo after > /workspace/after");
      await f.driver.stop(id);
      await f.driver.start(id);
      assert.equal((await sh(id, "cat /workspace/kept /workspace/after")).stdout, "ws-kept\nafter\n");
      await destroyAll();
    });
  }

  it("a sandbox with neither images nor an old layout fails its start with the reason", async () => {
    const id = await sandbox();
    await f.driver.stop(id);
    const paths = f.driver.layout.sandbox(id);
    await unmountUnder(paths.rootfs);
    await unmountUnder(paths.layer);
    await unmountUnder(paths.workspace);
    await rm(f.driver.layout.sandboxImages(id).dir, { recursive: true });
    await assert.rejects(f.driver.start(id), /no root\.img in the storage pool.*cannot start/);
    await destroyAll();
  });
});
