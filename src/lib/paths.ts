// Where Warren's own files are (migrations, the exec agent's C source, the spawner's script),
// found from this module whether it runs from src/ (through tsx, in tests) or bundled into
// build/ (what `make run` starts): the nearest directory above that holds migrations/.
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

function findProjectRoot(start: string): string {
  for (let dir = start; ; dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, "migrations")) && existsSync(path.join(dir, "package.json"))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`no Warren project (migrations/, package.json) above ${start}`);
  }
}

export const PROJECT_ROOT = findProjectRoot(path.dirname(fileURLToPath(import.meta.url)));

/** A file of the project, by its path from the project root. */
export function projectFile(...parts: string[]): string {
  return path.join(PROJECT_ROOT, ...parts);
}
