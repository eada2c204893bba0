// An "agent" instrumented with OpenTelemetry the ordinary way (README, "Traces"): the SDK and
// the OTLP/HTTP protobuf exporter, configured only by the standard OTEL_* variables. Run it
// from the repository (its node_modules hold the SDK):
//   OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:8080 \
//   OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer%20$WARREN_API_KEY" \
//   OTEL_SERVICE_NAME=my-agent node docs/examples/otlp-agent.mjs
import { context, trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { defaultResource, detectResources, envDetector } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";

// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (e.g. warren.run_id=run_... to send the spans
// to an existing run) are read by the environment detector, as the SDK's NodeSDK does.
const resource = defaultResource().merge(detectResources({ detectors: [envDetector] }));
const provider = new BasicTracerProvider({
  resource,
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
const tracer = provider.getTracer("otlp-agent-example", "1.0.0");

const turn = tracer.startSpan("agent turn", { attributes: { "user.id": "alice", "session.id": "s-42" } });
const inTurn = trace.setSpan(context.active(), turn);
const llm = tracer.startSpan(
  "chat gpt-4o",
  {
    attributes: {
      "gen_ai.operation.name": "chat",
      "gen_ai.provider.name": "openai",
      "gen_ai.request.model": "gpt-4o",
      "gen_ai.usage.input_tokens": 812,
      "gen_ai.usage.output_tokens": 64,
    },
  },
  inTurn,
);
llm.end();
const tool = tracer.startSpan("execute_tool search", { attributes: { "gen_ai.operation.name": "execute_tool" } }, inTurn);
tool.end();
turn.end();

await provider.forceFlush();
await provider.shutdown();
console.log(`trace ${turn.spanContext().traceId}`);
