// Starts s3rver on 127.0.0.1, a free port, in a fresh temp dir (s3rver-child.mjs says why
// in a child process); stop() ends it and removes the dir, and so does this process's exit.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

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
