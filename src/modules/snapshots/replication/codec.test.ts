// The chunk codec: round trips, and the output bound that refuses decompression bombs.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { MAX_CHUNK_BYTES } from "./chunker.js";
import {
  compressChunk,
  decompressChunk,
  looksIncompressible,
  rawZstdFrame,
  rawZstdFrameLength,
  zstdOutputBound,
} from "./codec.js";
import { MAX_STORED_CHUNK_BYTES } from "./pack.js";

describe("chunk codec", () => {
  it("bounds what a chunk of every kind decompresses to, and round-trips it", async () => {
    const kinds = [Buffer.alloc(1 << 20), randomBytes(1 << 20), Buffer.from("warren ".repeat(50_000)), Buffer.alloc(1)];
    for (const plain of kinds) {
      const compressed = await compressChunk(plain);
      const bound = zstdOutputBound(compressed);
      assert.ok(bound !== null && bound >= plain.length && bound <= plain.length + 128 * 1024);
      assert.ok((await decompressChunk(compressed, plain.length + 128 * 1024)).equals(plain));
    }
  });

  it("refuses a decompression bomb before decoding it", async () => {
    // 4,096 frames of 1 MiB of zeros: 200 KB that would decode to 4 GiB.
    const frame = await compressChunk(Buffer.alloc(1 << 20));
    const bomb = Buffer.concat(Array.from({ length: 4096 }, () => frame));
    assert.equal(zstdOutputBound(bomb), 4096 * (1 << 20));
    await assert.rejects(decompressChunk(bomb, 2 << 20), /more than 2097152/);
  });

  it("refuses malformed frames", async () => {
    const good = await compressChunk(Buffer.from("some bytes to compress"));
    for (const bad of [
      Buffer.alloc(0),
      Buffer.from("not zstd at all"),
      good.subarray(0, good.length - 2),
      Buffer.concat([good, Buffer.from([1])]),
    ]) {
      if (bad.length === 0) {
        assert.equal(zstdOutputBound(bad), 0);
        continue;
      }
      assert.equal(zstdOutputBound(bad), null);
      await assert.rejects(decompressChunk(bad, 1 << 20), /not a well-formed zstd frame/);
    }
  });
});

describe("incompressible chunks", () => {
  it("frames random bytes as raw blocks without zstd, and zstd reads them back", async () => {
    for (const size of [64 * 1024, 128 * 1024, 128 * 1024 + 1, 270_001, 1 << 20]) {
      const plain = randomBytes(size);
      assert.equal(looksIncompressible(plain), true);
      const framed = await compressChunk(plain);
      assert.ok(framed.equals(rawZstdFrame(plain)));
      assert.equal(framed.length, plain.length + 9 + 3 * Math.ceil(size / (128 * 1024)));
      assert.equal(zstdOutputBound(framed), plain.length);
      assert.ok((await decompressChunk(framed, plain.length)).equals(plain));
    }
  });

  it("frames raw blocks that libzstd decodes at every size edge: empty, one byte, a block \u00b1 1, the largest chunk", async () => {
    for (const size of [0, 1, 4095, 128 * 1024 - 1, 128 * 1024, 128 * 1024 + 1, 256 * 1024 + 1, MAX_CHUNK_BYTES]) {
      const plain = randomBytes(size);
      const framed = rawZstdFrame(plain);
      assert.equal(framed.length, rawZstdFrameLength(size));
      assert.ok(framed.length <= MAX_STORED_CHUNK_BYTES);
      assert.equal(zstdOutputBound(framed), size, `bound at ${size}`);
      assert.ok((await decompressChunk(framed, MAX_CHUNK_BYTES)).equals(plain), `round trip at ${size}`);
    }
  });

  it("still compresses text, zeros and short chunks", async () => {
    const text = Buffer.from("const warren = require('warren'); // a line of code\n".repeat(10_000));
    for (const plain of [text, Buffer.alloc(1 << 20), randomBytes(4096)]) {
      assert.equal(looksIncompressible(plain), false);
    }
    assert.ok((await compressChunk(text)).length < text.length / 10);
    // Mostly random with one compressible half: the sample sees the text and zstd runs.
    const mixed = Buffer.concat([randomBytes(256 * 1024), text.subarray(0, 256 * 1024)]);
    assert.equal(looksIncompressible(mixed), false);
  });
});
