// OpenTelemetry traces of API requests and reconciler steps, exported over OTLP/HTTP (JSON).
// Off unless the OTEL_* settings turn it on (config.ts reads them); when off, nothing here
// runs on a request. The provider is this server's own (not registered globally), so tests
// can run several servers with their own exporters in one process. Span attributes are
// chosen here and in the callers from fixed fields (route pattern, operationId, status,
// ids): never a raw URL (signed blob URLs carry signatures in the query), a header or a body.
import {
  type Attributes,
  type Context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from "@opentelemetry/api";
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

  /** A request's span, the child of the caller's span when its `traceparent` header names one. */
  startServer(name: string, attributes: Attributes, traceparent?: string | string[]): Span {
    const parent = remoteParent(traceparent);
    return this.tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent ?? ROOT_CONTEXT);
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

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/**
 * The context of a W3C `traceparent` header (version 00), or undefined when there is none or
 * it is malformed: a header a client controls is checked whole and never fails the request.
 * `tracestate` is not carried.
 */
export function remoteParent(header: string | string[] | undefined): Context | undefined {
  if (typeof header !== "string" || header.length > 128) return undefined;
  const match = TRACEPARENT.exec(header.trim());
  if (!match) return undefined;
  const [, traceId, spanId, flags] = match as unknown as [string, string, string, string];
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId,
    spanId,
    traceFlags: Number.parseInt(flags, 16) & 1,
    isRemote: true,
  });
}
