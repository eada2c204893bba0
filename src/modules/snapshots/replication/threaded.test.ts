// Replication in the worker thread: the same manifests as in-process, packs stored through
// this thread's has()/writePack, failures and aborts reported, on a real XFS image.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, open, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { openTestBlobStore } from "../../../../test/support/blob-store.js";
import { mountScratchXfs, type ScratchXfs } from "../../../../test/support/xfs.js";
import type { FsBlobStore } from "../../../drivers/blobs/fs.js";
import { type ChunkLocation, packData } from "./pack.js";
import { blobPackStore, type PackingOptions, readChunkAt } from "./packing.js";
import { rebuildImage } from "./rebuild.js";
import { replicateImage } from "./replicate.js";
import { ReplicationWorker } from "./threaded.js";
import type { Digest } from "./types.js";

const MiB = 1024 * 1024;

describe("replication in a worker thread", () => {
  let dir = "";
  let mountPoint = "";
  let scratch: ScratchXfs | undefined;
  let blobs: FsBlobStore;
  let image = "";
  const worker = new ReplicationWorker();

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-threaded-"));
    scratch = await mountScratchXfs(dir, "512M");
    mountPoint = scratch.mountPoint;
    blobs = await openTestBlobStore(path.join(dir, "blobs"));
    image = path.join(mountPoint, "a.img");
    const handle = await open(image, "w");
    try {
      await handle.truncate(64 * MiB);
      await handle.write(randomBytes(20 * MiB), 0, 20 * MiB, 0);
      const text = Buffer.from("text that compresses well, as many files of a filesystem do\n".repeat(50_000));
      await handle.write(text, 0, text.length, 40 * MiB);
      await handle.sync();
    } finally {
      await handle.close();
    }
  });

  after(async () => {
    await worker.close();
    await scratch?.unmount();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** A store over the blob store, its index in memory, recording what the worker asked. */
  const indexedStore = (prefix: string) => {
    const locations = new Map<Digest, ChunkLocation>();
    let packs = 0;
    const store: Pick<PackingOptions, "prefix" | "has" | "writePack" | "targetBytes"> = {
      prefix,
      targetBytes: 4 * MiB,
      has: async (digest) => locations.has(digest),
      writePack: async (pack) => {
        await blobs.putIfAbsent(pack.key, pack.parts);
        packs++;
        for (const entry of pack.entries)
          locations.set(entry.digest, { pack: pack.key, offset: entry.offset, length: entry.length });
      },
    };
    const source = {
      get: async (digest: Digest) => {
        const location = locations.get(digest);
        return location ? readChunkAt(blobs, location) : null;
      },
    };
    return { store, source, locations, packs: () => packs };
  };

  it("replicates as in-process does, its packs stored here, and the result rebuilds exactly", async () => {
    const { store, source, locations, packs } = indexedStore("orgs/org_worker");
    const [result, again] = await worker.replicate({ images: [{ path: image }, { path: image }], store });
    if (!result || !again) throw new Error("no result per image");
    const inProcess = await replicateImage({ path: image, chunks: blobPackStore(blobs, "orgs/org_inprocess") });
    assert.deepEqual(result.manifest, inProcess.manifest);
    assert.deepEqual(result.stats, inProcess.stats);
    // The second image is the same file: its chunks (some still in the pack being filled
    // when asked) are stored once.
    assert.deepEqual(again.manifest, result.manifest);
    assert.ok(packs() >= 5, `${packs()} packs`);
    assert.equal(locations.size, result.stats.newChunks);
    assert.equal([...locations.values()].length, new Set(result.manifest.chunks.map((ref) => ref.digest)).size);
    const rebuilt = path.join(dir, "a.rebuilt");
    await rebuildImage({ manifest: result.manifest, path: rebuilt, chunks: source });
    assert.ok((await readFile(rebuilt)).equals(await readFile(image)));
    await rm(rebuilt);
  });

  it("fails the job when a pack cannot be stored, and serves the next job", async () => {
    const { store } = indexedStore("orgs/org_failing");
    await assert.rejects(
      worker.replicate({
        images: [{ path: image }],
        store: {
          ...store,
          writePack: async () => {
            throw new Error("the blob store refused the pack");
          },
        },
      }),
      /the blob store refused the pack/,
    );
    await assert.rejects(
      worker.replicate({ images: [{ path: path.join(mountPoint, "missing.img") }], store }),
      /ENOENT/,
    );
    const { store: fine, packs } = indexedStore("orgs/org_after");
    const [result] = await worker.replicate({ images: [{ path: image }], store: fine });
    assert.ok(result && result.stats.newChunks > 0 && packs() > 0);
  });

  it("fails the jobs under way when the worker thread dies, and starts a new one for the next job", async () => {
    const { store } = indexedStore("orgs/org_dies");
    const dying = {
      ...store,
      writePack: async () => {
        // The thread goes away mid-job (as a crash or an out-of-memory kill of it would).
        await worker.close();
        await new Promise((resolve) => setTimeout(resolve, 50));
      },
    };
    await assert.rejects(
      worker.replicate({ images: [{ path: image }], store: dying }),
      /the replication worker stopped/,
    );
    const { store: next, packs } = indexedStore("orgs/org_reborn");
    const [result] = await worker.replicate({ images: [{ path: image }], store: next });
    assert.ok(result && result.stats.newChunks > 0 && packs() > 0);
  });

  it("stops when aborted, with the signal's reason", async () => {
    const { store } = indexedStore("orgs/org_abort");
    const abort = new AbortController();
    const slow = {
      ...store,
      writePack: async (pack: Parameters<typeof store.writePack>[0]) => {
        abort.abort(new Error("stopped by the test"));
        await store.writePack(pack);
      },
    };
    await assert.rejects(worker.replicate({ images: [{ path: image }], store: slow, signal: abort.signal }), {
      message: "stopped by the test",
    });
    // A pack's bytes arrive whole: the object is the pack its key names.
    const { store: check } = indexedStore("orgs/org_whole");
    let seen = 0;
    await worker.replicate({
      images: [{ path: image }],
      store: {
        ...check,
        writePack: async (pack) => {
          seen++;
          assert.equal(packData(pack).length, pack.size);
          await check.writePack(pack);
        },
      },
    });
    assert.ok(seen > 0);
  });
});
