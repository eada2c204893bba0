// Secret egress end to end through the real egress gateway: a gateway_only sandbox made
// through the API with a bound secret runs the host's curl (the test image of
// support/egress.ts) with the gateway as its HTTPS proxy and no CA flag. The upstream is an
// HTTPS server in a network namespace the test makes (the test peer's, 203.0.113.0/24),
// with its own test CA given to Warren as WARREN_EGRESS_EXTRA_CA_FILE; it records the
// Authorization header it receives.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import type { ExecOutcome } from "../src/drivers/runtime/interface.js";
import {
  type RuntimeFixture,
  startRuntimeFixture,
  startTestPeer,
  type TestPeer,
} from "../src/drivers/runtime/local/test-support.js";
import { createLogger } from "../src/lib/logger.js";
import { EgressGateway } from "../src/modules/egress/gateway.js";
import { startTestApp, type TestApp } from "./harness.js";
import { curlLayer, filesContaining, makeTestPki } from "./support/egress.js";
import { busyboxLayer, pushImage } from "./support/registry.js";

const GATEWAY = "169.254.213.1";
const BOUND = "api.upstream-one.com";
const OTHER = "other.upstream-two.com";

describe("secret egress through the egress gateway, from a gateway_only sandbox", () => {
  const pki = makeTestPki();
  let peer: TestPeer;
  let upstream: ChildProcess;
  const received: { url: string; host: string; auth: string }[] = [];
  let gateway: EgressGateway;
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let sandboxId = "";
  let runId = "";
  let secretId = "";
  const value = `sk-gw-${Date.now()}-must-stay-outside`;

  const curl = async (url: string, ...flags: string[]) => {
    const outcome: ExecOutcome = await fixture.driver.exec(sandboxId, {
      argv: ["curl", "-sS", "--max-time", "10", ...flags, url],
      timeoutSeconds: 30,
      maxOutputBytes: 1 << 20,
    });
    assert.equal(outcome.kind, "completed", JSON.stringify(outcome));
    return outcome as Extract<ExecOutcome, { kind: "completed" }>;
  };

  before(async () => {
    peer = await startTestPeer();
    const leaf = pki.leaf([BOUND, OTHER]);
    writeFileSync(path.join(pki.dir, "up.key"), leaf.key);
    writeFileSync(path.join(pki.dir, "up.pem"), leaf.cert);
    const script = path.join(pki.dir, "upstream.cjs");
    writeFileSync(
      script,
      `const fs = require("fs");
       require("https").createServer({ key: fs.readFileSync(${JSON.stringify(path.join(pki.dir, "up.key"))}),
                                       cert: fs.readFileSync(${JSON.stringify(path.join(pki.dir, "up.pem"))}) }, (q, r) => {
         q.resume();
         q.on("end", () => {
           const auth = q.headers.authorization || "";
           console.log(JSON.stringify({ url: q.url, host: q.headers.host, auth }));
           r.setHeader("x-echo", auth);
           r.end(q.url === "/echo" ? "echo " + auth + " end" : "ok");
         });
       }).listen(443, ${JSON.stringify(peer.address)}, () => console.log("ready"));`,
    );
    upstream = spawn("ip", ["netns", "exec", peer.netns, process.execPath, script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    await new Promise<void>((resolve, reject) => {
      let buffer = "";
      upstream.stdout?.on("data", (chunk: Buffer) => {
        buffer += chunk.toString();
        for (let end = buffer.indexOf("\n"); end >= 0; end = buffer.indexOf("\n")) {
          const line = buffer.slice(0, end);
          buffer = buffer.slice(end + 1);
          if (line === "ready") resolve();
          else if (line.startsWith("{")) received.push(JSON.parse(line));
        }
      });
      upstream.once("exit", (code) => reject(new Error(`upstream exited ${code}`)));
    });

    const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
    gateway = await EgressGateway.start({
      port: 0,
      hosts: new Map([
        [BOUND, peer.address],
        [OTHER, peer.address],
      ]),
      log: createLogger("error", silent),
      connectTimeoutMs: 3000,
    });
    fixture = await startRuntimeFixture("segw", { gateway: { address: GATEWAY, port: gateway.port } });
    await pushImage(fixture.registry.url, "test/curl", "latest", {
      layers: [busyboxLayer(), await curlLayer()],
      config: { Cmd: ["/bin/sh"], Env: ["PATH=/usr/bin:/bin"] },
    });
    t = await startTestApp("pglite", {
      overrides: { runtime: fixture.driver, egressGateway: gateway },
      config: {
        sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
        egress: { ...loadConfig({}).egress, extraCaFile: pki.caFile },
      },
    });
    // The container wired secret egress into this gateway; the driver gets the app's CA now
    // (at `make run` it is an option of the driver's open).
    fixture.driver.useTrustedCa(t.c.egressCa.certificatePem);
    reconciler = new SandboxReconciler(t.c, fixture.driver, {
      pids: 128,
      retentionSeconds: 3600,
      gatewayAddress: GATEWAY,
    });
    await reconciler.start();

    const secret = await t.request("POST", "/v1/secrets", {
      key: t.orgA.keys.owner,
      body: { name: "upstream-token", value, dest_host: BOUND },
    });
    assert.equal(secret.status, 200, secret.raw);
    secretId = (secret.body.secret as { id: string }).id;
    const created = await t.request("POST", "/v1/sandboxes", {
      key: t.orgA.keys.owner,
      body: {
        image: `${fixture.registry.host}/test/curl:latest`,
        command: ["sleep", "3600"],
        network_access: "gateway_only",
        secrets: [{ name: "upstream-token" }],
      },
    });
    assert.equal(created.status, 200, created.raw);
    sandboxId = created.body.id as string;
    runId = created.body.run_id as string;
    const ready = await t.request("GET", `/v1/sandboxes/${sandboxId}`, {
      key: t.orgA.keys.owner,
      query: { wait_state: "running", wait_timeout_seconds: "25" },
    });
    assert.equal((ready.body.sandbox as { state: string }).state, "running", ready.raw);
  });

  after(async () => {
    await reconciler?.stop();
    await t?.close();
    await gateway?.close();
    await fixture?.cleanup();
    upstream?.kill();
    await peer?.stop();
    pki.remove();
  });

  it("injects the bound secret into curl's request through the proxy, and scrubs the echo", async () => {
    const plain = await curl(`https://${BOUND}/plain`, "-H", "Authorization: Bearer made-up-inside");
    assert.equal(plain.exit, 0, plain.stderr);
    assert.equal(plain.stdout, "ok");
    assert.deepEqual(received.at(-1), { url: "/plain", host: BOUND, auth: `Bearer ${value}` });
    const echo = await curl(`https://${BOUND}/echo`, "-i");
    assert.equal(echo.exit, 0, echo.stderr);
    assert.ok(!echo.stdout.includes(value), echo.stdout);
    assert.match(echo.stdout, /echo Bearer \*+ end/);
  });

  it("lets gateway_only reach no other host, and sends it nothing", async () => {
    const before = received.length;
    const other = await curl(`https://${OTHER}/plain`);
    assert.notEqual(other.exit, 0, "the gateway refuses a host neither bound nor allowlisted");
    assert.equal(received.length, before);
  });

  it("never lets the value into the sandbox's environment or files", async () => {
    const env = await fixture.driver.exec(sandboxId, { argv: ["env"], timeoutSeconds: 10, maxOutputBytes: 1 << 20 });
    assert.equal(env.kind, "completed");
    const text = (env as Extract<ExecOutcome, { kind: "completed" }>).stdout;
    assert.ok(!text.includes(value));
    assert.match(text, /^HTTPS_PROXY=http:\/\/169\.254\.213\.1:80$/m);
    const paths = fixture.driver.layout.sandbox(sandboxId);
    assert.deepEqual(await filesContaining(paths.upper, Buffer.from(value)), []);
    assert.deepEqual(await filesContaining(paths.workspace, Buffer.from(value)), []);
  });

  it("stops at once on revoke, and the ledger has every request and refusal", async () => {
    assert.equal((await t.request("POST", `/v1/secrets/${secretId}:revoke`, { key: t.orgA.keys.owner })).status, 200);
    const before = received.length;
    const refused = await curl(`https://${BOUND}/after-revoke`, "-w", "%{http_code}");
    assert.match(refused.stdout, /^\{"code":"secret_revoked","message":"secret egress: secret revoked"\}\n403$/);
    assert.equal(received.length, before);
    await t.c.egressLedger.flush();
    const rows = await t.request("POST", "/v1/telemetry/sql", {
      key: t.orgA.keys.member,
      body: {
        sql: `SELECT name, payload->>'host', payload->>'path', (payload->>'status')::int FROM events
               WHERE run_id = '${runId}' AND name LIKE 'egress.%' ORDER BY ts_wall_ns`,
      },
    });
    assert.equal(rows.status, 200, rows.raw);
    const got = rows.body.rows as unknown[][];
    assert.deepEqual(
      got.filter((r) => r[1] === BOUND),
      [
        ["egress.injected", BOUND, "/plain", 200],
        ["egress.injected", BOUND, "/echo", 200],
        ["egress.refused", BOUND, "/after-revoke", 403],
      ],
    );
    assert.ok(
      got.some((r) => r[0] === "egress.refused" && r[1] === OTHER),
      `the gateway's refusal of ${OTHER} is in the ledger: ${JSON.stringify(got)}`,
    );
  });
});
