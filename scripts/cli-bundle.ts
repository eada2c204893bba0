// The `warren` command as packages/cli/bin/warren.mjs runs it: packages/cli/src bundled by
// esbuild into packages/cli/dist (npm packages stay external), so the CLI starts as plain
// JavaScript, without the TypeScript loader (issue 27: `warren --help` 1.4 s -> tens of ms).
// - dist/warren.mjs and its chunks: the command tree; `warren mcp`'s server is a chunk of its
//   own, loaded (with the MCP SDK) only by that command.
// - dist/admin-client.mjs: `warren admin`'s store access (src/cli/admin-client.ts), a bundle
//   of its own beside its worker threads' bundles (it may open the embedded store, whose
//   telemetry replica runs in a worker thread found beside the bundle that starts it).
// - dist/inputs.json: the sources it was built from, so bin/warren.mjs can tell a stale build.
// `make build` and `make cli` build it; test/support/cli.ts builds it when it is stale.
import { mkdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { build, type Metafile, type Plugin } from "esbuild";
import { buildWorkerBundles, NODE_BUNDLE, PROJECT_DIR } from "./server-bundle.js";

export const CLI_DIST = path.join(PROJECT_DIR, "packages", "cli", "dist");
export const CLI_INPUTS = path.join(CLI_DIST, "inputs.json");
const ADMIN_CLIENT = "admin-client.mjs";

const COMMON = { ...NODE_BUNDLE, write: false, metafile: true } as const;

/** src/cli/admin.ts's `import("./admin-client.js")`: the admin client's own bundle at run time. */
const adminClientApart: Plugin = {
  name: "admin-client-apart",
  setup(b) {
    b.onResolve({ filter: /\/admin-client\.js$/ }, () => ({ path: `./${ADMIN_CLIENT}`, external: true }));
  },
};

/** Writes each output to a temporary name first, then renames it: a concurrent run never reads half a file. */
async function writeOutputs(files: { path: string; contents: Uint8Array }[]): Promise<void> {
  await Promise.all(
    files.map(async (file) => {
      await mkdir(path.dirname(file.path), { recursive: true });
      const temporary = `${file.path}.${process.pid}.tmp`;
      await writeFile(temporary, file.contents);
      await rename(temporary, file.path);
    }),
  );
}

const sourcesOf = (metafile: Metafile) =>
  Object.keys(metafile.inputs).filter((input) => !input.includes("node_modules"));

export async function buildCliBundle(): Promise<void> {
  const [cli, admin] = await Promise.all([
    build({
      ...COMMON,
      // commander, ws and the MCP SDK are bundled in: Node's import of a CommonJS package
      // lexes it for its exports, which cost ~150 ms of a `warren --help` on the 2-core host.
      // The native hash stays a package of its own (its binary is found beside it).
      packages: undefined,
      external: ["@napi-rs/blake-hash", "bufferutil", "utf-8-validate"],
      // The bundled CommonJS packages require Node's modules: an ES module has no `require`.
      banner: {
        js: 'import { createRequire as __warrenRequire } from "node:module"; const require = __warrenRequire(import.meta.url);',
      },
      entryPoints: { warren: path.join(PROJECT_DIR, "packages", "cli", "src", "main.ts") },
      outdir: CLI_DIST,
      outExtension: { ".js": ".mjs" },
      splitting: true,
      // Chunks beside warren.mjs: mcp.ts finds docs/openapi.json at the depth of its source.
      chunkNames: "[name]-[hash]",
      plugins: [adminClientApart],
      absWorkingDir: PROJECT_DIR,
    }),
    build({
      ...COMMON,
      entryPoints: [path.join(PROJECT_DIR, "src", "cli", "admin-client.ts")],
      outfile: path.join(CLI_DIST, ADMIN_CLIENT),
      absWorkingDir: PROJECT_DIR,
    }),
    buildWorkerBundles(path.join(CLI_DIST, ADMIN_CLIENT)),
  ]);
  await writeOutputs([...cli.outputFiles, ...admin.outputFiles]);
  const inputs = [...new Set([...sourcesOf(cli.metafile), ...sourcesOf(admin.metafile)])].sort();
  await writeOutputs([{ path: CLI_INPUTS, contents: new TextEncoder().encode(`${JSON.stringify(inputs)}\n`) }]);
}

/** Whether dist/ is missing or older than a source it was built from (bin/warren.mjs asks the same). */
export async function cliBundleIsStale(): Promise<boolean> {
  let inputs: string[];
  let built: number;
  try {
    inputs = JSON.parse(await readFile(CLI_INPUTS, "utf8")) as string[];
    built = (await stat(CLI_INPUTS)).mtimeMs;
  } catch {
    return true;
  }
  const times = await Promise.all(
    // A source that is gone counts as unchanged (an installed CLI has none; a removed one
    // changed the file that imported it).
    inputs.map((input) =>
      stat(path.join(PROJECT_DIR, input)).then(
        (s) => s.mtimeMs,
        () => 0,
      ),
    ),
  );
  return times.some((time) => time > built);
}

if (process.argv[1] && path.resolve(process.argv[1]) === new URL(import.meta.url).pathname) {
  await buildCliBundle();
  process.stdout.write(`built ${path.relative(PROJECT_DIR, CLI_DIST)}/warren.mjs\n`);
}
