// Starts s3rver on 127.0.0.1, a free port, in a fresh temp dir (s3rver-child.mjs says why
// in a child process); stop() ends it and removes the dir, and so does this process's exit.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe } from "node:test";
import { fileURLToPath } from "node:url";
import { S3BlobStore } from "../../src/drivers/blobs/s3.js";
import { startTestApp, type TestApp, type TestAppOptions } from "../harness.js";

export interface S3rverHandle {
  endpoint: string;
  bucket: string;
  /** s3rver's fixed account. */
  accessKeyId: string;
  secretAccessKey: string;
  stop(): Promise<void>;
}

const CHILD = path.join(path.dirname(fileURLToPath(import.meta.url)), "s3rver-child.mjs");

export async function startS3rver(bucket = "warren-test"): Promise<S3rverHandle> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "warren-s3rver-"));
  const child: ChildProcess = spawn(process.execPath, ["--openssl-legacy-provider", CHILD, dir, bucket], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    process.removeListener("exit", killOnExit);
    if (child.exitCode === null && child.signalCode === null) {
      child.stdin?.end();
      child.kill("SIGTERM");
      await exited;
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const port = await new Promise<number>((resolve, reject) => {
      if (!child.stdout) throw new Error("s3rver child has no stdout");
      const lines = createInterface({ input: child.stdout });
      lines.once("line", (line) => resolve((JSON.parse(line) as { port: number }).port));
      child.once("exit", (code) => reject(new Error(`s3rver exited (${code}) before listening`)));
    });
    return {
      endpoint: `http://127.0.0.1:${port}`,
      bucket,
      accessKeyId: "S3RVER",
      secretAccessKey: "S3RVER",
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The S3 blob store driver on a running s3rver, keys under `prefix`. */
export function openS3BlobStore(server: S3rverHandle, prefix = "warren"): Promise<S3BlobStore> {
  return S3BlobStore.open({
    bucket: server.bucket,
    endpoint: server.endpoint,
    region: "us-east-1",
    accessKeyId: server.accessKeyId,
    secretAccessKey: server.secretAccessKey,
    forcePathStyle: true,
    prefix,
  });
}

/**
 * Runs a suite on a PGlite app whose blob store is S3 (an s3rver started for it), as
 * forEachStore runs one per store: `onS3BlobStore("volumes", (t) => { ... }, options)`.
 */
export function onS3BlobStore(name: string, suite: (t: () => TestApp) => void, options: TestAppOptions = {}): void {
  describe(`${name} [pglite, s3 blob store]`, () => {
    let s3: S3rverHandle | null = null;
    let t: TestApp | null = null;
    before(async () => {
      s3 = await startS3rver();
      const blobs = await openS3BlobStore(s3);
      t = await startTestApp("pglite", { ...options, overrides: { ...options.overrides, blobs } });
    });
    after(async () => {
      await t?.close();
      await s3?.stop();
    });
    suite(() => t as TestApp);
  });
}
