import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatBytes, formatMarker, materializationCost, parseMarker, planEviction } from "./cache-budget.js";
import type { ManifestFile } from "./manifest.js";

const chunk = (size: number) => ({ digest: `blake3:${"a".repeat(64)}` as const, size });
const file = (path: string, chunks: number[]): ManifestFile => ({
  path,
  mode: 0o644,
  size: chunks.reduce((sum, size) => sum + size, 0),
  digest: `blake3:${"b".repeat(64)}` as const,
  chunks: chunks.map(chunk),
});

describe("volume cache budget", () => {
  it("costs every file, directory and the root as inodes, and only copied files as bytes", () => {
    const files = [file("a/b/c.txt", [10]), file("a/d.bin", [100, 100, 100]), file("e", []), file("a/b/f", [5])];
    // Directories a and a/b, the root, four files.
    assert.deepEqual(materializationCost(files, true), { bytes: 300, inodes: 7 });
    assert.deepEqual(materializationCost(files, false), { bytes: 315, inodes: 7 });
    // One 1 MiB chunk repeated 3072 times is 3 GiB on the host, whatever the blob store holds.
    const repeated = file(
      "big",
      Array.from({ length: 3072 }, () => 1_048_576),
    );
    assert.deepEqual(materializationCost([repeated], true), { bytes: 3 * 1024 ** 3, inodes: 2 });
  });

  it("evicts least recently used first, only as much as needed, and refuses what cannot fit", () => {
    const budget = { bytes: 100, inodes: 10 };
    const candidates = [
      { key: "new", cost: { bytes: 40, inodes: 1 }, lastUse: 9 },
      { key: "old", cost: { bytes: 40, inodes: 1 }, lastUse: 1 },
      { key: "mid", cost: { bytes: 10, inodes: 5 }, lastUse: 5 },
    ];
    const used = { bytes: 90, inodes: 7 };
    assert.deepEqual(planEviction(used, { bytes: 0, inodes: 0 }, budget, candidates), []);
    assert.deepEqual(planEviction(used, { bytes: 30, inodes: 1 }, budget, candidates), ["old"]);
    assert.deepEqual(planEviction(used, { bytes: 5, inodes: 6 }, budget, candidates), ["old", "mid"]);
    assert.deepEqual(planEviction(used, { bytes: 95, inodes: 1 }, budget, candidates), ["old", "mid", "new"]);
    // Held by entries that are not candidates (pinned): no eviction can make room.
    assert.equal(planEviction(used, { bytes: 101, inodes: 0 }, budget, candidates), null);
    assert.equal(planEviction({ bytes: 95, inodes: 0 }, { bytes: 10, inodes: 0 }, budget, []), null);
  });

  it("reads back the marker it writes, and a marker of before costs were recorded", () => {
    assert.deepEqual(parseMarker(formatMarker("boot-1", { bytes: 12, inodes: 3 })), {
      boot: "boot-1",
      cost: { bytes: 12, inodes: 3 },
    });
    assert.deepEqual(parseMarker("boot-1"), { boot: "boot-1", cost: null });
    assert.deepEqual(parseMarker("boot-1\ngarbage"), { boot: "boot-1", cost: null });
    assert.deepEqual(parseMarker(""), { boot: "", cost: null });
  });

  it("formats byte counts for a tenant", () => {
    assert.equal(formatBytes(17), "17 bytes");
    assert.equal(formatBytes(512 * 1024), "512.0 KiB");
    assert.equal(formatBytes(3 * 1024 ** 3), "3.0 GiB");
  });
});
