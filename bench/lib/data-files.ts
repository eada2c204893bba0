// Data files the storage benchmarks write and measure: fresh random bytes (incompressible,
// never stored before), a 1 MB change at a random place, fsyncs, allocated size.
import { randomBytes, randomFillSync, randomInt } from "node:crypto";
import { open, stat } from "node:fs/promises";

/** Writes `bytes` of fresh random data (incompressible, never seen before) to `file`, fsynced. */
export async function writeRandom(file: string, bytes: number): Promise<void> {
  const handle = await open(file, "w");
  const buffer = Buffer.allocUnsafe(8 * 1024 * 1024);
  try {
    for (let done = 0; done < bytes; ) {
      const length = Math.min(buffer.length, bytes - done);
      randomFillSync(buffer, 0, length);
      await handle.write(buffer, 0, length);
      done += length;
    }
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Overwrites 1 MB at a random block-aligned place of `file` (fsynced); returns the offset. */
export async function changeOneMB(file: string): Promise<number> {
  const { size } = await stat(file);
  const offset = randomInt(Math.floor((size - 1e6) / 4096)) * 4096;
  const handle = await open(file, "r+");
  try {
    await handle.write(randomBytes(1e6), 0, 1e6, offset);
    await handle.sync();
  } finally {
    await handle.close();
  }
  return offset;
}

export async function fsyncFile(file: string, flags = "r"): Promise<void> {
  const handle = await open(file, flags);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export async function allocatedBytes(files: string[]): Promise<number> {
  let total = 0;
  for (const file of files) total += (await stat(file)).blocks * 512;
  return total;
}
