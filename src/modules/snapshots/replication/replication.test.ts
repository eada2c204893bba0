// Replication and rebuild of image files on a real XFS (loop-mounted, reflink): a fresh
// image, a reflinked clone changed in places replicated against it (only the change is
// stored), byte-for-byte rebuilds, and a rebuild's failures (corrupt chunk, missing chunk).
// The chunk store is blobPackStore (chunks in packs) over the embedded fs blob store; one
// test reads chunks stored before packs (one object each).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { constants, existsSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { openTestBlobStore } from "../../../../test/support/blob-store.js";
import { mountScratchXfs, type ScratchXfs } from "../../../../test/support/xfs.js";
import type { FsBlobStore } from "../../../drivers/blobs/fs.js";
import { blobChunkStore } from "./chunk-store.js";
import { listExtents } from "./extents.js";
import { blobPackStore } from "./packing.js";
import { rebuildImage } from "./rebuild.js";
import { replicateImage, WindowPool } from "./replicate.js";
import { ChunkError, type Digest, type ImageManifest } from "./types.js";

const MiB = 1024 * 1024;
const PREFIX = "orgs/org_test";

async function pwrite(file: string, data: Uint8Array, offset: number): Promise<void> {
  const handle = await open(file, "r+");
  try {
    await handle.write(data, 0, data.length, offset);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** A sparse 64 MiB image: random data, a repeated region, zeros written as data, text, holes. */
async function makeImage(file: string): Promise<void> {
  const handle = await open(file, "w");
  try {
    await handle.truncate(64 * MiB);
    await handle.write(randomBytes(6 * MiB), 0, 6 * MiB, 0);
    const repeated = randomBytes(2 * MiB);
    await handle.write(repeated, 0, repeated.length, 10 * MiB);
    await handle.write(repeated, 0, repeated.length, 20 * MiB);
    await handle.write(Buffer.alloc(3 * MiB), 0, 3 * MiB, 30 * MiB); // allocated zeros
    const text = Buffer.from("a filesystem holds many small text files like this one\n".repeat(40_000));
    await handle.write(text, 0, text.length, 40 * MiB);
    await handle.write(randomBytes(5000), 0, 5000, 64 * MiB - 5000); // ends mid-block
    await handle.sync();
  } finally {
    await handle.close();
  }
}

describe("replication on XFS", () => {
  let dir = "";
  let mountPoint = "";
  let scratch: ScratchXfs | undefined;
  let chunks: ReturnType<typeof blobPackStore>;
  let blobRoot = "";
  let blobs: FsBlobStore;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-repl-"));
    scratch = await mountScratchXfs(dir, "1G");
    mountPoint = scratch.mountPoint;
    blobRoot = path.join(dir, "blobs");
    blobs = await openTestBlobStore(blobRoot);
    // Small packs, so the 64 MiB images make several and packs are written while others fill.
    chunks = blobPackStore(blobs, PREFIX, { targetBytes: 2 * MiB });
  });

  after(async () => {
    await scratch?.unmount();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const storedBytes = async () => {
    let total = 0;
    const walk = async (at: string): Promise<void> => {
      for (const entry of await readdir(at, { withFileTypes: true }).catch(() => []))
        if (entry.isDirectory()) await walk(path.join(at, entry.name));
        else total += (await stat(path.join(at, entry.name))).size;
    };
    await walk(blobRoot);
    return total;
  };

  let baseManifest: ImageManifest;

  it("replicates a fresh image (data extents only, zeros and repeats stored once) and rebuilds it exactly", async () => {
    const image = path.join(mountPoint, "a.img");
    await makeImage(image);
    const { manifest, stats } = await replicateImage({ path: image, chunks });
    baseManifest = manifest;
    assert.equal(manifest.size, 64 * MiB);
    assert.equal(stats.newChunks, new Set(manifest.chunks.map((ref) => ref.digest)).size);
    // 6 + 2 (the repeat stored once) + ~2 MiB of text + the tail; the zeros are holes.
    assert.ok(stats.bytes < 16 * MiB && stats.bytes > 10 * MiB, `covers ${stats.bytes}`);
    assert.ok(stats.uploadedBytes < 10 * MiB, `uploaded ${stats.uploadedBytes}`);
    assert.ok(manifest.chunks.every((ref) => ref.offset < 30 * MiB || ref.offset >= 33 * MiB));
    // Each pack adds its index (48 bytes a chunk) and trailer (40 bytes) to the chunks' bytes.
    assert.ok(chunks.packsWritten >= 3, `${chunks.packsWritten} packs`);
    assert.equal(await storedBytes(), stats.uploadedBytes + 48 * stats.newChunks + 40 * chunks.packsWritten);

    const again = await replicateImage({ path: image, chunks });
    assert.deepEqual(again.manifest, manifest);
    assert.equal(again.stats.newChunks, 0);

    const rebuilt = path.join(dir, "a.rebuilt");
    await rebuildImage({ manifest, path: rebuilt, chunks });
    assert.ok((await readFile(rebuilt)).equals(await readFile(image)));
    assert.ok((await stat(rebuilt)).blocks * 512 < 20 * MiB, "the rebuilt image is sparse");
  });

  it("reuses its read windows: 40 MiB of random data reads through a few, and rebuilds exactly", async () => {
    const image = path.join(mountPoint, "windows.img");
    const handle = await open(image, "w");
    try {
      await handle.write(randomBytes(40 * MiB), 0, 40 * MiB, 0);
      await handle.sync();
    } finally {
      await handle.close();
    }
    // A store whose puts are slow keeps chunks waiting for compression while windows are
    // read: a window read into again while a chunk of it was still to be compressed would
    // store bytes other than those named, which the rebuild below refuses.
    const windows = new WindowPool();
    const slow = blobPackStore(blobs, "orgs/org_windows", { targetBytes: 4 * MiB });
    const put = slow.put.bind(slow);
    slow.put = async (digest, compressed, plainSize) => {
      await new Promise((resolve) => setTimeout(resolve, 2));
      await put(digest, compressed, plainSize);
    };
    const { manifest } = await replicateImage({ path: image, chunks: slow, windows, concurrency: 4 });
    const made = windows.made;
    assert.ok(made >= 2 && made <= 5, `${made} windows for 5 reads`);
    // Every window came back once its chunks were compressed: a second replication makes none.
    const again = await replicateImage({ path: image, chunks: slow, windows });
    assert.deepEqual(again.manifest, manifest);
    assert.equal(windows.made, made);
    const rebuilt = path.join(dir, "windows.rebuilt");
    await rebuildImage({ manifest, path: rebuilt, chunks: slow });
    assert.ok((await readFile(rebuilt)).equals(await readFile(image)));
    await rm(rebuilt);
  });

  it("replicates a changed reflink clone against its base, storing about only the change", async () => {
    const base = path.join(mountPoint, "a.img");
    const clone = path.join(mountPoint, "b.img");
    await copyFile(base, clone, constants.COPYFILE_FICLONE_FORCE);
    assert.ok((await listExtents(clone)).some((extent) => extent.shared));
    await pwrite(clone, randomBytes(MiB), 2 * MiB + 8192); // inside the random region
    await pwrite(clone, randomBytes(4096), 50 * MiB); // into a hole
    await pwrite(clone, Buffer.from("changed"), 40 * MiB + 100_000); // a few bytes of text

    const before = await storedBytes();
    const packsBefore = chunks.packsWritten;
    const { manifest, stats } = await replicateImage({
      path: clone,
      base: { path: base, manifest: baseManifest },
      chunks,
    });
    const uploaded = (await storedBytes()) - before;
    assert.equal(uploaded, stats.uploadedBytes + 48 * stats.newChunks + 40 * (chunks.packsWritten - packsBefore));
    // The changed MiB, the chunks it straddles (≤ 1 MiB each side), the new block, one text chunk.
    assert.ok(stats.uploadedBytes > MiB && stats.uploadedBytes < 4 * MiB, `uploaded ${stats.uploadedBytes}`);
    assert.ok(stats.newChunks <= 10, `${stats.newChunks} new chunks`);

    const rebuilt = path.join(dir, "b.rebuilt");
    await rebuildImage({ manifest, path: rebuilt, chunks });
    assert.ok((await readFile(rebuilt)).equals(await readFile(clone)));
    // The delta equals a full replication of the clone, block for block of content.
    const full = await replicateImage({ path: clone, chunks });
    const fullRebuilt = path.join(dir, "b.full");
    await rebuildImage({ manifest: full.manifest, path: fullRebuilt, chunks });
    assert.ok((await readFile(fullRebuilt)).equals(await readFile(rebuilt)));
  });

  it("is exact whatever the base: unrelated, or the very same file", async () => {
    const image = path.join(mountPoint, "c.img");
    await makeImage(image);
    for (const base of [path.join(mountPoint, "b.img"), path.join(mountPoint, "a.img"), image]) {
      const { manifest } = await replicateImage({ path: image, base: { path: base, manifest: baseManifest }, chunks });
      const rebuilt = path.join(dir, "c.rebuilt");
      await rebuildImage({ manifest, path: rebuilt, chunks });
      assert.ok((await readFile(rebuilt)).equals(await readFile(image)), `base ${base}`);
    }
  });

  /** The file of the pack holding `digest`, and where in it. */
  const located = (digest: Digest) => {
    const location = chunks.locations.get(digest);
    assert.ok(location?.pack, "the chunk is in a pack");
    return { file: blobs.fileOf(location.pack), offset: location.offset, length: location.length };
  };

  it("rebuild refuses a corrupt chunk, naming it, and leaves nothing behind", async () => {
    const victim = baseManifest.chunks[3]?.digest as Digest;
    const { file, offset, length } = located(victim);
    const original = await readFile(file);
    const flipped = Buffer.from(original);
    flipped[offset + (length >> 1)] = (flipped[offset + (length >> 1)] as number) ^ 0x01;
    await writeFile(file, flipped);
    const out = path.join(dir, "out", "corrupt.img");
    await mkdir(path.dirname(out), { recursive: true });
    try {
      await assert.rejects(rebuildImage({ manifest: baseManifest, path: out, chunks }), (error: unknown) => {
        assert.ok(error instanceof ChunkError);
        assert.equal(error.reason, "corrupt");
        assert.equal(error.digest, victim);
        assert.match(error.message, new RegExp(victim));
        return true;
      });
      assert.deepEqual(await readdir(path.dirname(out)), []);
    } finally {
      await writeFile(file, original);
    }
  });

  it("rebuild reports a chunk of a missing pack, and one cut short, as missing", async () => {
    const victim = baseManifest.chunks[0]?.digest as Digest;
    const { file } = located(victim);
    const original = await readFile(file);
    const out = path.join(dir, "out", "missing.img");
    const rejectsMissing = () =>
      assert.rejects(
        rebuildImage({ manifest: baseManifest, path: out, chunks, concurrency: 1 }),
        (error: unknown) => error instanceof ChunkError && error.reason === "missing",
      );
    try {
      await rm(file);
      await rejectsMissing();
      assert.ok(!existsSync(out));
      // A pack truncated in the middle of the chunk: the range read comes back short.
      const { offset } = located(victim);
      await writeFile(file, original.subarray(0, offset + 10));
      await rejectsMissing();
      assert.ok(!existsSync(out));
    } finally {
      await writeFile(file, original);
    }
  });

  it("rebuilds from chunks stored before packs (one object each), alone or beside packed ones", async () => {
    const image = path.join(mountPoint, "legacy.img");
    await makeImage(image);
    const legacy = blobChunkStore(blobs, PREFIX);
    const { manifest } = await replicateImage({ path: image, chunks: legacy });
    for (const source of [legacy, chunks]) {
      const rebuilt = path.join(dir, "legacy.rebuilt");
      await rebuildImage({ manifest, path: rebuilt, chunks: source });
      assert.ok((await readFile(rebuilt)).equals(await readFile(image)));
    }
  });

  it("stops when aborted", async () => {
    const image = path.join(mountPoint, "a.img");
    await assert.rejects(replicateImage({ path: image, chunks, signal: AbortSignal.abort() }), { name: "AbortError" });
    const out = path.join(dir, "out", "aborted.img");
    await assert.rejects(rebuildImage({ manifest: baseManifest, path: out, chunks, signal: AbortSignal.abort() }), {
      name: "AbortError",
    });
    assert.ok(!existsSync(out));
  });

  it("rebuild rejects a hostile manifest before writing anything", async () => {
    const out = path.join(dir, "out", "hostile.img");
    const first = baseManifest.chunks[0] as ImageManifest["chunks"][0];
    const hostile = { ...baseManifest, chunks: [{ ...first, offset: baseManifest.size - 4096 }] };
    await assert.rejects(rebuildImage({ manifest: hostile, path: out, chunks }), /ends past the image size/);
    assert.ok(!existsSync(out));
  });

  it("replicates a file where fiemap is unavailable (tmpfs) as one whole extent", {
    skip: !existsSync("/dev/shm") && "no /dev/shm",
  }, async () => {
    const shm = await mkdtemp("/dev/shm/warren-repl-");
    try {
      const image = path.join(shm, "t.img");
      await writeFile(image, Buffer.concat([randomBytes(300_000), Buffer.alloc(2 * MiB), randomBytes(70_000)]));
      assert.deepEqual(await listExtents(image), [
        { offset: 0, length: 300_000 + 2 * MiB + 70_000, physical: null, shared: false },
      ]);
      const { manifest } = await replicateImage({ path: image, chunks });
      const rebuilt = path.join(shm, "t.rebuilt");
      await rebuildImage({ manifest, path: rebuilt, chunks });
      assert.ok((await readFile(rebuilt)).equals(await readFile(image)));
    } finally {
      await rm(shm, { recursive: true, force: true });
    }
  });
});
