// Secret egress without a sandbox: bindings admitted at create, and the interceptor driven
// through a loopback CONNECT proxy that plays the egress gateway, against a real HTTPS
// upstream trusted through WARREN_EGRESS_EXTRA_CA_FILE. The sandbox-side client trusts only
// the deployment's egress CA. (The end-to-end test with curl inside a sandbox is
// sandbox-egress.test.ts, once the gateway runs.)
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { loadConfig } from "../src/config.js";
import type { EgressCaller } from "../src/modules/egress/types.js";
import { forEachStore } from "./harness.js";
import { assertError } from "./support/assertions.js";
import {
  makeTestPki,
  openTunnel,
  startTestGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from "./support/egress.js";
import { eventually } from "./support/eventually.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";

const BOUND = "api.upstream-one.com";
const OTHER = "other.upstream-two.com";
const MODEL = "model.gateway-three.com";
const IMPOSTOR = "api.impostor-four.com";
const GUARDED = "api.guarded-five.com";
const CRLF = "api.crlf-six.com";
const IDLE = "api.idle-seven.com";
const pki = makeTestPki();
after(() => pki.remove());

forEachStore(
  "secret egress",
  (t) => {
    let upstream: TestUpstream;
    let impostor: TestUpstream;
    let brief: TestUpstream;
    let gateway: TestGateway;
    let guardGateway: TestGateway;
    let caller: EgressCaller;
    let guardCaller: EgressCaller;
    let secretId: string;
    const value = `sk-live-${"q".repeat(20)}-${Date.now()}`;
    const owner = () => t().orgA.keys.owner;

    const createSecret = async (body: Record<string, unknown>) => {
      const res = await t().request("POST", "/v1/secrets", { key: owner(), body });
      assert.equal(res.status, 200, res.raw);
      return (res.body.secret as { id: string }).id;
    };
    const createSandbox = (secrets: string[], key = owner()) =>
      t().request("POST", "/v1/sandboxes", { key, body: { secrets: secrets.map((name) => ({ name })) } });
    const sql = async (query: string) => {
      const res = await t().request("POST", "/v1/telemetry/sql", { key: owner(), body: { sql: query } });
      assert.equal(res.status, 200, res.raw);
      return res.body.rows as unknown[][];
    };
    const get = (path: string, extra = "") => `GET ${path} HTTP/1.1\r\nHost: ${BOUND}\r\n${extra}\r\n`;

    before(async () => {
      upstream = await startUpstream(pki.leaf([BOUND, OTHER, MODEL, GUARDED]));
      impostor = await startUpstream(pki.leaf([BOUND], { selfSigned: true }));
      brief = await startUpstream(pki.leaf([IDLE]), 150);
      secretId = await createSecret({ name: "upstream-token", value, dest_host: BOUND });
      const created = await createSandbox(["upstream-token"]);
      assert.equal(created.status, 200, created.raw);
      const id = created.body.id as string;
      const row = await t().c.sandboxes.secretBindingsOf(id);
      assert.ok(row);
      caller = {
        sandboxId: id,
        orgId: t().orgA.id,
        projectId: t().orgA.defaultProjectId,
        runId: created.body.run_id as string,
        mode: "gateway_only",
      };
      gateway = await startTestGateway(t().c.secretEgress, caller, { [BOUND]: upstream.port, [OTHER]: upstream.port });
      // A second sandbox: one secret for a host whose server is not trusted, one for the guards.
      await createSecret({ name: "impostor-token", value: `${value}-imp`, dest_host: IMPOSTOR });
      await createSecret({ name: "guarded-token", value: `${value}-grd`, dest_host: GUARDED });
      await createSecret({ name: "crlf-token", value: "abc\r\nX-Injected: 1", dest_host: CRLF });
      await createSecret({ name: "idle-token", value: `${value}-idl`, dest_host: IDLE });
      const second = await createSandbox(["impostor-token", "guarded-token", "crlf-token", "idle-token"]);
      assert.equal(second.status, 200, second.raw);
      guardCaller = { ...caller, sandboxId: second.body.id as string, runId: second.body.run_id as string };
      guardGateway = await startTestGateway(t().c.secretEgress, guardCaller, {
        [IMPOSTOR]: impostor.port,
        [GUARDED]: upstream.port,
        [CRLF]: upstream.port,
        [IDLE]: brief.port,
      });
    });
    after(async () => {
      await gateway?.close();
      await guardGateway?.close();
      await upstream?.close();
      await impostor?.close();
      await brief?.close();
    });

    it("stores the admitted binding on the sandbox row, never the value", async () => {
      const row = await t().c.sandboxes.secretBindingsOf(caller.sandboxId);
      assert.deepEqual(row?.bindings, [
        {
          name: "upstream-token",
          secret_id: secretId,
          delivery: "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS",
          dest_host: BOUND,
          subject_kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER",
          subject_id: t().orgA.principalIds.owner,
        },
      ]);
      const shown = await t().request("GET", `/v1/sandboxes/${caller.sandboxId}`, { key: owner() });
      assert.equal(shown.status, 200);
      assert.ok(!shown.raw.includes(value));
      assert.deepEqual(await t().c.secretEgress.hostsFor(caller), [BOUND]);
      assert.equal(await t().c.secretEgress.wants(caller, BOUND, 443), true);
      assert.equal(await t().c.secretEgress.wants(caller, "API.UPSTREAM-ONE.COM", 443), true);
      assert.equal(await t().c.secretEgress.wants(caller, BOUND, 80), false, "only HTTPS");
      assert.equal(await t().c.secretEgress.wants(caller, OTHER, 443), false);
      assert.equal(await t().c.secretEgress.wants(caller, `x.${BOUND}`, 443), false, "only the exact host");
      // Another organization's caller naming this sandbox gets nothing.
      assert.deepEqual(await t().c.secretEgress.hostsFor({ ...caller, orgId: t().orgB.id }), []);
    });

    it("refuses bindings that are unknown, ungranted, revoked, sandbox-environment or another org's", async () => {
      const envSecret = await createSecret({
        name: "env-only",
        value: "e",
        delivery: "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT",
      });
      assert.ok(envSecret);
      const revoked = await createSecret({ name: "revoked-one", value: "r", dest_host: "api.revoked-host.com" });
      assert.equal((await t().request("POST", `/v1/secrets/${revoked}:revoke`, { key: owner() })).status, 200);
      const orgBSecret = await t().request("POST", "/v1/secrets", {
        key: t().orgB.keys.owner,
        body: { name: "org-b-only", value: "b", dest_host: "api.org-b-host.com" },
      });
      assert.equal(orgBSecret.status, 200);
      for (const name of ["no-such-secret", "env-only", "revoked-one", "org-b-only"]) {
        const res = await createSandbox([name]);
        assertError(res, 400, "invalid_argument");
        assert.ok(!res.raw.includes(value));
      }
      // The owner created upstream-token; the member holds no grant on it.
      assertError(await createSandbox(["upstream-token"], t().orgA.keys.member), 400, "invalid_argument");
      assertError(await createSandbox(["upstream-token", "upstream-token"]), 400, "invalid_argument");
      // Granting the member makes the same create pass.
      const grant = await t().request("POST", `/v1/secrets/${secretId}/grants`, {
        key: owner(),
        body: { subject_kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", subject_id: t().orgA.principalIds.member },
      });
      assert.equal(grant.status, 200, grant.raw);
      assert.equal((await createSandbox(["upstream-token"], t().orgA.keys.member)).status, 200);
    });

    it("binds a MODEL_GATEWAY secret to the configured model-gateway host, and refuses it without one", async () => {
      await createSecret({
        name: "model-key",
        value: "m-value",
        delivery: "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY",
        dest_host: "api.some-model-vendor.com",
      });
      const created = await createSandbox(["model-key"]);
      assert.equal(created.status, 200, created.raw);
      const row = await t().c.sandboxes.secretBindingsOf(created.body.id as string);
      assert.equal(row?.bindings[0]?.dest_host, MODEL);
      assert.equal(row?.bindings[0]?.delivery, "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY");
      const cred = await t().c.identity.authenticate(owner());
      await assert.rejects(t().c.secrets.bindForSandbox(cred, ["model-key"], ""), { code: "unsupported_capability" });
    });

    it("injects the bound secret over a kept-alive connection, replacing the sandbox's own Authorization", async () => {
      const before = upstream.received.length;
      const tunnel = await openTunnel(gateway.port, BOUND, t().c.egressCa.certificatePem);
      try {
        const first = await tunnel.send(get("/plain", "Authorization: Bearer sandbox-made-this-up\r\n"));
        assert.equal(first.status, 200);
        assert.equal(first.body.toString(), "ok 0");
        const body = "x".repeat(3000);
        const chunked =
          `POST /upload HTTP/1.1\r\nHost: ${BOUND}\r\nTransfer-Encoding: chunked\r\n\r\n` +
          `7d0\r\n${body.slice(0, 2000)}\r\n3e8\r\n${body.slice(2000)}\r\n0\r\n\r\n`;
        const second = await tunnel.send(chunked);
        assert.equal(second.body.toString(), "ok 3000");
        const sized = await tunnel.send(`PUT /sized HTTP/1.1\r\nHost: ${BOUND}\r\nContent-Length: 5\r\n\r\nhello`);
        assert.equal(sized.body.toString(), "ok 5");
      } finally {
        tunnel.close();
      }
      const got = upstream.received.slice(before);
      assert.equal(got.length, 3);
      for (const r of got) assert.equal(r.authorization, `Bearer ${value}`);
      assert.equal(got[1]?.body.length, 3000);
      assert.equal(got[2]?.body.toString(), "hello");
    });

    it("sends nothing to a host without a binding", async () => {
      const before = upstream.received.length;
      // The gateway tunnels it: the sandbox then speaks TLS to the upstream itself.
      const tunnel = await openTunnel(gateway.port, OTHER, pki.caPem);
      try {
        const res = await tunnel.send(`GET /echo HTTP/1.1\r\nHost: ${OTHER}\r\n\r\n`);
        assert.equal(res.status, 200);
        assert.equal(res.body.toString(), "you sent  and that is all");
      } finally {
        tunnel.close();
      }
      assert.equal(upstream.received.slice(before)[0]?.authorization, undefined);
    });

    it("scrubs an echoed value from headers and bodies, across chunk boundaries", async () => {
      const tunnel = await openTunnel(gateway.port, BOUND, t().c.egressCa.certificatePem);
      try {
        const echo = await tunnel.send(get("/echo"));
        assert.equal(echo.status, 200);
        assert.ok(!echo.head.includes(value) && !echo.body.includes(value), echo.head + echo.body.toString());
        assert.match(echo.body.toString(), /^you sent Bearer \*+ and that is all$/);
        for (const split of [1, 2, 5, 7, 64]) {
          const res = await tunnel.send(get(`/echo-chunked?split=${split}`));
          assert.ok(!res.body.includes(value), `split ${split}: ${res.body}`);
          assert.equal(res.body.length, `before Bearer ${value} after`.length);
        }
      } finally {
        tunnel.close();
      }
    });

    it("scrubs an echo of the value in JSON, URL and compressed forms, not only byte for byte", async () => {
      const ENCODED = "api.encoded-eight.com";
      // Characters API keys do carry (base64's + / =) and ones JSON escapes.
      const tricky = `sk/"esc\\aped+${Date.now()}=`;
      await createSecret({ name: "encoded-token", value: tricky, dest_host: ENCODED });
      const created = await createSandbox(["encoded-token"]);
      assert.equal(created.status, 200, created.raw);
      const encodedCaller = { ...caller, sandboxId: created.body.id as string, runId: created.body.run_id as string };
      const echo = await startUpstream(pki.leaf([ENCODED]));
      const encodedGateway = await startTestGateway(t().c.secretEgress, encodedCaller, { [ENCODED]: echo.port });
      const forms = [
        tricky,
        JSON.stringify(tricky).slice(1, -1),
        JSON.stringify(tricky).slice(1, -1).replaceAll("/", "\\/"),
        encodeURIComponent(tricky),
        encodeURIComponent(tricky).toLowerCase(),
      ];
      try {
        const tunnel = await openTunnel(encodedGateway.port, ENCODED, t().c.egressCa.certificatePem);
        try {
          for (const path of ["/echo-json", "/echo-json-plain", "/echo-url"]) {
            const res = await tunnel.send(`GET ${path} HTTP/1.1\r\nHost: ${ENCODED}\r\n\r\n`);
            const seen = res.head + res.body.toString("latin1");
            for (const form of forms) assert.ok(!seen.includes(form), `${path} leaks ${form}: ${seen}`);
          }
        } finally {
          tunnel.close();
        }
        // A body compressed against Accept-Encoding: identity cannot be scrubbed: it never reaches the sandbox.
        const gz = await openTunnel(encodedGateway.port, ENCODED, t().c.egressCa.certificatePem);
        try {
          const res = await gz.send(`GET /echo-gzip HTTP/1.1\r\nHost: ${ENCODED}\r\n\r\n`);
          assert.equal(res.status, 502, res.head);
          assert.ok(!res.body.includes(Buffer.from([0x1f, 0x8b])), "no gzip body");
        } finally {
          gz.close();
        }
      } finally {
        await encodedGateway.close();
        await echo.close();
      }
    });

    it("refuses a request target with control bytes (a lenient upstream would read a bare CR as a line end)", async () => {
      const before = upstream.received.length;
      for (const target of ["/a\rHost:\tevil.example\rX:\t", "/a\x00b", "/a\x7fb", "/caf\xe9"]) {
        const tunnel = await openTunnel(gateway.port, BOUND, t().c.egressCa.certificatePem);
        try {
          const res = await tunnel.send(Buffer.from(`GET ${target} HTTP/1.1\r\nHost: ${BOUND}\r\n\r\n`, "latin1"));
          assert.equal(res.status, 400, JSON.stringify(target));
          assert.match(res.head, /x-warren-egress: malformed_request_line/i, JSON.stringify(target));
        } finally {
          tunnel.close();
        }
      }
      assert.equal(upstream.received.length, before, "nothing reached the upstream with the secret");
    });

    it("uses a rotated value and refuses a revoked one on the next request of the same connection", async () => {
      const rotatedValue = `${value}-v2`;
      const before = upstream.received.length;
      const tunnel = await openTunnel(gateway.port, BOUND, t().c.egressCa.certificatePem);
      try {
        assert.equal((await tunnel.send(get("/a0"))).status, 200);
        assert.equal((await tunnel.send(get("/a"))).status, 200);
        const rotated = await t().request("POST", `/v1/secrets/${secretId}:rotate`, {
          key: owner(),
          body: { value: rotatedValue },
        });
        assert.equal(rotated.status, 200, rotated.raw);
        assert.equal((await tunnel.send(get("/b"))).status, 200);
        const got = upstream.received.slice(before);
        assert.deepEqual(
          got.map((r) => r.authorization),
          [`Bearer ${value}`, `Bearer ${value}`, `Bearer ${rotatedValue}`],
        );
        // One value per upstream connection: kept alive while the value holds, a new one after
        // the rotation (a late answer on the old one could echo the old value past the scrubber).
        assert.equal(got[0]?.connection, got[1]?.connection);
        assert.notEqual(got[1]?.connection, got[2]?.connection);
        assert.equal((await t().request("POST", `/v1/secrets/${secretId}:revoke`, { key: owner() })).status, 200);
        const refused = await tunnel.send(get("/c"));
        assert.equal(refused.status, 403);
        assert.match(refused.body.toString(), /secret revoked/);
        assert.match(refused.head, /\r\nX-Warren-Egress: secret_revoked\r\n/);
        assert.equal(JSON.parse(refused.body.toString()).code, "secret_revoked");
        assert.ok(!refused.body.includes(value));
        assert.equal(upstream.received.length, before + 3, "the revoked request never left");
      } finally {
        tunnel.close();
      }
    });

    it("refuses an upstream whose certificate the trust store does not vouch for", async () => {
      const tunnel = await openTunnel(guardGateway.port, IMPOSTOR, t().c.egressCa.certificatePem);
      try {
        const res = await tunnel.send(`GET /x HTTP/1.1\r\nHost: ${IMPOSTOR}\r\n\r\n`);
        assert.equal(res.status, 502);
        assert.match(res.body.toString(), /upstream certificate not trusted/);
      } finally {
        tunnel.close();
      }
      assert.equal(impostor.received.length, 0, "the impostor never saw a request");
    });

    it("opens a new upstream connection when the upstream closed an idle one", async () => {
      const tunnel = await openTunnel(guardGateway.port, IDLE, t().c.egressCa.certificatePem);
      try {
        const get = (p: string) => tunnel.send(`GET ${p} HTTP/1.1\r\nHost: ${IDLE}\r\n\r\n`);
        const closedBefore = brief.closedConnections();
        assert.equal((await get("/one")).status, 200);
        await eventually(
          "the upstream closing its idle connection",
          async () => brief.closedConnections() > closedBefore,
        );
        assert.equal((await get("/two")).status, 200, "the sandbox's connection outlives the upstream's");
      } finally {
        tunnel.close();
      }
      assert.deepEqual(
        brief.received.map((r) => [r.url, r.authorization]),
        [
          ["/one", `Bearer ${value}-idl`],
          ["/two", `Bearer ${value}-idl`],
        ],
      );
    });

    it("refuses a Host naming another host, absolute targets, upgrades and oversized heads", async () => {
      const before = upstream.received.length;
      const cases: [string, number, RegExp][] = [
        [`GET / HTTP/1.1\r\nHost: ${OTHER}\r\n\r\n`, 403, /host header/],
        [`GET / HTTP/1.1\r\nHost: ${GUARDED}\r\nHost: ${OTHER}\r\n\r\n`, 403, /host header/],
        [`GET https://${OTHER}/ HTTP/1.1\r\nHost: ${GUARDED}\r\n\r\n`, 400, /origin form/],
        [`GET / HTTP/1.1\r\nHost: ${GUARDED}\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n`, 501, /upgrades/],
        [`GET / HTTP/1.1\r\nHost: ${GUARDED}\r\nX-Big: ${"a".repeat(70_000)}\r\n\r\n`, 431, /larger/],
        [`POST / HTTP/1.1\r\nHost: ${GUARDED}\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n`, 400, /both/],
        [`GET / HTTP/1.0\r\nHost: ${GUARDED}\r\n\r\n`, 400, /request line/],
      ];
      for (const [request, status, message] of cases) {
        const tunnel = await openTunnel(guardGateway.port, GUARDED, t().c.egressCa.certificatePem);
        try {
          const res = await tunnel.send(request);
          assert.equal(res.status, status, request.slice(0, 80));
          assert.match(res.body.toString(), message);
        } finally {
          tunnel.close();
        }
      }
      assert.equal(upstream.received.length, before, "nothing reached the upstream");
      const crlf = await openTunnel(guardGateway.port, CRLF, t().c.egressCa.certificatePem);
      try {
        const res = await crlf.send(`GET / HTTP/1.1\r\nHost: ${CRLF}\r\n\r\n`);
        assert.equal(res.status, 403);
        assert.match(res.body.toString(), /not header safe/);
      } finally {
        crlf.close();
      }
      // A client that sends no SNI still gets the bound host's leaf.
      const noSni = await openTunnel(guardGateway.port, GUARDED, t().c.egressCa.certificatePem, { sni: false });
      try {
        assert.equal((await noSni.send(`GET /no-sni HTTP/1.1\r\nHost: ${GUARDED}\r\n\r\n`)).status, 200);
      } finally {
        noSni.close();
      }
      // Expect: 100-continue is answered by the interceptor; HEAD has no body.
      const tunnel100 = await openTunnel(guardGateway.port, GUARDED, t().c.egressCa.certificatePem);
      try {
        const posted = await tunnel100.send(
          `POST /c HTTP/1.1\r\nHost: ${GUARDED}\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi`,
        );
        assert.equal(posted.body.toString(), "ok 2");
        const head = await tunnel100.send(`HEAD /h HTTP/1.1\r\nHost: ${GUARDED}\r\n\r\n`, "HEAD");
        assert.equal(head.status, 200);
        assert.equal((await tunnel100.send(`GET /after-head HTTP/1.1\r\nHost: ${GUARDED}\r\n\r\n`)).status, 200);
      } finally {
        tunnel100.close();
      }
      assert.equal(upstream.received.length, before + 4);
      assert.ok(!upstream.received.some((r) => r.url === "/" && r.host === CRLF), "the CRLF value never left");
      // The same connection type still works for a proper request.
      const tunnel = await openTunnel(guardGateway.port, GUARDED, t().c.egressCa.certificatePem);
      try {
        assert.equal((await tunnel.send(`GET /fine HTTP/1.1\r\nHost: ${GUARDED}:443\r\n\r\n`)).status, 200);
      } finally {
        tunnel.close();
      }
      assert.equal(upstream.received.at(-1)?.authorization, `Bearer ${value}-grd`);
      await t().c.egressLedger.flush();
      const refused = await sql(
        `SELECT payload->>'reason' FROM events WHERE run_id = '${guardCaller.runId}' AND name = 'egress.refused'`,
      );
      assert.ok(refused.length >= 8, JSON.stringify(refused));
      assert.ok(refused.some((r) => r[0] === "upstream_certificate_not_trusted"));
      assert.ok(refused.some((r) => r[0] === "host_header_must_name_the_bound_host"));
    });

    it("records every injection and refusal in the ledger, queryable with SQL, never the value", async () => {
      await t().c.egressLedger.flush();
      const rows = await sql(
        `SELECT name, payload->>'method', payload->>'path', (payload->>'status')::int, payload->>'secret_id',
                (payload->>'secret_version')::int, payload->>'reason', run_id, payload::text
           FROM events WHERE run_id = '${caller.runId}' AND name LIKE 'egress.%' ORDER BY ts_wall_ns`,
      );
      const injected = rows.filter((r) => r[0] === "egress.injected");
      const refused = rows.filter((r) => r[0] === "egress.refused");
      assert.ok(injected.length >= 10, JSON.stringify(rows));
      assert.deepEqual(injected[0]?.slice(1, 6), ["GET", "/plain", 200, secretId, 1]);
      assert.ok(injected.some((r) => r[6] === "response_scrubbed"));
      assert.ok(
        injected.some((r) => r[1] === "GET" && r[2] === "/b" && r[5] === 2),
        "the rotated version",
      );
      assert.deepEqual(refused.at(-1)?.slice(1, 5), ["GET", "/c", 403, secretId]);
      assert.equal(refused.at(-1)?.[6], "secret_revoked");
      for (const r of rows) assert.ok(!String(r[8]).includes(value));
      assert.ok(!t().logs().includes(value));
      // The sealed deployment keys (the CA's, the SSH host key) are no telemetry relation.
      for (const query of ["SELECT * FROM deployment_keys", "SELECT * FROM public.deployment_keys"]) {
        const res = await t().request("POST", "/v1/telemetry/sql", { key: owner(), body: { sql: query } });
        assertError(res, 400, "invalid_argument");
      }
    });

    it("keeps injections in the ledger while another sandbox floods it with refusals", async () => {
      await t().c.egressLedger.flush();
      // Faster than any store writes: the queue holds what one sandbox sends, not the ledger's capacity.
      for (let i = 0; i < 12_000; i++) {
        t().c.egressLedger.record(guardCaller, { kind: "refused", host: "flood.example", port: 443, reason: "flood" });
      }
      t().c.egressLedger.record(caller, {
        kind: "injected",
        host: BOUND,
        port: 443,
        method: "GET",
        path: "/after-the-flood",
        status: 200,
        secretId,
        secretVersion: 1,
      });
      await t().c.egressLedger.flush();
      const after = await sql(
        `SELECT count(*) FROM events WHERE run_id = '${caller.runId}' AND payload->>'path' = '/after-the-flood'`,
      );
      assert.equal(Number(after[0]?.[0]), 1, "the injection was recorded");
      const flood = await sql(
        `SELECT count(*) FROM events WHERE run_id = '${guardCaller.runId}' AND payload->>'reason' = 'flood'`,
      );
      assert.ok(Number(flood[0]?.[0]) <= 200, `one sandbox's refusals are bounded: ${flood[0]?.[0]}`);
      assert.match(t().logs(), /refusals over the sandbox's per-second budget/);
    });
  },
  {
    config: {
      secretEgress: { modelGatewayHost: MODEL },
      egress: { ...loadConfig({}).egress, extraCaFile: pki.caFile },
    },
    overrides: { runtime: API_ONLY_RUNTIME },
  },
);
