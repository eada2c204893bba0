// Traces from inside a real sandbox with nothing configured (issue 29, item 4): every sandbox's
// environment names Warren's OTLP endpoint through its gateway address, with its own
// credential, so an ordinary OpenTelemetry-instrumented Node program exports into the
// sandbox's ambient run. The test image (busybox) has no Node: the host's node binary, the
// shared libraries it links and the program (bundled with the SDK by esbuild) are copied into
// the sandbox through the file API, and node runs under the copied dynamic loader.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { build } from "esbuild";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import type { ExecOutcome } from "../src/drivers/runtime/interface.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { createLogger } from "../src/lib/logger.js";
import { EgressGateway } from "../src/modules/egress/gateway.js";
import { startTestApp, type TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";
import { sql } from "./support/otlp.js";

const GATEWAY = "169.254.213.1";
const DIR = "/opt/otel";

/** The host's node binary and every shared library it links (with the loader), as paths. */
async function nodeAndLibraries(): Promise<string[]> {
  const node = process.execPath;
  const { stdout } = await promisify(execFile)("ldd", [node]);
  const libs = [...stdout.matchAll(/(\/\S+\.so[.\d]*)\s+\(/g)].map((m) => m[1] as string);
  return [node, ...new Set(libs)];
}

describe("OTLP from inside a sandbox", () => {
  let gateway: EgressGateway;
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let bundleDir = "";
  const owner = () => t.orgA.keys.owner;

  before(async () => {
    const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
    gateway = await EgressGateway.start({ port: 0, log: createLogger("error", silent), connectTimeoutMs: 3000 });
    fixture = await startRuntimeFixture("otlp", { gateway: { address: GATEWAY, port: gateway.port } });
    t = await startTestApp("pglite", {
      overrides: { runtime: fixture.driver, egressGateway: gateway },
      config: {
        sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 512, pids: 128 },
      },
    });
    await t.app.listen({ host: "127.0.0.1", port: 0 });
    const address = t.app.server.address();
    gateway.setApiTarget({ host: "127.0.0.1", port: typeof address === "object" && address ? address.port : 0 });
    reconciler = new SandboxReconciler(t.c, fixture.driver, {
      pids: 128,
      retentionSeconds: 3600,
      gatewayAddress: GATEWAY,
    });
    await reconciler.start();
    bundleDir = await mkdtemp(path.join(os.tmpdir(), "warren-otlp-bundle-"));
    await build({
      entryPoints: [path.join(import.meta.dirname, "support", "otlp-sandbox-program.ts")],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      outfile: path.join(bundleDir, "program.mjs"),
      // The SDK's CommonJS parts call require() for Node's built-ins.
      banner: { js: 'import { createRequire } from "node:module"; const require = createRequire(import.meta.url);' },
      logLevel: "error",
    });
  });

  after(async () => {
    await reconciler?.stop();
    await t?.close();
    await gateway?.close();
    await fixture?.cleanup();
    if (bundleDir) await rm(bundleDir, { recursive: true, force: true });
  });

  const put = async (id: string, target: string, body: Buffer, mode: string) => {
    const res = await t.app.inject({
      method: "PUT",
      url: `/v1/sandboxes/${id}/files?path=${encodeURIComponent(target)}&mode=${mode}`,
      headers: { authorization: `Bearer ${owner()}`, "content-type": "application/octet-stream" },
      payload: body,
    });
    assert.equal(res.statusCode, 200, res.body);
  };

  it("exports an instrumented program's spans into the sandbox's ambient run, with nothing configured", async () => {
    const created = await t.request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { command: ["sleep", "3600"] },
    });
    assert.equal(created.status, 200, created.raw);
    const id = created.body.id as string;
    const ambient = created.body.run_id as string;
    const ready = await t.request("GET", `/v1/sandboxes/${id}`, {
      key: owner(),
      query: { wait_state: "running", wait_timeout_seconds: "25" },
    });
    assert.equal((ready.body.sandbox as { state: string }).state, "running", ready.raw);

    const files = await nodeAndLibraries();
    for (const file of files) await put(id, `${DIR}/${path.basename(file)}`, await readFile(file), "755");
    await put(id, `${DIR}/program.mjs`, await readFile(path.join(bundleDir, "program.mjs")), "644");
    const loader = files.map((f) => path.basename(f)).find((name) => name.startsWith("ld-linux")) ?? "";
    assert.ok(loader, `node links a dynamic loader: ${files.join(" ")}`);

    const outcome: ExecOutcome = await fixture.driver.exec(id, {
      argv: [`${DIR}/${loader}`, "--library-path", DIR, `${DIR}/node`, `${DIR}/program.mjs`],
      timeoutSeconds: 300,
      maxOutputBytes: 1 << 20,
    });
    assert.equal(outcome.kind, "completed", JSON.stringify(outcome).slice(0, 2000));
    const done = outcome as Extract<ExecOutcome, { kind: "completed" }>;
    assert.equal(done.exit, 0, `${done.stdout}\n${done.stderr}`);
    const traceId = done.stdout.trim();
    assert.match(traceId, /^[0-9a-f]{32}$/, done.stdout);

    const rows = await eventually("the sandbox's spans in SQL", async () => {
      const found = await sql(
        t,
        owner(),
        `SELECT run_id, name, model, input_tokens FROM spans WHERE trace_id = '${traceId}'
          ORDER BY parent_span_id NULLS FIRST`,
      );
      return found.length === 2 ? found : null;
    });
    assert.deepEqual(
      rows.map((r) => [r.run_id, r.name]),
      [
        [ambient, "agent in a sandbox"],
        [ambient, "chat tiny-model"],
      ],
    );
    assert.equal(rows[1]?.model, "tiny-model");
    assert.equal(String(rows[1]?.input_tokens), "3");
    // Joinable with the sandbox whose ambient run they are in.
    const joined = await sql(
      t,
      owner(),
      `SELECT DISTINCT b.id FROM spans s JOIN sandboxes b ON b.run_id = s.run_id WHERE s.trace_id = '${traceId}'`,
    );
    assert.deepEqual(joined, [{ id }]);
  });
});
