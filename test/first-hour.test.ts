// A newcomer's first hour (issue 24, C): `make` installs exactly the lock, a second Warren on
// the same host says which ports are taken and leaves the other checkout's `warren` alone, and
// a WARREN_BOOTSTRAP_API_KEY that an existing data dir ignores is said so at warn; with no
// internet, `make offline-image` gives a first sandbox an image.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { LocalRuntimeDriver } from "../src/drivers/runtime/local/driver.js";
import { sweepRoot } from "../src/drivers/runtime/local/sweep.js";
import { TEST_RESOURCES, testId, testSubnetPool } from "../src/drivers/runtime/local/test-support.js";
import { freePort } from "./support/ports.js";
import { eventually, ServerProcess } from "./support/server-process.js";

const exec = promisify(execFile);

interface LockEntry {
  version?: string;
  optionalDependencies?: Record<string, string>;
}

describe("npm ci on a fresh clone", () => {
  it("the lock records every optional dependency of every locked package (npm ci refuses a lock without them)", async () => {
    const lock = JSON.parse(await readFile("package-lock.json", "utf8")) as { packages: Record<string, LockEntry> };
    const missing: string[] = [];
    for (const [where, entry] of Object.entries(lock.packages)) {
      for (const name of Object.keys(entry.optionalDependencies ?? {})) {
        // npm resolves a dependency in the package's own node_modules, then in each parent's.
        const parts = where.split("/node_modules/");
        let found = false;
        for (let depth = parts.length; depth >= 0 && !found; depth--) {
          const base = parts.slice(0, depth).join("/node_modules/");
          found = `${base ? `${base}/` : ""}node_modules/${name}` in lock.packages;
        }
        if (!found) missing.push(`${name} (of ${where || "the root"})`);
      }
    }
    assert.deepEqual(missing, []);
  });

  it("make installs with npm ci only (an npm install would rewrite the lock)", async () => {
    const makefile = await readFile("Makefile", "utf8");
    const recipes = makefile.split("\n").filter((line) => line.startsWith("\t"));
    assert.ok(
      recipes.some((line) => /\bnpm ci\b/.test(line)),
      "a recipe runs npm ci",
    );
    assert.deepEqual(
      recipes.filter((line) => /\bnpm (install|i)\b/.test(line)),
      [],
    );
  });
});

describe("make cli beside another checkout", () => {
  let binDir = "";
  before(async () => {
    binDir = await mkdtemp(path.join(os.tmpdir(), "warren-bin-"));
  });
  after(async () => {
    await rm(binDir, { recursive: true, force: true });
  });

  // -o: the npm stamp counts as up to date, so the test never installs packages.
  const makeCli = () =>
    exec("make", ["-s", "-o", "node_modules/.package-lock.json", "cli", `BIN_DIR=${binDir}`], { timeout: 120_000 });

  it("installs the command when absent, leaves another checkout's alone and says how to run this one", async () => {
    const own = path.resolve("packages/cli/bin/warren.mjs");
    const first = await makeCli();
    assert.match(await readFile(path.join(binDir, "warren"), "utf8"), new RegExp(own.replaceAll("/", "\\/")));
    assert.match(first.stdout, /installed/);
    // Reinstalling over its own wrapper is fine.
    await makeCli();
    const other = '#!/bin/sh\nexec node "/srv/other-checkout/packages/cli/bin/warren.mjs" "$@"\n';
    await writeFile(path.join(binDir, "warren"), other, { mode: 0o755 });
    const second = await makeCli();
    assert.equal(await readFile(path.join(binDir, "warren"), "utf8"), other);
    assert.match(second.stdout, /\/srv\/other-checkout/);
    assert.ok(second.stdout.includes(`node ${own}`), second.stdout);
  });
});

