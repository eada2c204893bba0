// Helpers of the OTLP tests: a listening app's base URL, telemetry SQL as rows of objects,
// and the real OpenTelemetry SDK (a provider whose spans go through a real OTLP exporter).
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { OTLPTraceExporter as JsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as ProtoExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import type { TestApp } from "../harness.js";

export async function baseUrl(t: TestApp): Promise<string> {
  if (!t.app.server.listening) await t.app.listen({ host: "127.0.0.1", port: 0 });
  return `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
}

/** One telemetry SQL query's rows as objects keyed by column name. */
export async function sql(t: TestApp, key: string, text: string): Promise<Record<string, unknown>[]> {
  const res = await t.request("POST", "/v1/telemetry/sql", { key, body: { sql: text, limit: 1000 } });
  assert.equal(res.status, 200, res.raw);
  const columns = (res.body.columns as { name: string }[]).map((c) => c.name);
  return (res.body.rows as unknown[][]).map((row) => Object.fromEntries(columns.map((c, i) => [c, row[i]])));
}

export type ExporterKind = "protobuf" | "json";

/** A tracer provider exporting every span as it ends through the real OTLP/HTTP exporter. */
export function sdkProvider(
  kind: ExporterKind,
  url: string,
  key: string,
  resource: Record<string, string> = {},
  compression: "gzip" | "none" = "none",
): { provider: BasicTracerProvider; exporter: SpanExporter } {
  const options = {
    url: `${url}/v1/traces`,
    headers: { authorization: `Bearer ${key}` },
    compression: compression as never,
  };
  const exporter = kind === "protobuf" ? new ProtoExporter(options) : new JsonExporter(options);
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "otlp-test", ...resource }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  return { provider, exporter };
}
