// @warren/sdk as a user installs it: `npm pack` builds it (JavaScript, .d.ts and source maps in
// dist/), the tarball is installed offline into a fresh project (its dependencies linked from
// this checkout's node_modules, no registry), plain `node` (no tsx) runs a script of it
// against a real server, a TypeScript consumer type-checks against its .d.ts, and esbuild
// bundles it for the browser with no Node built-in and no Node-only dependency in the bundle.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { build } from "esbuild";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";
import { assertTypeChecks } from "./support/typecheck.js";

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, "..");
const MODULES = path.join(ROOT, "node_modules");
const NODE_BUILTINS = new Set((await import("node:module")).builtinModules);

describe("the @warren/sdk package", () => {
  let tmp: string;
  let project: string;
  let tarball: string;
  let api: ApiServer;

  before(async () => {
    tmp = await mkdtemp(path.join(os.tmpdir(), "warren-sdk-package-"));
    // npm pack runs the package's prepack (its build); the tarball lands in tmp.
    const packed = await run("npm", ["pack", "--json", "--pack-destination", tmp], {
      cwd: path.join(ROOT, "packages", "sdk"),
      env: { ...process.env, npm_config_update_notifier: "false" },
      maxBuffer: 16 * 1_048_576,
    });
    const [info] = JSON.parse(packed.stdout) as [{ filename: string; files: { path: string }[] }];
    tarball = path.join(tmp, info.filename);
    const files = info.files.map((f) => f.path);
    for (const file of ["dist/index.js", "dist/index.d.ts", "dist/index.js.map", "dist/browser.js", "package.json"]) {
      assert.ok(files.includes(file), `the tarball has ${file}`);
    }
    assert.ok(!files.some((f) => f.startsWith("dist/") && f.endsWith(".test.js")));

    project = path.join(tmp, "project");
    await mkdir(project);
    // The SDK's dependencies come from this checkout (file: links), so the install needs no
    // registry; the native hash's platform package is whichever one this machine installed.
    const platformHashes = (await readdir(path.join(MODULES, "@napi-rs"))).filter((d) => d.startsWith("blake-hash-"));
    const dependencies: Record<string, string> = {
      "@warren/sdk": `file:${tarball}`,
      ws: `file:${path.join(MODULES, "ws")}`,
      "@napi-rs/blake-hash": `file:${path.join(MODULES, "@napi-rs", "blake-hash")}`,
    };
    for (const name of platformHashes)
      dependencies[`@napi-rs/${name}`] = `file:${path.join(MODULES, "@napi-rs", name)}`;
    await writeFile(
      path.join(project, "package.json"),
      JSON.stringify({ name: "sdk-user", private: true, type: "module", dependencies }),
    );
    // In a network namespace of its own: the install cannot reach a registry.
    await run("unshare", ["--net", "npm", "install", "--offline", "--no-audit", "--no-fund"], {
      cwd: project,
      env: { ...process.env, npm_config_update_notifier: "false" },
    });
    api = await startApiServer("pglite");
  });

  after(async () => {
    await api?.close();
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  it("runs under plain node against a real server", async () => {
    const script = path.join(project, "walkthrough.mjs");
    await writeFile(
      script,
      `import { Warren, NotFoundError, int64 } from "@warren/sdk";
const warren = new Warren({ apiKey: process.env.KEY, baseUrl: process.env.URL });
const me = await warren.whoami();
const project = await warren.projects.create({ name: "Packaged", slug: "packaged" });
const run = await warren.runs.start({ project_id: project.id, label: "from the tarball" });
const done = await warren.runs.complete(run.id, "succeeded");
let missing = "";
try {
  await warren.projects.get("prj_missing");
} catch (error) {
  missing = error instanceof NotFoundError ? error.code : String(error);
}
console.log(JSON.stringify({ org: me.organization.id, status: done.status, missing, count: String(int64(project.run_count)) }));
`,
    );
    const out = await run(process.execPath, [script], {
      cwd: project,
      // Nothing of this process's loaders: NODE_OPTIONS would carry tsx.
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", KEY: api.t.orgA.keys.owner, URL: api.url },
    });
    const result = JSON.parse(out.stdout.trim()) as Record<string, string>;
    assert.deepEqual(result, { org: api.t.orgA.id, status: "succeeded", missing: "not_found", count: "0" });
  });

  it("type-checks a TypeScript consumer against its declarations", async () => {
    await writeFile(
      path.join(project, "consumer.ts"),
      `import { Warren, type SandboxRecord, type Schema, WarrenApiError } from "@warren/sdk";
export async function states(warren: Warren): Promise<SandboxRecord["state"][]> {
  const out: Schema<"SandboxState">[] = [];
  for await (const sandbox of warren.sandboxes.list()) if (sandbox.record) out.push(sandbox.record.state);
  return out;
}
export const isApiError = (e: unknown): e is WarrenApiError => e instanceof WarrenApiError;
// @ts-expect-error a state the API does not have
export const wrong: Schema<"SandboxState"> = "paused";
`,
    );
    await assertTypeChecks(project, ["consumer.ts"], { typeRoots: [path.join(MODULES, "@types")], types: ["node"] });
  });

  it("bundles for the browser with no Node built-in and no Node-only dependency", async () => {
    await writeFile(
      path.join(project, "app.js"),
      `import { Warren, ExecStream } from "@warren/sdk";
const warren = new Warren({ apiKey: "wrn_key", baseUrl: "https://warren.example" });
export const groups = [warren.sandboxes, warren.runs, warren.views, typeof ExecStream];
`,
    );
    const result = await build({
      absWorkingDir: project,
      entryPoints: ["app.js"],
      bundle: true,
      platform: "browser",
      format: "esm",
      write: false,
      metafile: true,
      logLevel: "silent",
    });
    const inputs = Object.keys(result.metafile.inputs);
    assert.ok(
      inputs.some((input) => input.endsWith("@warren/sdk/dist/browser.js")),
      `the browser entry was taken: ${inputs.join(", ")}`,
    );
    for (const input of inputs) {
      assert.ok(!/node_modules\/(ws|@napi-rs)\//.test(input), `${input} is Node-only`);
      assert.ok(!input.endsWith("volume-push.js") && !input.endsWith("socket-node.js"), `${input} is Node-only`);
    }
    for (const output of Object.values(result.metafile.outputs)) {
      for (const imported of output.imports) {
        const name = imported.path.replace(/^node:/, "");
        assert.ok(
          !imported.path.startsWith("node:") && !NODE_BUILTINS.has(name),
          `the bundle imports ${imported.path}`,
        );
      }
    }
    const text = result.outputFiles[0]?.text ?? "";
    assert.doesNotMatch(text, /\brequire\(|from "node:|process\.env\.|\bBuffer\.(from|concat|alloc)/);
  });
});
