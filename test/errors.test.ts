// The HTTP edge's error handling (contract 7.1, docs/api-decisions.md "Errors"): unknown
// routes, malformed and oversized bodies, media types, strict query and body validation, the
// envelope's exact fields, the request id, and that no internals leak from a server fault.
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { it } from "node:test";
import { forEachStore, type TestApp, type TestResponse } from "./harness.js";

const BODY_LIMIT = 2048;
const ENVELOPE_KEYS = ["code", "message", "details", "request_id"];
const INTERNAL_DETAIL = "relay exploded at /srv/warren/secret-path.ts:42 with password hunter2";

/** Everything an error body of a non-sandbox route must satisfy, whatever the error. */
function assertEnvelope(res: TestResponse, status: number, code: string) {
  assert.equal(res.status, status, res.raw);
  assert.match(String(res.headers["content-type"]), /^application\/json/);
  assert.equal(res.body.code, code, res.raw);
  for (const key of Object.keys(res.body)) assert.ok(ENVELOPE_KEYS.includes(key), `unexpected envelope field ${key}`);
  assert.match(String(res.body.code), /^[a-z]+(_[a-z]+)*$/, "codes are snake_case");
  const message = res.body.message;
  assert.equal(typeof message, "string");
  assert.ok((message as string).length > 0);
  assert.ok(!/\n/.test(message as string), "the message is one line");
  assert.ok(!/\bat\s+\S+\s+\(|\bat\s+(async\s+)?[\w.<>]+\s*\(?\/|^\s*at /m.test(message as string), "no stack frames");
  assert.ok(!/node_modules|\/work\/|\.ts:\d+|\.js:\d+/.test(message as string), "no source paths");
  assert.ok(!/fastify|ajv|FST_/i.test(message as string), "no framework internals");
  if (res.body.details !== undefined) assert.equal(typeof res.body.details, "object");
  const requestId = res.headers["x-request-id"];
  assert.match(String(requestId), /^req_[0-9a-z]{26}$/);
  assert.equal(res.body.request_id, requestId);
  assert.ok(!res.raw.includes("stack"), "no stack property");
}

async function feedback(t: TestApp, body: unknown, headers: Record<string, string> = {}) {
  return t.request("POST", "/v1/feedback", { key: t.orgA.keys.member, body, headers });
}

forEachStore(
  "errors",
  (t) => {
    it("answers an unknown route with 404 not_found in the envelope, with or without a key", async () => {
      for (const key of [t().orgA.keys.owner, null]) {
        for (const [method, url] of [
          ["GET", "/v1/nope"],
          ["GET", "/v2/whoami"],
          ["POST", "/v1/projects/x/y/z"],
          ["GET", "/"],
        ] as const) {
          assertEnvelope(await t().request(method, url, { key }), 404, "not_found");
        }
      }
    });

    it("answers a known path with an unrouted method with 405 method_not_allowed and Allow, in the envelope", async () => {
      for (const [method, url, allow] of [
        ["DELETE", "/v1/whoami", "GET, HEAD"],
        ["PUT", "/v1/projects", "GET, HEAD, POST"],
        ["PUT", "/v1/sandboxes/sbx-0000000000000000000000000000000000000000", "DELETE, GET, HEAD, PATCH"],
        ["GET", "/v1/sandboxes/sbx-0000000000000000000000000000000000000000:exec", "POST"],
      ] as const) {
        for (const key of [t().orgA.keys.owner, null]) {
          const res = await t().request(method, url, { key });
          assertEnvelope(res, 405, "method_not_allowed");
          assert.equal(res.headers.allow, allow, `${method} ${url}`);
        }
      }
    });

    it("refuses malformed JSON with 400 invalid_argument", async () => {
      for (const raw of ["{bad", '{"title": "x",}', "[1, 2", "nul", '{"title": "x"} trailing']) {
        const res = await feedback(t(), raw, { "content-type": "application/json" });
        assertEnvelope(res, 400, "invalid_argument");
      }
    });

    it("refuses an empty JSON body with 400 invalid_argument", async () => {
      const res = await feedback(t(), "", { "content-type": "application/json" });
      assertEnvelope(res, 400, "invalid_argument");
    });

    it("refuses a body over the configured limit with 413 payload_too_large", async () => {
      const big = { title: "too big", surface: "api", body: "x".repeat(BODY_LIMIT) };
      const res = await feedback(t(), big);
      assertEnvelope(res, 413, "payload_too_large");
      const { rows } = await t().c.db.query("SELECT id FROM feedback WHERE title = 'too big'");
      assert.equal(rows.length, 0, "nothing was stored");
    });

    it("accepts a body just under the configured limit", async () => {
      const body = { title: "just fits", surface: "api", body: "" };
      const overhead = Buffer.byteLength(JSON.stringify(body));
      body.body = "y".repeat(BODY_LIMIT - overhead);
      assert.equal(Buffer.byteLength(JSON.stringify(body)), BODY_LIMIT);
      const res = await feedback(t(), body);
      assert.equal(res.status, 200, res.raw);
    });

    it("refuses a body over the limit that is streamed or under-declared in Content-Length", async () => {
      const raw = JSON.stringify({ title: "streamed", surface: "api", body: "z".repeat(BODY_LIMIT * 2) });
      const headers = { authorization: `Bearer ${t().orgA.keys.member}`, "content-type": "application/json" };
      const attempts = [
        // No Content-Length: the limit must hold while the body streams in.
        { headers, payload: Readable.from([raw.slice(0, 1000), raw.slice(1000)]) },
        { headers: { ...headers, "content-length": "100" }, payload: raw },
      ];
      for (const attempt of attempts) {
        const injected = await t().app.inject({ method: "POST", url: "/v1/feedback", ...attempt });
        const res: TestResponse = {
          status: injected.statusCode,
          headers: injected.headers,
          body: JSON.parse(injected.body) as Record<string, unknown>,
          raw: injected.body,
        };
        assertEnvelope(res, 413, "payload_too_large");
      }
      const { rows } = await t().c.db.query("SELECT id FROM feedback WHERE title = 'streamed'");
      assert.equal(rows.length, 0);
    });

    it("refuses a body that is not JSON with 415 unsupported_media_type", async () => {
      for (const contentType of ["text/plain", "application/x-www-form-urlencoded", "application/xml"]) {
        const res = await feedback(t(), "title=x&surface=api", { "content-type": contentType });
        assertEnvelope(res, 415, "unsupported_media_type");
      }
    });

    it("accepts application/json with a charset parameter", async () => {
      const res = await feedback(t(), JSON.stringify({ title: "charset", surface: "api" }), {
        "content-type": "application/json; charset=utf-8",
      });
      assert.equal(res.status, 200, res.raw);
    });

    it("refuses an unknown query parameter with 400 on every kind of route", async () => {
      const key = t().orgA.keys.owner;
      const cases: [string, string, unknown][] = [
        ["GET", "/v1/projects", undefined],
        ["GET", "/v1/runs", undefined],
        ["GET", "/v1/whoami", undefined],
        ["GET", "/v1/usage", undefined],
        ["GET", `/v1/projects/${t().orgA.defaultProjectId}`, undefined],
        ["POST", "/v1/feedback", { title: "query", surface: "api" }],
        ["GET", "/v1/admin/organizations", undefined],
      ];
      for (const [method, url, body] of cases) {
        const res = await t().request(method, url, { key, body, query: { unknown_param: "1" } });
        assertEnvelope(res, 400, "invalid_argument");
        assert.ok(String(res.body.message).includes("unknown_param"), res.raw);
      }
      const discovery = await t().request("GET", "/v1/service-config", { query: { unknown_param: "1" } });
      assertEnvelope(discovery, 400, "invalid_argument");
      const { rows } = await t().c.db.query("SELECT id FROM feedback WHERE title = 'query'");
      assert.equal(rows.length, 0, "a refused request stored nothing");
    });

    it("refuses a wrongly typed query parameter with 400", async () => {
      const key = t().orgA.keys.owner;
      for (const query of [{ page_size: "abc" }, { page_size: "1.5" }, { page_size: "0" }, { page_size: "" }]) {
        const res = await t().request("GET", "/v1/projects", { key, query });
        assertEnvelope(res, 400, "invalid_argument");
        assert.ok(String(res.body.message).includes("page_size"), res.raw);
      }
      const ok = await t().request("GET", "/v1/projects", { key, query: { page_size: "2" } });
      assert.equal(ok.status, 200, ok.raw);
    });

    it("refuses wrongly typed body fields without coercing them", async () => {
      const cases: [Record<string, unknown>, string][] = [
        [{ title: 123, surface: "api" }, "title"],
        [{ title: true, surface: "api" }, "title"],
        [{ title: "x", surface: "api", evidence: "single" }, "evidence"],
        [{ title: "x", surface: "api", body: 5 }, "body"],
        [{ title: "x", surface: "api", severity: 1 }, "severity"],
        [{ title: null, surface: "api" }, "title"],
      ];
      for (const [body, field] of cases) {
        const res = await feedback(t(), body);
        assertEnvelope(res, 400, "invalid_argument");
        assert.ok(String(res.body.message).includes(field), res.raw);
      }
    });

    it("names an unknown body field rather than dropping it", async () => {
      const res = await feedback(t(), { title: "x", surface: "api", colour: "blue" });
      assertEnvelope(res, 400, "invalid_argument");
      assert.ok(String(res.body.message).includes('"colour"'), res.raw);
    });

    it("answers every refusal in the envelope with the request id of its x-request-id header", async () => {
      const key = t().orgA.keys.member;
      const cases: [TestResponse, number, string][] = [
        [await t().request("GET", "/v1/whoami"), 401, "unauthenticated"],
        [await t().request("GET", "/v1/admin/organizations", { key }), 403, "permission_denied"],
        [await t().request("GET", "/v1/projects/prj_unknown", { key }), 404, "not_found"],
        [
          await t().request("POST", "/v1/projects", { key, body: { name: "Default again", slug: "default" } }),
          409,
          "already_exists",
        ],
        [await feedback(t(), { title: "" }), 400, "invalid_argument"],
      ];
      const ids = new Set<string>();
      for (const [res, status, code] of cases) {
        assertEnvelope(res, status, code);
        ids.add(String(res.body.request_id));
      }
      assert.equal(ids.size, cases.length, "each response has its own request id");
    });

    it("puts a request id on successful responses too", async () => {
      const res = await t().request("GET", "/v1/whoami", { key: t().orgA.keys.member });
      assert.equal(res.status, 200);
      assert.match(String(res.headers["x-request-id"]), /^req_[0-9a-z]{26}$/);
      assert.equal(res.body.request_id, undefined);
    });

    it("serves the health routes without a credential", async () => {
      assert.deepEqual((await t().request("GET", "/healthz")).body, { status: "ok" });
      assert.deepEqual((await t().request("GET", "/readyz")).body, { status: "ready" });
    });
  },
  { config: { bodyLimitBytes: BODY_LIMIT } },
);

// A fault inside a handler: the relay throws. The caller sees only `internal`, the operator's
// log has the detail, tied to the request id.
forEachStore(
  "errors on a server fault",
  (t) => {
    it("answers an unexpected fault with 500 internal and no internals", async () => {
      const res = await t().request("POST", "/v1/feedback", {
        key: t().orgA.keys.member,
        body: { title: "fault", surface: "api" },
      });
      assertEnvelope(res, 500, "internal");
      assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"]);
      assert.ok(!res.raw.includes("exploded"), "the internal message leaked");
      assert.ok(!res.raw.includes("hunter2"), "the internal message leaked");
      assert.ok(!res.raw.includes("secret-path"), "the internal message leaked");

      const lines = t()
        .logs()
        .split("\n")
        .filter((line) => line.trim() !== "")
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      const faults = lines.filter((l) => l.reqId === res.body.request_id && Number(l.level) >= 50);
      assert.equal(faults.length, 1, "the fault is logged once, with its request id");
      assert.ok(JSON.stringify(faults[0]).includes("exploded"), "the log keeps the detail for the operator");
      assert.ok(!t().logs().includes(t().orgA.keys.member), "the caller's key was logged");
    });
  },
  {
    overrides: {
      feedbackRelay: {
        relay: async () => {
          throw new Error(INTERNAL_DETAIL);
        },
      },
    },
  },
);
