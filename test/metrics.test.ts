// GET /metrics on a real server (both stores): who may scrape, the exposition format, and
// that the counters move with the requests, refusals and annotations they count. The
// sandbox metrics on real runc sandboxes are in metrics-runtime.test.ts.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { forEachStore, type TestApp } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";
import { type Exposition, parseExposition, sampleSum } from "./support/prometheus.js";

const METRICS_TOKEN = "prom-scraper-token-0123456789abcdef";

async function scrape(t: TestApp, key = t.orgA.keys.owner): Promise<Exposition> {
  const res = await t.request("GET", "/metrics", { key });
  assert.equal(res.status, 200, res.raw);
  assert.match(String(res.headers["content-type"]), /^text\/plain; version=0\.0\.4/);
  return parseExposition(res.raw);
}

/** The metric names docs/metrics.md documents (its table's first column). */
async function documentedNames(): Promise<string[]> {
  const doc = await readFile(new URL("../docs/metrics.md", import.meta.url), "utf8");
  return [...doc.matchAll(/^\| `(warren_[a-z_]+)` \|/gm)].map((m) => m[1] as string);
}

forEachStore(
  "metrics",
  (t) => {
    it("refuses a scrape without an operator credential, in the standard envelope", async () => {
      assertError(await t().request("GET", "/metrics"), 401, "unauthenticated");
      assertError(await t().request("GET", "/metrics", { key: "wrn_not-a-key" }), 401, "unauthenticated");
      assertError(
        await t().request("GET", "/metrics", { headers: { authorization: `Basic ${METRICS_TOKEN}` } }),
        401,
        "unauthenticated",
      );
      // Org A is the operator organization: its admin is not enough, and org B's owner is no operator.
      assertError(await t().request("GET", "/metrics", { key: t().orgA.keys.admin }), 403, "permission_denied");
      assertError(await t().request("GET", "/metrics", { key: t().orgB.keys.owner }), 403, "permission_denied");
    });

    it("serves the text format to the metrics token, which is no API key", async () => {
      const exposition = await scrape(t(), METRICS_TOKEN);
      assert.equal(exposition.types.get("warren_http_requests_total"), "counter");
      const whoami = await t().request("GET", "/v1/whoami", { key: METRICS_TOKEN });
      assertError(whoami, 401, "unauthenticated");
      assertError(await t().request("GET", "/metrics", { key: `${METRICS_TOKEN}x` }), 401, "unauthenticated");
    });

    it("documents every warren_ metric it serves in docs/metrics.md, with its type", async () => {
      const exposition = await scrape(t());
      const served = [...exposition.types.keys()].filter((name) => name.startsWith("warren_")).sort();
      assert.deepEqual(served, [...(await documentedNames())].sort());
      const doc = await readFile(new URL("../docs/metrics.md", import.meta.url), "utf8");
      for (const name of served) {
        const row = new RegExp(`^\\| \`${name}\` \\| (\\w+) \\|`, "m").exec(doc);
        assert.equal(row?.[1], exposition.types.get(name), `${name}: type in docs/metrics.md`);
      }
      // The process metrics come along (CPU, memory, event loop lag).
      assert.ok(exposition.types.has("process_cpu_user_seconds_total"));
      assert.ok(exposition.types.has("nodejs_eventloop_lag_seconds"));
    });

    it("counts requests per operationId and status, never per URL", async () => {
      const before = await scrape(t());
      const key = t().orgA.keys.member;
      for (let i = 0; i < 3; i++) assert.equal((await t().request("GET", "/v1/whoami", { key })).status, 200);
      assert.equal((await t().request("GET", "/v1/projects/prj_nope-123", { key })).status, 404);
      assert.equal((await t().request("GET", "/v1/no-such-route-7f3a")).status, 404);
      const after = await scrape(t());
      const delta = (name: string, labels: Record<string, string>) =>
        sampleSum(after, name, labels) - sampleSum(before, name, labels);
      assert.equal(delta("warren_http_requests_total", { operation: "WhoAmI", status: "200" }), 3);
      assert.equal(delta("warren_http_request_duration_seconds_count", { operation: "WhoAmI", status: "200" }), 3);
      assert.ok(delta("warren_http_request_duration_seconds_sum", { operation: "WhoAmI", status: "200" }) > 0);
      assert.equal(delta("warren_http_requests_total", { operation: "GetProject", status: "404" }), 1);
      assert.equal(delta("warren_http_requests_total", { operation: "unmatched", status: "404" }), 1);
      // The scrape before this one is counted too, under its own operationId.
      assert.ok(sampleSum(after, "warren_http_requests_total", { operation: "GetMetrics", status: "200" }) >= 1);
      const text = (await t().request("GET", "/metrics", { key: t().orgA.keys.owner })).raw;
      assert.ok(!text.includes("no-such-route"), "a URL never becomes a label");
      assert.ok(!text.includes("prj_nope"), "an id never becomes a label");
      for (const secret of [t().orgA.keys.owner, t().orgA.keys.member, METRICS_TOKEN]) {
        assert.ok(!text.includes(secret), "no credential in the exposition");
      }
    });

    it("counts sandboxes by state from the store, every state a series", async () => {
      const before = await scrape(t());
      for (const state of ["requested", "running", "stopped", "failed", "terminated"]) {
        assert.ok(
          before.samples.some((s) => s.name === "warren_sandboxes" && s.labels.state === state),
          `state ${state} is a series even at 0`,
        );
      }
      const created = await t().request("POST", "/v1/sandboxes", { key: t().orgB.keys.owner, body: {} });
      assert.equal(created.status, 200, created.raw);
      const after = await scrape(t());
      // Without a reconciler a new sandbox stays requested; the count spans organizations.
      assert.equal(
        sampleSum(after, "warren_sandboxes", { state: "requested" }),
        sampleSum(before, "warren_sandboxes", { state: "requested" }) + 1,
      );
    });

    it("counts telemetry SQL refusals by reason class and annotations by kind", async () => {
      const key = t().orgA.keys.owner;
      const before = await scrape(t());
      const refused = await t().request("POST", "/v1/telemetry/sql", { key, body: { sql: "DELETE FROM runs" } });
      assert.equal(refused.status, 400, refused.raw);
      const unknown = await t().request("POST", "/v1/telemetry/sql", { key, body: { sql: "SELECT nope FROM runs" } });
      assert.equal(unknown.status, 400, unknown.raw);
      const fine = await t().request("POST", "/v1/telemetry/sql", { key, body: { sql: "SELECT count(*) FROM runs" } });
      assert.equal(fine.status, 200, fine.raw);

      const schema = await t().request("POST", "/v1/annotation-schemas", {
        key,
        body: { name: "metrics-label", json_schema: JSON.stringify({ type: "object" }) },
      });
      assert.equal(schema.status, 200, schema.raw);
      const run = await t().request("POST", "/v1/runs", { key, body: { label: "m" } });
      assert.equal(run.status, 200, run.raw);
      const runId = (run.body.run as { id: string }).id;
      for (let i = 0; i < 2; i++) {
        const res = await t().request("POST", "/v1/annotations", {
          key,
          body: { schema_name: "metrics-label", payload_json: `{"i":${i}}`, run_id: runId },
        });
        assert.equal(res.status, 200, res.raw);
      }
      const after = await scrape(t());
      const delta = (name: string, labels: Record<string, string>) =>
        sampleSum(after, name, labels) - sampleSum(before, name, labels);
      assert.equal(delta("warren_telemetry_sql_refusals_total", { reason: "construct" }), 1);
      assert.equal(delta("warren_telemetry_sql_refusals_total", { reason: "invalid" }), 1);
      assert.equal(delta("warren_telemetry_sql_refusals_total", {}), 2);
      assert.equal(delta("warren_annotations_ingested_total", { kind: "point" }), 2);
    });
  },
  {
    config: { metrics: { token: METRICS_TOKEN, stateCacheSeconds: 0 } },
    overrides: { runtime: API_ONLY_RUNTIME },
  },
);

