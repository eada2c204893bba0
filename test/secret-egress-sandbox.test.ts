// Secret egress seen from inside a real sandbox: the local driver binds the deployment's
// egress CA into the image's trust store, and the host's curl (a test image, support/egress.ts)
// makes an HTTPS request with no CA flag. Until the egress gateway is merged, the sandbox
// reaches the interceptor through a Unix socket bound into it (`curl --unix-socket`), which
// the test hands to the interceptor the way the gateway hands it a CONNECT's stream.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import type { ExecOutcome } from "../src/drivers/runtime/interface.js";
import { type RuntimeFixture, startRuntimeFixture, startSandbox } from "../src/drivers/runtime/local/test-support.js";
import { CA_BUNDLE_PATHS, SANDBOX_CA_PATH } from "../src/drivers/runtime/local/trust.js";
import type { EgressCaller } from "../src/modules/egress/types.js";
import { startTestApp, type TestApp } from "./harness.js";
import { curlLayer, filesContaining, makeTestPki, startUpstream, type TestUpstream } from "./support/egress.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";
import { busyboxLayer, pushImage } from "./support/registry.js";

const BOUND = "api.upstream-one.com";

describe("secret egress from inside a sandbox", () => {
  const pki = makeTestPki();
  let t: TestApp;
  let f: RuntimeFixture;
  let upstream: TestUpstream;
  let socketServer: Server;
  let socketDir: string;
  let sandboxId: string;
  let caller: EgressCaller;
  let secretId: string;
  const made: string[] = [];
  const value = `sk-sandbox-${Date.now()}-never-inside`;

  const exec = async (argv: string[]): Promise<Extract<ExecOutcome, { kind: "completed" }>> => {
    const outcome = await f.driver.exec(sandboxId, { argv, timeoutSeconds: 30, maxOutputBytes: 1_048_576 });
    assert.equal(outcome.kind, "completed", JSON.stringify(outcome));
    return outcome as Extract<ExecOutcome, { kind: "completed" }>;
  };
  const curl = (urlPath: string, ...flags: string[]) =>
    exec(["curl", "-sS", "--unix-socket", "/run/egress/gw.sock", ...flags, `https://${BOUND}${urlPath}`]);

  before(async () => {
    t = await startTestApp("pglite", {
      config: { secretEgress: { modelGatewayHost: "" }, egress: { ...loadConfig({}).egress, extraCaFile: pki.caFile } },
      overrides: { runtime: API_ONLY_RUNTIME },
    });
    upstream = await startUpstream(pki.leaf([BOUND]));
    const secret = await t.request("POST", "/v1/secrets", {
      key: t.orgA.keys.owner,
      body: { name: "sandbox-token", value, dest_host: BOUND },
    });
    secretId = (secret.body.secret as { id: string }).id;
    const created = await t.request("POST", "/v1/sandboxes", {
      key: t.orgA.keys.owner,
      body: { secrets: [{ name: "sandbox-token" }] },
    });
    assert.equal(created.status, 200, created.raw);
    caller = {
      sandboxId: created.body.id as string,
      orgId: t.orgA.id,
      projectId: t.orgA.defaultProjectId,
      runId: created.body.run_id as string,
      mode: "gateway_only",
    };
    // The gateway's part: each connection on the socket is a CONNECT to BOUND:443 answered 200.
    socketDir = await mkdtemp(path.join(os.tmpdir(), "warren-egress-sock-"));
    socketServer = createServer((socket) =>
      t.c.secretEgress.intercept(socket, { host: BOUND, port: upstream.port, address: "127.0.0.1" }, caller),
    );
    await new Promise<void>((resolve) => socketServer.listen(path.join(socketDir, "gw.sock"), resolve));

    f = await startRuntimeFixture("segress", { trustedCaPem: t.c.egressCa.certificatePem });
    await pushImage(f.registry.url, "test/curl", "latest", {
      layers: [busyboxLayer(), await curlLayer()],
      config: { Cmd: ["/bin/sh"], Env: ["PATH=/usr/bin:/bin"] },
    });
    const image = await f.driver.prepareImage(`${f.registry.host}/test/curl:latest`);
    sandboxId = await startSandbox(f, made, {
      source: { kind: "image", image },
      mounts: [{ source: socketDir, target: "/run/egress", readOnly: false }],
    });
  });

  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await f?.cleanup();
    await new Promise<void>((resolve) => (socketServer ? socketServer.close(() => resolve()) : resolve()));
    await upstream?.close();
    await t?.close();
    if (socketDir) await rm(socketDir, { recursive: true, force: true });
    pki.remove();
  });

  it("puts the CA in the image's trust store and NODE_EXTRA_CA_CERTS", async () => {
    const ca = await exec(["cat", SANDBOX_CA_PATH]);
    assert.equal(ca.stdout.trim(), t.c.egressCa.certificatePem.trim());
    const bundle = await exec(["cat", CA_BUNDLE_PATHS[0] ?? ""]);
    const hostBundle = await readFile("/etc/ssl/certs/ca-certificates.crt", "utf8");
    assert.ok(bundle.stdout.startsWith(hostBundle.slice(0, 2000)), "the image's own bundle is kept");
    assert.ok(bundle.stdout.trim().endsWith(t.c.egressCa.certificatePem.trim()), "the CA is appended");
    assert.match((await exec(["env"])).stdout, /^NODE_EXTRA_CA_CERTS=\/etc\/warren\/ca\.pem$/m);
    // Read-only: the sandbox cannot swap the CA for one of its own.
    assert.notEqual((await exec(["sh", "-c", `echo x >> ${SANDBOX_CA_PATH}`])).exit, 0);
  });

  it("injects the secret into curl's request with no CA flag, and scrubs the echo", async () => {
    const before = upstream.received.length;
    const plain = await curl("/plain", "-H", "Authorization: Bearer made-up-inside");
    assert.equal(plain.exit, 0, plain.stderr);
    assert.equal(plain.stdout, "ok 0");
    assert.equal(upstream.received[before]?.authorization, `Bearer ${value}`);
    const echo = await curl("/echo", "-i");
    assert.equal(echo.exit, 0, echo.stderr);
    assert.ok(!echo.stdout.includes(value), echo.stdout);
    assert.match(echo.stdout, /you sent Bearer \*+ and that is all/);
    const chunked = await curl("/echo-chunked?split=4");
    assert.ok(!chunked.stdout.includes(value));
    const upload = await curl("/upload", "--data-binary", "@/bin/busybox");
    assert.match(upload.stdout, /^ok \d{5,}$/);
  });

  it("never lets the value into the sandbox: environment, files, exec output", async () => {
    const env = await exec(["env"]);
    assert.ok(!env.stdout.includes(value));
    const paths = f.driver.layout.sandbox(sandboxId);
    const needle = Buffer.from(value);
    assert.deepEqual(await filesContaining(paths.upper, needle), []);
    assert.deepEqual(await filesContaining(paths.workspace, needle), []);
    assert.deepEqual(await filesContaining(socketDir, needle), []);
  });

  it("refuses the next request once the secret is revoked, and the ledger shows each one", async () => {
    assert.equal((await t.request("POST", `/v1/secrets/${secretId}:revoke`, { key: t.orgA.keys.owner })).status, 200);
    const before = upstream.received.length;
    const refused = await curl("/after-revoke", "-w", "%{http_code}");
    assert.match(refused.stdout, /^\{"code":"secret_revoked","message":"secret egress: secret revoked"\}\n403$/);
    assert.equal(upstream.received.length, before);
    await t.c.egressLedger.flush();
    const rows = await t.request("POST", "/v1/telemetry/sql", {
      key: t.orgA.keys.member,
      body: {
        sql: `SELECT name, payload->>'path', (payload->>'status')::int FROM events
               WHERE run_id = '${caller.runId}' AND name LIKE 'egress.%' ORDER BY ts_wall_ns`,
      },
    });
    assert.equal(rows.status, 200, rows.raw);
    assert.deepEqual(rows.body.rows, [
      ["egress.injected", "/plain", 200],
      ["egress.injected", "/echo", 200],
      ["egress.injected", "/echo-chunked", 200],
      ["egress.injected", "/upload", 200],
      ["egress.refused", "/after-revoke", 403],
    ]);
    // The run tail carries the same events.
    const tail = await t.c.tails.open(await t.c.identity.authenticate(t.orgA.keys.member), { runId: caller.runId });
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), 60_000);
    const tailed: string[] = [];
    for await (const frame of tail.frames(abort.signal)) {
      if (!("item" in frame)) continue;
      const data = frame.item.data as { name?: string; payload?: { path?: string } };
      if (data.name?.startsWith("egress.")) tailed.push(`${data.name} ${data.payload?.path}`);
      if (tailed.length === 5) break;
    }
    clearTimeout(timer);
    assert.deepEqual(tailed, [
      "egress.injected /plain",
      "egress.injected /echo",
      "egress.injected /echo-chunked",
      "egress.injected /upload",
      "egress.refused /after-revoke",
    ]);
  });

  it("answers 422 for a MODEL_GATEWAY binding when no model gateway is configured", async () => {
    const secret = await t.request("POST", "/v1/secrets", {
      key: t.orgA.keys.owner,
      body: {
        name: "model-key",
        value: "m",
        delivery: "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY",
        dest_host: "api.model-vendor.com",
      },
    });
    assert.equal(secret.status, 200, secret.raw);
    const res = await t.request("POST", "/v1/sandboxes", {
      key: t.orgA.keys.owner,
      body: { secrets: [{ name: "model-key" }] },
    });
    assert.equal(res.status, 422, res.raw);
    assert.equal(res.body.code, "unsupported_capability");
  });
});
