// The pure parts of the storage pool's upkeep: the admission decision and which templates
// are idle. Their effect on real sandboxes is in storage-upkeep.test.ts.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decideStorage, type PoolUsage, promisedImageBytes } from "./admission.js";
import { idleTemplates } from "./pool.js";

const G = 1024 ** 3;
const usage = (overrides: Partial<PoolUsage> = {}): PoolUsage => ({
  hostFreeBytes: 10 * G,
  poolAllocatedBytes: 0,
  imageBytesById: new Map(),
  fixedBytes: 0,
  stagingBytes: 0,
  ...overrides,
});
const policy = { reserveBytes: 2 * G, overcommit: 1 };

describe("storage admission", () => {
  it("admits while every image filled still fits the host's free space minus the reserve", () => {
    const held = usage({ imageBytesById: new Map([["a", 4 * G]]) });
    assert.equal(decideStorage(held, new Map(), { id: "b", bytes: 4 * G }, policy).admitted, true);
    const refused = decideStorage(held, new Map(), { id: "b", bytes: 5 * G }, policy);
    assert.equal(refused.admitted, false);
    assert.equal(refused.mayStillWriteBytes, 9 * G);
    assert.equal(refused.backableBytes, 8 * G);
    assert.equal(refused.couldEverFit, true, "it would fit were `a` gone");
  });

  it("counts what the pool already holds on the host as written, and read-only files as held", () => {
    // `a` wrote 3 GiB (on the host already); a snapshot of 1 GiB holds its blocks.
    const written = usage({
      hostFreeBytes: 6 * G,
      poolAllocatedBytes: 4 * G,
      imageBytesById: new Map([["a", 4 * G]]),
      fixedBytes: 1 * G,
    });
    // May still write: 4 (a) + 1 (snapshot) + 3 (b) - 4 held = 4; backable 6 - 2 = 4.
    const verdict = decideStorage(written, new Map(), { id: "b", bytes: 3 * G }, policy);
    assert.equal(verdict.mayStillWriteBytes, 4 * G);
    assert.equal(verdict.admitted, true);
    assert.equal(decideStorage(written, new Map(), { id: "b", bytes: 3 * G + 1 }, policy).admitted, false);
  });

  it("counts changes under way once, by sandbox id (a growth replaces its sandbox's size)", () => {
    const held = usage({ imageBytesById: new Map([["a", 2 * G]]) });
    assert.equal(promisedImageBytes(held, new Map([["a", 3 * G]])), 3 * G);
    assert.equal(promisedImageBytes(held, new Map([["b", 3 * G]])), 5 * G);
    const pending = new Map([["b", 5 * G]]);
    assert.equal(decideStorage(held, pending, { id: "c", bytes: 1 * G }, policy).admitted, true);
    assert.equal(decideStorage(held, pending, { id: "c", bytes: 1 * G + 1 }, policy).admitted, false);
    // The growth of `a` to 3 GiB: its new total, not 3 more.
    assert.equal(decideStorage(held, new Map(), { id: "a", bytes: 8 * G }, policy).admitted, true);
  });

  it("overcommits by the ratio, and says when nothing could ever fit", () => {
    const empty = usage();
    assert.equal(decideStorage(empty, new Map(), { id: "a", bytes: 16 * G }, policy).admitted, false);
    assert.equal(
      decideStorage(empty, new Map(), { id: "a", bytes: 16 * G }, { ...policy, overcommit: 2 }).admitted,
      true,
    );
    const never = decideStorage(empty, new Map(), { id: "a", bytes: 100 * G }, policy);
    assert.equal(never.couldEverFit, false);
    // Staged imports count at their size.
    assert.equal(
      decideStorage(usage({ stagingBytes: 8 * G }), new Map(), { id: "a", bytes: 1 }, policy).admitted,
      false,
    );
  });
});

describe("idle templates", () => {
  it("are those unused for the idle time with no clone of them under way", () => {
    const now = 1_000_000;
    const templates = new Map([
      [1, { lastUsedMs: now - 10_000, cloning: 0 }],
      [2, { lastUsedMs: now - 10_000, cloning: 1 }],
      [10, { lastUsedMs: now - 500, cloning: 0 }],
      [20, { lastUsedMs: now - 1000, cloning: 0 }],
    ]);
    assert.deepEqual(idleTemplates(templates, now, 1000), [1, 20]);
    assert.deepEqual(idleTemplates(templates, now, 100_000), []);
  });
});
