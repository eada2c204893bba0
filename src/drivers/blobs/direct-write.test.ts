// Direct writes of a temp file: every size around the sector and buffer boundaries comes back
// byte for byte at its exact length, with the mode asked; buffers are reused.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { DIRECT_WRITE_BYTES, DirectWriter } from "./direct-write.js";

describe("direct writes", () => {
  let dir = "";
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-direct-write-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("writes every size exactly, in pieces of any size, and the file has the mode asked", async () => {
    const sizes = [0, 1, 4095, 4096, 4097, DIRECT_WRITE_BYTES - 1, DIRECT_WRITE_BYTES, DIRECT_WRITE_BYTES + 1];
    sizes.push(2 * DIRECT_WRITE_BYTES + 12345);
    for (const [i, size] of sizes.entries()) {
      const data = randomBytes(size);
      const file = path.join(dir, `f${i}`);
      const writer = await DirectWriter.open(file, 0o600);
      assert.ok(writer, "the host's file system takes O_DIRECT");
      try {
        // Pieces of odd sizes, as a request body arrives.
        for (let at = 0; at < size; ) {
          const piece = Math.min(size - at, 1 + ((at * 7919) % 70_000));
          await writer.write(data.subarray(at, at + piece));
          at += piece;
        }
        assert.equal(await writer.finish(), size);
      } finally {
        await writer.close();
      }
      const back = await readFile(file);
      assert.equal(back.length, size, `size ${size}`);
      assert.ok(back.equals(data), `content of size ${size}`);
      assert.equal((await stat(file)).mode & 0o777, 0o600);
    }
  });

  it("refuses to create a file that exists (O_EXCL)", async () => {
    const file = path.join(dir, "taken");
    const first = await DirectWriter.open(file, 0o600);
    assert.ok(first);
    await first.finish();
    await first.close();
    await assert.rejects(DirectWriter.open(file, 0o600), /EEXIST/);
  });
});
