// The server as `make run` starts it: src/main.ts bundled by esbuild into one ES module
// (npm packages stay external), run by plain `node`. Without the TypeScript loader in the
// way the server is ready ~0.8 s sooner (1.5 s instead of 2.3 s on the 2-core host). Used
// by the Makefile (`node --import tsx scripts/build-server.ts`), the benchmarks and the
// crash test, so all three run the same artefact.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

export const PROJECT_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
/** Must stay inside the project: the server finds migrations/ and its other files from it. */
export const SERVER_BUNDLE = path.join(PROJECT_DIR, "build", "warren.mjs");

/** How every bundle of this project is built (the CLI's too: scripts/cli-bundle.ts). */
export const NODE_BUNDLE = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  packages: "external",
  sourcemap: "linked",
  logLevel: "warning",
} as const;

export async function buildServerBundle(outfile = SERVER_BUNDLE): Promise<string> {
  await Promise.all([
    build({ ...NODE_BUNDLE, entryPoints: [path.join(PROJECT_DIR, "src", "main.ts")], outfile }),
    buildWorkerBundles(outfile),
  ]);
  return outfile;
}

/**
 * The worker threads' modules beside a bundle `outfile` of code that starts them (the server,
 * or the CLI's admin client), under the names their starters look for: a worker thread is
 * `<bundle>.<kind>-worker.mjs` next to the bundle its starter was bundled into.
 */
export async function buildWorkerBundles(outfile: string): Promise<void> {
  const worker = (parts: string[], file: string) =>
    build({ ...NODE_BUNDLE, entryPoints: [path.join(PROJECT_DIR, ...parts)], outfile: file });
  await Promise.all([
    // The replication worker thread (src/modules/snapshots/replication/threaded.ts, workerBundle()).
    worker(["src", "modules", "snapshots", "replication", "worker.ts"], workerBundle(outfile)),
    // The telemetry replica's thread on the embedded store (src/modules/telemetry/replica.ts).
    worker(["src", "modules", "telemetry", "replica-worker.ts"], telemetryWorkerBundle(outfile)),
    // The volume manifest parser's thread (src/modules/volumes/manifest-parser.ts).
    worker(["src", "modules", "volumes", "manifest-worker.ts"], manifestWorkerBundle(outfile)),
    // The image layer unpack thread (src/drivers/runtime/image/unpack-thread.ts).
    worker(["src", "drivers", "runtime", "image", "unpack-worker.ts"], unpackWorkerBundle(outfile)),
  ]);
}

/** The replication worker's bundle beside the server bundle `outfile`. */
export function workerBundle(outfile: string): string {
  return outfile.replace(/\.mjs$/, ".replication-worker.mjs");
}

/** The telemetry replica's bundle beside the server bundle `outfile`. */
export function telemetryWorkerBundle(outfile: string): string {
  return outfile.replace(/\.mjs$/, ".telemetry-worker.mjs");
}

/** The volume manifest parser's bundle beside the server bundle `outfile`. */
export function manifestWorkerBundle(outfile: string): string {
  return outfile.replace(/\.mjs$/, ".manifest-worker.mjs");
}

/** The image layer unpack thread's bundle beside the server bundle `outfile`. */
export function unpackWorkerBundle(outfile: string): string {
  return outfile.replace(/\.mjs$/, ".unpack-worker.mjs");
}

/** Every file buildServerBundle(outfile) writes. */
export function bundleFiles(outfile: string): string[] {
  return [
    outfile,
    workerBundle(outfile),
    telemetryWorkerBundle(outfile),
    manifestWorkerBundle(outfile),
    unpackWorkerBundle(outfile),
  ].flatMap((file) => [file, `${file}.map`]);
}
