// The egress gateway and gateway_only networking end to end, on real runc sandboxes made
// through the API: from inside sandboxes of each mode, every forbidden destination fails and
// every allowed one works; the API through the gateway with the sandbox's own credential
// only; live switching (the allowlist routes' own checks: egress-allowlist.test.ts). The "internet" is a peer in a
// network namespace the test makes (203.0.113.0/24), named by WARREN_EGRESS_HOSTS-style
// mappings given to the gateway.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import type { ExecOutcome } from "../src/drivers/runtime/interface.js";
import {
  countingServer,
  hostIPv4Addresses,
  type RuntimeFixture,
  startRuntimeFixture,
  startTestPeer,
  type TestPeer,
} from "../src/drivers/runtime/local/test-support.js";
import { createLogger } from "../src/lib/logger.js";
import { EgressGateway } from "../src/modules/egress/gateway.js";
import type { EgressCaller, EgressInterceptor, EgressLedgerEntry } from "../src/modules/egress/types.js";
import { startTestApp, type TestApp } from "./harness.js";

const GATEWAY = "169.254.213.1";

function stdoutOf(outcome: ExecOutcome): string {
  assert.equal(outcome.kind, "completed", JSON.stringify(outcome).slice(0, 400));
  return (outcome as Extract<ExecOutcome, { kind: "completed" }>).stdout;
}

