// Hostile text and malformed requests at the HTTP edge (docs/api-decisions.md "Text Warren
// accepts"): NUL, lone surrogates and deep nesting in bodies, path ids, query parameters and
// the JSON carried inside payload_json and json_schema are a 400 naming the field; the
// router's and the HTTP parser's own refusals answer in the envelope too. Nothing changes.
import assert from "node:assert/strict";
import net from "node:net";
import { it } from "node:test";
import type { RunJson } from "../src/modules/runs/schemas.js";
import { forEachStore, type TestApp, type TestResponse } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { countRows } from "./support/fixtures.js";

const FLAT_KEYS = ["code", "message", "request_id"];

/** 400 invalid_argument whose message names `field`; flat envelopes hold exactly code, message and request_id. */
function assertRefused(res: TestResponse, field: string, flat = false): void {
  assertError(res, 400, "invalid_argument");
  assert.ok(String(res.body.message).includes(field), `message names ${field}: ${res.raw}`);
  if (flat) assert.deepEqual(Object.keys(res.body).sort(), FLAT_KEYS);
}

/** A raw body, so escapes such as a lone `\ud800` reach the server exactly as written. */
function raw(t: TestApp, method: string, url: string, key: string, text: string) {
  return t.request(method, url, { key, body: text, headers: { "content-type": "application/json" } });
}

/** Sends raw bytes to a listening server and returns the status, headers and JSON body of the answer. */
async function rawHttp(port: number, request: Buffer): Promise<TestResponse> {
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", reject);
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("utf8")));
    socket.end(request);
  });
  const [head = "", body = ""] = answer.split("\r\n\r\n");
  const [statusLine = "", ...lines] = head.split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const at = line.indexOf(":");
    headers[line.slice(0, at).toLowerCase()] = line.slice(at + 1).trim();
  }
  return { status: Number(statusLine.split(" ")[1]), headers, body: JSON.parse(body), raw: answer };
}

