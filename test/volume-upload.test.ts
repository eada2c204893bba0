// The push helper's uploads against a real HTTP server: a chunk is streamed as exactly its
// byte range, a file that shrank since it was hashed fails the upload instead of sending
// short, and the uploads during the hashing send only what the server says is missing and
// surface the first failure.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, truncate, writeFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type Chunk, EarlyUploads, PushError, putChunk } from "../packages/sdk/src/volume-upload.js";

describe("volume push uploads", () => {
  let server: http.Server;
  let base = "";
  let dir = "";
  const received = new Map<string, Buffer>();
  let refuse = "";

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-vol-upload-"));
    server = http.createServer(async (request, response) => {
      const parts: Buffer[] = [];
      try {
        for await (const part of request) parts.push(part as Buffer);
      } catch {
        return;
      }
      const name = request.url ?? "";
      if (name === refuse) {
        response.writeHead(400).end("refused");
        return;
      }
      received.set(name, Buffer.concat(parts));
      response.writeHead(201).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });

  it("streams exactly the chunk's byte range, and refuses a file that shrank since it was hashed", async () => {
    const file = path.join(dir, "data.bin");
    const bytes = randomBytes(3 * 1_048_576 + 17);
    await writeFile(file, bytes);
    const chunk: Chunk = { digest: "blake3:x", size: 1_048_576 + 5, file, offset: 1_048_576 + 3 };
    await putChunk(`${base}/range`, chunk, undefined);
    assert.ok(received.get("/range")?.equals(bytes.subarray(chunk.offset, chunk.offset + chunk.size)));
    await truncate(file, chunk.offset + 10);
    await assert.rejects(putChunk(`${base}/short`, chunk, undefined), PushError);
    assert.equal(received.has("/short"), false);
  });

  it("uploads during the hashing only what the server lacks, and throws the first failure", async () => {
    const file = path.join(dir, "blobs.bin");
    await writeFile(file, randomBytes(4096));
    const chunkAt = (i: number): Chunk => ({ digest: `blake3:${i}`, size: 1024, file, offset: i * 1024 });
    const asked: string[][] = [];
    const uploaded: string[] = [];
    const uploads = (present: Set<string>) =>
      new EarlyUploads({
        concurrency: 2,
        ask: async (blobs) => {
          asked.push(blobs.map((blob) => blob.digest));
          return {
            status: 200,
            json: {
              uploads: blobs.map((blob) => ({
                digest: blob.digest,
                present: present.has(blob.digest),
                upload_url: `${base}/blob/${blob.digest.slice(7)}`,
              })),
            },
          };
        },
        put: (url, chunk) => putChunk(url, chunk, undefined),
        uploaded: (chunk) => uploaded.push(chunk.digest),
      });
    const early = uploads(new Set(["blake3:1"]));
    early.add([chunkAt(0), chunkAt(1)]);
    early.add([chunkAt(0), chunkAt(2)]);
    await early.finish();
    assert.deepEqual(asked.flat().sort(), ["blake3:0", "blake3:1", "blake3:2"], "each blob asked for once");
    assert.deepEqual(uploaded.sort(), ["blake3:0", "blake3:2"]);
    assert.ok(received.get("/blob/2")?.length === 1024);

    refuse = "/blob/3";
    const failing = uploads(new Set());
    failing.add([chunkAt(3)]);
    await assert.rejects(failing.finish(), /upload refused: 400 refused/);
    assert.throws(() => failing.add([chunkAt(0)]), /upload refused/);
  });
});
