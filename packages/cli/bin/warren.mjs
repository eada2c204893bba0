#!/usr/bin/env node
// The `warren` command: runs the compiled CLI, dist/warren.mjs (scripts/cli-bundle.ts; `make
// build` or `make cli` builds it), as plain JavaScript. A checkout whose sources are newer
// than that build (being edited) runs its TypeScript sources through tsx instead, as the
// command did before it was compiled, rather than a stale build.
import { readFileSync, statSync } from "node:fs";

const dist = new URL("../dist/", import.meta.url);
const root = new URL("../../../", import.meta.url);

function builtAndFresh() {
  let inputs;
  let built;
  try {
    inputs = JSON.parse(readFileSync(new URL("inputs.json", dist), "utf8"));
    built = statSync(new URL("inputs.json", dist)).mtimeMs;
  } catch {
    return false;
  }
  for (const input of inputs) {
    let changed = 0;
    try {
      changed = statSync(new URL(input, root)).mtimeMs;
    } catch {
      // Gone: an installed CLI has no sources; a removed one changed the file that imported it.
    }
    if (changed > built) return false;
  }
  return true;
}

if (builtAndFresh()) {
  await import(new URL("warren.mjs", dist).href);
} else {
  if (process.stderr.isTTY)
    process.stderr.write("warren: packages/cli/dist is stale (make cli): running the sources\n");
  const { register } = await import("tsx/esm/api");
  register();
  await import("../src/main.ts");
}
