// Spans as Warren stores them (the payload of each `span` event, docs/api-decisions.md
// "OpenTelemetry ingest") back into one OTLP/JSON ExportTraceServiceRequest, which any OTLP
// backend takes at its /v1/traces (`warren run traces <run> | curl --data-binary @- ...`).
// Spans are grouped by resource and scope as they were sent.

type Json = unknown;
type KeyValue = { key: string; value: Record<string, unknown> };

/** A stored attribute value as an OTLP AnyValue (the inverse of the ingest's mapping). */
export function anyValue(value: Json): Record<string, unknown> {
  if (value === null || value === undefined) return {};
  if (typeof value === "string") return { stringValue: value };
  if (typeof value === "boolean") return { boolValue: value };
  if (typeof value === "number") return Number.isInteger(value) ? { intValue: String(value) } : { doubleValue: value };
  if (Array.isArray(value)) return { arrayValue: { values: value.map(anyValue) } };
  if (typeof value === "object") return { kvlistValue: { values: keyValues(value as Record<string, Json>) } };
  return { stringValue: String(value) };
}

export function keyValues(attributes: Record<string, Json> | undefined): KeyValue[] {
  return Object.entries(attributes ?? {}).map(([key, value]) => ({ key, value: anyValue(value) }));
}

const KINDS = ["unspecified", "internal", "server", "client", "producer", "consumer"];
const STATUS = ["unset", "ok", "error"];

const enumOf = (names: string[], value: unknown) => {
  const at = names.indexOf(String(value));
  return at >= 0 ? at : Number(value) || 0;
};

interface StoredSpan {
  name: string;
  trace_id: string;
  span_id: string;
  parent_span_id?: string;
  trace_state?: string;
  flags?: number;
  kind: string;
  start_time_unix_nano: string;
  end_time_unix_nano: string;
  status: { code: string; message: string };
  attributes: Record<string, Json>;
  dropped_attributes_count?: number;
  events?: {
    time_unix_nano: string;
    name: string;
    attributes: Record<string, Json>;
    dropped_attributes_count?: number;
  }[];
  dropped_events_count?: number;
  links?: {
    trace_id: string;
    span_id: string;
    trace_state?: string;
    flags?: number;
    attributes: Record<string, Json>;
    dropped_attributes_count?: number;
  }[];
  dropped_links_count?: number;
  resource?: { attributes?: Record<string, Json>; dropped_attributes_count?: number; schema_url?: string };
  scope?: {
    name?: string;
    version?: string;
    attributes?: Record<string, Json>;
    dropped_attributes_count?: number;
    schema_url?: string;
  };
}

function spanOf(s: StoredSpan): Record<string, unknown> {
  const span: Record<string, unknown> = {
    traceId: s.trace_id,
    spanId: s.span_id,
    name: s.name,
    kind: enumOf(KINDS, s.kind),
    startTimeUnixNano: s.start_time_unix_nano,
    endTimeUnixNano: s.end_time_unix_nano,
    attributes: keyValues(s.attributes),
    status: { code: enumOf(STATUS, s.status?.code), ...(s.status?.message ? { message: s.status.message } : {}) },
  };
  if (s.parent_span_id) span.parentSpanId = s.parent_span_id;
  if (s.trace_state) span.traceState = s.trace_state;
  if (s.flags) span.flags = s.flags;
  if (s.dropped_attributes_count) span.droppedAttributesCount = s.dropped_attributes_count;
  if (s.events) {
    span.events = s.events.map((e) => ({
      timeUnixNano: e.time_unix_nano,
      name: e.name,
      attributes: keyValues(e.attributes),
      ...(e.dropped_attributes_count ? { droppedAttributesCount: e.dropped_attributes_count } : {}),
    }));
  }
  if (s.dropped_events_count) span.droppedEventsCount = s.dropped_events_count;
  if (s.links) {
    span.links = s.links.map((l) => ({
      traceId: l.trace_id,
      spanId: l.span_id,
      attributes: keyValues(l.attributes),
      ...(l.trace_state ? { traceState: l.trace_state } : {}),
      ...(l.flags ? { flags: l.flags } : {}),
      ...(l.dropped_attributes_count ? { droppedAttributesCount: l.dropped_attributes_count } : {}),
    }));
  }
  if (s.dropped_links_count) span.droppedLinksCount = s.dropped_links_count;
  return span;
}

/** One ExportTraceServiceRequest holding every span given (stored payloads, in any order). */
export function otlpJsonOf(payloads: StoredSpan[]): { resourceSpans: Record<string, unknown>[] } {
  const resources = new Map<string, { resource: StoredSpan["resource"]; scopes: Map<string, StoredSpan[]> }>();
  for (const p of payloads) {
    const rKey = JSON.stringify(p.resource ?? {});
    let r = resources.get(rKey);
    if (!r) {
      r = { resource: p.resource ?? {}, scopes: new Map() };
      resources.set(rKey, r);
    }
    const sKey = JSON.stringify(p.scope ?? {});
    const list = r.scopes.get(sKey);
    if (list) list.push(p);
    else r.scopes.set(sKey, [p]);
  }
  return {
    resourceSpans: [...resources.values()].map(({ resource, scopes }) => ({
      resource: {
        attributes: keyValues(resource?.attributes),
        ...(resource?.dropped_attributes_count ? { droppedAttributesCount: resource.dropped_attributes_count } : {}),
      },
      ...(resource?.schema_url ? { schemaUrl: resource.schema_url } : {}),
      scopeSpans: [...scopes.values()].map((spans) => {
        const scope = spans[0]?.scope ?? {};
        return {
          scope: {
            name: scope.name ?? "",
            ...(scope.version ? { version: scope.version } : {}),
            ...(scope.attributes ? { attributes: keyValues(scope.attributes) } : {}),
            ...(scope.dropped_attributes_count ? { droppedAttributesCount: scope.dropped_attributes_count } : {}),
          },
          ...(scope.schema_url ? { schemaUrl: scope.schema_url } : {}),
          spans: spans.map(spanOf),
        };
      }),
    })),
  };
}

export type { StoredSpan };