describe("egress gateway and gateway_only", () => {
  let peer: TestPeer;
  let gateway: EgressGateway;
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let apiPort = 0;
  const ledger: { caller: EgressCaller; entry: EgressLedgerEntry }[] = [];
  const owner = () => t.orgA.keys.owner;

  before(async () => {
    peer = await startTestPeer();
    const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
    gateway = await EgressGateway.start({
      port: 0,
      hosts: new Map([
        ["allowed.test", peer.address],
        ["other.test", peer.address],
        ["secret.test", peer.address],
        ["a.wild.test", peer.address],
        ["intercept.test", peer.address],
      ]),
      log: createLogger("error", silent),
      connectTimeoutMs: 3000,
    });
    fixture = await startRuntimeFixture("egress", { gateway: { address: GATEWAY, port: gateway.port } });
    t = await startTestApp("pglite", {
      overrides: { runtime: fixture.driver, egressGateway: gateway },
      config: {
        sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
      },
    });
    await t.app.listen({ host: "127.0.0.1", port: 0 });
    const address = t.app.server.address();
    apiPort = typeof address === "object" && address ? address.port : 0;
    gateway.setApiTarget({ host: "127.0.0.1", port: apiPort });
    // A stand-in for secret egress (the secrets helper's interceptor): secret.test is a bound
    // secret's host, and CONNECT to intercept.test is handed over.
    const interceptor: EgressInterceptor = {
      hostsFor: async () => ["secret.test", "intercept.test"],
      wants: async (_caller, host) => host === "intercept.test",
      intercept: (client, target, caller) => {
        client.end(`intercepted ${target.host}:${target.port} for ${caller.sandboxId}\n`);
      },
    };
    gateway.use({ interceptor, ledger: { record: (caller, entry) => ledger.push({ caller, entry }) } });
    reconciler = new SandboxReconciler(t.c, fixture.driver, {
      pids: 128,
      retentionSeconds: 3600,
      gatewayAddress: GATEWAY,
    });
    await reconciler.start();
  });

  after(async () => {
    await reconciler?.stop();
    await t?.close();
    await gateway?.close();
    await fixture?.cleanup();
    await peer?.stop();
  });

  const create = async (network: string) => {
    const res = await t.request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { command: ["sleep", "3600"], network_access: network },
    });
    assert.equal(res.status, 200, res.raw);
    const id = res.body.id as string;
    const ready = await t.request("GET", `/v1/sandboxes/${id}`, {
      key: owner(),
      query: { wait_state: "running", wait_timeout_seconds: "25" },
    });
    assert.equal((ready.body.sandbox as { state: string }).state, "running", ready.raw);
    return id;
  };
  const sh = async (id: string, script: string) =>
    stdoutOf(
      await fixture.driver.exec(id, {
        argv: ["sh", "-c", script],
        timeoutSeconds: 30,
        maxOutputBytes: 1 << 20,
      }),
    );
  /**
   * An HTTP/1.0 request by hand through the gateway (Debian's static busybox 1.35 wget crashes with
   * a proxy); prints the whole answer, or FAIL when nothing came back.
   */
  const http = (id: string, target: string, headers: string[] = []) => {
    const host = /^http:\/\/([^/]+)/.exec(target)?.[1] ?? GATEWAY;
    const head = [`GET ${target} HTTP/1.0`, `Host: ${host}`, ...headers, "", ""].join("\\r\\n");
    return sh(
      id,
      `out=$(printf "${head}" | nc -w 5 ${GATEWAY} 80 2>/dev/null); [ -n "$out" ] && echo "$out" || echo FAIL`,
    );
  };
  /** Through the proxy: the status line and body of an absolute-form request. */
  const viaProxy = (id: string, url: string) => http(id, url);
  /** CONNECT by hand with nc; prints the gateway's answer and whatever the tunnel carried. */
  const connect = (id: string, authority: string) =>
    sh(
      id,
      `printf 'CONNECT ${authority} HTTP/1.1\\r\\nHost: ${authority}\\r\\n\\r\\n' | nc -w 3 ${GATEWAY} 80 2>&1; echo`,
    );
  const setAllowlist = (hosts: string[]) =>
    t.request("PUT", `/v1/admin/organizations/${t.orgA.id}/egress-allowlist`, { key: owner(), body: { hosts } });

  it("gives every sandbox the gateway as its proxy and API, in every mode", async () => {
    const id = await create("none");
    const env = await sh(id, "env | sort");
    for (const line of [
      `HTTP_PROXY=http://${GATEWAY}:80`,
      `HTTPS_PROXY=http://${GATEWAY}:80`,
      `http_proxy=http://${GATEWAY}:80`,
      `https_proxy=http://${GATEWAY}:80`,
      `NO_PROXY=${GATEWAY},localhost,127.0.0.1`,
      `no_proxy=${GATEWAY},localhost,127.0.0.1`,
      `WARREN_API_URL=http://${GATEWAY}`,
      `WARREN_SANDBOX_ID=${id}`,
      `OTEL_EXPORTER_OTLP_ENDPOINT=http://${GATEWAY}`,
      "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
    ]) {
      assert.ok(env.split("\n").includes(line), `${line} in\n${env}`);
    }
    assert.match(env, /^WARREN_SANDBOX_TOKEN=\S+$/m);
    // The OTLP exporters' header: the same credential, percent-encoded (W3C baggage form).
    const token = /^WARREN_SANDBOX_TOKEN=(\S+)$/m.exec(env)?.[1];
    assert.ok(env.split("\n").includes(`OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20${token}`), env);
    // none: nothing at all, the gateway included.
    assert.match(await http(id, "/v1/whoami", ["Authorization: Bearer $WARREN_SANDBOX_TOKEN"]), /^FAIL/);
    const out = await sh(id, `nc -w 2 ${peer.address} ${peer.port} 2>&1; echo done`);
    assert.doesNotMatch(out, /pong|whoami|"organization/);
  });

  it("gateway_only reaches allowlisted hosts and secret hosts through the proxy, over HTTP and CONNECT, nothing else", async () => {
    assert.equal((await setAllowlist([])).status, 200);
    const id = await create("gateway_only");
    const other = await create("public");
    const otherAddress = (await fixture.driver.addressesOf(other))?.sandbox;
    const slot = await fixture.driver.addressesOf(id);
    assert.ok(otherAddress && slot);
    const loopback = await countingServer("127.0.0.1");
    const anyAddress = await countingServer("0.0.0.0");
    try {
      // The default allowlist is empty: only the secrets' hosts.
      const refused = await viaProxy(id, `http://allowed.test:${peer.httpPort}/x`);
      assert.match(refused, /403/);
      assert.match(
        await viaProxy(id, `http://secret.test:${peer.httpPort}/s`),
        /^HTTP\/1\.1 200 [\s\S]*^peer GET \/s host=secret\.test/m,
      );
      assert.match(await connect(id, `secret.test:${peer.port}`), /200 Connection established[\s\S]*pong/);
      // The handed-over tunnel of the interceptor.
      assert.match(
        await connect(id, `intercept.test:443`),
        new RegExp(`200 Connection established[\\s\\S]*intercepted intercept.test:443 for ${id}`),
      );

      // An allowlist change applies to the next request.
      assert.equal((await setAllowlist(["allowed.test", "*.wild.test"])).status, 200);
      assert.match(
        await viaProxy(id, `http://allowed.test:${peer.httpPort}/hello?token=abc`),
        /^peer GET \/hello\?token=abc host=allowed\.test:\d+$/m,
      );
      assert.match(await viaProxy(id, `http://a.wild.test:${peer.httpPort}/w`), /^peer GET \/w/m);
      assert.match(await connect(id, `allowed.test:${peer.port}`), /200 Connection established[\s\S]*pong/);

      // Refused by the gateway, with a reason: hosts not allowed, addresses, blocked ranges.
      for (const url of [
        `http://other.test:${peer.httpPort}/secret-path?key=hidden`,
        `http://${peer.address}:${peer.httpPort}/`,
        "http://169.254.169.254/latest/meta-data/",
        `http://127.0.0.1:${apiPort}/v1/whoami`,
      ]) {
        assert.match(await viaProxy(id, url), /403/, url);
      }
      const tunnel = await connect(id, `other.test:${peer.port}`);
      assert.match(tunnel, /^HTTP\/1\.1 403 Forbidden/);
      assert.match(tunnel, /neither a host of the sandbox's secrets nor on the organization's egress allowlist/);
      assert.doesNotMatch(tunnel, /pong/);
      // The ledger saw each refusal, without the query string.
      const refusals = ledger.filter((r) => r.caller.sandboxId === id && r.entry.kind === "refused");
      assert.ok(
        refusals.some((r) => r.entry.host === "other.test" && r.entry.path === "/secret-path"),
        JSON.stringify(refusals),
      );
      assert.ok(refusals.every((r) => !JSON.stringify(r.entry).includes("hidden")));
      assert.equal(refusals[0]?.caller.orgId, t.orgA.id);
      assert.equal(refusals[0]?.caller.mode, "gateway_only");

      // Not through the gateway: the peer directly, another sandbox, the host's services, the
      // API's port, the gateway's real port, the metadata address: all dropped.
      const attempts = [
        `${peer.address} ${peer.port}`,
        `${otherAddress} 9000`,
        `127.0.0.1 ${loopback.port}`,
        `${slot.gateway} ${anyAddress.port}`,
        `${slot.gateway} ${apiPort}`,
        `${slot.gateway} ${gateway.port}`,
        `169.254.169.254 80`,
        ...hostIPv4Addresses().flatMap((address) => [`${address} ${anyAddress.port}`, `${address} ${gateway.port}`]),
      ];
      // At once (each waits up to 2 s for nothing).
      const out = await sh(
        id,
        `${attempts.map((a, i) => `(echo "== ${a}"; nc -w 2 ${a} </dev/null 2>&1) > /tmp/attempt-${i} &`).join(" ")} wait; cat /tmp/attempt-*`,
      );
      assert.equal(out.split("\n").filter((line) => line.startsWith("== ")).length, attempts.length, out);
      assert.doesNotMatch(out, /hello|pong|HTTP/, out);
      assert.equal(loopback.accepted(), 0);
      assert.equal(anyAddress.accepted(), 0);
    } finally {
      loopback.server.close();
      anyAddress.server.close();
    }
  });

  it("refuses the gateway's real port from non-sandbox interfaces, and any caller that is not a sandbox", async () => {
    const hostSide = peer.address.replace(/\.(\d+)$/, (_m, last: string) => `.${Number(last) - 1}`);
    const request = "GET /v1/whoami HTTP/1.0\r\n\r\n";
    // From the peer's namespace (another interface of the host): dropped by the guard.
    const fromPeer = await new Promise<string>((resolve) => {
      execFile(
        "ip",
        [
          "netns",
          "exec",
          peer.netns,
          "busybox",
          "sh",
          "-c",
          `printf '${request.replace(/\r\n/g, "\\r\\n")}' | busybox nc -w 2 ${hostSide} ${gateway.port} 2>&1; echo rc=$?`,
        ],
        (_error, stdout) => resolve(stdout),
      );
    });
    assert.doesNotMatch(fromPeer, /HTTP/, fromPeer);
    // From loopback the port answers, but an unknown source is refused.
    const fromLoopback = await fetch(`http://127.0.0.1:${gateway.port}/v1/whoami`, {
      headers: { authorization: `Bearer ${owner()}` },
    });
    assert.equal(fromLoopback.status, 403);
    assert.equal(fromLoopback.headers.get("x-warren-egress"), "unknown_source");
    assert.doesNotMatch(await fromLoopback.text(), new RegExp(t.orgA.id));
  });

  it("public reaches the world directly and through the proxy, never blocked ranges through it", async () => {
    assert.equal((await setAllowlist([])).status, 200);
    const id = await create("public");
    assert.equal(await sh(id, `nc -w 2 ${peer.address} ${peer.port}`), "pong\n");
    assert.match(await viaProxy(id, `http://other.test:${peer.httpPort}/p`), /^peer GET \/p host=other\.test/m);
    assert.match(await viaProxy(id, `http://${peer.address}:${peer.httpPort}/ip`), /^peer GET \/ip/m);
    assert.match(await connect(id, `${peer.address}:${peer.port}`), /200 Connection established[\s\S]*pong/);
    for (const url of ["http://169.254.169.254/", `http://127.0.0.1:${apiPort}/v1/whoami`, "http://10.0.0.1/"]) {
      assert.match(await viaProxy(id, url), /403/, url);
    }
    assert.match(await connect(id, `127.0.0.1:${apiPort}`), /^HTTP\/1\.1 403 Forbidden[\s\S]*loopback, private/);
  });

  it("relays the API only with the calling sandbox's own credential", async () => {
    const id = await create("gateway_only");
    const other = await create("public");
    const otherToken = (await sh(other, 'printf %s "$WARREN_SANDBOX_TOKEN"')).trim();
    assert.ok(otherToken.length > 20);
    // Straight to the gateway (NO_PROXY names it), as an API client in the sandbox would.
    const own = await http(id, `/v1/sandboxes/${id}`, ["Authorization: Bearer $WARREN_SANDBOX_TOKEN"]);
    assert.match(own, /^HTTP\/1\.1 200 /, own);
    const body = own.slice(own.indexOf("\r\n\r\n") + 4);
    assert.equal((JSON.parse(body) as { sandbox: { id: string } }).sandbox.id, id, own);
    // The public one too.
    const theirs = await http(other, "/v1/whoami", ["Authorization: Bearer $WARREN_SANDBOX_TOKEN"]);
    assert.match(theirs, /^HTTP\/1\.1 200 /);
    assert.match(theirs, new RegExp(t.orgA.id));
    for (const header of [
      [],
      [`Authorization: Bearer ${otherToken}`],
      [`Authorization: Bearer ${owner()}`],
      ["Authorization: Bearer nope"],
    ]) {
      const out = await http(id, "/v1/whoami", header);
      assert.match(out, /^HTTP\/1\.1 403 Forbidden/, out);
      assert.match(out, /"code":"permission_denied"/);
      assert.doesNotMatch(out, new RegExp(t.orgA.id));
    }
    const refused = ledger.filter((r) => r.caller.sandboxId === id && r.entry.host === "warren-api");
    assert.ok(refused.length >= 4);
    assert.ok(refused.every((r) => !JSON.stringify(r.entry).includes(otherToken)));
    assert.doesNotMatch(t.logs(), new RegExp(otherToken));
  });

  it("switches live between the three modes, with receipts naming the rules", async () => {
    assert.equal((await setAllowlist(["allowed.test"])).status, 200);
    const id = await create("gateway_only");
    const viaGateway = () => viaProxy(id, `http://allowed.test:${peer.httpPort}/g`);
    const direct = () => sh(id, `nc -w 2 ${peer.address} ${peer.port} 2>&1; echo done`);
    const patch = async (mode: string) => {
      const res = await t.request("PATCH", `/v1/sandboxes/${id}`, { key: owner(), body: { network_access: mode } });
      assert.equal(res.status, 200, res.raw);
      return res.body.network_access_receipt as { network_access: string; policies: { policy_name: string }[] };
    };
    assert.match(await viaGateway(), /^peer GET \/g/m);
    assert.doesNotMatch(await direct(), /pong/);

    const toPublic = await patch("public");
    assert.equal(toPublic.network_access, "public");
    assert.equal(await direct(), "pong\ndone\n");
    assert.match(await viaGateway(), /^peer GET \/g/m);

    const toNone = await patch("none");
    assert.equal(toNone.network_access, "none");
    assert.doesNotMatch(await direct(), /pong/);
    assert.match(await viaGateway(), /^FAIL/);

    const back = await patch("gateway_only");
    assert.equal(back.network_access, "gateway_only");
    assert.match(await viaGateway(), /^peer GET \/g/m);
    assert.doesNotMatch(await direct(), /pong/);
    const receipt = await fixture.driver.setNetwork(id, "gateway_only");
    assert.deepEqual(
      receipt.rules.map((r) => r.chain),
      ["sandbox_input"],
    );
    const publicReceipt = await fixture.driver.setNetwork(id, "public");
    assert.deepEqual(
      publicReceipt.rules.map((r) => r.chain),
      ["sandboxes", "sandboxes", "postrouting", "sandbox_input"],
    );
    assert.equal(publicReceipt.link?.sandboxAddress, receipt.link?.sandboxAddress, "the switch keeps the slot");
  });
});
