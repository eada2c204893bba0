// The Python SDK (packages/python) as a user gets it: its generated files are fresh, mypy
// --strict passes, a wheel is built from a copy of the package with Debian's python3-build
// (offline, no PyPI) and installed into a fresh virtual environment (--system-site-packages
// for Debian's httpx), whose pytest then runs packages/python/tests against a real server
// with real sandboxes (behind a misbehaving proxy for the retry and tail tests), and whose
// python runs the README's Python walkthrough. Debian's python3 only (/usr/bin/python3): a
// pyenv shim on PATH sees none of the python3-* packages.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { pushDirectory, Warren } from "../packages/sdk/src/index.js";
import { type ApiServer, type FaultyProxy, startApiServer, startFaultyProxy } from "./support/sdk-server.js";

const PYTHON = "/usr/bin/python3";
const SOURCE = path.resolve("packages/python");

interface Ran {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command without blocking this process (the server under test runs in it). */
function run(cmd: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}) {
  return new Promise<Ran>((resolve) => {
    const child = spawn(cmd, args, {
      cwd: options.cwd ?? process.cwd(),
      env: options.env ?? { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/root" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const res: Ran = { status: null, stdout: "", stderr: "" };
    child.stdout.on("data", (chunk) => {
      res.stdout += chunk;
    });
    child.stderr.on("data", (chunk) => {
      res.stderr += chunk;
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 240_000);
    child.once("close", (status) => {
      clearTimeout(timer);
      res.status = status;
      resolve(res);
    });
  });
}

const shown = (res: Ran) =>
  `exit ${res.status}\nstdout: ${res.stdout.slice(-6000)}\nstderr: ${res.stderr.slice(-6000)}`;

/**
 * Tells the faulty proxy what to do next, over HTTP, for the Python tests; `hold` and `free`
 * make an Idempotency-Key's record look held by a request still in flight, then its holder gone.
 */
async function startControl(proxy: FaultyProxy, api: ApiServer): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? "/", "http://control");
    const action = url.pathname.slice(1);
    const key = url.searchParams.get("key") ?? "";
    if (action === "hold" || action === "free") {
      const holder = action === "hold" ? api.t.c.idempotency.instanceId : "gone";
      await api.t.c.db.query(
        action === "hold"
          ? `UPDATE idempotency_keys SET state = 'pending', status_code = NULL, response_body = NULL, holder = $2
              WHERE idempotency_key = $1`
          : "UPDATE idempotency_keys SET holder = $2 WHERE idempotency_key = $1",
        [key, holder],
      );
      res.writeHead(204).end();
      return;
    }
    if (action === "refuse")
      proxy.refuseNext(Number(url.searchParams.get("status")), Number(url.searchParams.get("retry_after")));
    else if (action === "drop") proxy.dropNextAfterRequest(url.searchParams.get("match") ?? "");
    else if (action === "drop-streams") proxy.dropStreams();
    else {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(204).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe("Python SDK [pglite, local runtime]", () => {
  let api: ApiServer;
  let proxy: FaultyProxy;
  let control: Awaited<ReturnType<typeof startControl>>;
  let tmp: string;
  let venvPython: string;
  let typeCheck: Promise<Ran>;

  before(async () => {
    // mypy (the slowest step) from the start, beside the server's and the wheel's; its cache
    // outside the checkout, kept between runs (mypy checks it against the sources).
    typeCheck = run(
      "mypy",
      [
        "--strict",
        "--cache-dir",
        path.join(os.tmpdir(), "warren-python-mypy-cache"),
        "warren",
        "examples/walkthrough.py",
        "tests",
      ],
      { cwd: SOURCE },
    );
    tmp = await mkdtemp(path.join(os.tmpdir(), "warren-python-"));
    api = await startApiServer("pglite", { runtime: "py" });
    proxy = await startFaultyProxy(api.url);
    control = await startControl(proxy, api);
  });
  after(async () => {
    await control?.close();
    await proxy?.close();
    await api?.close();
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  it("has its generated models and sync client up to date (tools/generate.py --check)", async () => {
    const res = await run(PYTHON, [path.join(SOURCE, "tools/generate.py"), "--check"]);
    assert.equal(res.status, 0, shown(res));
  });

  it("builds a wheel offline and installs it into a fresh virtual environment", async () => {
    // From a copy: the build's own directories (build/, *.egg-info) stay out of the checkout.
    const copy = path.join(tmp, "src");
    await cp(SOURCE, copy, {
      recursive: true,
      filter: (p) => !/(^|\/)(build|dist|__pycache__|[^/]*\.egg-info)$/.test(p),
    });
    const dist = path.join(tmp, "dist");
    const built = await run(PYTHON, ["-m", "build", "--wheel", "--no-isolation", "--outdir", dist, copy]);
    assert.equal(built.status, 0, shown(built));
    const wheels = (await readdir(dist)).filter((f) => f.endsWith(".whl"));
    assert.deepEqual(wheels, ["warren-0.1.0-py3-none-any.whl"]);
    const venv = path.join(tmp, "venv");
    const made = await run(PYTHON, ["-m", "venv", "--system-site-packages", venv]);
    assert.equal(made.status, 0, shown(made));
    venvPython = path.join(venv, "bin", "python");
    const installed = await run(venvPython, [
      "-m",
      "pip",
      "install",
      "--no-index",
      "--no-deps",
      "--disable-pip-version-check",
      path.join(dist, wheels[0] as string),
    ]);
    assert.equal(installed.status, 0, shown(installed));
    const where = await run(venvPython, ["-c", "import warren, httpx; print(warren.__file__)"], { cwd: tmp });
    assert.equal(where.status, 0, shown(where));
    assert.ok(where.stdout.startsWith(venv), where.stdout);
  });

  it("passes its pytest suite from the venv against the real server (sync and async clients)", async () => {
    assert.ok(venvPython, "the wheel was installed");
    const res = await run(
      venvPython,
      ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", path.join(SOURCE, "tests")],
      {
        cwd: tmp,
        timeoutMs: 300_000,
        env: {
          PATH: process.env.PATH ?? "",
          HOME: tmp,
          WARREN_API_URL: api.url,
          WARREN_API_KEY: api.t.orgA.keys.owner,
          WARREN_TEST_MEMBER_KEY: api.t.orgA.keys.member,
          WARREN_TEST_MEMBER_KEY_ID: api.t.orgA.keyIds.member,
          WARREN_TEST_OTHER_KEY: api.t.orgB.keys.owner,
          WARREN_TEST_PROXY_URL: proxy.url,
          WARREN_TEST_CONTROL_URL: control.url,
          WARREN_PYTHON_SOURCE: SOURCE,
          PYTHONDONTWRITEBYTECODE: "1",
          WARREN_EXPECT_PREFIX: path.join(tmp, "venv"),
        },
      },
    );
    assert.equal(res.status, 0, shown(res));
    assert.match(res.stdout, /passed/);
    assert.doesNotMatch(res.stdout, /skipped/);
  });

  it("runs the README's Python walkthrough to the end and leaves no sandbox running", async () => {
    assert.ok(venvPython, "the wheel was installed");
    const walkthrough = path.join(SOURCE, "examples/walkthrough.py");
    const readme = await readFile("README.md", "utf8");
    assert.ok(
      readme.includes(`\`\`\`python\n${await readFile(walkthrough, "utf8")}\`\`\``),
      "README.md shows the walkthrough as it is",
    );
    const res = await run(venvPython, [walkthrough], {
      env: { PATH: process.env.PATH ?? "", HOME: tmp, WARREN_API_URL: api.url, WARREN_API_KEY: api.t.orgA.keys.owner },
    });
    assert.equal(res.status, 0, shown(res));
    assert.match(res.stdout, /exit 0 Linux/);
    assert.match(res.stdout, /restored: hello/);
    assert.match(res.stdout, /version_digest/);
    assert.match(res.stdout, /event sandbox\.state_changed/);
    const warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url });
    for await (const s of warren.sandboxes.list()) {
      assert.ok(s.state === "terminating" || s.state === "terminated", `${s.id} is ${s.state}`);
    }
  });
  it("shares the volume push's hash cache with the TypeScript SDK (the same file, either way)", async () => {
    assert.ok(venvPython, "the wheel was installed");
    const dir = path.join(tmp, "shared-tree");
    await mkdir(path.join(dir, "sub"), { recursive: true });
    await writeFile(path.join(dir, "a.txt"), `alpha ${randomBytes(8).toString("hex")}\n`); // new blobs: none stored yet
    await writeFile(path.join(dir, "sub", "b.bin"), randomBytes(5000));
    // Out of the racy window (files changed in the last 2 s are not cached).
    const settled = Date.now() + 2200;
    while (Date.now() < settled) await new Promise((resolve) => setTimeout(resolve, 100));
    const cache = path.join(tmp, "shared-cache.json");
    const warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url });
    const volume = await warren.volumes.create({ name: "shared-cache", quota_bytes: 2n ** 30n });
    const script = [
      "import sys, warren",
      "r = warren.Warren().volumes.push(sys.argv[1], sys.argv[2], hash_cache=sys.argv[3])",
      "print(r.reused_files, r.uploaded_blobs, r.version['version_digest'])",
    ].join("\n");
    const env = {
      PATH: process.env.PATH ?? "",
      HOME: tmp,
      WARREN_API_URL: api.url,
      WARREN_API_KEY: api.t.orgA.keys.owner,
    };
    const first = await run(venvPython, ["-c", script, volume.id as string, dir, cache], { env });
    assert.equal(first.status, 0, shown(first));
    assert.match(first.stdout, /^0 2 blake3:/, "Python hashed and uploaded both files");
    const lines: string[] = [];
    const ts = await pushDirectory({
      apiUrl: api.url,
      apiKey: api.t.orgA.keys.owner,
      volumeId: volume.id as string,
      dir,
      hashCache: cache,
      onProgress: (line) => lines.push(line),
    });
    assert.equal(ts.uploadedBlobs, 0);
    assert.ok(lines.includes("2 files unchanged since the last push (hash cache)"), lines.join("\n"));
    await writeFile(path.join(dir, "a.txt"), `changed ${randomBytes(8).toString("hex")}\n`);
    const again = Date.now() + 2200;
    while (Date.now() < again) await new Promise((resolve) => setTimeout(resolve, 100));
    await pushDirectory({
      apiUrl: api.url,
      apiKey: api.t.orgA.keys.owner,
      volumeId: volume.id as string,
      dir,
      hashCache: cache,
    });
    const second = await run(venvPython, ["-c", script, volume.id as string, dir, cache], { env });
    assert.equal(second.status, 0, shown(second));
    assert.match(second.stdout, /^2 0 blake3:/, "Python reused what TypeScript hashed");
  });

  it("type-checks with mypy --strict (the package, its tests and the walkthrough)", async () => {
    const res = await typeCheck;
    assert.equal(res.status, 0, shown(res));
    assert.match(res.stdout, /Success: no issues found/);
  });
});
