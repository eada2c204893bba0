// The volume collector on both stores (fs blob store) and on S3: blobs of a deleted volume
// go once nothing pins it, shared and pinned ones stay, verified uploads of a push that
// never published go after the grace period, a publish racing the collector either keeps
// its blobs or is refused naming them; and the host cache's sweep removes what no sandbox pins.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import type { FsBlobStore } from "../src/drivers/blobs/fs.js";
import type { BlobStore } from "../src/drivers/blobs/interface.js";
import { volumeKeys } from "../src/modules/volumes/blobs.js";
import { VolumeCache } from "../src/modules/volumes/cache.js";
import { VolumeCollector } from "../src/modules/volumes/collector.js";
import { forEachStore, type TestApp } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";
import { onS3BlobStore } from "./support/s3rver.js";
import { createVolume, digest, pushTree, putUrl, requestUploads, startPush, treeOf } from "./support/volumes.js";

const config = () => ({
  volumes: {
    pushTtlSeconds: 3600,
    maxManifestBytes: 65_536,
    cacheDir: "/nonexistent",
    gcIntervalSeconds: 600,
    gcGraceSeconds: 3600,
    maxFiles: 100_000,
    cacheBudget: { bytes: 2 ** 40, inodes: 10_000_000 },
  },
});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A real store whose deletes can be held at a gate (to hold the collector inside its transaction). */
function gatedDeletes(inner: BlobStore) {
  let open: () => void = () => undefined;
  let entered: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => {
    open = resolve;
  });
  const reached = new Promise<void>((resolve) => {
    entered = resolve;
  });
  const store = new Proxy(inner, {
    get(target, property) {
      if (property === "delete") {
        return async (key: string) => {
          entered();
          await gate;
          return target.delete(key);
        };
      }
      const value = target[property as keyof BlobStore];
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { store, open, reached };
}

function collectorTests(t: () => TestApp) {
  const owner = () => t().orgA.keys.owner;
  const org = () => t().orgA.id;
  const collector = (blobs = t().c.blobs) =>
    new VolumeCollector(t().c.db, t().c.clock, t().c.log, blobs, config().volumes);
  const stored = async (bytes: string | Buffer) =>
    (await t().c.blobs.head(volumeKeys.blob(org(), digest(Buffer.from(bytes))))) !== null;
  const age = (days: number) =>
    t().c.db.query(`UPDATE volume_blobs SET touched_at = touched_at - interval '${days} days'`);

  it("collects a deleted volume's blobs once nothing pins it, keeping shared ones", async () => {
    const only = `only in one ${Date.now()}`;
    const shared = `shared ${Date.now()}`;
    const one = await createVolume(t(), owner(), `one-${Date.now()}`);
    const two = await createVolume(t(), owner(), `two-${Date.now()}`);
    assert.equal((await pushTree(t(), owner(), one.id, treeOf({ a: only, s: shared }))).publish.status, 200);
    assert.equal((await pushTree(t(), owner(), two.id, treeOf({ s: shared }))).publish.status, 200);
    const sandbox = await t().request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { volumes: [{ volume_id: one.id, target_path: "/data" }] },
    });
    assert.equal(sandbox.status, 200, sandbox.raw);
    assert.equal((await t().request("DELETE", `/v1/volumes/${one.id}`, { key: owner() })).status, 200);
    await age(2);
    // Pinned by a sandbox that has not ended: the references stay.
    assert.deepEqual(await collector().collectBlobs(0), { releasedVolumes: 0, manifests: 0, blobs: 0 });
    assert.ok(await stored(only));
    await t().c.db.query("UPDATE sandboxes SET state = 'terminated' WHERE id = $1", [sandbox.body.id]);
    // Within the grace period nothing goes (touched two days ago, grace three days).
    const within = await collector().collectBlobs(3 * 86_400);
    assert.equal(within.blobs, 0);
    assert.ok(await stored(only));
    const pass = await collector().collectBlobs(86_400);
    assert.ok(pass.blobs >= 1, JSON.stringify(pass));
    assert.equal(await stored(only), false);
    assert.ok(await stored(shared));
    const rows = await t().c.db.query("SELECT 1 FROM volume_blobs WHERE org_id = $1 AND digest = $2", [
      org(),
      digest(Buffer.from(only)),
    ]);
    assert.equal(rows.rows.length, 0);
  });

  it("removes a deleted volume's manifests once no other volume has the same version", async () => {
    const same = treeOf({ f: `same ${Date.now()}` });
    const one = await createVolume(t(), owner(), `m-one-${Date.now()}`);
    const two = await createVolume(t(), owner(), `m-two-${Date.now()}`);
    const first = await pushTree(t(), owner(), one.id, same);
    assert.equal(first.publish.status, 200, first.publish.raw);
    const versionOf = (res: { body: Record<string, unknown> }) =>
      (res.body.version as { version_digest: string }).version_digest;
    const shared = versionOf(first.publish);
    const second = await pushTree(t(), owner(), one.id, treeOf({ f: `own ${Date.now()}` }));
    const own = versionOf(second.publish);
    // The same files with no parent: the same version digest in another volume.
    const again = await pushTree(t(), owner(), two.id, same);
    assert.equal(versionOf(again.publish), shared);
    const manifest = async (version: string) =>
      (await t().c.blobs.head(volumeKeys.versionManifest(org(), version))) !== null;
    assert.ok((await manifest(shared)) && (await manifest(own)));
    assert.equal((await t().request("DELETE", `/v1/volumes/${one.id}`, { key: owner() })).status, 200);
    const pass = await collector().collectBlobs();
    assert.equal(pass.releasedVolumes, 1);
    assert.equal(pass.manifests, 1);
    assert.equal(await manifest(own), false);
    assert.ok(await manifest(shared), "the other volume still has this version");
    assert.equal((await t().request("DELETE", `/v1/volumes/${two.id}`, { key: owner() })).status, 200);
    assert.equal((await collector().collectBlobs()).manifests, 1);
    assert.equal(await manifest(shared), false);
  });

  it("collects verified uploads of a push that never published; a new push uploads them again", async () => {
    const content = `over quota ${Date.now()} ${"x".repeat(100)}`;
    const small = await createVolume(t(), owner(), `small-${Date.now()}`, "10");
    const refused = await pushTree(t(), owner(), small.id, treeOf({ f: content }));
    assertError(refused.publish, 429, "quota_exceeded");
    assert.ok(await stored(content));
    assert.equal((await collector().collectBlobs()).blobs, 0, "recently verified: within the grace period");
    await age(1);
    assert.ok((await collector().collectBlobs(3600)).blobs >= 1);
    assert.equal(await stored(content), false);
    const big = await createVolume(t(), owner(), `big-${Date.now()}`);
    const again = await pushTree(t(), owner(), big.id, treeOf({ f: content }));
    assert.equal(again.publish.status, 200, again.publish.raw);
    assert.deepEqual(again.uploaded, [digest(Buffer.from(content))]);
  });

  it("leaves a blob a publish touches while the collector waits on its row", async () => {
    const content = `raced ${Date.now()}`;
    const d = digest(Buffer.from(content));
    const gone = await createVolume(t(), owner(), `gone-${Date.now()}`);
    assert.equal((await pushTree(t(), owner(), gone.id, treeOf({ f: content }))).publish.status, 200);
    await t().request("DELETE", `/v1/volumes/${gone.id}`, { key: owner() });
    const keeper = await createVolume(t(), owner(), `keeper-${Date.now()}`);
    await age(1);
    // What a publish's transaction does: touch the blob, reference it; held open meanwhile.
    let touched: () => void = () => undefined;
    let release: () => void = () => undefined;
    const ready = new Promise<void>((resolve) => {
      touched = resolve;
    });
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const publish = t().c.db.tx(async (q) => {
      await q.query("UPDATE volume_blobs SET touched_at = now() WHERE org_id = $1 AND digest = $2", [org(), d]);
      await q.query("INSERT INTO volume_blob_refs (volume_id, org_id, digest, size_bytes) VALUES ($1, $2, $3, $4)", [
        keeper.id,
        org(),
        d,
        content.length,
      ]);
      touched();
      await held;
    });
    await ready;
    let finished = false;
    const pass = collector()
      .collectBlobs(3600)
      .finally(() => {
        finished = true;
      });
    await sleep(200); // a window of absence: a collector that did not wait would finish in it
    assert.equal(finished, false, "the collector waits for the publish's row lock");
    release();
    await publish;
    await pass;
    assert.ok(await stored(content));
  });

  it("refuses a publish whose blobs the collector took first, naming them; the push then uploads them", async () => {
    const content = `taken ${Date.now()}`;
    const d = digest(Buffer.from(content));
    const gone = await createVolume(t(), owner(), `taken-${Date.now()}`);
    const tree = treeOf({ f: content });
    assert.equal((await pushTree(t(), owner(), gone.id, tree)).publish.status, 200);
    await t().request("DELETE", `/v1/volumes/${gone.id}`, { key: owner() });
    const next = await createVolume(t(), owner(), `next-${Date.now()}`);
    const start = await startPush(t(), owner(), next.id);
    const [present] = await requestUploads(t(), owner(), start.push_id, tree);
    assert.equal(present?.present, true);
    await putUrl(t(), start.manifest_upload_url, Buffer.from(JSON.stringify(tree.manifest)));
    // The push sat longer than the grace period: the collector takes the blob and is held
    // inside its transaction (rows deleted, objects being deleted) while the publish arrives.
    await age(1);
    const gated = gatedDeletes(t().c.blobs);
    const pass = collector(gated.store).collectBlobs(3600);
    await gated.reached;
    const publish = t().request("POST", `/v1/volume-pushes/${start.push_id}/publish`, { key: owner(), body: {} });
    await sleep(200); // lets the publish reach the row the collector holds (if later, it is refused all the same)
    gated.open();
    await pass;
    const refused = await publish;
    assertError(refused, 400, "failed_precondition");
    assert.deepEqual((refused.body.details as { missing_digests: string[] }).missing_digests, [d]);
    assert.equal(await stored(content), false);
    const [upload] = await requestUploads(t(), owner(), start.push_id, tree);
    assert.ok(upload && !upload.present);
    assert.ok([200, 201].includes(await putUrl(t(), upload.upload_url, Buffer.from(content))));
    const ok = await t().request("POST", `/v1/volume-pushes/${start.push_id}/publish`, { key: owner(), body: {} });
    assert.equal(ok.status, 200, ok.raw);
  });
}

