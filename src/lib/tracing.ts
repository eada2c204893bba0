// OpenTelemetry traces of API requests and reconciler steps, exported over OTLP/HTTP (JSON).
// Off unless the OTEL_* settings turn it on (config.ts reads them); when off, nothing here
// runs on a request. The provider is this server's own (not registered globally), so tests
// can run several servers with their own exporters in one process. Span attributes are
// chosen here and in the callers from fixed fields (route pattern, operationId, status,
// ids): never a raw URL (signed blob URLs carry signatures in the query), a header or a body.
import { type Attributes, type Span, SpanKind, SpanStatusCode, type Tracer } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  NodeTracerProvider,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
} from "@opentelemetry/sdk-trace-node";
import type { TracingSettings } from "../config.js";

export { type Span, SpanStatusCode };

export class Tracing {
  private readonly provider: NodeTracerProvider;
  readonly tracer: Tracer;

  private constructor(settings: TracingSettings, version: string) {
    const root =
      settings.sampleRatio >= 1
        ? new AlwaysOnSampler()
        : settings.sampleRatio <= 0
          ? new AlwaysOffSampler()
          : new TraceIdRatioBasedSampler(settings.sampleRatio);
    this.provider = new NodeTracerProvider({
      resource: resourceFromAttributes({ "service.name": settings.serviceName, "service.version": version }),
      sampler: new ParentBasedSampler({ root }),
      spanProcessors: [
        new BatchSpanProcessor(new OTLPTraceExporter({ url: settings.url, headers: settings.headers }), {
          scheduledDelayMillis: settings.exportDelayMs,
        }),
      ],
    });
    this.tracer = this.provider.getTracer("warren", version);
  }

  /** A tracer when the settings enable tracing, else null (and no cost anywhere). */
  static open(settings: TracingSettings, version: string): Tracing | null {
    return settings.enabled ? new Tracing(settings, version) : null;
  }

  /** A span that started at `startTime` (ms since the epoch, or a performance time) and is ended by the caller. */
  start(name: string, attributes: Attributes, kind: SpanKind = SpanKind.INTERNAL, startTime?: number): Span {
    return this.tracer.startSpan(name, { kind, attributes, ...(startTime !== undefined ? { startTime } : {}) });
  }

  startServer(name: string, attributes: Attributes): Span {
    return this.start(name, attributes, SpanKind.SERVER);
  }

  /** Sends what is buffered (tests, shutdown). */
  flush(): Promise<void> {
    return this.provider.forceFlush();
  }

  /** Sends what is buffered and stops exporting. */
  shutdown(): Promise<void> {
    return this.provider.shutdown();
  }
}
