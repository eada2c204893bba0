// What the repack's check of each live chunk (decompress, size, BLAKE3: checkChunk in
// replication/rebuild.ts) costs beside the raw operation it follows, the chunk's range read
// from a pack in the fs blob store. Rounds alternate the two; the chunks are 1 MiB (the
// snapshot chunker's largest), half random and half compressible.
// Run: node --import tsx bench/repack-check.ts
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { FsBlobStore } from "../src/drivers/blobs/fs.js";
import { compressChunk, digestOf } from "../src/modules/snapshots/replication/codec.js";
import { PackBuilder } from "../src/modules/snapshots/replication/pack.js";
import { checkChunk } from "../src/modules/snapshots/replication/rebuild.js";

const CHUNKS = 32;
const ROUNDS = 6;

async function main() {
  const dir = await mkdtemp(path.join(os.tmpdir(), "warren-bench-repack-"));
  try {
    const blobs = await FsBlobStore.open({ dir, signingKey: randomBytes(32), publicBaseUrl: "http://127.0.0.1:1" });
    const builder = new PackBuilder();
    const chunks: { digest: ReturnType<typeof digestOf>; size: number; offset: number; length: number }[] = [];
    for (let i = 0; i < CHUNKS; i++) {
      const plain = Buffer.concat([randomBytes(512 * 1024), Buffer.alloc(512 * 1024, i)]);
      const digest = digestOf(plain);
      const entry = builder.append(digest, plain.length, await compressChunk(plain));
      chunks.push({ digest, size: plain.length, offset: entry.offset, length: entry.length });
    }
    const pack = builder.seal("bench");
    await blobs.putIfAbsent(pack.key, pack.parts);
    const read = async (check: boolean) => {
      const started = performance.now();
      for (const chunk of chunks) {
        const data = await blobs.getRange(pack.key, chunk.offset, chunk.length);
        if (!data) throw new Error("missing");
        if (check) await checkChunk(chunk.digest, chunk.size, data);
      }
      return (performance.now() - started) / CHUNKS;
    };
    await read(true);
    const raw: number[] = [];
    const checked: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      raw.push(await read(false));
      checked.push(await read(true));
    }
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
    const result = {
      at: new Date().toISOString(),
      load: os.loadavg().map((value) => Number(value.toFixed(2))),
      chunkBytes: 1024 * 1024,
      rawReadMsPerChunk: Number(median(raw).toFixed(3)),
      readAndCheckMsPerChunk: Number(median(checked).toFixed(3)),
      rounds: ROUNDS,
    };
    console.log(JSON.stringify(result));
    await writeFile(
      path.join(import.meta.dirname, "results", "repack-check.json"),
      `${JSON.stringify(result, null, 2)}\n`,
    );
    await blobs.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