forEachStore(
  "volume collector",
  (t) => {
    collectorTests(t);

    it("sweeps cache entries no live sandbox pins, never one asked for during the sweep", async () => {
      const owner = t().orgA.keys.owner;
      const orgId = t().orgA.id;
      const volume = await createVolume(t(), owner, `cached-${Date.now()}`);
      const first = await pushTree(t(), owner, volume.id, treeOf({ "a.txt": "pinned", "d/b.txt": "bee" }));
      const v1 = (first.publish.body.version as { version_digest: string }).version_digest;
      const sandbox = await t().request("POST", "/v1/sandboxes", {
        key: owner,
        body: { volumes: [{ volume_id: volume.id, target_path: "/data" }] },
      });
      assert.equal(sandbox.status, 200, sandbox.raw);
      const second = await pushTree(t(), owner, volume.id, treeOf({ "a.txt": "unpinned" }));
      const v2 = (second.publish.body.version as { version_digest: string }).version_digest;
      const dir = await mkdtemp(path.join(os.tmpdir(), "warren-vol-cache-"));
      try {
        const cache = new VolumeCache(t().c.blobs, dir);
        const gc = new VolumeCollector(t().c.db, t().c.clock, t().c.log, t().c.blobs, config().volumes);
        const d1 = await cache.ensure(orgId, v1);
        const d2 = await cache.ensure(orgId, v2);
        const leftover = path.join(dir, orgId, `${"0".repeat(64)}.tmp-abcdef`);
        await mkdir(leftover);
        // v2 asked for while the sweep reads the pins (which do not name it yet): kept.
        const during = await cache.sweep(async () => {
          await cache.ensure(orgId, v2);
          return new Set([`${orgId}/${v1}`]);
        });
        assert.equal(during, 1, "only the leftover");
        const entries = async () => (await readdir(path.join(dir, orgId))).filter((name) => !name.endsWith(".boot"));
        assert.deepEqual((await entries()).sort(), [v1.slice(7), v2.slice(7)].sort());
        assert.equal(await gc.sweepCache(cache), 1);
        assert.deepEqual(await entries(), [v1.slice(7)]);
        assert.equal(await readFile(path.join(d1, "d/b.txt"), "utf8"), "bee");
        await t().c.db.query("UPDATE sandboxes SET state = 'failed' WHERE id = $1", [sandbox.body.id]);
        assert.equal(await gc.sweepCache(cache), 1);
        assert.deepEqual(await readdir(path.join(dir, orgId)), [], "entries and their boot markers are gone");
        // Asked for again, it is materialized again.
        assert.equal(await cache.ensure(orgId, v2), d2);
        assert.equal(await readFile(path.join(d2, "a.txt"), "utf8"), "unpinned");
        // An entry written in an earlier boot (a copied file's unflushed data may be lost: an
        // empty file in its place) is written again. Replaced, not written in place: a.txt is
        // a hard link to the store's blob (see the test of links below).
        await chmod(d2, 0o755);
        await rm(path.join(d2, "a.txt"));
        await writeFile(path.join(d2, "a.txt"), "");
        await writeFile(`${d2}.boot`, "an-earlier-boot");
        assert.equal(await new VolumeCache(t().c.blobs, dir).ensure(orgId, v2), d2);
        assert.equal(await readFile(path.join(d2, "a.txt"), "utf8"), "unpinned");
        // So is one a crash cut short (a temp tree, never renamed into place, and no entry).
        await chmod(d2, 0o755);
        await rename(d2, `${d2}.tmp-0123ab`);
        await rm(`${d2}.boot`);
        const rebuilt = new VolumeCache(t().c.blobs, dir);
        assert.equal(await rebuilt.ensure(orgId, v2), d2);
        assert.equal(await readFile(path.join(d2, "a.txt"), "utf8"), "unpinned");
        assert.equal(await rebuilt.sweep(async () => new Set([`${orgId}/${v2}`])), 1, "the cut-short tree is swept");
        assert.deepEqual((await entries()).sort(), [v2.slice(7)]);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });

    it("links a one-chunk file to its fs store blob (read-only, the server's own), copies the rest", async () => {
      const owner = t().orgA.keys.owner;
      const orgId = t().orgA.id;
      const volume = await createVolume(t(), owner, `linked-${Date.now()}`);
      const big = randomBytes(5 * 1_048_576);
      const tree = treeOf({ "big.bin": big, "plain.txt": "same bytes", "tool.sh": "same bytes" });
      const tool = tree.manifest.files.find((file) => file.path === "tool.sh");
      if (tool) tool.mode = 0o755;
      const pushed = await pushTree(t(), owner, volume.id, tree);
      const version = (pushed.publish.body.version as { version_digest: string }).version_digest;
      const dir = await mkdtemp(path.join(os.tmpdir(), "warren-vol-cache-"));
      try {
        const entry = await new VolumeCache(t().c.blobs, dir).ensure(orgId, version);
        const store = t().c.blobs as FsBlobStore;
        const blobFile = store.fileOf(volumeKeys.blob(orgId, digest(Buffer.from("same bytes"))));
        const blob = await stat(blobFile);
        const plain = await stat(path.join(entry, "plain.txt"));
        assert.equal(plain.ino, blob.ino, "a link, not a copy");
        assert.equal(plain.mode & 0o7777, 0o444);
        assert.equal(plain.uid, process.getuid?.());
        // The same blob as an executable: the inode is 0444 already, so a copy of mode 0555.
        const copied = await stat(path.join(entry, "tool.sh"));
        assert.notEqual(copied.ino, blob.ino);
        assert.equal(copied.mode & 0o7777, 0o555);
        assert.equal(await readFile(path.join(entry, "tool.sh"), "utf8"), "same bytes");
        // Two chunks: copied and checked.
        const bigStat = await stat(path.join(entry, "big.bin"));
        assert.equal(bigStat.nlink, 1);
        assert.ok((await readFile(path.join(entry, "big.bin"))).equals(big));
        // Anyone but the server's user is refused a write through the link (the path is
        // made traversable for the test: the cache's parents are private besides).
        await chmod(dir, 0o755);
        const write = spawnSync(
          "setpriv",
          [
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
            "-c",
            'echo x >> "$0"',
            path.join(entry, "plain.txt"),
          ],
          { encoding: "utf8" },
        );
        assert.notEqual(write.status, 0);
        assert.match(write.stderr, /Permission denied/);
        assert.equal(await readFile(blobFile, "utf8"), "same bytes");
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME }, config: config() },
);

onS3BlobStore("volume collector", collectorTests, { overrides: { runtime: API_ONLY_RUNTIME }, config: config() });
