import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { ImageError } from "./errors.js";
import { encodeTar } from "./tar.js";
import { unpackLayerInThread, unpackThreadId } from "./unpack-thread.js";

async function* pieces(bytes: Buffer, size = 5000): AsyncGenerator<Buffer> {
  for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
}

function layer(files: number, bytesEach: number, prefix = "f"): Buffer {
  return encodeTar(
    Array.from({ length: files }, (_, i) => ({
      name: `d${i % 7}/${prefix}${i}`,
      type: "file" as const,
      mode: 0o640,
      data: Buffer.alloc(bytesEach, i % 251),
    })),
  );
}

describe("unpackLayerInThread", () => {
  const work = mkdtempSync(path.join(os.tmpdir(), "warren-unpack-thread-test-"));
  let counter = 0;
  const freshDir = () => {
    const dir = path.join(work, `t${counter++}`, "rootfs");
    mkdirSync(dir, { recursive: true });
    return dir;
  };
  after(() => rmSync(work, { recursive: true, force: true }));

  it("unpacks in one long-lived thread that every unpack (also concurrent ones) reuses", async () => {
    const tars = [layer(40, 3000, "a"), layer(25, 70_000, "b"), layer(3, 1_000_000, "c")];
    const first = freshDir();
    const result = await unpackLayerInThread(pieces(gzipSync(tars[0] as Buffer)), first, {
      expectedDiffId: `sha256:${createHash("sha256")
        .update(tars[0] as Buffer)
        .digest("hex")}`,
    });
    assert.equal(result.entries, 40);
    assert.equal(readFileSync(path.join(first, "d3/a3")).length, 3000);
    const thread = unpackThreadId();
    assert.notEqual(thread, null);

    const dirs = tars.map(() => freshDir());
    const results = await Promise.all(
      tars.map((tar, i) => unpackLayerInThread(pieces(gzipSync(tar), 64 * 1024), dirs[i] as string)),
    );
    assert.deepEqual(
      results.map((r) => r.entries),
      [40, 25, 3],
    );
    for (const [i, tar] of tars.entries()) {
      assert.equal(results[i]?.diffId, `sha256:${createHash("sha256").update(tar).digest("hex")}`);
    }
    assert.deepEqual(readFileSync(path.join(dirs[2] as string, "d1/c1")), Buffer.alloc(1_000_000, 1));
    assert.equal(unpackThreadId(), thread, "a second thread was started");
  });

  it("answers the unpacker's errors with their codes, and the source's own error", async () => {
    const tar = layer(3, 10);
    await assert.rejects(
      unpackLayerInThread(pieces(gzipSync(tar)), freshDir(), { expectedDiffId: `sha256:${"0".repeat(64)}` }),
      (error: unknown) => error instanceof ImageError && error.code === "digest_mismatch",
    );
    const hostile = encodeTar([{ name: "../escape", type: "file", data: "x" }]);
    const target = freshDir();
    await assert.rejects(
      unpackLayerInThread(pieces(hostile), target),
      (error: unknown) => error instanceof ImageError && error.code === "unsafe_layer",
    );
    assert.equal(existsSync(path.join(target, "..", "escape")), false);
    const busy = freshDir();
    mkdirSync(path.join(busy, "x"));
    await assert.rejects(unpackLayerInThread(pieces(tar), busy), /not empty/);

    // A download that fails half way: the call rejects with its error, once the thread has
    // stopped (nothing more appears in the target afterwards).
    const big = gzipSync(layer(200, 20_000));
    async function* failing(): AsyncGenerator<Buffer> {
      yield big.subarray(0, big.length >> 1);
      throw new ImageError("digest_mismatch", "blob sha256:x has digest sha256:y");
    }
    const cut = freshDir();
    await assert.rejects(
      unpackLayerInThread(failing(), cut),
      (error: unknown) => error instanceof ImageError && /has digest/.test(error.message),
    );
    const count = () => readdirSync(cut, { recursive: true }).length;
    const seen = count();
    // The thread answers every later job in order: once this one is done, the cut one has stopped.
    await unpackLayerInThread(pieces(gzipSync(tar)), freshDir());
    assert.equal(count(), seen);
  });
});