forEachStore("edge input", (t) => {
  const feedbackRows = () => countRows(t(), "feedback WHERE org_id = $1", [t().orgA.id]);

  it("reads an empty body labelled application/json as no body (a DELETE or a bodiless verb), but refuses bad JSON", async () => {
    const key = t().orgA.keys.owner;
    const json = { "content-type": "application/json" };
    const project = await t().request("POST", "/v1/projects", {
      key,
      body: { name: "empty-body", slug: "empty-body" },
    });
    assert.equal(project.status, 200, project.raw);
    const id = (project.body.project as { id: string }).id;
    const deleted = await t().request("DELETE", `/v1/projects/${id}`, { key, headers: json });
    assert.equal(deleted.status, 200, deleted.raw);
    const run = await t().request("POST", "/v1/runs", { key, body: { label: "r" } });
    const runId = (run.body.run as { id: string }).id;
    const completeWithoutBody = await t().request("POST", `/v1/runs/${runId}:complete`, { key, headers: json });
    assert.equal(completeWithoutBody.status, 400, "a verb with a required field names it");
    assert.match(String(completeWithoutBody.body.message), /status/);
    const broken = await t().request("POST", "/v1/projects", {
      key,
      headers: json,
      body: "{not json" as unknown as Record<string, unknown>,
    });
    assert.equal(broken.status, 400);
    assert.equal(broken.body.code, "invalid_argument");
    const poisoned = await t().request("POST", "/v1/projects", {
      key,
      headers: json,
      body: '{"name":"p","slug":"p","__proto__":{"x":1}}' as unknown as Record<string, unknown>,
    });
    assert.equal(poisoned.status, 400, poisoned.raw);
  });

  it("refuses query names and values that are not percent-encoded UTF-8 with 400 (issue 24 A17a)", async () => {
    const key = t().orgA.keys.member;
    for (const [url, flat] of [
      ["/v1/sandboxes?name=%ff", true],
      ["/v1/sandboxes?name=ok&project_id=%e9t", true],
      ["/v1/projects?page_token=%zz", false],
      ["/v1/projects?page_size=10&%ff=1", false],
      ["/v1/runs?page_token=%", false],
    ] as const) {
      const res = await t().request("GET", url, { key });
      assertRefused(res, "percent-encoded UTF-8", flat);
    }
    // Well-formed encodings (UTF-8, a plus, an encoded percent) are read as before.
    const fine = await t().request("GET", "/v1/sandboxes?name=caf%C3%A9+x%25", { key });
    assert.equal(fine.status, 200, fine.raw);
  });

  it("refuses NUL and lone surrogates in any body string or key with 400 naming the field, storing nothing", async () => {
    const key = t().orgA.keys.member;
    const before = await feedbackRows();
    const cases: [string, string][] = [
      ['{"title":"a\\u0000b","surface":"api"}', "body.title"],
      ['{"title":"a","surface":"api","body":"x\\u0000"}', "body.body"],
      ['{"title":"a","surface":"api","evidence":["ok","\\u0000"]}', "body.evidence.1"],
      ['{"title":"a\\ud800b","surface":"api"}', "body.title"],
      ['{"title":"a\\udc00","surface":"api"}', "body.title"],
      ['{"title":"x","surface":"api","repro":"\\ud83d"}', "body.repro"],
    ];
    for (const [text, field] of cases) assertRefused(await raw(t(), "POST", "/v1/feedback", key, text), field);
    assert.equal(await feedbackRows(), before);
    // A well-formed pair (an emoji) is fine.
    const ok = await raw(t(), "POST", "/v1/feedback", key, '{"title":"a\\ud83d\\ude00","surface":"api"}');
    assert.equal(ok.status, 200, ok.raw);
  });

  it("refuses NUL in project and run bodies on create and update, changing nothing", async () => {
    const key = t().orgA.keys.owner;
    const projects = await countRows(t(), "projects WHERE org_id = $1", [t().orgA.id]);
    assertRefused(await raw(t(), "POST", "/v1/projects", key, '{"name":"n\\u0000","slug":"nul-slug"}'), "body.name");
    assertRefused(
      await raw(t(), "PATCH", `/v1/projects/${t().orgA.defaultProjectId}`, key, '{"description":"\\u0000"}'),
      "body.description",
    );
    assertRefused(await raw(t(), "POST", "/v1/runs", key, '{"label":"\\ud800"}'), "body.label");
    assert.equal(await countRows(t(), "projects WHERE org_id = $1", [t().orgA.id]), projects);
  });

  it("refuses %00 in a path id or a query parameter with 400, in the route's envelope", async () => {
    const key = t().orgA.keys.owner;
    assertRefused(await t().request("GET", "/v1/sandboxes/a%00b", { key }), "params.id", true);
    assertRefused(await t().request("GET", "/v1/projects/prj%00x", { key }), "params.id");
    assertRefused(await t().request("GET", "/v1/runs/run_%00", { key }), "params.id");
    assertRefused(await t().request("GET", "/v1/projects?page_token=%00", { key }), "query.page_token");
    assertRefused(await t().request("GET", "/v1/sandboxes?name=a%00", { key }), "query.name", true);
    assertRefused(await t().request("GET", "/v1/runs?project_id=%00", { key }), "query.project_id");
  });

  it("refuses NUL, unsupported escapes and lone surrogates inside payload_json, storing nothing", async () => {
    const key = t().orgA.keys.owner;
    const schema = JSON.stringify({ type: "object", additionalProperties: true });
    const registered = await t().request("POST", "/v1/annotation-schemas", {
      key,
      body: { name: "edge-text", json_schema: schema },
    });
    assert.equal(registered.status, 200, registered.raw);
    const run = await t().request("POST", "/v1/runs", { key, body: { label: "edge" } });
    const runId = (run.body.run as RunJson).id;
    const events = () => countRows(t(), "events WHERE org_id = $1 AND kind = 'annotation'", [t().orgA.id]);
    const before = await events();
    for (const payload of ['{"a":"\\u0000"}', '{"a":"\\ud800"}', '{"\\u0000":1}', '{"a":["\\udfff"]}']) {
      const res = await t().request("POST", "/v1/annotations", {
        key,
        body: { schema_name: "edge-text", run_id: runId, payload_json: payload },
      });
      assertRefused(res, "body.payload_json");
    }
    const range = await t().request("POST", "/v1/annotations:range", {
      key,
      body: {
        schema_name: "edge-text",
        run_id: runId,
        payload_json: '{"a":"\\u0000"}',
        range_start_ns: "1",
        range_end_ns: "2",
      },
    });
    assertRefused(range, "body.payload_json");
    assert.equal(await events(), before);
  });

  it("refuses a json_schema (or a payload) nested 2,000 levels deep with 400, not a stack overflow", async () => {
    const key = t().orgA.keys.owner;
    let deep: unknown = { type: "string" };
    for (let i = 0; i < 2000; i++) deep = { type: "object", properties: { a: deep } };
    const res = await t().request("POST", "/v1/annotation-schemas", {
      key,
      body: { name: "edge-deep", json_schema: JSON.stringify(deep) },
    });
    assertRefused(res, "body.json_schema");
    assertRefused(
      await t().request("POST", "/v1/annotation-schemas", {
        key,
        body: { name: "edge-nul", json_schema: '{"description":"\\u0000"}' },
      }),
      "body.json_schema",
    );
    assert.equal((await t().request("GET", "/v1/annotation-schemas/edge-deep", { key })).status, 404);
    const nested = `${"[".repeat(5000)}${"]".repeat(5000)}`;
    assertRefused(
      await raw(t(), "POST", "/v1/feedback", key, `{"title":"x","surface":"api","evidence":${nested}}`),
      "body.evidence",
    );
  });

  it("answers a URL that is not UTF-8 and an over-long path id with 400 in the envelope", async () => {
    const key = t().orgA.keys.owner;
    assertRefused(await t().request("GET", "/v1/sandboxes/%ff%fe", { key }), "URL", true);
    assertRefused(await t().request("GET", "/v1/projects/%ff%fe", { key }), "URL");
    assertRefused(await t().request("GET", `/v1/sandboxes/${"a".repeat(10_000)}`, { key }), "path parameter", true);
    assertRefused(await t().request("GET", `/v1/runs/${"a".repeat(10_000)}`, { key }), "path parameter");
  });

  it("answers what Node's HTTP parser refuses in the envelope with a request id", async () => {
    const app = t().app;
    // The harness closes the app, and with it this listener, after the suite.
    await app.listen({ port: 0, host: "127.0.0.1" });
    {
      const port = (app.server.address() as net.AddressInfo).port;
      const badHeader = Buffer.concat([
        Buffer.from("GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a"),
        Buffer.from([0x7f]),
        Buffer.from("b\r\n\r\n"),
      ]);
      const refused = await rawHttp(port, badHeader);
      assertError(refused, 400, "invalid_argument");
      assert.match(String(refused.body.request_id), /^req_[0-9a-z]{26}$/);
      assert.deepEqual(Object.keys(refused.body).sort(), FLAT_KEYS);

      const longUrl = Buffer.from(`GET /v1/sandboxes/${"a".repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
      const tooLong = await rawHttp(port, longUrl);
      assertError(tooLong, 431, "headers_too_large");
      assert.deepEqual(Object.keys(tooLong.body).sort(), FLAT_KEYS);
    }
  });
});