describe("the server beside another Warren [pglite]", () => {
  const apiKey = "wrn_firsthour_owner_key_0123456789abcdefghijkl";
  let root = "";
  let dataDir = "";
  let server: ServerProcess;
  let holder: net.Server | null = null;

  before(async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), "warren-firsthour-data-"));
    // No sandbox runtime (its root would be under a file): these starts need none, and
    // opening one (storage pool, exec agent) costs a loaded host a minute per start.
    root = path.join(`${dataDir}.no-runtime`, "runtime");
    await writeFile(`${dataDir}.no-runtime`, "");
    server = new ServerProcess({
      dataDir,
      runtimeRoot: root,
      apiKey,
      env: { WARREN_SANDBOX_POOL_SIZE: "0" },
      // A loaded 2-core host took over a minute to start it (module load, PGlite's initdb).
      readyTimeoutMs: 300_000,
    });
    await server.build("warren-firsthour-test");
  });

  after(async () => {
    holder?.close();
    await server?.dispose();
    await rm(dataDir, { recursive: true, force: true });
    await rm(`${dataDir}.no-runtime`, { force: true });
  });

  it("a busy port stops it before it starts anything, naming the address, its setting and a free one", async () => {
    holder = net.createServer();
    await new Promise<void>((resolve) => holder?.listen(0, "127.0.0.1", resolve));
    const busy = (holder.address() as net.AddressInfo).port;
    const failure = await server
      .start({ WARREN_SESSION_LISTEN: `127.0.0.1:${busy}` })
      .then(() => null)
      .catch((error: Error) => error.message);
    assert.ok(failure, "the server must not start");
    assert.match(failure, new RegExp(`127\\.0\\.0\\.1:${busy} \\(WARREN_SESSION_LISTEN\\) is in use`));
    assert.match(failure, /set WARREN_SESSION_LISTEN=127\.0\.0\.1:\d+ \(free now\)/);
    // Nothing was started: the data dir holds no store and no server lock.
    assert.deepEqual(await readdir(dataDir), []);
    holder.close();
    holder = null;
  });

  it("warns when WARREN_BOOTSTRAP_API_KEY differs from the keys of an existing data dir, never logging it", async () => {
    await server.start();
    assert.ok(!server.log.includes("WARREN_BOOTSTRAP_API_KEY is ignored"), server.log);
    await server.stop("SIGTERM");
    const other = "wrn_firsthour_other_key_0123456789abcdefghijkl";
    // This start also finds its egress gateway's port taken: it takes a free one and says so.
    holder = net.createServer();
    await new Promise<void>((resolve) => holder?.listen(0, "0.0.0.0", resolve));
    const busy = (holder.address() as net.AddressInfo).port;
    await server.start({ WARREN_BOOTSTRAP_API_KEY: other, WARREN_EGRESS_GATEWAY_PORT: String(busy) });
    const warning = (text: string) => server.log.split("\n").find((l) => l.includes(text)) ?? "";
    await eventually("the warning", async () => warning("WARREN_BOOTSTRAP_API_KEY is ignored"), 60_000);
    const line = warning("WARREN_BOOTSTRAP_API_KEY is ignored");
    assert.equal((JSON.parse(line) as { level: number }).level, 40, line);
    assert.ok(!server.log.includes(other), "the key itself is never logged");
    const gateway = JSON.parse(warning("egress gateway's port is in use") || "{}") as {
      busy_port?: number;
      port?: number;
    };
    assert.equal(gateway.busy_port, busy, server.log);
    assert.ok(gateway.port && gateway.port !== busy, server.log);
    await server.stop("SIGTERM");
  });
});

describe("a first sandbox with no internet (make offline-image)", () => {
  let dataDir = "";
  let root = "";
  let driver: LocalRuntimeDriver | null = null;
  const id = testId("offline");

  before(async () => {
    dataDir = await mkdtemp(path.join(os.tmpdir(), "warren-offline-data-"));
    root = await mkdtemp(path.join(os.tmpdir(), "warren-runtime-offline-"));
    await writeFile(path.join(root, "owner.pid"), String(process.pid));
  });

  after(async () => {
    await driver?.destroy(id).catch(() => undefined);
    await driver?.close();
    await sweepRoot(root).catch(() => undefined);
    const pid = Number(await readFile(path.join(dataDir, "local-registry", "registry.pid"), "utf8").catch(() => "0"));
    if (pid > 0) process.kill(pid, "SIGKILL");
    await rm(dataDir, { recursive: true, force: true });
  });

  it("builds a busybox image into a loopback registry, and a sandbox runs from it", async () => {
    const address = `127.0.0.1:${await freePort()}`;
    const made = await exec(process.execPath, ["--import", "tsx", "scripts/local-image.ts"], {
      env: { ...process.env, WARREN_DATA_DIR: dataDir, WARREN_LOCAL_REGISTRY: address },
      timeout: 300_000,
    });
    const reference = `${address}/warren/busybox:latest`;
    assert.match(made.stdout, new RegExp(`WARREN_DEFAULT_IMAGE=${reference.replaceAll(".", "\\.")}`));
    driver = await LocalRuntimeDriver.open({ root, subnetPool: testSubnetPool(root) });
    const image = await driver.prepareImage(reference);
    await driver.create({
      id,
      source: { kind: "image", image },
      command: ["sleep", "infinity"],
      resources: TEST_RESOURCES,
      storageClass: "standard",
      network: "none",
    });
    await driver.start(id);
    const said = await driver.exec(id, {
      argv: ["sh", "-c", "echo hello > /workspace/hello.txt; cat /workspace/hello.txt; uname -s"],
      timeoutSeconds: 60,
      maxOutputBytes: 4096,
    });
    assert.equal(said.kind === "completed" && said.stdout, "hello\nLinux\n", JSON.stringify(said));
  });
});
