// The Python SDK's per-call overhead over raw httpx (bench/README.md "Python SDK"): starts a
// real server (the in-process app of the tests, PGlite, no runtime: WhoAmI needs none) and
// runs bench/sdk-python.py against it with Debian's python3, the SDK from packages/python.
//
//   node --import tsx bench/sdk-python.ts [--calls 2000] [--output bench/results/sdk-python.json]
import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startApiServer } from "../test/support/sdk-server.js";
import { benchArgs } from "./lib/args.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const OUTPUT = args.get("output") ?? path.join(ROOT, "bench/results/sdk-python.json");
process.env.WARREN_LOG_LEVEL ??= "warn";

const api = await startApiServer("pglite");
try {
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn("/usr/bin/python3", [path.join(ROOT, "bench/sdk-python.py")], {
      env: {
        PATH: process.env.PATH ?? "",
        PYTHONPATH: path.join(ROOT, "packages/python"),
        WARREN_API_URL: api.url,
        WARREN_API_KEY: api.t.orgA.keys.owner,
        BENCH_CALLS: args.get("calls") ?? "2000",
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let text = "";
    child.stdout.on("data", (chunk) => {
      text += chunk;
    });
    child.once("close", (code) => (code === 0 ? resolve(text) : reject(new Error(`sdk-python.py exited ${code}`))));
  });
  await writeFile(OUTPUT, out);
  process.stdout.write(out);
} finally {
  await api.close();
}
