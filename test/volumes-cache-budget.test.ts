// The host volume cache's budget per organization (issue 24, A14), on both stores (the pins
// are the store's sandboxes): a version whose materialization alone exceeds the budget is
// refused before anything is written; a cold version evicts the organization's unpinned
// entries, least recently used first, never a pinned one and never another organization's;
// a new process counts the entries already on disk.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { VolumeCache, VolumeCacheError } from "../src/modules/volumes/cache.js";
import { pinnedVersions } from "../src/modules/volumes/gc-repo.js";
import { forEachStore, type TestApp } from "./harness.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";
import { createVolume, pushTree, treeOf } from "./support/volumes.js";

const MiB = 1_048_576;
/** Bytes and files plus directories one organization's entries may hold in these tests. */
const BUDGET = { bytes: 8 * MiB, inodes: 50 };

/** `mib` MiB made of one repeated 1 MiB chunk `fill`: one distinct blob, `mib` MiB once materialized. */
function repeated(mib: number, fill: number): Buffer {
  return Buffer.alloc(mib * MiB, fill);
}

/** Bytes `dir` holds on disk (`du`: hard links to the blob store counted once, in the store). */
function diskBytes(dir: string): number {
  const du = spawnSync("du", ["-s", "-B1", dir], { encoding: "utf8" });
  assert.equal(du.status, 0, du.stderr);
  return Number(du.stdout.split(/\s/)[0]);
}

const config = () => ({
  volumes: {
    pushTtlSeconds: 3600,
    maxManifestBytes: 65_536,
    cacheDir: "/nonexistent",
    gcIntervalSeconds: 600,
    gcGraceSeconds: 3600,
    maxFiles: 100_000,
    cacheBudget: BUDGET,
  },
});

