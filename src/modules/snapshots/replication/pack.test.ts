// Packs: the format (round trip, a hostile index refused), the chunk index rebuilt from the
// blob store alone (packs and chunks stored before packs), and the packing store's bounds
// (packs written at once, a failed write reported at flush) over a real fs blob store.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { openTestBlobStore } from "../../../../test/support/blob-store.js";
import type { FsBlobStore } from "../../../drivers/blobs/fs.js";
import { blobChunkStore, chunkKey } from "./chunk-store.js";
import { MAX_CHUNK_BYTES } from "./chunker.js";
import { compressChunk, decompressChunk, digestOf } from "./codec.js";
import {
  isPackKey,
  MAX_PACK_CHUNKS,
  PACK_TRAILER_BYTES,
  PackBuilder,
  PackFormatError,
  packData,
  packEntries,
  packMatchesKey,
  readPackIndex,
  rebuildChunkIndex,
} from "./pack.js";
import { PackingChunkStore, readChunkAt, type SealedPack } from "./packing.js";
import type { Digest } from "./types.js";

const PREFIX = "orgs/org_pack";

async function someChunks(count: number, bytes = 40_000) {
  return Promise.all(
    Array.from({ length: count }, async () => {
      const plain = randomBytes(bytes);
      return { digest: digestOf(plain), plain, compressed: await compressChunk(plain) };
    }),
  );
}

