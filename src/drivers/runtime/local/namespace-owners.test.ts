// The host uids owning sandboxes' user namespaces: two drivers on two roots (two Warren
// servers on one machine) never hand one uid to two sandboxes, even for ids whose hashes
// collide, each driver stays in its range, and a destroy releases the claim.
import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { LocalRuntimeDriver } from "./driver.js";
import { MAPPED_IDS } from "./id-mapping.js";
import { DEFAULT_CLAIMS_DIR, legacyOwnerUid, ownerUidCandidates, type UidRange } from "./namespace-owners.js";
import { sweepRoot } from "./sweep.js";
import { type RuntimeFixture, startRuntimeFixture, testSubnetPool } from "./test-support.js";
import { namespaceOwnerOf, userNamespacePin } from "./user-namespace.js";

/** Two sandbox ids the code before claims gave one owner uid (a birthday search over 2^30 values). */
function collidingIds(): [string, string] {
  const seen = new Map<number, string>();
  const salt = Math.random().toString(16).slice(2, 8);
  for (let n = 0; ; n++) {
    const id = `u-${salt}-${n.toString(16)}`;
    const uid = legacyOwnerUid(id);
    const other = seen.get(uid);
    if (other) return [other, id];
    seen.set(uid, id);
  }
}

describe("user-namespace owner uids", () => {
  it("candidates start where the id hashes to and walk the range, wrapping", () => {
    const range: UidRange = { first: 5000, count: 10 };
    const candidates = ownerUidCandidates("t-abc", range);
    assert.equal(candidates.length, 10);
    assert.equal(new Set(candidates).size, 10);
    assert.ok(candidates.every((uid) => uid >= 5000 && uid < 5010));
    for (let i = 1; i < candidates.length; i++) {
      assert.equal(candidates[i], 5000 + (((candidates[0] as number) - 5000 + i) % 10));
    }
    assert.equal(ownerUidCandidates("t-abc", { first: 1, count: 2 ** 30 }).length, 4096, "probes are bounded");
  });

  describe("two drivers on one machine", () => {
    let f: RuntimeFixture;
    let second: LocalRuntimeDriver | undefined;
    let secondRoot = "";
    const rangeA: UidRange = { first: 2 ** 30 + 12_345, count: 2 };

    before(async () => {
      f = await startRuntimeFixture("userns-owners");
      secondRoot = await mkdtemp(path.join(os.tmpdir(), "warren-runtime-userns-owners-b-"));
      await writeFile(path.join(secondRoot, "owner.pid"), String(process.pid));
      second = await LocalRuntimeDriver.open({ root: secondRoot, subnetPool: testSubnetPool(secondRoot) });
    });

    after(async () => {
      // Each step runs whatever the one before did: the fixture's registry must stop.
      await second?.close().catch(() => undefined);
      const swept = secondRoot ? await sweepRoot(secondRoot).catch((error: Error) => error) : null;
      await f?.cleanup();
      if (swept instanceof Error) throw swept;
    });

    it("never hand one uid to two sandboxes, whatever their ids hash to", async () => {
      const [first, other] = collidingIds();
      const driverB = second as LocalRuntimeDriver;
      const imageB = await driverB.prepareImage(f.busyboxRef);
      await f.driver.create(f.spec({ id: first }));
      await driverB.create(f.spec({ id: other, source: { kind: "image", image: imageB } }));
      await Promise.all([f.driver.start(first), driverB.start(other)]);
      const ownerA = await namespaceOwnerOf(userNamespacePin(f.driver.layout.sandbox(first)));
      const ownerB = await namespaceOwnerOf(userNamespacePin(driverB.layout.sandbox(other)));
      assert.notEqual(ownerA, ownerB, `both sandboxes' user namespaces are owned by uid ${ownerA}`);
      // Another sandbox of the first driver: a third uid.
      const third = `${first}-x`;
      await f.driver.create(f.spec({ id: third }));
      const ownerC = await namespaceOwnerOf(userNamespacePin(f.driver.layout.sandbox(third)));
      assert.ok(![ownerA, ownerB].includes(ownerC));

      // Destroys release the claims: none of the machine-wide claims names these sandboxes.
      for (const [driver, id] of [
        [f.driver, first],
        [driverB, other],
        [f.driver, third],
      ] as const)
        await driver.destroy(id);
      const claims = await readdir(DEFAULT_CLAIMS_DIR).catch(() => [] as string[]);
      for (const name of claims) {
        const text = await readFile(path.join(DEFAULT_CLAIMS_DIR, name), "utf8").catch(() => "");
        assert.ok(![first, other, third].some((id) => text.endsWith(`\n${id}\n`)), `claim ${name} left: ${text}`);
      }
    });

    it("draw from the driver's own range, and refuse a create when it is used up", async () => {
      const root = await mkdtemp(path.join(os.tmpdir(), "warren-runtime-userns-owners-c-"));
      await writeFile(path.join(root, "owner.pid"), String(process.pid));
      const ranged = await LocalRuntimeDriver.open({
        root,
        subnetPool: testSubnetPool(root),
        namespaceOwnerUids: rangeA,
        // The owners of sandboxes without id mapping (id-mapping.ts draws blocks instead).
        idMapping: false,
      });
      try {
        const image = await ranged.prepareImage(f.busyboxRef);
        const spec = (id: string) => f.spec({ id, source: { kind: "image", image } });
        const ids = [`r-${Date.now().toString(16)}-1`, `r-${Date.now().toString(16)}-2`];
        for (const id of ids) await ranged.create(spec(id));
        const owners = await Promise.all(
          ids.map((id) => namespaceOwnerOf(userNamespacePin(ranged.layout.sandbox(id)))),
        );
        assert.deepEqual([...owners].sort(), [rangeA.first, rangeA.first + 1], "the two uids of the range, one each");
        await assert.rejects(ranged.create(spec(`r-${Date.now().toString(16)}-3`)), /WARREN_SANDBOX_UID_RANGE/);
      } finally {
        await ranged.close();
        await sweepRoot(root);
      }
    });

    it("with id mapping, two drivers never hand one block of ids to two sandboxes, and stay in their blocks", async () => {
      const blocks: UidRange = { first: 2 ** 31 + 4321 * MAPPED_IDS, count: 2 };
      const roots = await Promise.all(
        ["d", "e"].map((name) => mkdtemp(path.join(os.tmpdir(), `warren-runtime-userns-owners-${name}-`))),
      );
      const drivers: LocalRuntimeDriver[] = [];
      try {
        for (const root of roots) {
          await writeFile(path.join(root, "owner.pid"), String(process.pid));
          drivers.push(
            await LocalRuntimeDriver.open({
              root,
              subnetPool: testSubnetPool(root),
              idMapping: true,
              idMappingBlocks: blocks,
            }),
          );
        }
        const ids = [`m-${Date.now().toString(16)}-1`, `m-${Date.now().toString(16)}-2`];
        for (const [index, driver] of drivers.entries()) {
          const image = await driver.prepareImage(f.busyboxRef);
          await driver.create(f.spec({ id: ids[index] as string, source: { kind: "image", image } }));
        }
        const firsts = await Promise.all(drivers.map((driver, index) => driver.mappedRoot(ids[index] as string)));
        assert.deepEqual(
          [...firsts].sort(),
          [blocks.first, blocks.first + MAPPED_IDS],
          "the two blocks of the range, one each",
        );
        const owners = await Promise.all(
          drivers.map((driver, index) =>
            namespaceOwnerOf(userNamespacePin(driver.layout.sandbox(ids[index] as string))),
          ),
        );
        assert.deepEqual(owners, firsts, "each user namespace is owned by its block's root");
        const image = await (drivers[0] as LocalRuntimeDriver).prepareImage(f.busyboxRef);
        await assert.rejects(
          (drivers[0] as LocalRuntimeDriver).create(
            f.spec({ id: `m-${Date.now().toString(16)}-3`, source: { kind: "image", image } }),
          ),
          /no free block of 65536 host ids/,
        );
        // A destroy releases the block: the next create gets it.
        await (drivers[0] as LocalRuntimeDriver).destroy(ids[0] as string);
        const again = `m-${Date.now().toString(16)}-4`;
        await (drivers[0] as LocalRuntimeDriver).create(f.spec({ id: again, source: { kind: "image", image } }));
        assert.equal(await (drivers[0] as LocalRuntimeDriver).mappedRoot(again), firsts[0]);
      } finally {
        for (const driver of drivers) await driver.close();
        for (const root of roots) await sweepRoot(root);
      }
    });
  });
});
