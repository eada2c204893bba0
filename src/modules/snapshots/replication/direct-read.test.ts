// Direct (O_DIRECT) reads of an image: windows placed where the kernel accepts them (found by
// probing), the same bytes as a buffered read, and buffered reads wherever direct ones cannot
// serve (a window the probe could not place, a range that is not whole sectors).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ImageFile, WindowPool } from "./replicate.js";

const MiB = 1024 * 1024;
/** Where the window's data starts (after the room for the chunk carried over). */
const AT = MiB;

describe("direct image reads", () => {
  let dir = "";
  let image = "";
  let data: Buffer;

  before(async () => {
    // The host's file system (ext4 here); direct I/O needs one that supports it.
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-direct-"));
    image = path.join(dir, "image");
    data = randomBytes(12 * MiB);
    await writeFile(image, data);
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("places a window for direct reads and reads the same bytes as a buffered read", async () => {
    const file = await ImageFile.open(image);
    try {
      assert.equal(typeof file.directFd, "number", "the file system accepts O_DIRECT");
      const pool = new WindowPool();
      const window = pool.acquire(file.directFd);
      assert.equal(window.aligned, true);
      for (const [offset, length] of [
        [0, 8 * MiB],
        [4096, 4096],
        [11 * MiB, MiB],
      ] as const) {
        assert.equal(await file.read(window, AT, length, offset), length);
        assert.ok(window.buffer.subarray(AT, AT + length).equals(data.subarray(offset, offset + length)));
      }
      // A range that is not whole sectors is read buffered, correctly.
      assert.equal(await file.read(window, AT + 3, 1000, 5), 1000);
      assert.ok(window.buffer.subarray(AT + 3, AT + 1003).equals(data.subarray(5, 1005)));
      window.release();
      // The window comes back placed, without a second probe.
      assert.equal(pool.acquire(file.directFd).aligned, true);
      assert.equal(pool.made, 1);
    } finally {
      await file.close();
    }
  });

  it("reads buffered when the probe cannot place a window (a file shorter than a sector)", async () => {
    const small = path.join(dir, "small");
    await writeFile(small, "short");
    const file = await ImageFile.open(small);
    try {
      const window = new WindowPool().acquire(file.directFd);
      assert.equal(window.aligned, false);
      assert.equal(await file.read(window, AT, 5, 0), 5);
      assert.equal(window.buffer.subarray(AT, AT + 5).toString(), "short");
      assert.equal((await readFile(small)).toString(), "short");
    } finally {
      await file.close();
    }
  });

  it("a window the probe could not place for one file is placed for the next (the worker's pool is shared by every job)", async () => {
    const small = path.join(dir, "small-first");
    await writeFile(small, "short");
    const pool = new WindowPool();
    const first = await ImageFile.open(small);
    try {
      const window = pool.acquire(first.directFd);
      assert.equal(window.aligned, false);
      window.release();
    } finally {
      await first.close();
    }
    const file = await ImageFile.open(image);
    try {
      const window = pool.acquire(file.directFd);
      assert.equal(pool.made, 1, "the same memory");
      assert.equal(window.aligned, true, "placed for a file that allows direct reads");
      assert.equal(await file.read(window, AT, MiB, MiB), MiB);
      assert.ok(window.buffer.subarray(AT, AT + MiB).equals(data.subarray(MiB, 2 * MiB)));
    } finally {
      await file.close();
    }
  });
});
