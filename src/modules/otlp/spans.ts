// From a decoded request to the spans Warren stores: each span checked on its own (a bad span
// is rejected and counted, the others are kept, as OTLP's partial success has it), its event
// id derived from its trace and span ids, its payload built once as JSON text.
import { createHash } from "node:crypto";
import { conventionsOf, type SpanConventions } from "./conventions.js";
import {
  type Attributes,
  type AttrValue,
  type OtlpRequest,
  type OtlpResourceSpans,
  type OtlpScopeSpans,
  type OtlpSpan,
  SPAN_KINDS,
  STATUS_CODES,
} from "./model.js";

/** The attribute (of the span, else of its resource) that names the run a span belongs to. */
export const RUN_ATTRIBUTE = "warren.run_id";

export interface AcceptedSpan {
  span: OtlpSpan;
  eventId: string;
  /** The run the span or its resource names, if any. */
  namedRunId: string | null;
  conventions: SpanConventions;
  payloadJson: string;
  resourceAttributes: Attributes;
}

export interface SpanBatch {
  spans: AcceptedSpan[];
  rejected: number;
  /** Why spans were rejected: the first reason of each kind, for the partial-success message. */
  reasons: string[];
}

const TRACE_ID = /^[0-9a-f]{32}$/;
const SPAN_ID = /^[0-9a-f]{16}$/;
const MAX_NS = 2n ** 63n - 1n;

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/**
 * A span's event id: a ULID whose time is the span's start (in milliseconds, clamped to the
 * ULID range) and whose 80 random bits are the first bits of SHA-256(trace id, span id). The
 * same span sent again gets the same id, so the events table's key stores it once.
 */
export function spanEventId(traceId: string, spanId: string, startNs: bigint): string {
  const ms = Number(startNs / 1_000_000n);
  let time = Math.min(ms, 2 ** 48 - 1);
  const out = new Array<string>(26);
  for (let i = 9; i >= 0; i--) {
    out[i] = CROCKFORD[time % 32] as string;
    time = Math.floor(time / 32);
  }
  // 80 bits of the digest, five at a time, most significant first.
  const digest = createHash("sha256").update(`${traceId}:${spanId}`).digest();
  for (let i = 0; i < 16; i++) {
    const bit = i * 5;
    const byte = bit >> 3;
    const pair = ((digest[byte] as number) << 8) | (digest[byte + 1] as number);
    out[10 + i] = CROCKFORD[(pair >> (11 - (bit & 7))) & 31] as string;
  }
  return out.join("");
}

const UNSTORABLE = /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Text PostgreSQL cannot store: NUL, and a surrogate without its pair. */
function storable(value: AttrValue | string): boolean {
  if (typeof value === "string") return !UNSTORABLE.test(value);
  if (value === null || typeof value !== "object") return true;
  if (Array.isArray(value)) return value.every(storable);
  for (const key in value) if (!storable(key) || !storable(value[key] as AttrValue)) return false;
  return true;
}

function problemOf(span: OtlpSpan): string | null {
  if (!TRACE_ID.test(span.traceId) || /^0+$/.test(span.traceId)) return "a trace_id is not 16 bytes (or is zero)";
  if (!SPAN_ID.test(span.spanId) || /^0+$/.test(span.spanId)) return "a span_id is not 8 bytes (or is zero)";
  if (span.parentSpanId !== "" && !SPAN_ID.test(span.parentSpanId)) return "a parent_span_id is not 8 bytes";
  if (span.startNs > MAX_NS || span.endNs > MAX_NS) return "a start or end time is past the year 2262";
  for (const e of span.events) if (e.timeNs > MAX_NS) return "a span event's time is past the year 2262";
  return null;
}

const nanos = (n: bigint) => n.toString();

function payloadOf(span: OtlpSpan, rs: OtlpResourceSpans, ss: OtlpScopeSpans): Record<string, unknown> {
  const p: Record<string, unknown> = {
    name: span.name,
    trace_id: span.traceId,
    span_id: span.spanId,
    kind: SPAN_KINDS[span.kind] ?? String(span.kind),
    start_time_unix_nano: nanos(span.startNs),
    end_time_unix_nano: nanos(span.endNs),
    status: { code: STATUS_CODES[span.status.code] ?? String(span.status.code), message: span.status.message },
    attributes: span.attributes,
  };
  if (span.parentSpanId) p.parent_span_id = span.parentSpanId;
  if (span.traceState) p.trace_state = span.traceState;
  if (span.flags) p.flags = span.flags;
  if (span.droppedAttributesCount) p.dropped_attributes_count = span.droppedAttributesCount;
  if (span.events.length > 0) {
    p.events = span.events.map((e) => ({
      time_unix_nano: nanos(e.timeNs),
      name: e.name,
      attributes: e.attributes,
      ...(e.droppedAttributesCount ? { dropped_attributes_count: e.droppedAttributesCount } : {}),
    }));
  }
  if (span.droppedEventsCount) p.dropped_events_count = span.droppedEventsCount;
  if (span.links.length > 0) {
    p.links = span.links.map((l) => ({
      trace_id: l.traceId,
      span_id: l.spanId,
      attributes: l.attributes,
      ...(l.traceState ? { trace_state: l.traceState } : {}),
      ...(l.flags ? { flags: l.flags } : {}),
      ...(l.droppedAttributesCount ? { dropped_attributes_count: l.droppedAttributesCount } : {}),
    }));
  }
  if (span.droppedLinksCount) p.dropped_links_count = span.droppedLinksCount;
  p.resource = {
    attributes: rs.resource.attributes,
    ...(rs.resource.droppedAttributesCount ? { dropped_attributes_count: rs.resource.droppedAttributesCount } : {}),
    ...(rs.schemaUrl ? { schema_url: rs.schemaUrl } : {}),
  };
  p.scope = {
    name: ss.scope.name,
    ...(ss.scope.version ? { version: ss.scope.version } : {}),
    ...(Object.keys(ss.scope.attributes).length > 0 ? { attributes: ss.scope.attributes } : {}),
    ...(ss.scope.droppedAttributesCount ? { dropped_attributes_count: ss.scope.droppedAttributesCount } : {}),
    ...(ss.schemaUrl ? { schema_url: ss.schemaUrl } : {}),
  };
  return p;
}

export function spansOf(request: OtlpRequest): SpanBatch {
  const batch: SpanBatch = { spans: [], rejected: 0, reasons: [] };
  const reject = (reason: string) => {
    batch.rejected++;
    if (!batch.reasons.includes(reason)) batch.reasons.push(reason);
  };
  for (const rs of request.resourceSpans) {
    const resourceRun = rs.resource.attributes[RUN_ATTRIBUTE];
    for (const ss of rs.scopeSpans) {
      for (const span of ss.spans) {
        const problem = problemOf(span);
        if (problem) {
          reject(problem);
          continue;
        }
        const payload = payloadOf(span, rs, ss);
        if (!storable(payload as AttrValue)) {
          reject("a string holds NUL or an unpaired surrogate, which Warren cannot store");
          continue;
        }
        const spanRun = span.attributes[RUN_ATTRIBUTE];
        const named = typeof spanRun === "string" ? spanRun : typeof resourceRun === "string" ? resourceRun : null;
        batch.spans.push({
          span,
          eventId: spanEventId(span.traceId, span.spanId, span.startNs),
          namedRunId: named,
          conventions: conventionsOf(span.attributes, rs.resource.attributes),
          payloadJson: JSON.stringify(payload),
          resourceAttributes: rs.resource.attributes,
        });
      }
    }
  }
  return batch;
}
