// Manifests read back from storage are checked before a rebuild trusts them.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decodeManifest, encodeManifest, ManifestError, validateManifest } from "./manifest.js";

const digest = `blake3:${"0f".repeat(32)}`;
const good = {
  version: 1,
  size: 4 << 20,
  chunks: [
    { offset: 0, size: 65536, digest },
    { offset: 1 << 20, size: 1 << 20, digest },
  ],
};

describe("manifest validation", () => {
  it("round-trips a valid manifest", () => {
    assert.deepEqual(decodeManifest(encodeManifest(good as never)), good);
  });

  const hostile: [string, unknown][] = [
    ["not an object", [1, 2]],
    ["another version", { ...good, version: 2 }],
    ["a negative size", { ...good, size: -1 }],
    ["a fractional size", { ...good, size: 1.5 }],
    ["an unsafe size", { ...good, size: 2 ** 60 }],
    ["an extra field", { ...good, extra: true }],
    ["chunks out of order", { ...good, chunks: [good.chunks[1], good.chunks[0]] }],
    [
      "overlapping chunks",
      {
        ...good,
        chunks: [
          { offset: 0, size: 65536, digest },
          { offset: 4096, size: 4096, digest },
        ],
      },
    ],
    ["a chunk past the end", { ...good, chunks: [{ offset: (4 << 20) - 4096, size: 8192, digest }] }],
    ["an empty chunk", { ...good, chunks: [{ offset: 0, size: 0, digest }] }],
    ["a chunk over the maximum", { ...good, size: 8 << 20, chunks: [{ offset: 0, size: (1 << 20) + 4096, digest }] }],
    ["a bad digest", { ...good, chunks: [{ offset: 0, size: 4096, digest: "sha256:00" }] }],
    ["an uppercase digest", { ...good, chunks: [{ offset: 0, size: 4096, digest: digest.toUpperCase() }] }],
    ["a string offset", { ...good, chunks: [{ offset: "0", size: 4096, digest }] }],
    ["a chunk with an extra field", { ...good, chunks: [{ offset: 0, size: 4096, digest, path: "/etc" }] }],
  ];
  for (const [name, value] of hostile)
    it(`refuses ${name}`, () => {
      assert.throws(() => validateManifest(value), ManifestError);
    });

  it("refuses bytes that are not JSON", () => {
    assert.throws(() => decodeManifest(Buffer.from("{nope")), ManifestError);
  });
});
