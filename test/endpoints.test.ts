// Port endpoints end to end on real runc sandboxes: the API, the reconciler, the local
// driver and the session plane (src/http/session-plane.ts) on a loopback port, reached with
// real HTTP clients and raw sockets. Servers in the sandboxes: busybox httpd, and the
// http-echo test image (test/support/http-echo.c: the forwarded head, a raw upgrade echo).
// One store (PGlite): nothing here differs between stores, and each sandbox costs time.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import type { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { type SessionPlane, startSessionPlane } from "../src/http/session-plane.js";
import type { TestApp } from "./harness.js";
import { openSession } from "./support/console-session.js";
import { eventually } from "./support/eventually.js";
import { pushHttpEchoImage } from "./support/http-echo.js";
import { startRuntimeApp } from "./support/runtime-app.js";

interface PlaneResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  json: Record<string, unknown>;
}

describe("port endpoints", () => {
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let plane: SessionPlane;
  let echoImage: string;
  const owner = () => t.orgA.keys.owner;

  before(async () => {
    fixture = await startRuntimeFixture("endpoints");
    echoImage = await pushHttpEchoImage(fixture.registry);
    ({ t, reconciler } = await startRuntimeApp("pglite", fixture));
    plane = await startSessionPlane(t.c.sessions, { host: "127.0.0.1", port: 0, log: t.c.log });
  });

  after(async () => {
    await plane?.close();
    await reconciler?.stop();
    await t?.close();
    await fixture?.cleanup();
  });

  const hostOf = (id: string, port: number) => `${port}-${id}.localhost:${plane.address.port}`;

  /** A request to the plane with the endpoint's Host header (sent to 127.0.0.1: no resolver needed). */
  const viaPlane = (
    host: string,
    path = "/",
    headers: Record<string, string> = {},
    method = "GET",
    body: Buffer | null = null,
  ) =>
    new Promise<PlaneResponse & { bytes: Buffer }>((resolve, reject) => {
      const req = http.request(
        { host: "127.0.0.1", port: plane.address.port, path, method, headers: { host, ...headers }, agent: false },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (chunk: Buffer) => chunks.push(chunk));
          res.on("end", () => {
            const bytes = Buffer.concat(chunks);
            const text = bytes.toString();
            let json: Record<string, unknown> = {};
            try {
              json = JSON.parse(text) as Record<string, unknown>;
            } catch {}
            resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json, bytes });
          });
        },
      );
      req.on("error", reject);
      req.end(body ?? undefined);
    });

  const assertRefused = (res: PlaneResponse, status: number, code: string) => {
    assert.equal(res.status, status, res.text);
    assert.equal(res.json.code, code, res.text);
    assert.equal(typeof res.json.message, "string");
    assert.match(String(res.json.request_id), /^req_/);
    assert.deepEqual(Object.keys(res.json).sort(), ["code", "message", "request_id"]);
  };

  const create = async (body: Record<string, unknown>) => {
    const res = await t.request("POST", "/v1/sandboxes", { key: owner(), body });
    assert.equal(res.status, 200, res.raw);
    return res.body.id as string;
  };

  const sandbox = async (id: string, wait?: string) => {
    const res = await t.request("GET", `/v1/sandboxes/${id}`, {
      key: owner(),
      ...(wait ? { query: { wait_state: wait, wait_timeout_seconds: "25" } } : {}),
    });
    assert.equal(res.status, 200, res.raw);
    return res.body.sandbox as { state: string; endpoints: { port: number; url: string }[] } & Record<string, unknown>;
  };

  /** Polls GetSandbox until `endpoints` lists `port` (the server inside takes a moment to bind). */
  const endpointsOnce = async (id: string, port: number) => {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const view = await sandbox(id);
      if (view.endpoints.some((e) => e.port === port)) return view.endpoints;
      if (Date.now() > deadline) assert.fail(`no endpoint for port ${port}: ${JSON.stringify(view)}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };

  const tokenFor = async (id: string, port: number, key = owner()) =>
    t.request("POST", `/v1/sandboxes/${id}/endpoints/${port}:token`, { key, body: {} });

  it("reports the plane's URL in GetServiceConfig", async () => {
    const res = await t.request("GET", "/v1/service-config");
    assert.equal(res.body.session_plane_url, `http://localhost:${plane.address.port}`);
  });

  it("serves busybox httpd to an API key and a token of its organization, and refuses everything else", async () => {
    const script =
      "mkdir -p /tmp/www && echo hello-from-httpd > /tmp/www/index.html && exec busybox httpd -f -p 8080 -h /tmp/www";
    const id = await create({ command: ["sh", "-c", script], ports: [8080, 9090], network_access: "public" });
    await sandbox(id, "running");
    const endpoints = await endpointsOnce(id, 8080);
    // 9090 is among `ports` but nothing listens on it: no endpoint.
    assert.deepEqual(endpoints, [{ port: 8080, url: `http://${hostOf(id, 8080)}/` }]);
    const host = hostOf(id, 8080);

    const byKey = await viaPlane(host, "/", { authorization: `Bearer ${owner()}` });
    assert.equal(byKey.status, 200, byKey.text);
    assert.equal(byKey.text, "hello-from-httpd\n");
    assert.equal((await viaPlane(host, "/", { authorization: `Bearer ${t.orgA.keys.member}` })).status, 200);

    // Missing, unknown and wrongly placed credentials.
    const missing = await viaPlane(host);
    assertRefused(missing, 401, "unauthenticated");
    assert.match(String(missing.headers["www-authenticate"]), /^Bearer/);
    assertRefused(await viaPlane(host, "/", { authorization: "Bearer wk_nope" }), 401, "unauthenticated");
    assertRefused(await viaPlane(host, `/?warren_token=${owner()}`), 401, "unauthenticated");
    assertRefused(await viaPlane(host, "/", { cookie: `warren_endpoint_token=${owner()}` }), 401, "unauthenticated");

    // Another organization's key reads exactly like an unknown sandbox.
    const otherOrg = await viaPlane(host, "/", { authorization: `Bearer ${t.orgB.keys.owner}` });
    assertRefused(otherOrg, 404, "not_found");
    const unknownId = `sbx-${randomBytes(20).toString("hex")}`;
    const unknown = await viaPlane(hostOf(unknownId, 8080), "/", { authorization: `Bearer ${t.orgB.keys.owner}` });
    assertRefused(unknown, 404, "not_found");
    assert.equal(otherOrg.json.message, unknown.json.message);

    // A port not in `ports`, a listed port nothing answers on, a host that names no endpoint.
    assertRefused(await viaPlane(hostOf(id, 8081), "/", { authorization: `Bearer ${owner()}` }), 404, "not_found");
    const silent = await viaPlane(hostOf(id, 9090), "/", { authorization: `Bearer ${owner()}` });
    assertRefused(silent, 503, "unavailable");
    assert.equal(silent.headers["retry-after"], "1");
    assertRefused(
      await viaPlane(`localhost:${plane.address.port}`, "/", { authorization: `Bearer ${owner()}` }),
      404,
      "not_found",
    );

    // A sandbox-scoped credential opens no endpoint and issues no token, even for its own sandbox.
    const scoped = await t.issueKey(t.orgA, { sandbox: { sandboxId: id, lineagePath: id } });
    assertRefused(await viaPlane(host, "/", { authorization: `Bearer ${scoped.key}` }), 403, "permission_denied");
    assert.equal((await tokenFor(id, 8080, scoped.key)).status, 403);

    // Tokens: issued for one port of one sandbox.
    const issued = await tokenFor(id, 8080);
    assert.equal(issued.status, 200, issued.raw);
    const token = issued.body.token as string;
    assert.match(token, /^wst1\./);
    assert.equal(issued.body.url, `http://${host}/?warren_token=${encodeURIComponent(token)}`);
    const ttl = Date.parse(String(issued.body.expires_at)) - Date.now();
    assert.ok(ttl > 800_000 && ttl <= 900_000, `default lifetime 900 s, got ${ttl} ms`);
    assert.equal((await tokenFor(id, 8081)).status, 404, "a port not in ports gets no token");
    assert.equal((await tokenFor(id, 8080, t.orgB.keys.owner)).status, 404, "another org's sandbox is not found");
    const badTtl = await t.request("POST", `/v1/sandboxes/${id}/endpoints/8080:token`, {
      key: owner(),
      body: { ttl_seconds: 86_401 },
    });
    assert.equal(badTtl.status, 400, badTtl.raw);

    const byToken = await viaPlane(host, "/", { authorization: `Bearer ${token}` });
    assert.equal(byToken.text, "hello-from-httpd\n");
    assertRefused(
      await viaPlane(hostOf(id, 9090), "/", { authorization: `Bearer ${token}` }),
      403,
      "permission_denied",
    );
    assertRefused(
      await viaPlane(hostOf(unknownId, 8080), "/", { authorization: `Bearer ${token}` }),
      403,
      "permission_denied",
    );
    const tampered = `${token.slice(0, -2)}${token.endsWith("AA") ? "BB" : "AA"}`;
    assertRefused(await viaPlane(host, "/", { authorization: `Bearer ${tampered}` }), 401, "unauthenticated");

    // A query-parameter token becomes a cookie of this host, and the redirect drops it from the URL.
    const redirected = await viaPlane(host, `/index.html?a=1&warren_token=${encodeURIComponent(token)}`);
    assert.equal(redirected.status, 302, redirected.text);
    assert.equal(redirected.headers.location, "/index.html?a=1");
    const cookie = String(redirected.headers["set-cookie"]);
    assert.match(cookie, /^warren_endpoint_token=wst1\.[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Lax$/);
    const byCookie = await viaPlane(host, "/index.html?a=1", { cookie: cookie.split(";")[0] as string });
    assert.equal(byCookie.status, 200);
    assert.equal(byCookie.text, "hello-from-httpd\n");

    // An absolute-form target would turn the redirect into an open one: refused.
    const absolute = await rawExchange(
      plane.address.port,
      `GET http://evil.example/?warren_token=${token} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
      null,
    );
    assert.match(absolute, /^HTTP\/1\.1 400 /);
    assert.doesNotMatch(absolute, /evil\.example/);

    // Nothing of the credentials reached the log.
    assert.ok(!t.logs().includes(owner()) && !t.logs().includes(token), "no credential in the log");

    // A stopped sandbox serves nothing (and lists no endpoint).
    const stopped = await t.request("PATCH", `/v1/sandboxes/${id}`, { key: owner(), body: { state: "stopped" } });
    assert.equal(stopped.status, 200, stopped.raw);
    assert.deepEqual((await sandbox(id, "stopped")).endpoints, []);
    // The plane keeps a 1 s view of the row: it refuses once that view is past.
    const notRunning = await eventually("the plane seeing the stop", async () => {
      const answer = await viaPlane(host, "/", { authorization: `Bearer ${owner()}` });
      return answer.status === 409 && answer;
    }).catch(() => viaPlane(host, "/", { authorization: `Bearer ${owner()}` }));
    assertRefused(notRunning, 409, "sandbox_not_running");
  });

  it("forwards without Warren's credential and passes a raw upgrade through both ways", async () => {
    const id = await create({ image: echoImage, ports: [8080], network_access: "public" });
    await sandbox(id, "running");
    await endpointsOnce(id, 8080);
    const host = hostOf(id, 8080);

    const head = await viaPlane(host, "/headers?x=1", { authorization: `Bearer ${owner()}`, cookie: "app=1" });
    assert.equal(head.status, 200, head.text);
    assert.match(head.text, /^GET \/headers\?x=1 HTTP\/1\.1\r\n/);
    assert.doesNotMatch(head.text, /authorization/i);
    assert.match(head.text, /\r\nCookie: app=1\r\n/i);
    assert.match(head.text, new RegExp(`\\r\\nX-Forwarded-Host: ${host.replace(/\./g, "\\.")}\\r\\n`));
    assert.match(head.text, /\r\nX-Forwarded-For: 127\.0\.0\.1\r\n/);

    // With the token in its cookie, the app's own Authorization header is its business.
    const token = (await tokenFor(id, 8080)).body.token as string;
    const own = await viaPlane(host, "/headers", {
      authorization: "Basic YXBwOmFwcA==",
      cookie: `app=1; warren_endpoint_token=${token}; other=2`,
    });
    assert.equal(own.status, 200, own.text);
    assert.match(own.text, /\r\nauthorization: Basic YXBwOmFwcA==\r\n/i);
    // An API key sent along with the token (an SDK adding it to every request) stays out.
    const withKey = await viaPlane(host, "/headers", {
      authorization: `Bearer ${owner()}`,
      cookie: `warren_endpoint_token=${token}`,
    });
    assert.equal(withKey.status, 200, withKey.text);
    assert.ok(!withKey.text.includes(owner()), "the API key is not forwarded");
    // Nor in any other form: no scheme, quoted, Basic, another header, a cookie of the app's,
    // the console's session cookie (issue 28) under either of its names.
    const sessionToken = token;
    const consoleSession = await openSession(t, owner());
    for (const [name, value] of [
      ["cookie", consoleSession.cookie],
      ["cookie", `__Host-warren_console=${consoleSession.secret}`],
      ["authorization", owner()],
      ["authorization", `Bearer "${owner()}"`],
      ["authorization", `"${owner()}"`],
      ["authorization", `Token ${sessionToken}`],
      ["authorization", `Basic ${Buffer.from(`user:${owner()}`).toString("base64")}`],
      ["x-api-key", owner()],
      ["cookie", `api_key="${owner()}"`],
      ["cookie", `api_key=${encodeURIComponent(sessionToken)}`],
    ] as const) {
      const headers: Record<string, string> = { [name]: value };
      const cookie = `warren_endpoint_token=${token}; app=1`;
      headers.cookie = name === "cookie" ? `${value}; ${cookie}` : cookie;
      const leaked = await viaPlane(host, "/headers", headers);
      assert.equal(leaked.status, 200, leaked.text);
      assert.ok(!leaked.text.includes(owner()), `${name}: ${value} is not forwarded: ${leaked.text}`);
      assert.ok(!leaked.text.includes(consoleSession.secret), `${name}: the console's session is not forwarded`);
      assert.ok(!leaked.text.includes(sessionToken), `${name}: ${value} is not forwarded`);
      assert.ok(!leaked.text.includes(encodeURIComponent(sessionToken)), `${name}: ${value} is not forwarded`);
      assert.match(leaked.text, /\r\nCookie: app=1\r\n/i, "the app's own cookie still is");
    }
    assert.match(own.text, /\r\nCookie: app=1; other=2\r\n/i);
    assert.ok(!own.text.includes(token), "the token is not forwarded");

    // A 4 MiB body streamed in and back out; a response head over 16 KiB and a request head over it.
    const payload = randomBytes(4 * 1_048_576);
    const echoed = await viaPlane(host, "/echo", { authorization: `Bearer ${owner()}` }, "POST", payload);
    assert.equal(echoed.status, 200);
    assert.ok(echoed.bytes.equals(payload), "the body came back byte for byte");
    assertRefused(await viaPlane(host, "/bigheader", { authorization: `Bearer ${owner()}` }), 503, "unavailable");
    const hugeHead = await viaPlane(host, "/", { authorization: `Bearer ${owner()}`, "x-pad": "p".repeat(20_000) });
    assert.equal(hugeHead.status, 431);
    // The plane and the sandbox's server still serve after both.
    assert.equal((await viaPlane(host, "/", { authorization: `Bearer ${owner()}` })).text, "hello");

    // A raw upgrade: 101 from the sandbox, then bytes echoed through the plane.
    const upgraded = await rawExchange(
      plane.address.port,
      `GET /ws HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
      "ping-through-the-plane",
    );
    assert.match(upgraded, /^HTTP\/1\.1 101 Switching Protocols\r\n/);
    assert.ok(upgraded.endsWith("\r\n\r\nping-through-the-plane"), upgraded);
    // The cookie from a page of another sandbox's endpoint (same site to a browser): refused.
    const cookieUpgrade = (origin: string) =>
      rawExchange(
        plane.address.port,
        `GET /ws HTTP/1.1\r\nHost: ${host}\r\nCookie: warren_endpoint_token=${token}\r\nOrigin: ${origin}\r\n` +
          "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        "ping-with-the-cookie",
      );
    const foreignOrigin = `http://${hostOf(`sbx-${"0".repeat(40)}`, 8080)}`;
    assert.match(await cookieUpgrade(foreignOrigin), /^HTTP\/1\.1 403 /);
    assert.match(await cookieUpgrade("http://evil.example"), /^HTTP\/1\.1 403 /);
    assert.match(await cookieUpgrade("null"), /^HTTP\/1\.1 403 /);
    const foreignPost = await viaPlane(
      host,
      "/echo",
      { cookie: `warren_endpoint_token=${token}`, origin: foreignOrigin },
      "POST",
      Buffer.from("x"),
    );
    assertRefused(foreignPost, 403, "permission_denied");
    const refused = await rawExchange(
      plane.address.port,
      `GET /ws HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
      null,
    );
    assert.match(refused, /^HTTP\/1\.1 401 /);
    assert.match(refused, /"code":"unauthenticated"/);
  });

  it("never redirects off the endpoint's origin, and keeps the sandbox's cookies on it", async () => {
    const cgi =
      "printf 'Content-Type: text/plain\\r\\nSet-Cookie: tossed=1; Domain=localhost; Path=/\\r\\nSet-Cookie: own=2; path=/; DOMAIN=.localhost\\r\\n\\r\\nok'";
    const script =
      "mkdir -p /tmp/www/cgi-bin && echo hi > /tmp/www/index.html && " +
      `printf '#!/bin/sh\\n%s\\n' "${cgi.replaceAll('"', '\\"')}" > /tmp/www/cgi-bin/c && chmod +x /tmp/www/cgi-bin/c && ` +
      "exec busybox httpd -f -p 8080 -h /tmp/www";
    const id = await create({ command: ["sh", "-c", script], ports: [8080], network_access: "public" });
    await sandbox(id, "running");
    await endpointsOnce(id, 8080);
    const host = hostOf(id, 8080);
    const token = (await tokenFor(id, 8080)).body.token as string;
    // `/\\evil.example` is a path to the plane, but a browser resolves it as a Location to evil.example.
    for (const target of ["/\\evil.example/", "/\\/evil.example/", "//evil.example/"]) {
      const answer = await rawExchange(
        plane.address.port,
        `GET ${target}?warren_token=${token} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
        null,
      );
      assert.match(answer, /^HTTP\/1\.1 400 /, `${target}: ${answer}`);
      assert.doesNotMatch(answer, /location:/i, target);
    }
    // A cookie for the plane's parent domain would reach every other endpoint: it stays host-only.
    const cookies = await viaPlane(host, "/cgi-bin/c", { authorization: `Bearer ${owner()}` });
    assert.equal(cookies.status, 200, cookies.text);
    const set = cookies.headers["set-cookie"] ?? [];
    assert.equal(set.length, 2, JSON.stringify(set));
    for (const cookie of set) assert.doesNotMatch(cookie, /domain/i, cookie);
    assert.match(String(set[0]), /^tossed=1; Path=\/$/);
  });

  it("refuses an upgrade answer head with a bare LF (a Set-Cookie with Domain hidden behind one never reaches the client)", async () => {
    const answer =
      "HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n" +
      "X-A: b\\nSet-Cookie: evil=1; Domain=localhost\\r\\n\\r\\n";
    const script = `while true; do printf '${answer}' | nc -l -p 8080; done`;
    const id = await create({ command: ["sh", "-c", script], ports: [8080], network_access: "public" });
    await sandbox(id, "running");
    await endpointsOnce(id, 8080);
    const upgraded = await rawExchange(
      plane.address.port,
      `GET /ws HTTP/1.1\r\nHost: ${hostOf(id, 8080)}\r\nAuthorization: Bearer ${owner()}\r\n` +
        "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
      null,
    );
    assert.doesNotMatch(upgraded, /domain=/i, upgraded);
    assert.match(upgraded, /^HTTP\/1\.1 503 /, upgraded);
    assert.match(upgraded, /"code":"unavailable"/, upgraded);
  });

  it("destroys connections whose request head misses its deadline, however they trickle bytes", async () => {
    const slow = await startSessionPlane(t.c.sessions, {
      host: "127.0.0.1",
      port: 0,
      log: t.c.log,
      headersTimeoutMs: 1_000,
    });
    /** A client from `localAddress` sending one more header byte every 100 ms: whether the plane closed it in `ms`. */
    const trickle = (localAddress: string, ms: number) =>
      new Promise<boolean>((resolve) => {
        const socket = net.connect({ host: "127.0.0.1", port: slow.address.port, localAddress });
        socket.on("error", () => undefined);
        socket.write("GET / HTTP/1.1\r\nHost: nothing.localhost\r\nX-Slow: ");
        const drip = setInterval(() => socket.writable && socket.write("a"), 100);
        const timer = setTimeout(() => finish(false), ms);
        const finish = (closed: boolean) => {
          clearInterval(drip);
          clearTimeout(timer);
          socket.destroy();
          resolve(closed);
        };
        socket.once("close", () => finish(true));
      });
    try {
      // 5 clients from each of 10 addresses, unauthenticated: every one is gone well within 30 s.
      const addresses = Array.from({ length: 10 }, (_, i) => `127.0.0.${i + 10}`);
      const closed = await Promise.all(
        addresses.flatMap((address) => Array.from({ length: 5 }, () => trickle(address, 30_000))),
      );
      assert.equal(closed.filter((ok) => !ok).length, 0, "every trickling connection was destroyed");
    } finally {
      await slow.close();
    }
  });

  it("caps the connections one organization holds through the plane; another organization still gets in", async () => {
    const limited = await startSessionPlane(t.c.sessions, {
      host: "127.0.0.1",
      port: 0,
      log: t.c.log,
      limits: { perOrganization: 2 },
    });
    const ours = await create({ image: echoImage, ports: [8080], network_access: "public" });
    const theirsRes = await t.request("POST", "/v1/sandboxes", {
      key: t.orgB.keys.owner,
      body: { image: echoImage, ports: [8080], network_access: "public" },
    });
    assert.equal(theirsRes.status, 200, theirsRes.raw);
    const theirs = theirsRes.body.id as string;
    const held: net.Socket[] = [];
    /** An upgrade through the limited plane: its answer head, and the socket (kept open). */
    const upgrade = (id: string, key: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect({ host: "127.0.0.1", port: limited.address.port });
        held.push(socket);
        let received = "";
        socket.on("data", (chunk: Buffer) => {
          received += chunk.toString();
          if (received.includes("\r\n\r\n")) resolve(received);
        });
        socket.on("error", reject);
        socket.on("close", () => resolve(received));
        socket.write(
          `GET /ws HTTP/1.1\r\nHost: 8080-${id}.localhost:${limited.address.port}\r\nAuthorization: Bearer ${key}\r\n` +
            "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        );
      });
    try {
      await sandbox(ours, "running");
      await endpointsOnce(ours, 8080);
      const theirsView = await t.request("GET", `/v1/sandboxes/${theirs}`, {
        key: t.orgB.keys.owner,
        query: { wait_state: "running", wait_timeout_seconds: "25" },
      });
      assert.equal((theirsView.body.sandbox as { state: string }).state, "running", theirsView.raw);
      for (let i = 0; i < 2; i++) assert.match(await upgrade(ours, owner()), /^HTTP\/1\.1 101 /);
      const third = await upgrade(ours, owner());
      assert.match(third, /^HTTP\/1\.1 429 /, third);
      assert.match(third, /"code":"rate_limited"/, third);
      assert.match(third, /\r\nretry-after: 1\r\n/i, third);
      // A plain request of the same organization waits its turn too.
      const plain = await new Promise<number>((resolve, reject) => {
        const req = http.request(
          {
            host: "127.0.0.1",
            port: limited.address.port,
            path: "/",
            headers: { host: `8080-${ours}.localhost:${limited.address.port}`, authorization: `Bearer ${owner()}` },
            agent: false,
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on("error", reject);
        req.end();
      });
      assert.equal(plain, 429);
      // Another organization's endpoint is not held up by it (its server may take a moment to bind).
      const deadline = Date.now() + 30_000;
      let theirsAnswer = await upgrade(theirs, t.orgB.keys.owner);
      while (!/^HTTP\/1\.1 101 /.test(theirsAnswer) && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 200));
        theirsAnswer = await upgrade(theirs, t.orgB.keys.owner);
      }
      assert.match(theirsAnswer, /^HTTP\/1\.1 101 /, theirsAnswer);
      // A closed upgrade gives its place back.
      held[0]?.destroy();
      const freedBy = Date.now() + 30_000;
      let again = "";
      while (!/^HTTP\/1\.1 101 /.test(again) && Date.now() < freedBy) {
        again = await upgrade(ours, owner());
        if (!/^HTTP\/1\.1 101 /.test(again)) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.match(again, /^HTTP\/1\.1 101 /, again);
    } finally {
      for (const socket of held) socket.destroy();
      await limited.close();
      await t.request("DELETE", `/v1/sandboxes/${theirs}`, { key: t.orgB.keys.owner });
      await t.request("DELETE", `/v1/sandboxes/${ours}`, { key: owner() });
    }
  });

  it("closes a client address's connections past its share at accept, and takes new ones once it holds fewer", async () => {
    const limited = await startSessionPlane(t.c.sessions, {
      host: "127.0.0.1",
      port: 0,
      log: t.c.log,
      limits: { overall: 100, perAddress: 2 },
    });
    const connect = () =>
      new Promise<net.Socket>((resolve, reject) => {
        const socket = net.connect(limited.address.port, "127.0.0.1", () => resolve(socket));
        socket.on("error", reject);
      });
    /** Whether the plane closes the socket (within 30 s) rather than keeping it. */
    const closedByPlane = (socket: net.Socket) =>
      new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), 30_000);
        socket.once("close", () => {
          clearTimeout(timer);
          resolve(true);
        });
      });
    /** A request on a fresh connection: the plane's answer status, or null when it closed the connection. */
    const ask = () =>
      new Promise<number | null>((resolve) => {
        const req = http.request(
          {
            host: "127.0.0.1",
            port: limited.address.port,
            path: "/",
            headers: { host: "nothing.localhost" },
            agent: false,
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on("error", () => resolve(null));
        req.end();
      });
    const held: net.Socket[] = [];
    try {
      held.push(await connect(), await connect());
      const third = await connect();
      third.on("error", () => undefined);
      assert.equal(await closedByPlane(third), true, "a third connection from the address is closed");
      assert.equal(await ask(), null, "and so is a request on one");
      assert.equal(held[0]?.destroyed, false, "the two held connections stay open");
      const gone = closedByPlane(held[0] as net.Socket);
      held[0]?.destroy();
      await gone;
      // The slot comes back with the close: the plane answers again (its own refusal of an unknown host).
      let status: number | null = null;
      for (const deadline = Date.now() + 30_000; status === null && Date.now() < deadline; ) {
        status = await ask();
        if (status === null) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.ok(status !== null && status >= 400 && status < 500, `the plane answered ${status}`);
    } finally {
      for (const socket of held) socket.destroy();
      await limited.close();
    }
  });

  it("keeps room for a new address while attackers on several addresses hold all the unauthenticated places they can; an upgraded connection is never evicted", async () => {
    const id = await create({ image: echoImage, ports: [8080], network_access: "public" });
    // Small caps: 5 attacker addresses x 10 connections would take every place of the plane.
    const limited = await startSessionPlane(t.c.sessions, {
      host: "127.0.0.1",
      port: 0,
      log: t.c.log,
      limits: { overall: 40, perAddress: 10, unauthenticated: 12, unauthenticatedPerAddress: 4 },
      // Attackers must not lose their places to the head deadline while the test runs.
      headersTimeoutMs: 300_000,
      metrics: t.c.metrics,
    });
    /** warren_connections_refused_total of the plane, for one reason. */
    const refusals = async (reason: string) => {
      const { body } = await t.c.metrics.scrape();
      const line = new RegExp(
        `^warren_connections_refused_total\\{server="session_plane",reason="${reason}"\\} (\\d+)$`,
        "m",
      );
      return Number(line.exec(body)?.[1] ?? 0);
    };
    const host = `8080-${id}.localhost:${limited.address.port}`;
    const sockets: net.Socket[] = [];
    try {
      await sandbox(id, "running");
      await endpointsOnce(id, 8080);
      // An authenticated WebSocket (upgraded) from its own address, open before the flood.
      const ws = net.connect({ host: "127.0.0.1", port: limited.address.port, localAddress: "127.0.0.50" });
      sockets.push(ws);
      ws.on("error", () => undefined);
      let received = "";
      ws.on("data", (chunk: Buffer) => {
        received += chunk.toString();
      });
      ws.write(
        `GET /ws HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${owner()}\r\n` +
          "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
      );
      const waitFor = async (what: string, ok: () => boolean) => {
        const deadline = Date.now() + 30_000;
        while (!ok()) {
          assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      };
      await waitFor("the upgrade's 101", () => received.includes("\r\n\r\n"));
      assert.match(received, /^HTTP\/1\.1 101 /, received);
      // The flood: 5 addresses, 10 connections each, none ever sending a byte.
      const attackers = Array.from({ length: 5 }, (_, a) => `127.0.0.${a + 20}`).flatMap((address) =>
        Array.from({ length: 10 }, () => {
          const socket = net.connect({ host: "127.0.0.1", port: limited.address.port, localAddress: address });
          socket.on("error", () => undefined);
          sockets.push(socket);
          return socket;
        }),
      );
      // Every attacker connection is in the accept queue before the legitimate client's.
      await waitFor("the attackers' connects", () => attackers.every((s) => !s.connecting));
      const legit = await new Promise<number | string>((resolve) => {
        const req = http.request(
          {
            host: "127.0.0.1",
            port: limited.address.port,
            localAddress: "127.0.0.99",
            path: "/headers",
            headers: { host, authorization: `Bearer ${owner()}` },
            agent: false,
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on("error", (error) => resolve(error.message));
        req.end();
      });
      assert.equal(legit, 200, "a client from a new address is served");
      // The attackers hold what the unauthenticated budget leaves them, and no more.
      await waitFor("the refused attackers' closes", () => attackers.filter((s) => !s.destroyed).length <= 12);
      assert.ok(
        attackers.some((s) => !s.destroyed),
        "the attackers keep some places",
      );
      assert.ok((await refusals("refused")) > 0, "connections closed at accept are counted");
      // The WebSocket was never a candidate for eviction: it still echoes.
      assert.equal(ws.destroyed, false);
      ws.write("still-here");
      await waitFor("the upgrade's echo", () => received.includes("still-here"));
    } finally {
      for (const socket of sockets) socket.destroy();
      await limited.close();
      await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
    }
  });

  it("answers 503 for a sandbox response with a status below 100, and keeps serving", async () => {
    const script =
      "while true; do printf 'HTTP/1.1 099 Odd\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nhi' | nc -l -p 8080; done";
    const id = await create({ command: ["sh", "-c", script], ports: [8080], network_access: "public" });
    await sandbox(id, "running");
    await endpointsOnce(id, 8080);
    const answer = await Promise.race([
      viaPlane(hostOf(id, 8080), "/", { authorization: `Bearer ${owner()}` }),
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 30_000)),
    ]);
    assert.ok(answer, "the plane answered");
    assertRefused(answer, 503, "unavailable");
  });

  it("frames a chunked request body again (a GET's raw body would be a second request on a pooled connection)", async () => {
    // A sandbox of its own: its pooled upstream connections are no other test's.
    const id = await create({ image: echoImage, ports: [8080], network_access: "public" });
    await sandbox(id, "running");
    await endpointsOnce(id, 8080);
    const smuggled = "GET /headers?smuggled=1 HTTP/1.1\r\nHost: x\r\n\r\n";
    const answer = await rawExchange(
      plane.address.port,
      `GET /headers HTTP/1.1\r\nHost: ${hostOf(id, 8080)}\r\nAuthorization: Bearer ${owner()}\r\n` +
        `Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`,
      null,
    );
    assert.match(answer, /^HTTP\/1\.1 200 /, answer);
    // The sandbox was told how the body is framed (it reads no request out of it then).
    assert.match(answer, /\r\nTransfer-Encoding: chunked\r\n/i, answer);
  });

  it("lists an endpoint only once the sandbox listens, counts traffic as session activity, and has none for `none`", async () => {
    const id = await create({ command: ["sleep", "3600"], ports: [8080], idle_timeout_seconds: 600 });
    await sandbox(id, "running");
    assert.deepEqual((await sandbox(id)).endpoints, []);
    // A server bound to loopback only is not reachable through the veth: still no endpoint.
    const local = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
      key: owner(),
      body: { cmd: ["sh", "-c", "busybox httpd -f -p 127.0.0.1:8080 -h /tmp </dev/null >/dev/null 2>&1 & echo $!"] },
    });
    assert.equal(local.body.exit, 0, local.raw);
    // A window of absence past the 1 s cache of listening ports: a wrongly listed one would show.
    await new Promise((resolve) => setTimeout(resolve, 1200));
    assert.deepEqual((await sandbox(id)).endpoints, []);
    const started = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
      key: owner(),
      body: { cmd: ["sh", "-c", `kill ${String(local.body.stdout).trim()}; sleep 0.2; busybox httpd -p 8080 -h /tmp`] },
    });
    assert.equal(started.body.exit, 0, started.raw);
    await endpointsOnce(id, 8080);
    const before = await sandbox(id);
    assert.equal((before.last_activity as { source: string }).source, "exec");
    const res = await viaPlane(hostOf(id, 8080), "/", { authorization: `Bearer ${owner()}` });
    assert.ok(res.status === 200 || res.status === 404, `httpd answered: ${res.status}`);
    const deadline = Date.now() + 30_000;
    let after = await sandbox(id);
    while ((after.last_activity as { source: string }).source !== "session" && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      after = await sandbox(id);
    }
    assert.equal((after.last_activity as { source: string }).source, "session");
    assert.ok(Date.parse(String(after.idle_deadline)) >= Date.parse(String(before.idle_deadline)));

    // Ports with network `none` are refused at create (issue 24), not only at use.
    const refused = await t.request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { command: ["sleep", "3600"], ports: [8080], network_access: "none" },
    });
    assert.equal(refused.status, 400, refused.raw);
    assert.equal(refused.body.code, "invalid_argument", refused.raw);
    const isolated = await create({ command: ["sleep", "3600"], network_access: "none" });
    await sandbox(isolated, "running");
    assert.deepEqual((await sandbox(isolated)).endpoints, []);
  });
});

/** Writes `request` on a raw connection, then `payload` after the reply's head; resolves with all read until quiet. */
function rawExchange(port: number, request: string, payload: string | null): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port });
    let received = "";
    let sent = false;
    const finish = () => {
      socket.destroy();
      resolve(received);
    };
    // Generous for the first answer (a loaded host), then until the exchange goes quiet.
    let quiet = setTimeout(finish, 30_000);
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString();
      if (payload !== null && !sent && received.includes("\r\n\r\n")) {
        sent = true;
        socket.write(payload);
      }
      clearTimeout(quiet);
      quiet = setTimeout(finish, payload !== null && received.endsWith(payload) ? 10 : 2000);
    });
    socket.on("error", reject);
    socket.on("close", () => {
      clearTimeout(quiet);
      resolve(received);
    });
    socket.write(request);
  });
}