describe("metrics and tracing settings", () => {
  it("leaves tracing off by default and turns it on with the standard OTEL_* variables", () => {
    assert.equal(loadConfig({}).tracing.enabled, false);
    assert.equal(
      loadConfig({ OTEL_TRACES_EXPORTER: "none", OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" }).tracing.enabled,
      false,
    );
    const base = loadConfig({ OTEL_TRACES_EXPORTER: "otlp", OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" });
    assert.equal(base.tracing.enabled, true);
    assert.equal(base.tracing.url, "http://collector:4318/v1/traces");
    const exact = loadConfig({
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://otlp.example/custom/path",
      OTEL_EXPORTER_OTLP_HEADERS: "authorization=Bearer%20abc,x-tenant=t1",
      OTEL_SERVICE_NAME: "warren-eu",
      OTEL_TRACES_SAMPLER: "traceidratio",
      OTEL_TRACES_SAMPLER_ARG: "0.25",
    }).tracing;
    assert.equal(exact.enabled, true, "an endpoint alone turns the exporter on");
    assert.equal(exact.url, "https://otlp.example/custom/path");
    assert.deepEqual(exact.headers, { authorization: "Bearer abc", "x-tenant": "t1" });
    assert.equal(exact.serviceName, "warren-eu");
    assert.equal(exact.sampleRatio, 0.25);
    assert.equal(loadConfig({ OTEL_SDK_DISABLED: "true", OTEL_TRACES_EXPORTER: "otlp" }).tracing.enabled, false);
    assert.throws(() => loadConfig({ OTEL_TRACES_EXPORTER: "zipkin" }), /OTEL_TRACES_EXPORTER/);
    assert.throws(
      () => loadConfig({ OTEL_TRACES_EXPORTER: "otlp", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }),
      /OTLP over HTTP/,
    );
    assert.throws(() => loadConfig({ OTEL_EXPORTER_OTLP_HEADERS: "novalue" }), /key=value/);
    assert.equal(loadConfig({ WARREN_METRICS_TOKEN: "t" }).metrics.token, "t");
  });
});
