// Pure parts of the delta: parsing fiemap output, the ranges two files share, and what a
// replication with a base still reads.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FiemapParseError, parseFiemap } from "./extents.js";
import { dataRanges, planDelta, sameMapping, subtractRanges } from "./replicate.js";
import type { ChunkRef } from "./types.js";

const OUTPUT = `b.img:
 EXT: FILE-OFFSET      BLOCK-RANGE      TOTAL FLAGS
   0: [0..7999]:       hole              8000
   1: [8000..8023]:    80..103             24 0x2000
   2: [8024..40959]:   hole             32936
   3: [40960..47999]:  33040..40079      7040 0x2000
   4: [48000..48015]:  320..335            16   0x0
   5: [48016..48031]:  400..415            16 0x800
   6: [48032..61439]:  40112..53519     13408 0x2001
   7: [61440..409599]: hole             348160
`;

const ref = (offset: number, size: number): ChunkRef => ({ offset, size, digest: `blake3:${"a".repeat(64)}` });

describe("parseFiemap", () => {
  it("reads data extents in bytes, leaving out holes and unwritten extents", () => {
    const extents = parseFiemap(OUTPUT, 409600 * 512);
    assert.deepEqual(extents, [
      { offset: 8000 * 512, length: 24 * 512, physical: 80 * 512, shared: true },
      { offset: 40960 * 512, length: 7040 * 512, physical: 33040 * 512, shared: true },
      { offset: 48000 * 512, length: 16 * 512, physical: 320 * 512, shared: false },
      { offset: 48032 * 512, length: 13408 * 512, physical: 40112 * 512, shared: true },
    ]);
  });

  it("clips the last extent to the file size and marks unreliable locations unknown", () => {
    const output = "f:\n EXT: FILE-OFFSET BLOCK-RANGE TOTAL FLAGS\n   0: [0..7]: 100..107 8 0x5\n";
    assert.deepEqual(parseFiemap(output, 1000), [{ offset: 0, length: 1000, physical: null, shared: false }]);
  });

  it("an empty file of holes has no extents", () => {
    assert.deepEqual(parseFiemap("empty.img:\n", 10 << 20), []);
  });

  it("refuses lines it does not understand rather than skip data", () => {
    for (const bad of [
      "f:\n EXT: FILE-OFFSET\n   0: [0..7]: 100..107 8 0x1\n   garbage\n",
      "f:\n EXT: FILE-OFFSET\n   0: [0..7]: 100..103 8 0x1\n", // physical length differs
      "f:\n EXT: FILE-OFFSET\n   0: [8..15]: 100..107 8\n   1: [0..7]: 10..17 8\n", // not ascending
    ])
      assert.throws(() => parseFiemap(bad, 1 << 20), FiemapParseError);
  });
});

describe("delta planning", () => {
  const MiB = 1 << 20;
  it("merges logically adjacent extents into data ranges", () => {
    assert.deepEqual(
      dataRanges([
        { offset: 0, length: 10, physical: 100, shared: false },
        { offset: 10, length: 5, physical: 900, shared: true },
        { offset: 20, length: 5, physical: 120, shared: false },
      ]),
      [
        { start: 0, end: 15 },
        { start: 20, end: 25 },
      ],
    );
  });

  it("finds the ranges mapped to the same blocks, not those merely overlapping", () => {
    const a = [
      { offset: 0, length: 4 * MiB, physical: 100 * MiB, shared: true },
      { offset: 4 * MiB, length: MiB, physical: 7 * MiB, shared: false }, // rewritten in a
      { offset: 5 * MiB, length: 3 * MiB, physical: 105 * MiB, shared: true },
    ];
    const b = [
      { offset: 0, length: 8 * MiB, physical: 100 * MiB, shared: true },
      { offset: 9 * MiB, length: MiB, physical: 9 * MiB, shared: false },
    ];
    assert.deepEqual(sameMapping(a, b), [
      { start: 0, end: 4 * MiB },
      { start: 5 * MiB, end: 8 * MiB },
    ]);
    const shifted = [{ offset: MiB, length: 4 * MiB, physical: 100 * MiB, shared: true }];
    assert.deepEqual(sameMapping(shifted, b), []);
    const unknown = [{ offset: 0, length: 8 * MiB, physical: null, shared: false }];
    assert.deepEqual(sameMapping(unknown, b), []);
  });

  it("subtracts ranges", () => {
    assert.deepEqual(
      subtractRanges(
        [
          { start: 0, end: 10 },
          { start: 20, end: 30 },
        ],
        [
          { start: 2, end: 4 },
          { start: 8, end: 22 },
          { start: 25, end: 26 },
        ],
      ),
      [
        { start: 0, end: 2 },
        { start: 4, end: 8 },
        { start: 22, end: 25 },
        { start: 26, end: 30 },
      ],
    );
  });

  it("reuses base chunks wholly in shared blocks, knows the base's gaps there are zeros, reads the rest", () => {
    const data = [{ start: 0, end: 8 * MiB }];
    const same = [
      { start: 0, end: 4 * MiB },
      { start: 5 * MiB, end: 8 * MiB },
    ];
    const base = [ref(0, MiB), ref(MiB, MiB), ref(3 * MiB, MiB + 4096), ref(6 * MiB, MiB)];
    const plan = planDelta(data, same, base);
    assert.deepEqual(plan.reused, [ref(0, MiB), ref(MiB, MiB), ref(6 * MiB, MiB)]);
    // [2, 3) MiB is a gap of the base inside shared blocks: zeros, not read.
    assert.deepEqual(plan.read, [{ start: 3 * MiB, end: 5 * MiB }]);
  });

  it("reads everything without shared blocks", () => {
    const data = [{ start: 0, end: 8 * MiB }];
    assert.deepEqual(planDelta(data, [], [ref(0, MiB)]), { reused: [], read: data });
  });
});
