// POST /v1/traces (OTLP/HTTP) on both stores: spans from the real OpenTelemetry SDK through its
// protobuf and JSON exporters, fixtures setting every field of the trace proto in both
// encodings, the trace-to-run mapping, resends stored once, the GenAI columns and trace-level
// copy-down, and the spans in telemetry SQL. Refusals are in test/otlp-refusals.test.ts.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { gzipSync } from "node:zlib";
import { context, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { forEachStore, type TestApp } from "./harness.js";
import { runCli } from "./support/cli.js";
import { eventually } from "./support/eventually.js";
import { API_ONLY_RUNTIME, sandboxScopedKey } from "./support/fixtures.js";
import { baseUrl, type ExporterKind, sdkProvider, sql } from "./support/otlp.js";
import { fixtureIds, jsonFixture, protobufFixture, START_NS } from "./support/otlp-fixtures.js";
import { openSse } from "./support/sse.js";

async function post(t: TestApp, key: string, body: Buffer | string, contentType: string, headers = {}) {
  const res = await t.app.inject({
    method: "POST",
    url: "/v1/traces",
    headers: { authorization: `Bearer ${key}`, "content-type": contentType, ...headers },
    payload: body,
  });
  return res;
}

async function startRun(t: TestApp, key: string): Promise<string> {
  const res = await t.request("POST", "/v1/runs", { key, body: { label: "otlp" } });
  assert.equal(res.status, 200, res.raw);
  return (res.body.run as { id: string }).id;
}

const SPAN_COLUMNS =
  "run_id, trace_id, span_id, parent_span_id, name, kind, status_code, status_message, start_ns, end_ns, duration_ms, service_name, scope_name, span_type, gen_ai_operation, gen_ai_system, model, input_tokens, output_tokens, total_tokens, cost_usd, input, output, user_id, session_id, tags, attributes, span_events, links, resource_attributes";

forEachStore(
  "OTLP ingest",
  (t) => {
    const owner = () => t().orgA.keys.owner;

    for (const kind of ["protobuf", "json"] as ExporterKind[]) {
      it(`stores the real SDK's spans (${kind} exporter) in a run of their trace, typed and queryable`, async () => {
        const { provider } = sdkProvider(kind, await baseUrl(t()), owner(), {}, kind === "json" ? "gzip" : "none");
        const tracer = provider.getTracer("warren-test", "1.2.3");
        const root = tracer.startSpan("agent turn", {
          kind: SpanKind.SERVER,
          attributes: { "user.id": "user-7", "session.id": "sess-7", "tag.tags": ["prod", "beta"] },
        });
        const llm = tracer.startSpan(
          "chat gpt-x",
          {
            kind: SpanKind.CLIENT,
            attributes: {
              "gen_ai.operation.name": "chat",
              "gen_ai.provider.name": "openai",
              "gen_ai.request.model": "gpt-x",
              "gen_ai.response.model": "gpt-x-2026",
              "gen_ai.usage.input_tokens": 12,
              "gen_ai.usage.output_tokens": 30,
              "gen_ai.usage.reasoning_tokens": 5,
              "gen_ai.prompt.0.content": "kept as an attribute",
            },
          },
          trace.setSpan(context.active(), root),
        );
        llm.addEvent("gen_ai.choice", { index: 0 });
        llm.setStatus({ code: SpanStatusCode.ERROR, message: "rate limited" });
        llm.end();
        root.end();
        await provider.forceFlush();
        await provider.shutdown();
        const traceId = root.spanContext().traceId;
        const rows = await eventually("both spans in SQL", async () => {
          const found = await sql(
            t(),
            owner(),
            `SELECT ${SPAN_COLUMNS} FROM spans WHERE trace_id = '${traceId}' ORDER BY parent_span_id NULLS FIRST`,
          );
          return found.length === 2 ? found : null;
        });
        const [r, c] = rows as [Record<string, unknown>, Record<string, unknown>];
        assert.equal(r.name, "agent turn");
        assert.equal(r.kind, "server");
        assert.equal(r.parent_span_id, null);
        assert.equal(c.parent_span_id, root.spanContext().spanId);
        assert.equal(c.run_id, r.run_id);
        assert.equal(c.kind, "client");
        assert.equal(c.status_code, "error");
        assert.equal(c.status_message, "rate limited");
        assert.equal(c.service_name, "otlp-test");
        assert.equal(c.scope_name, "warren-test");
        assert.equal(c.span_type, "LLM");
        assert.equal(c.gen_ai_operation, "chat");
        assert.equal(c.gen_ai_system, "openai");
        assert.equal(c.model, "gpt-x-2026", "the response model wins over the request model");
        assert.equal(String(c.input_tokens), "12");
        assert.equal(String(c.output_tokens), "30");
        assert.equal(String(c.total_tokens), "42");
        // Trace-level values copied down from the root span.
        assert.equal(c.user_id, "user-7");
        assert.equal(c.session_id, "sess-7");
        assert.deepEqual(c.tags, ["prod", "beta"]);
        const attributes = c.attributes as Record<string, unknown>;
        assert.equal(attributes["gen_ai.usage.reasoning_tokens"], 5, "an unknown gen_ai.usage attribute is kept");
        assert.equal(attributes["gen_ai.prompt.0.content"], "kept as an attribute");
        assert.deepEqual(
          (c.span_events as { name: string; attributes: unknown }[]).map((e) => [e.name, e.attributes]),
          [["gen_ai.choice", { index: 0 }]],
        );
        // The trace got a run of its own, in the key's project (labelled by its root span's
        // name only when the first request of the trace holds the root).
        const run = await t().request("GET", `/v1/runs/${String(r.run_id)}`, { key: owner() });
        assert.equal(run.status, 200, run.raw);
        assert.match((run.body.run as { label: string }).label, new RegExp(`^trace ${traceId}(: agent turn)?$`));
        assert.equal((run.body.run as { project_id: string }).project_id, t().orgA.defaultProjectId);
      });
    }

    it("reads every field of the trace proto the same from protobuf and from JSON", async () => {
      const stored: Record<string, unknown>[][] = [];
      const runId = await startRun(t(), owner());
      for (const [n, format] of [
        [1, "protobuf"],
        [2, "json"],
      ] as const) {
        const ids = fixtureIds(n);
        const body =
          format === "protobuf" ? protobufFixture(ids, runId) : Buffer.from(JSON.stringify(jsonFixture(ids, runId)));
        const res = await post(
          t(),
          owner(),
          body,
          format === "protobuf" ? "application/x-protobuf" : "application/json",
        );
        assert.equal(res.statusCode, 200, res.body);
        assert.match(
          String(res.headers["content-type"]),
          format === "protobuf" ? /^application\/x-protobuf$/ : /^application\/json(;|$)/,
        );
        if (format === "protobuf") assert.equal(res.rawPayload.length, 0, "all accepted: an empty response");
        else assert.deepEqual(JSON.parse(res.body), {});
        const rows = await sql(
          t(),
          owner(),
          `SELECT ${SPAN_COLUMNS}, event_id FROM spans WHERE trace_id = '${ids.traceId}' ORDER BY start_ns`,
        );
        assert.equal(rows.length, 2);
        for (const row of rows) assert.equal(row.run_id, runId, "the resource's warren.run_id names the run");
        stored.push(
          rows.map((row) => {
            const { run_id, trace_id, span_id, parent_span_id, event_id, ...rest } = row;
            void run_id;
            void trace_id;
            void span_id;
            void parent_span_id;
            void event_id;
            return rest;
          }),
        );
        const payload = await sql(
          t(),
          owner(),
          `SELECT payload FROM events WHERE kind = 'span' AND payload->>'span_id' = '${ids.childId}'`,
        );
        const p = payload[0]?.payload as Record<string, unknown>;
        assert.equal(p.trace_state, "vendor=1");
        assert.equal(p.flags, 257);
        assert.equal(p.dropped_attributes_count, 3);
        assert.equal(p.dropped_events_count, 5);
        assert.equal(p.dropped_links_count, 7);
        assert.deepEqual(p.links, [
          {
            trace_id: ids.linkTraceId,
            span_id: ids.linkSpanId,
            attributes: { "link.attr": 1.5 },
            trace_state: "link=1",
            flags: 1,
            dropped_attributes_count: 6,
          },
        ]);
        assert.deepEqual(p.events, [
          {
            time_unix_nano: String(START_NS + 2_000_000_000n),
            name: "exception",
            attributes: { "exception.message": "boom" },
            dropped_attributes_count: 4,
          },
        ]);
        assert.deepEqual(p.resource, {
          attributes: { "service.name": "fixture-svc", "user.id": "resource-user", "warren.run_id": runId },
          dropped_attributes_count: 1,
          schema_url: "https://opentelemetry.io/schemas/1.30.0",
        });
        assert.deepEqual(p.scope, {
          name: "fixture-scope",
          version: "9.9.9",
          attributes: { "scope.attr": true },
          dropped_attributes_count: 2,
          schema_url: "https://opentelemetry.io/schemas/1.31.0",
        });
      }
      assert.deepEqual(stored[0], stored[1], "both encodings store the same rows");
      const child = stored[0]?.[1] as Record<string, unknown>;
      assert.equal(child.name, "chat model-x");
      assert.equal(child.kind, "client");
      assert.equal(child.status_code, "error");
      assert.equal(child.status_message, "rate limited");
      assert.equal(Number(child.duration_ms), 2500);
      assert.equal(child.model, "model-x");
      assert.equal(Number(child.cost_usd), 0.25);
      assert.equal(child.input, '[{"role":"user","content":"hi"}]');
      assert.equal(child.output, "hello");
      assert.equal(child.user_id, "resource-user", "the resource's user.id");
      assert.equal(child.session_id, "sess-1", "copied down from the root span");
      assert.deepEqual(child.tags, ["t1", "t2"]);
      assert.deepEqual(child.attributes, {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "model-x",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
        "gen_ai.usage.cost": 0.25,
        "gen_ai.usage.reasoning_tokens": "9007199254740993",
        "gen_ai.input.messages": '[{"role":"user","content":"hi"}]',
        "output.value": "hello",
        "huge.double": "Infinity",
        "raw.bytes": Buffer.from([0, 1, 2, 250]).toString("base64"),
        nested: { inner: [1, "x"] },
        empty: null,
        ["__proto__"]: "plain key",
      });
    });

    it("stores a span sent again once, and gives a new trace one run however often it is sent", async () => {
      const ids = fixtureIds(3);
      const body = protobufFixture(ids);
      const first = await post(t(), owner(), body, "application/x-protobuf");
      assert.equal(first.statusCode, 200, first.body);
      const [again, gzipped] = await Promise.all([
        post(t(), owner(), body, "application/x-protobuf"),
        post(t(), owner(), gzipSync(body), "application/x-protobuf", { "content-encoding": "gzip" }),
      ]);
      assert.equal(again.statusCode, 200);
      assert.equal(gzipped.statusCode, 200);
      const rows = await sql(t(), owner(), `SELECT run_id FROM spans WHERE trace_id = '${ids.traceId}'`);
      assert.equal(rows.length, 2);
      assert.equal(new Set(rows.map((r) => r.run_id)).size, 1);
      const runs = await sql(t(), owner(), `SELECT id FROM runs WHERE label LIKE 'trace ${ids.traceId}%'`);
      assert.equal(runs.length, 1);
    });

    it("sends a sandbox credential's spans to its sandbox's ambient run, and no other", async () => {
      const created = await t().request("POST", "/v1/sandboxes", { key: owner(), body: {} });
      assert.equal(created.status, 200, created.raw);
      const sandboxId = created.body.id as string;
      const ambient = created.body.run_id as string;
      const key = await sandboxScopedKey(t(), t().orgA, sandboxId);
      const ids = fixtureIds(4);
      const res = await post(t(), key, Buffer.from(JSON.stringify(jsonFixture(ids))), "application/json");
      assert.equal(res.statusCode, 200, res.body);
      const rows = await sql(t(), owner(), `SELECT run_id FROM spans WHERE trace_id = '${ids.traceId}'`);
      assert.deepEqual(
        rows.map((r) => r.run_id),
        [ambient, ambient],
      );
      // Naming another run of the organization is refused span by span (partial success).
      const other = await startRun(t(), owner());
      const named = await post(
        t(),
        key,
        Buffer.from(JSON.stringify(jsonFixture(fixtureIds(5), other))),
        "application/json",
      );
      assert.equal(named.statusCode, 200);
      const partial = JSON.parse(named.body).partialSuccess;
      assert.equal(partial.rejectedSpans, "2");
      assert.match(partial.errorMessage, /not found/);
      assert.equal((await sql(t(), owner(), `SELECT 1 FROM spans WHERE run_id = '${other}'`)).length, 0);
      // A second sandbox sending spans of the same trace (propagated to it) keeps them in its own run.
      const second = await t().request("POST", "/v1/sandboxes", { key: owner(), body: {} });
      const secondKey = await sandboxScopedKey(t(), t().orgA, second.body.id as string);
      const same = JSON.stringify(jsonFixture(ids))
        .replaceAll(ids.rootId, "77".repeat(8))
        .replaceAll(ids.childId, "78".repeat(8));
      assert.equal((await post(t(), secondKey, Buffer.from(same), "application/json")).statusCode, 200);
      const both = await sql(
        t(),
        owner(),
        `SELECT span_id, run_id FROM spans WHERE trace_id = '${ids.traceId}' ORDER BY span_id`,
      );
      assert.deepEqual(
        both.map((r) => r.run_id),
        [ids.rootId, ids.childId, "77".repeat(8), "78".repeat(8)]
          .sort()
          .map((span) => (span === "77".repeat(8) || span === "78".repeat(8) ? second.body.run_id : ambient)),
      );
    });

    it("streams spans in the run tail as they arrive", async () => {
      const runId = await startRun(t(), owner());
      const url = await baseUrl(t());
      const stream = await openSse(`${url}/v1/runs/${runId}/tail`, { authorization: `Bearer ${owner()}` });
      assert.equal(stream.status, 200, stream.body);
      try {
        assert.equal((await stream.next(30_000))?.data.name, "run.started");
        const { provider } = sdkProvider("protobuf", url, owner(), { "warren.run_id": runId });
        const tracer = provider.getTracer("tail-test");
        for (const name of ["first", "second"]) {
          const span = tracer.startSpan(name, { attributes: { "gen_ai.request.model": "m" } });
          span.end();
          await provider.forceFlush();
          const item = await stream.next(30_000);
          assert.equal(item?.data.kind, "span");
          assert.equal(item?.data.name, "span");
          const payload = item?.data.payload as Record<string, unknown>;
          assert.equal(payload.name, name);
          assert.equal(payload.span_id, span.spanContext().spanId);
          assert.deepEqual(payload.attributes, { "gen_ai.request.model": "m" });
        }
        await provider.shutdown();
      } finally {
        stream.close();
      }
    });

    it("dumps a run as OTLP/JSON with `warren run traces`, which an OTLP receiver takes back as the same spans", async () => {
      const ids = fixtureIds(7);
      const res = await post(t(), owner(), protobufFixture(ids), "application/x-protobuf");
      assert.equal(res.statusCode, 200);
      const [first] = await sql(t(), owner(), `SELECT run_id FROM spans WHERE trace_id = '${ids.traceId}'`);
      const home = await mkdtemp(path.join(os.tmpdir(), "warren-otlp-cli-"));
      try {
        const dumped = await runCli(
          ["--url", await baseUrl(t()), "--api-key", owner(), "run", "traces", String(first?.run_id)],
          {
            home,
          },
        );
        assert.equal(dumped.code, 0, dumped.stderr);
        // Forwarded to an OTLP receiver: Warren itself, as another organization.
        const forwarded = await post(t(), t().orgB.keys.owner, dumped.stdout, "application/json");
        assert.equal(forwarded.statusCode, 200, forwarded.body);
        assert.deepEqual(JSON.parse(forwarded.body), {});
        const columns = SPAN_COLUMNS.replace("run_id, ", "");
        const query = `SELECT ${columns} FROM spans WHERE trace_id = '${ids.traceId}' ORDER BY span_id`;
        assert.deepEqual(await sql(t(), t().orgB.keys.owner, query), await sql(t(), owner(), query));
        const missing = await runCli(["--url", await baseUrl(t()), "--api-key", owner(), "run", "traces", "run_nope"], {
          home,
        });
        assert.equal(missing.code, 3, missing.stderr);
      } finally {
        await rm(home, { recursive: true, force: true });
      }
    });

    it("removes a project's spans and traces with the project", async () => {
      const project = await t().request("POST", "/v1/projects", {
        key: owner(),
        body: { name: "otlp-gone", slug: "otlp-gone" },
      });
      assert.equal(project.status, 200, project.raw);
      const projectId = (project.body.project as { id: string }).id;
      const scoped = await t().issueKey(t().orgA, { role: "owner", kind: "user", projectId });
      const ids = fixtureIds(8);
      assert.equal((await post(t(), scoped.key, protobufFixture(ids), "application/x-protobuf")).statusCode, 200);
      const before = await sql(t(), owner(), `SELECT project_id FROM spans WHERE trace_id = '${ids.traceId}'`);
      assert.deepEqual(
        before.map((r) => r.project_id),
        [projectId, projectId],
        "a new trace's run is in the key's project",
      );
      const deleted = await t().request("DELETE", `/v1/projects/${projectId}`, {
        key: owner(),
        query: { cascade: "true" },
      });
      assert.equal(deleted.status, 200, deleted.raw);
      assert.equal((await sql(t(), owner(), `SELECT 1 FROM spans WHERE trace_id = '${ids.traceId}'`)).length, 0);
      const { rows } = await t().c.db.query("SELECT 1 FROM otlp_traces WHERE trace_id = $1", [ids.traceId]);
      assert.equal(rows.length, 0);
    });

    it("lets an annotation target a span", async () => {
      const runId = await startRun(t(), owner());
      const ids = fixtureIds(6);
      const res = await post(t(), owner(), protobufFixture(ids, runId), "application/x-protobuf");
      assert.equal(res.statusCode, 200);
      const [span] = await sql(
        t(),
        owner(),
        `SELECT event_id FROM spans WHERE trace_id = '${ids.traceId}' AND span_id = '${ids.childId}'`,
      );
      const schema = await t().request("POST", "/v1/annotation-schemas", {
        key: owner(),
        body: {
          name: "span_grade",
          json_schema: JSON.stringify({ type: "object", properties: { ok: { type: "boolean" } } }),
        },
      });
      assert.equal(schema.status, 200, schema.raw);
      const annotated = await t().request("POST", "/v1/annotations", {
        key: owner(),
        body: {
          schema_name: "span_grade",
          run_id: runId,
          target_event_id: span?.event_id,
          payload_json: '{"ok":false}',
        },
      });
      assert.equal(annotated.status, 200, annotated.raw);
      const joined = await sql(
        t(),
        owner(),
        `SELECT s.name, a.payload FROM span_grade a JOIN spans s ON s.event_id = a.target_event_id WHERE s.run_id = '${runId}'`,
      );
      assert.deepEqual(joined, [{ name: "chat model-x", payload: { ok: false } }]);
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);
