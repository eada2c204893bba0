// The server as `make run` runs it (the bundle, main.ts's wiring): it starts its egress
// gateway before the runtime, points the gateway's API relay at its own listener, and a
// gateway_only sandbox created with the API reaches the API through the gateway with its own
// credential, an allowlisted host through the proxy, and nothing else.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { startTestPeer, type TestPeer } from "../src/drivers/runtime/local/test-support.js";
import { type CrashRig, eventually, startCrashRig } from "./support/server-process.js";

const KEY = `wk_${randomBytes(24).toString("hex")}`;

describe("egress through the server process", () => {
  let rig: CrashRig;
  let peer: TestPeer;
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`http://127.0.0.1:${rig.server.port}${path}`, {
      method,
      headers: { authorization: `Bearer ${KEY}`, ...(body ? { "content-type": "application/json" } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  before(async () => {
    peer = await startTestPeer();
    rig = await startCrashRig("egress-server", KEY, (busybox) => ({
      WARREN_DEFAULT_IMAGE: busybox,
      WARREN_SANDBOX_POOL_SIZE: "0",
      WARREN_EGRESS_GATEWAY_PORT: "0",
      WARREN_EGRESS_HOSTS: `allowed.test=${peer.address},other.test=${peer.address}`,
    }));
    await rig.server.start();
  });
  after(async () => {
    await rig?.cleanup();
    await peer?.stop();
  });

  it("serves a gateway_only sandbox its API and its allowlist, nothing else", async () => {
    const org = "default";
    const allow = await call("PUT", `/v1/admin/organizations/${org}/egress-allowlist`, { hosts: ["allowed.test"] });
    assert.equal(allow.status, 200, JSON.stringify(allow.body));
    const created = await call("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "gateway_only" });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    const id = created.body.id as string;
    await eventually(
      "the sandbox to run",
      async () => ((await call("GET", `/v1/sandboxes/${id}`)).body.sandbox as { state: string }).state === "running",
      60_000,
    );
    const sh = async (script: string) => {
      const res = await call("POST", `/v1/sandboxes/${id}:exec`, { cmd: ["sh", "-c", script] });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      return res.body.stdout as string;
    };
    const via = (head: string) => sh(`printf "${head}" | nc -w 5 169.254.213.1 80 2>/dev/null || true`);
    const whoami = await via("GET /v1/whoami HTTP/1.0\\r\\nAuthorization: Bearer $WARREN_SANDBOX_TOKEN\\r\\n\\r\\n");
    assert.match(whoami, /^HTTP\/1\.1 200 /, whoami);
    assert.match(whoami, new RegExp(id));
    const theirs = await via(`GET /v1/whoami HTTP/1.0\\r\\nAuthorization: Bearer ${KEY}\\r\\n\\r\\n`);
    assert.match(theirs, /^HTTP\/1\.1 403 /, theirs);
    const allowed = await via(
      `GET http://allowed.test:${peer.httpPort}/a HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n`,
    );
    // The proxy sends the request target's authority as Host.
    assert.match(allowed, new RegExp(`^peer GET /a host=allowed\\.test:${peer.httpPort}$`, "m"), allowed);
    const other = await via(`GET http://other.test:${peer.httpPort}/a HTTP/1.0\\r\\nHost: other.test\\r\\n\\r\\n`);
    assert.match(other, /^HTTP\/1\.1 403 [\s\S]*not_allowlisted/, other);
    assert.doesNotMatch(await sh(`nc -w 2 ${peer.address} ${peer.port} 2>&1; echo done`), /pong/);
    assert.equal((await call("DELETE", `/v1/sandboxes/${id}`)).status, 202);
  });
});
