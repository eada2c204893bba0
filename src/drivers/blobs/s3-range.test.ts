// getRange against S3-compatible servers that do not do ranges as asked (s3rver, in the
// contract suite, does): one that ignores Range and answers the whole object (200), and one
// that answers a partial response longer than asked. Either way getRange returns exactly
// the bytes asked (cut at the object's end), and reads no more of the body than it needs.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { S3BlobStore } from "./s3.js";

describe("s3 getRange with servers that bend Range", () => {
  const small = randomBytes(100);
  const large = randomBytes(32 * 1024 * 1024);
  let mode: "ignore" | "overlong" | "chunked" = "ignore";
  /** Bytes the server managed to write of the last body before the client closed. */
  let written = 0;
  let server: http.Server;
  let store: S3BlobStore;

  before(async () => {
    server = http.createServer((req, res) => {
      const body = new URL(req.url ?? "/", "http://x").pathname.endsWith("/large") ? large : small;
      const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? "");
      written = 0;
      if (mode === "chunked") {
        // No length announced: the body is all there is to go by.
        res.writeHead(200, { "content-type": "application/octet-stream" });
      } else if (mode === "ignore" || !range) {
        res.writeHead(200, { "content-length": body.length, "content-type": "application/octet-stream" });
      } else {
        // A partial answer that runs on to the object's end.
        const start = Number(range[1]);
        res.writeHead(206, {
          "content-length": body.length - start,
          "content-range": `bytes ${start}-${body.length - 1}/${body.length}`,
          "content-type": "application/octet-stream",
        });
        const rest = body.subarray(start);
        res.end(rest);
        return;
      }
      // In 64 KiB pieces, so a client that stops reading stops the server early.
      let at = 0;
      const pump = () => {
        while (at < body.length) {
          const piece = body.subarray(at, at + 65_536);
          at += piece.length;
          written = at;
          if (!res.write(piece)) return void res.once("drain", pump);
        }
        res.end();
      };
      res.on("error", () => undefined);
      pump();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    store = await S3BlobStore.open({
      bucket: "b",
      endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      region: "us-east-1",
      accessKeyId: "test",
      secretAccessKey: "test",
      forcePathStyle: true,
      maxAttempts: 1,
    });
  });
  after(async () => {
    await store?.close();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
  });

  for (const kind of ["ignore", "overlong"] as const) {
    it(`${kind === "ignore" ? "a whole object answered (200)" : "a partial answer longer than asked (206)"}: exactly the range`, async () => {
      mode = kind;
      assert.ok((await store.getRange("obj/small", 0, 10))?.equals(small.subarray(0, 10)));
      assert.ok((await store.getRange("obj/small", 30, 20))?.equals(small.subarray(30, 50)));
      // Running past the end: cut at the end, never bytes from before the offset.
      assert.ok((await store.getRange("obj/small", 50, 100))?.equals(small.subarray(50)));
      assert.ok((await store.getRange("obj/small", 99, 5))?.equals(small.subarray(99)));
      assert.equal((await store.getRange("obj/small", 100, 5))?.length, 0);
    });
  }

  it("refuses a get over maxBytes without reading the object, also when its length is not announced", async () => {
    for (const kind of ["ignore", "chunked"] as const) {
      mode = kind;
      await assert.rejects(store.get("obj/large", { maxBytes: 1024 }), { name: "BlobError", code: "too_large" });
      // A window of absence: a client still reading would take the server past half of it.
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.ok(written < large.length / 2, `${kind}: the server wrote ${written} of ${large.length} bytes`);
      assert.ok((await store.get("obj/small", { maxBytes: 100 }))?.equals(small));
    }
  });

  it("stops reading a whole-object answer once it has the range", async () => {
    mode = "ignore";
    const got = await store.getRange("obj/large", 1024, 4096);
    assert.ok(got?.equals(large.subarray(1024, 5120)));
    // Socket buffers let the server run ahead somewhat, never through 32 MiB (a window of absence).
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.ok(written < large.length / 2, `the server wrote ${written} of ${large.length} bytes`);
  });
});
