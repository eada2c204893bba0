// A benchmark's recorded results: the machine it ran on and when, written to
// bench/results/<file> and printed.
import { writeFile } from "node:fs/promises";
import os from "node:os";
import { fileURLToPath } from "node:url";

const RESULTS_DIR = fileURLToPath(new URL("../results/", import.meta.url));

/** Stamps `results` with the machine (cores, Node, load now) and the time, then writes and prints it. */
export async function recordResults(file: string, results: Record<string, unknown>): Promise<void> {
  results.machine = {
    cpus: os.cpus().length,
    node: process.version,
    load: os.loadavg().map((l) => Math.round(l * 100) / 100),
  };
  results.at = new Date().toISOString();
  const text = `${JSON.stringify(results, null, 2)}\n`;
  await writeFile(`${RESULTS_DIR}${file}`, text);
  process.stdout.write(text);
}