forEachStore(
  "volume cache budget",
  (t: () => TestApp) => {
    /** A published version of `files` (1 MiB chunks) in a new volume of the org's; its digest. */
    const publish = async (org: "orgA" | "orgB", name: string, files: Record<string, Buffer | string>) => {
      const key = t()[org].keys.owner;
      const volume = await createVolume(t(), key, `${name}-${Date.now()}`);
      const pushed = await pushTree(t(), key, volume.id, treeOf(files, MiB));
      assert.equal(pushed.publish.status, 200, pushed.publish.raw);
      return {
        volumeId: volume.id,
        version: (pushed.publish.body.version as { version_digest: string }).version_digest,
      };
    };
    /** A sandbox (not ended: it pins the version) mounting the volume. */
    const pin = async (org: "orgA" | "orgB", volumeId: string) => {
      const res = await t().request("POST", "/v1/sandboxes", {
        key: t()[org].keys.owner,
        body: { volumes: [{ volume_id: volumeId, target_path: "/data" }] },
      });
      assert.equal(res.status, 200, res.raw);
      return res.body.id as string;
    };
    const endSandbox = (id: string) => t().c.db.query("UPDATE sandboxes SET state = 'failed' WHERE id = $1", [id]);
    const cacheOn = (dir: string) =>
      new VolumeCache(t().c.blobs, dir, { budget: BUDGET, pinned: () => pinnedVersions(t().c.db) });
    const entriesOf = async (dir: string, orgId: string) =>
      (await readdir(path.join(dir, orgId)).catch(() => [] as string[])).filter((name) => /^[0-9a-f]{64}$/.test(name));
    const refusal = async (promise: Promise<unknown>) => {
      const error = await promise.then(
        () => assert.fail("the mount was not refused"),
        (e: unknown) => e,
      );
      assert.ok(error instanceof VolumeCacheError, String(error));
      assert.equal(error.code, "volume_cache_exhausted");
      return error.message;
    };

    it("refuses a version of repeated chunks that would exceed the budget, writing nothing", async () => {
      const orgId = t().orgA.id;
      // 12 MiB on the host from one 1 MiB blob: the volume's quota counts 1 MiB.
      const big = await publish("orgA", "repeated", { "big.bin": repeated(12, 7) });
      const dir = await mkdtemp(path.join(os.tmpdir(), "warren-vol-budget-"));
      try {
        const cache = cacheOn(dir);
        const message = await refusal(cache.ensure(orgId, big.version));
        assert.match(message, /12\.0 MiB/);
        assert.match(message, /budget/);
        assert.ok(!message.includes(dir) && !message.includes(os.tmpdir()), message);
        assert.deepEqual(await readdir(path.join(dir, orgId)).catch(() => []), [], "nothing materialized");
        assert.deepEqual(cache.usage(orgId), { bytes: 0, inodes: 0 });
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });

    it("evicts the organization's least recently used unpinned versions, never a pinned one or another org's", async () => {
      const a = t().orgA.id;
      const b = t().orgB.id;
      const v1 = await publish("orgA", "v1", { "one.bin": repeated(3, 1) });
      const v2 = await publish("orgA", "v2", { "two.bin": repeated(3, 2) });
      const v3 = await publish("orgA", "v3", { "three.bin": repeated(4, 3) });
      const other = await publish("orgB", "other", { "b.bin": repeated(5, 4), "b.txt": "org b" });
      const dir = await mkdtemp(path.join(os.tmpdir(), "warren-vol-budget-"));
      const sandboxes: string[] = [];
      try {
        const cache = cacheOn(dir);
        await cache.ensure(a, v1.version);
        await cache.ensure(a, v2.version);
        // Org B fills its own budget beside org A's: neither pushes the other out.
        sandboxes.push(await pin("orgB", other.volumeId));
        const otherDir = await cache.ensure(b, other.version);
        assert.equal(await readFile(path.join(otherDir, "b.txt"), "utf8"), "org b");
        // v1 used again: v2 is now the least recently used of org A's.
        await cache.ensure(a, v1.version);
        // 3 + 3 + 4 MiB is past 8 MiB: v2 goes, v1 stays.
        const v3Dir = await cache.ensure(a, v3.version);
        assert.equal((await readFile(path.join(v3Dir, "three.bin"))).length, 4 * MiB);
        assert.deepEqual(
          (await entriesOf(dir, a)).sort(),
          [v1.version.slice(7), v3.version.slice(7)].sort(),
          "the least recently used version was evicted",
        );
        assert.deepEqual(await entriesOf(dir, b), [other.version.slice(7)], "org B's entry stays");
        assert.ok(cache.usage(a).bytes <= BUDGET.bytes, JSON.stringify(cache.usage(a)));
        assert.ok(
          diskBytes(path.join(dir, a)) <= BUDGET.bytes + 64 * 1024,
          `org A holds ${diskBytes(path.join(dir, a))}`,
        );

        // Pinned by sandboxes that have not ended, v1 and v3 stay, and v2 does not fit beside them.
        sandboxes.push(await pin("orgA", v1.volumeId), await pin("orgA", v3.volumeId));
        const message = await refusal(cache.ensure(a, v2.version));
        assert.match(message, /sandboxes that have not ended/);
        assert.deepEqual((await entriesOf(dir, a)).sort(), [v1.version.slice(7), v3.version.slice(7)].sort());
        // A new process counts what is on disk: it refuses v2 too, without writing it.
        const restarted = cacheOn(dir);
        await refusal(restarted.ensure(a, v2.version));
        assert.deepEqual(restarted.usage(a), cache.usage(a));
        assert.ok(diskBytes(path.join(dir, a)) <= BUDGET.bytes + 64 * 1024);
        // Another organization's mount still works meanwhile (a warm one, and a cold one after a sweep).
        assert.equal(await restarted.ensure(b, other.version), otherDir);
        // Once v3's sandbox ends, v2 fits again (v3 evicted, v1 still pinned).
        await endSandbox(sandboxes[2] as string);
        const v2Dir = await restarted.ensure(a, v2.version);
        assert.equal((await readFile(path.join(v2Dir, "two.bin"))).length, 3 * MiB);
        assert.deepEqual((await entriesOf(dir, a)).sort(), [v1.version.slice(7), v2.version.slice(7)].sort());
      } finally {
        for (const id of sandboxes) await endSandbox(id);
        await rm(dir, { recursive: true, force: true });
      }
    });

    it("bounds files and directories too", async () => {
      const orgId = t().orgA.id;
      const files: Record<string, string> = {};
      for (let i = 0; i < 60; i++) files[`d${i % 6}/f${i}.txt`] = `file ${i}`;
      const many = await publish("orgA", "many", files);
      const dir = await mkdtemp(path.join(os.tmpdir(), "warren-vol-budget-"));
      try {
        const message = await refusal(cacheOn(dir).ensure(orgId, many.version));
        assert.match(message, /67 files and directories/);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME }, config: config() },
);
