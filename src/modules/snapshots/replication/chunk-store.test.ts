// blobChunkStore over a real directory: the key layout, the write check, the has() cache.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { openTestBlobStore } from "../../../../test/support/blob-store.js";
import type { BlobStore } from "../../../drivers/blobs/interface.js";
import { blobChunkStore, chunkKey } from "./chunk-store.js";
import { digestOf } from "./codec.js";

describe("blobChunkStore", async () => {
  const root = await mkdtemp(path.join(os.tmpdir(), "warren-chunks-"));
  after(() => rm(root, { recursive: true, force: true }));

  /** The fs store, recording what putIfAbsent was given and counting heads. */
  const inner = await openTestBlobStore(root);
  const recorded = () => {
    const puts: { key: string; sha256?: string }[] = [];
    let heads = 0;
    const blobs: BlobStore = {
      kind: inner.kind,
      putIfAbsent: (key, data, options) => {
        puts.push({ key, sha256: options?.sha256 });
        return inner.putIfAbsent(key, data, options);
      },
      head: (key) => {
        heads++;
        return inner.head(key);
      },
      get: (key) => inner.get(key),
      getRange: (key, offset, length) => inner.getRange(key, offset, length),
      delete: (key) => inner.delete(key),
      list: (prefix) => inner.list(prefix),
      presignPut: (key, options) => inner.presignPut(key, options),
      presignGet: (key, options) => inner.presignGet(key, options),
      close: () => inner.close(),
    };
    return { blobs, puts, heads: () => heads };
  };

  it("stores a chunk once under <prefix>/chunks/<2 hex>/<hex>", async () => {
    const { blobs, puts } = recorded();
    const chunks = blobChunkStore(blobs, "orgs/org_1");
    const digest = digestOf(randomBytes(100));
    const hex = digest.slice(7);
    assert.equal(chunkKey("orgs/org_1", digest), `orgs/org_1/chunks/${hex.slice(0, 2)}/${hex}`);
    assert.equal(await chunks.has(digest), false);
    await chunks.put(digest, Buffer.from("compressed"), 100);
    await chunks.put(digest, Buffer.from("compressed"), 100);
    assert.equal(puts.length, 2);
    assert.deepEqual(await chunks.get(digest), Buffer.from("compressed"));
    assert.equal(await chunks.get(digestOf(Buffer.from("absent"))), null);
    assert.throws(() => chunkKey("orgs/org_1", "blake3:../../etc" as never), /not a chunk digest/);
  });

  it("passes the sha256 of the compressed bytes when writes are verified (not on fs by default)", async () => {
    const { blobs, puts } = recorded();
    const digest = digestOf(randomBytes(100));
    await blobChunkStore(blobs, "orgs/org_2", { verifyWrites: true }).put(digest, Buffer.from("abc"), 100);
    assert.equal(puts[0]?.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    await blobChunkStore(blobs, "orgs/org_3").put(digest, Buffer.from("abc"), 100);
    assert.equal(puts[1]?.sha256, undefined);
  });

  it("answers has() from its cache once a chunk is known stored", async () => {
    const { blobs, heads } = recorded();
    const chunks = blobChunkStore(blobs, "orgs/org_4");
    const digest = digestOf(randomBytes(100));
    await chunks.put(digest, Buffer.from("x"), 100);
    assert.equal(await chunks.has(digest), true);
    assert.equal(heads(), 0);
    const other = digestOf(randomBytes(100));
    await blobChunkStore(blobs, "orgs/org_4").put(other, Buffer.from("y"), 100);
    assert.equal(await chunks.has(other), true);
    assert.equal(await chunks.has(other), true);
    assert.equal(heads(), 1);
  });
});
