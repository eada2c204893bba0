import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { describe, it } from "node:test";
import type pg from "pg";
import { BackendMessageTooLarge, guardBackendMessages } from "./pg-message-guard.js";

/** A backend message: type byte, length (itself included), body. */
const message = (type: string, body: Buffer) => {
  const header = Buffer.alloc(5);
  header.write(type, 0);
  header.writeUInt32BE(body.length + 4, 1);
  return Buffer.concat([header, body]);
};

function guarded(maxBytes: number) {
  const stream = new PassThrough();
  let destroyedWith: unknown = null;
  stream.on("error", (error) => {
    destroyedWith = error;
  });
  guardBackendMessages({ connection: { stream } } as unknown as pg.Client, maxBytes);
  return { stream, destroyed: () => destroyedWith };
}

describe("guardBackendMessages", () => {
  it("follows message boundaries across any chunking, and ends the connection at the first message over the bound", async () => {
    const small = Buffer.concat(Array.from({ length: 50 }, (_, i) => message("D", Buffer.alloc((i * 37) % 1000, 1))));
    const big = message("E", Buffer.alloc(2000, 2)).subarray(0, 700); // only its start arrives
    const bytes = Buffer.concat([small, big]);
    for (const chunkSize of [1, 2, 3, 5, 7, 64, 1000, bytes.length]) {
      const { stream, destroyed } = guarded(1500);
      for (let i = 0; i < small.length; i += chunkSize)
        stream.write(bytes.subarray(i, Math.min(i + chunkSize, small.length)));
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(destroyed(), null, `chunks of ${chunkSize}: a small message was taken for a large one`);
      for (let i = small.length; i < bytes.length; i += chunkSize)
        stream.write(bytes.subarray(i, Math.min(i + chunkSize, bytes.length)));
      await new Promise((resolve) => setImmediate(resolve));
      assert.ok(destroyed() instanceof BackendMessageTooLarge, `chunks of ${chunkSize}`);
      assert.equal((destroyed() as BackendMessageTooLarge).bytes, 2000);
    }
  });
});
