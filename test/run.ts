// Runs the whole test suite: one throwaway PostgreSQL cluster shared by every test file
// (each file makes its own databases), stopped again however the run ends.
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import path from "node:path";
import { startPgCluster } from "./support/pg-cluster.js";

const files = process.argv.slice(2);
// A test that hangs fails by name after this long instead of holding the run until CI's limit
// (the longest test takes a few minutes on a loaded 2-core machine).
const TEST_TIMEOUT_MS = 900_000;

function testFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: "utf8" })
    .filter((file) => file.endsWith(".test.ts"))
    .map((file) => path.join(dir, file))
    .sort();
}
const cluster = await startPgCluster();
let exitCode = 1;
const stop = () => {
  try {
    cluster.stop();
  } catch (error) {
    process.stderr.write(`could not stop the test cluster: ${(error as Error).message}\n`);
  }
};
process.on("SIGINT", () => {
  stop();
  process.exit(130);
});
process.on("SIGTERM", () => {
  stop();
  process.exit(143);
});
try {
  // Node 20's --test does not expand ** patterns, so the runner lists the files itself.
  const patterns = files.length > 0 ? files : [...testFiles("test"), ...testFiles("src")];
  exitCode = await new Promise<number>((resolve) => {
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "--test",
        "--test-concurrency=2",
        `--test-timeout=${TEST_TIMEOUT_MS}`,
        "--test-reporter=spec",
        ...patterns,
      ],
      { stdio: "inherit", env: { ...process.env, WARREN_TEST_PG_URL: cluster.url } },
    );
    child.on("exit", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
} finally {
  stop();
}
process.exit(exitCode);
