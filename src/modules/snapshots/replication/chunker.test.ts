// The block-aligned chunker, pure: determinism, the size bounds, and locality (a change
// moves only the chunks around it).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import {
  BLOCK_BYTES,
  blockHash,
  chunkLengths,
  isZero,
  MAX_CHUNK_BYTES,
  MIN_CHUNK_BYTES,
  nextCut,
  WINDOW_BYTES,
} from "./chunker.js";

const MiB = 1024 * 1024;

/** Chunk boundaries as absolute offsets. */
function boundaries(data: Uint8Array): number[] {
  const cuts: number[] = [];
  let at = 0;
  for (const length of chunkLengths(data)) {
    at += length;
    cuts.push(at);
  }
  return cuts;
}

describe("chunker", () => {
  const data = randomBytes(32 * MiB);

  it("cuts the same bytes the same way", () => {
    assert.deepEqual(chunkLengths(data), chunkLengths(Buffer.from(data)));
  });

  it("cuts at block boundaries, within the bounds, with an average near 256 KiB", () => {
    const lengths = chunkLengths(data);
    assert.equal(
      lengths.reduce((a, b) => a + b, 0),
      data.length,
    );
    for (const [index, length] of lengths.entries()) {
      assert.ok(length <= MAX_CHUNK_BYTES);
      if (index < lengths.length - 1) {
        assert.ok(length >= MIN_CHUNK_BYTES, `chunk ${index} is ${length} bytes`);
        assert.equal(length % BLOCK_BYTES, 0);
      }
    }
    const average = data.length / lengths.length;
    assert.ok(average > 200 * 1024 && average < 340 * 1024, `average ${average}`);
  });

  it("ends the last chunk at the end of the range, even mid-block, and cuts nothing below the minimum", () => {
    assert.deepEqual(chunkLengths(data.subarray(0, 5000)), [5000]);
    assert.deepEqual(chunkLengths(new Uint8Array(0)), []);
    assert.equal(nextCut(data, 0, MIN_CHUNK_BYTES - BLOCK_BYTES, false), 0);
  });

  it("cuts a run of zeros into equal chunks", () => {
    const zeros = new Uint8Array(4 * MiB);
    const lengths = chunkLengths(zeros);
    assert.ok(lengths.every((length) => length === lengths[0]));
    assert.ok((lengths[0] as number) >= MIN_CHUNK_BYTES);
  });

  it("asks for more data when no cut is in sight, and needs none past the maximum", () => {
    const zeros = new Uint8Array(2 * MiB);
    const length = nextCut(zeros, 0, zeros.length, false);
    assert.ok(length > 0 && length <= MAX_CHUNK_BYTES);
  });

  it("decides a cut on the block's last 64 bytes, all of them", () => {
    const block = Buffer.from(data.subarray(0, BLOCK_BYTES));
    const before = blockHash(block, BLOCK_BYTES);
    block[0] = (block[0] as number) ^ 1; // outside the window
    assert.equal(blockHash(block, BLOCK_BYTES), before);
    for (const position of [BLOCK_BYTES - WINDOW_BYTES, BLOCK_BYTES - 33, BLOCK_BYTES - 1]) {
      const changed = Buffer.from(block);
      changed[position] = (changed[position] as number) ^ 0x40;
      assert.notEqual(blockHash(changed, BLOCK_BYTES), before, `byte ${position} of the block`);
    }
  });

  it("moves only the chunks near a changed block", () => {
    const changed = Buffer.from(data);
    const at = 10 * MiB + 3 * BLOCK_BYTES;
    randomBytes(BLOCK_BYTES).copy(changed, at);
    const a = new Set(boundaries(data));
    const b = boundaries(changed);
    const moved = b.filter((cut) => !a.has(cut));
    assert.ok(moved.length <= 3, `${moved.length} boundaries moved`);
    for (const cut of moved) assert.ok(cut > at && cut < at + 3 * MAX_CHUNK_BYTES);
  });

  it("resynchronizes after an inserted block: the boundaries after it shift by one block", () => {
    const at = 12 * MiB;
    const inserted = Buffer.concat([data.subarray(0, at), randomBytes(BLOCK_BYTES), data.subarray(at)]);
    const a = boundaries(data);
    const shifted = new Set(boundaries(inserted).map((cut) => (cut > at ? cut - BLOCK_BYTES : cut)));
    const lost = a.filter((cut) => !shifted.has(cut));
    assert.ok(lost.length <= 3, `${lost.length} of ${a.length} boundaries lost`);
    for (const cut of lost) assert.ok(cut > at - MAX_CHUNK_BYTES && cut < at + 3 * MAX_CHUNK_BYTES);
  });

  it("recognizes zeros", () => {
    assert.ok(isZero(new Uint8Array(3 * MiB + 5)));
    assert.ok(isZero(new Uint8Array(0)));
    const almost = new Uint8Array(2 * MiB);
    almost[2 * MiB - 1] = 1;
    assert.ok(!isZero(almost));
    assert.ok(!isZero(almost.subarray(MiB + 3)));
  });
});
