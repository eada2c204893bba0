// A Node program instrumented the ordinary way, run inside a sandbox by test/otlp-sandbox.test.ts:
// the OpenTelemetry SDK with the OTLP/HTTP protobuf exporter and no configuration of its own
// (the exporter reads OTEL_EXPORTER_OTLP_* from the environment the sandbox was given). It
// prints the trace id it exported, then exits once the spans are sent.
import { context, trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";

const exporter = new OTLPTraceExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter)] });
const tracer = provider.getTracer("in-sandbox", "1.0.0");
const root = tracer.startSpan("agent in a sandbox");
const child = tracer.startSpan(
  "chat tiny-model",
  {
    attributes: {
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": "tiny-model",
      "gen_ai.usage.input_tokens": 3,
    },
  },
  trace.setSpan(context.active(), root),
);
child.end();
root.end();
await new Promise<void>((resolve, reject) => {
  provider.forceFlush().then(resolve, reject);
});
// forceFlush settles once the export is answered; a failed export is logged by the SDK, and
// the test then finds no spans.
await provider.shutdown();
process.stdout.write(`${root.spanContext().traceId}\n`);