describe("packs", () => {
  let dir = "";
  let blobs: FsBlobStore;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-pack-"));
    blobs = await openTestBlobStore(dir);
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("round-trips: the key is the BLAKE3 of the bytes, the index lists every chunk where it lies", async () => {
    const chunks = await someChunks(5);
    const builder = new PackBuilder();
    for (const chunk of chunks) builder.append(chunk.digest, chunk.plain.length, chunk.compressed);
    const sealed = builder.seal(PREFIX);
    // The chunks are not copied: the pack's pieces are the appended buffers, then the index.
    assert.equal(sealed.parts.length, chunks.length + 1);
    assert.equal(sealed.parts[0]?.buffer, chunks[0]?.compressed.buffer);
    const data = packData(sealed);
    assert.equal(data.length, sealed.size);
    assert.match(sealed.key, /^orgs\/org_pack\/packs\/([0-9a-f]{2})\/\1[0-9a-f]{62}$/);
    assert.ok(isPackKey(sealed.key));
    assert.ok(packMatchesKey(sealed.key, data));
    assert.ok(!packMatchesKey(sealed.key, Buffer.concat([data, Buffer.from([0])])));
    assert.deepEqual(packEntries(data), sealed.entries);
    // The same chunks packed again make another key: a key is never written twice.
    const twin = new PackBuilder();
    for (const chunk of chunks) twin.append(chunk.digest, chunk.plain.length, chunk.compressed);
    const twinSealed = twin.seal(PREFIX);
    assert.notEqual(twinSealed.key, sealed.key);
    assert.deepEqual(twinSealed.entries, sealed.entries);
    for (const [i, entry] of sealed.entries.entries()) {
      const chunk = chunks[i] as (typeof chunks)[0];
      assert.equal(entry.digest, chunk.digest);
      assert.equal(entry.plainSize, chunk.plain.length);
      assert.ok(data.subarray(entry.offset, entry.offset + entry.length).equals(chunk.compressed));
    }
    // Stored as its list of pieces: the object is their concatenation.
    await blobs.putIfAbsent(sealed.key, sealed.parts);
    assert.ok((await blobs.get(sealed.key))?.equals(data));
    assert.deepEqual(await readPackIndex(blobs, sealed.key), sealed.entries);
    assert.equal(await readPackIndex(blobs, `${PREFIX}/packs/00/${"0".repeat(64)}`), null);
    const first = sealed.entries[0] as (typeof sealed.entries)[0];
    assert.ok((await readChunkAt(blobs, { pack: sealed.key, ...first }))?.equals(chunks[0]?.compressed as Buffer));
  });

  it("builds into a given buffer while it has room: the same pack, its chunks copied into that buffer", async () => {
    const chunks = await someChunks(4);
    const plain = new PackBuilder();
    const shared = Buffer.from(new SharedArrayBuffer(100_000));
    const into = new PackBuilder(shared);
    for (const chunk of chunks) {
      plain.append(chunk.digest, chunk.plain.length, chunk.compressed);
      into.append(chunk.digest, chunk.plain.length, chunk.compressed);
    }
    const a = plain.seal(PREFIX);
    const b = into.seal(PREFIX);
    // Two chunks of ~40 KB fit in 100 KB: one part in the buffer, the other two as they are, then the index.
    assert.equal(b.parts.length, 4);
    assert.equal(b.parts[0]?.buffer, shared.buffer);
    assert.equal(b.parts[0]?.length, (chunks[0]?.compressed.length ?? 0) + (chunks[1]?.compressed.length ?? 0));
    const bytes = packData(b);
    assert.ok(packMatchesKey(b.key, bytes));
    assert.deepEqual(b.entries, a.entries);
    // Only the random trailer bytes differ.
    assert.ok(bytes.subarray(0, bytes.length - 16).equals(packData(a).subarray(0, bytes.length - 16)));
  });

  it("frames raw chunks into the buffer while it has room and as their own parts after: every chunk decodes, copied before appendRawFrame returns", async () => {
    const raw = [randomBytes(200_000), randomBytes(200_000), randomBytes(10_000)];
    const text = Buffer.from("a line of a text file in a sandbox\n".repeat(3000));
    const textFrame = await compressChunk(text);
    const expected = [raw[0], raw[1], text, raw[2]] as Buffer[];
    const copies = expected.map((chunk) => Buffer.from(chunk));
    const shared = Buffer.from(new SharedArrayBuffer(300_000));
    const into = new PackBuilder(shared);
    const plain = new PackBuilder();
    for (const builder of [into, plain]) {
      // A: into the buffer; B: no room left (its own part); C: zstd's frame; D: after a part of its own.
      builder.appendRawFrame(digestOf(raw[0] as Buffer), raw[0] as Buffer);
      builder.appendRawFrame(digestOf(raw[1] as Buffer), raw[1] as Buffer);
      builder.append(digestOf(text), text.length, textFrame);
      builder.appendRawFrame(digestOf(raw[2] as Buffer), raw[2] as Buffer);
    }
    // What a sandbox writes next into the same window memory changes nothing appended.
    for (const chunk of raw) chunk.fill(0xa5);
    const a = into.seal(PREFIX);
    const b = plain.seal(PREFIX);
    assert.equal(a.parts[0]?.buffer, shared.buffer);
    assert.equal(a.parts[0]?.length, 200_000 + 9 + 2 * 3);
    const bytes = packData(a);
    assert.ok(packMatchesKey(a.key, bytes));
    assert.deepEqual(a.entries, b.entries);
    assert.ok(bytes.subarray(0, bytes.length - 16).equals(packData(b).subarray(0, bytes.length - 16)));
    const entries = packEntries(bytes);
    assert.equal(entries.length, 4);
    for (const [i, entry] of entries.entries()) {
      const decoded = await decompressChunk(bytes.subarray(entry.offset, entry.offset + entry.length), MAX_CHUNK_BYTES);
      assert.ok(decoded.equals(copies[i] as Buffer), `chunk ${i}`);
      assert.equal(entry.digest, digestOf(decoded));
      assert.equal(entry.plainSize, decoded.length);
    }
  });

  it("refuses a malformed or hostile pack: bad magic, an index past its end, overlapping or oversized entries", async () => {
    const chunks = await someChunks(3);
    const builder = new PackBuilder();
    for (const chunk of chunks) builder.append(chunk.digest, chunk.plain.length, chunk.compressed);
    const data = packData(builder.seal(PREFIX));
    const trailerAt = data.length - PACK_TRAILER_BYTES;
    const indexAt = trailerAt - 3 * 48;
    const mutate = (change: (copy: Buffer) => void) => {
      const copy = Buffer.from(data);
      change(copy);
      return copy;
    };
    const cases: [string, Buffer][] = [
      ["too short", data.subarray(0, 10)],
      ["bad magic", mutate((copy) => copy.write("NOTAPACK", trailerAt, "latin1"))],
      ["index offset off by one", mutate((copy) => copy.writeBigUInt64BE(BigInt(indexAt + 1), trailerAt + 8))],
      ["count beyond the bound", mutate((copy) => copy.writeUInt32BE(1_000_000, trailerAt + 16))],
      ["an unknown flag", mutate((copy) => copy.writeUInt32BE(1, trailerAt + 20))],
      // The second entry starts inside the first.
      ["overlapping entries", mutate((copy) => copy.writeBigUInt64BE(1n, indexAt + 48 + 32))],
      // The last entry runs into the index.
      ["an entry past the chunk area", mutate((copy) => copy.writeUInt32BE(10_000_000, indexAt + 2 * 48 + 40))],
      ["an impossible plain size", mutate((copy) => copy.writeUInt32BE(0, indexAt + 44))],
    ];
    for (const [name, bytes] of cases) assert.throws(() => packEntries(bytes), PackFormatError, name);
  });

  it("rebuilds the chunk index from the blob store alone: packs, per-chunk objects, unreadable packs reported", async () => {
    const prefix = "orgs/org_index";
    const packed = await someChunks(6);
    const sealed: SealedPack[] = [];
    for (const part of [packed.slice(0, 4), packed.slice(3)]) {
      const builder = new PackBuilder();
      for (const chunk of part) builder.append(chunk.digest, chunk.plain.length, chunk.compressed);
      const pack = builder.seal(prefix);
      await blobs.putIfAbsent(pack.key, pack.parts);
      sealed.push(pack);
    }
    const [legacy] = await someChunks(1);
    if (!legacy) throw new Error("no chunk");
    await blobChunkStore(blobs, prefix).put(legacy.digest, legacy.compressed, legacy.plain.length);
    // Not a pack: named like one, holding garbage.
    const junk = `${prefix}/packs/ab/ab${"0".repeat(62)}`;
    await blobs.putIfAbsent(junk, randomBytes(100));

    const index = await rebuildChunkIndex(blobs, prefix);
    assert.deepEqual(index.packs.sort(), sealed.map((pack) => pack.key).sort());
    assert.deepEqual(index.unreadable, [junk]);
    assert.equal(index.chunks.size, 7);
    for (const chunk of [...packed, legacy]) {
      const location = index.chunks.get(chunk.digest);
      assert.ok(location, chunk.digest);
      assert.ok((await readChunkAt(blobs, location))?.equals(chunk.compressed), chunk.digest);
    }
    assert.equal(index.chunks.get(legacy.digest)?.pack, null);
    assert.equal(index.chunks.get(legacy.digest)?.length, legacy.compressed.length);
    assert.equal((index.chunks.get(packed[0]?.digest as Digest) as { pack: string }).pack.length > 0, true);
    assert.equal(index.chunks.get(packed[5]?.digest as Digest)?.plainSize, 40_000);
    assert.equal(chunkKey(prefix, legacy.digest).startsWith(`${prefix}/chunks/`), true);
  });

  it("writes a pack at MAX_PACK_CHUNKS chunks however small they are", async () => {
    const written: number[] = [];
    const store = new PackingChunkStore({
      prefix: PREFIX,
      has: async () => false,
      get: async () => null,
      writePack: async (pack) => {
        // A reader accepts a pack this full.
        written.push(packEntries(packData(pack)).length);
      },
    });
    // Tiny stored chunks (what very compressible data makes), far below the target size.
    for (let i = 0; i < MAX_PACK_CHUNKS + 10; i++) {
      const name = Buffer.alloc(32);
      name.writeUInt32BE(i);
      await store.put(`blake3:${name.toString("hex")}` as Digest, Buffer.from([i & 0xff]), 4096);
    }
    await store.flush();
    assert.deepEqual(written, [MAX_PACK_CHUNKS, 10]);
  });

  it("writes at most maxWriting packs at once and reports a failed write at flush and on the next put", async () => {
    const chunks = await someChunks(12, 20_000);
    let writing = 0;
    let mostWriting = 0;
    const written: SealedPack[] = [];
    const release: (() => void)[] = [];
    const store = new PackingChunkStore({
      prefix: PREFIX,
      targetBytes: 40_000,
      maxWriting: 2,
      has: async () => false,
      get: async () => null,
      async writePack(pack) {
        writing++;
        mostWriting = Math.max(mostWriting, writing);
        await new Promise<void>((resolve) => release.push(resolve));
        writing--;
        written.push(pack);
      },
    });
    const releaser = setInterval(() => release.shift()?.(), 5);
    try {
      for (const chunk of chunks) await store.put(chunk.digest, chunk.compressed, chunk.plain.length);
      // A chunk put twice (the same bytes in two images) is stored once.
      const again = chunks[0] as (typeof chunks)[0];
      await store.put(again.digest, again.compressed, again.plain.length);
      await store.flush();
    } finally {
      clearInterval(releaser);
    }
    assert.equal(mostWriting, 2);
    assert.equal(store.packsWritten, written.length);
    assert.deepEqual(
      written.flatMap((pack) => pack.entries.map((entry) => entry.digest)).sort(),
      chunks.map((chunk) => chunk.digest).sort(),
    );

    const failing = new PackingChunkStore({
      prefix: PREFIX,
      targetBytes: 1,
      has: async () => false,
      get: async () => null,
      writePack: async () => {
        throw new Error("the store refused");
      },
    });
    const [one, two] = chunks;
    if (!one || !two) throw new Error("no chunks");
    await failing.put(one.digest, one.compressed, one.plain.length);
    await assert.rejects(failing.flush(), /the store refused/);
    await assert.rejects(failing.put(two.digest, two.compressed, two.plain.length), /the store refused/);
  });
});
