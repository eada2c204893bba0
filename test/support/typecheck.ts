// Type-checks a throwaway TypeScript project with this checkout's tsc (strict, NodeNext), for
// the tests that compile what a user would write against generated or packed declarations.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const MODULES = path.resolve(import.meta.dirname, "..", "..", "node_modules");

/** Fails the test with tsc's report unless `files` of `dir` type-check. */
export async function assertTypeChecks(
  dir: string,
  files: string[],
  compilerOptions: Record<string, unknown> = {},
): Promise<void> {
  const options = {
    strict: true,
    noEmit: true,
    target: "ES2022",
    module: "NodeNext",
    moduleResolution: "NodeNext",
    ...compilerOptions,
  };
  await writeFile(path.join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions: options, files }));
  const tsc = await run(process.execPath, [path.join(MODULES, "typescript", "bin", "tsc"), "-p", dir], {
    cwd: dir,
  }).catch((error: { stdout?: string; message: string }) => assert.fail(error.stdout || error.message));
  assert.equal(tsc.stdout, "");
}
