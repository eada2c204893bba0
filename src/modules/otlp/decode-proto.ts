// ExportTraceServiceRequest in the protobuf encoding (opentelemetry-proto,
// opentelemetry/proto/collector/trace/v1/trace_service.proto and trace/v1/trace.proto), read
// field by field with WireReader: unknown fields are skipped, a wrong wire type or a length
// past its message is MalformedBody, and every span and value counts against the budget.
import {
  type Attributes,
  type AttrValue,
  DecodeBudget,
  type DecodeLimits,
  doubleValue,
  emptyScope,
  intValue,
  MAX_VALUE_DEPTH,
  newAttributes,
  type OtlpEvent,
  type OtlpLink,
  type OtlpRequest,
  type OtlpResourceSpans,
  type OtlpScope,
  type OtlpScopeSpans,
  type OtlpSpan,
} from "./model.js";
import { MalformedBody, WIRE_I32, WIRE_I64, WIRE_LEN, WIRE_VARINT, WireReader } from "./wire.js";

const hex = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex");

/** Ids longer than this are not ids; they are cut here and refused as spans (service.ts). */
const MAX_ID_BYTES = 32;

function id(r: WireReader): string {
  const bytes = r.bytesField();
  return hex(bytes.length > MAX_ID_BYTES ? bytes.subarray(0, MAX_ID_BYTES) : bytes);
}

export function decodeProtobufRequest(body: Uint8Array, limits: DecodeLimits): OtlpRequest {
  const budget = new DecodeBudget(limits);
  const r = new WireReader(body);
  const resourceSpans: OtlpResourceSpans[] = [];
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1) {
      r.expect(wire, WIRE_LEN, "resource_spans");
      resourceSpans.push(resourceSpansOf(r.message(), budget));
    } else r.skip(wire);
  }
  return { resourceSpans };
}

function resourceSpansOf(r: WireReader, budget: DecodeBudget): OtlpResourceSpans {
  const out: OtlpResourceSpans = {
    resource: { attributes: newAttributes(), droppedAttributesCount: 0 },
    schemaUrl: "",
    scopeSpans: [],
  };
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1) {
      r.expect(wire, WIRE_LEN, "resource");
      const m = r.message();
      while (!m.done) {
        const t = m.tag();
        if (t.field === 1) keyValueInto(m, t.wire, out.resource.attributes, budget, 0);
        else if (t.field === 2 && t.wire === WIRE_VARINT) out.resource.droppedAttributesCount = m.uint32();
        else m.skip(t.wire);
      }
    } else if (field === 2) {
      r.expect(wire, WIRE_LEN, "scope_spans");
      out.scopeSpans.push(scopeSpansOf(r.message(), budget));
    } else if (field === 3 && wire === WIRE_LEN) out.schemaUrl = r.string();
    else r.skip(wire);
  }
  return out;
}

function scopeSpansOf(r: WireReader, budget: DecodeBudget): OtlpScopeSpans {
  const out: OtlpScopeSpans = { scope: emptyScope(), schemaUrl: "", spans: [] };
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1) {
      r.expect(wire, WIRE_LEN, "scope");
      out.scope = scopeOf(r.message(), budget);
    } else if (field === 2) {
      r.expect(wire, WIRE_LEN, "span");
      budget.span();
      out.spans.push(spanOf(r.message(), budget));
    } else if (field === 3 && wire === WIRE_LEN) out.schemaUrl = r.string();
    else r.skip(wire);
  }
  return out;
}

function scopeOf(r: WireReader, budget: DecodeBudget): OtlpScope {
  const scope = emptyScope();
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1 && wire === WIRE_LEN) scope.name = r.string();
    else if (field === 2 && wire === WIRE_LEN) scope.version = r.string();
    else if (field === 3) keyValueInto(r, wire, scope.attributes, budget, 0);
    else if (field === 4 && wire === WIRE_VARINT) scope.droppedAttributesCount = r.uint32();
    else r.skip(wire);
  }
  return scope;
}

function spanOf(r: WireReader, budget: DecodeBudget): OtlpSpan {
  const span: OtlpSpan = {
    traceId: "",
    spanId: "",
    traceState: "",
    parentSpanId: "",
    flags: 0,
    name: "",
    kind: 0,
    startNs: 0n,
    endNs: 0n,
    attributes: newAttributes(),
    droppedAttributesCount: 0,
    events: [],
    droppedEventsCount: 0,
    links: [],
    droppedLinksCount: 0,
    status: { code: 0, message: "" },
  };
  while (!r.done) {
    const { field, wire } = r.tag();
    switch (field) {
      case 1:
        r.expect(wire, WIRE_LEN, "trace_id");
        span.traceId = id(r);
        break;
      case 2:
        r.expect(wire, WIRE_LEN, "span_id");
        span.spanId = id(r);
        break;
      case 3:
        r.expect(wire, WIRE_LEN, "trace_state");
        span.traceState = r.string();
        break;
      case 4:
        r.expect(wire, WIRE_LEN, "parent_span_id");
        span.parentSpanId = id(r);
        break;
      case 5:
        r.expect(wire, WIRE_LEN, "name");
        span.name = r.string();
        break;
      case 6:
        r.expect(wire, WIRE_VARINT, "kind");
        span.kind = r.uint32();
        break;
      case 7:
        r.expect(wire, WIRE_I64, "start_time_unix_nano");
        span.startNs = r.fixed64();
        break;
      case 8:
        r.expect(wire, WIRE_I64, "end_time_unix_nano");
        span.endNs = r.fixed64();
        break;
      case 9:
        keyValueInto(r, wire, span.attributes, budget, 0);
        break;
      case 10:
        r.expect(wire, WIRE_VARINT, "dropped_attributes_count");
        span.droppedAttributesCount = r.uint32();
        break;
      case 11:
        r.expect(wire, WIRE_LEN, "events");
        budget.value();
        span.events.push(eventOf(r.message(), budget));
        break;
      case 12:
        r.expect(wire, WIRE_VARINT, "dropped_events_count");
        span.droppedEventsCount = r.uint32();
        break;
      case 13:
        r.expect(wire, WIRE_LEN, "links");
        budget.value();
        span.links.push(linkOf(r.message(), budget));
        break;
      case 14:
        r.expect(wire, WIRE_VARINT, "dropped_links_count");
        span.droppedLinksCount = r.uint32();
        break;
      case 15: {
        r.expect(wire, WIRE_LEN, "status");
        const m = r.message();
        while (!m.done) {
          const t = m.tag();
          if (t.field === 2 && t.wire === WIRE_LEN) span.status.message = m.string();
          else if (t.field === 3 && t.wire === WIRE_VARINT) span.status.code = m.uint32();
          else m.skip(t.wire);
        }
        break;
      }
      case 16:
        r.expect(wire, WIRE_I32, "flags");
        span.flags = r.fixed32();
        break;
      default:
        r.skip(wire);
    }
  }
  return span;
}

function eventOf(r: WireReader, budget: DecodeBudget): OtlpEvent {
  const event: OtlpEvent = { timeNs: 0n, name: "", attributes: newAttributes(), droppedAttributesCount: 0 };
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1 && wire === WIRE_I64) event.timeNs = r.fixed64();
    else if (field === 2 && wire === WIRE_LEN) event.name = r.string();
    else if (field === 3) keyValueInto(r, wire, event.attributes, budget, 0);
    else if (field === 4 && wire === WIRE_VARINT) event.droppedAttributesCount = r.uint32();
    else r.skip(wire);
  }
  return event;
}

function linkOf(r: WireReader, budget: DecodeBudget): OtlpLink {
  const link: OtlpLink = {
    traceId: "",
    spanId: "",
    traceState: "",
    attributes: newAttributes(),
    droppedAttributesCount: 0,
    flags: 0,
  };
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1 && wire === WIRE_LEN) link.traceId = id(r);
    else if (field === 2 && wire === WIRE_LEN) link.spanId = id(r);
    else if (field === 3 && wire === WIRE_LEN) link.traceState = r.string();
    else if (field === 4) keyValueInto(r, wire, link.attributes, budget, 0);
    else if (field === 5 && wire === WIRE_VARINT) link.droppedAttributesCount = r.uint32();
    else if (field === 6 && wire === WIRE_I32) link.flags = r.fixed32();
    else r.skip(wire);
  }
  return link;
}

/** A KeyValue field into `into` (a repeated key: the last one holds). */
function keyValueInto(r: WireReader, wire: number, into: Attributes, budget: DecodeBudget, depth: number): void {
  r.expect(wire, WIRE_LEN, "an attribute (KeyValue)");
  budget.value();
  const m = r.message();
  let key = "";
  let value: AttrValue = null;
  while (!m.done) {
    const t = m.tag();
    if (t.field === 1 && t.wire === WIRE_LEN) key = m.string();
    else if (t.field === 2 && t.wire === WIRE_LEN) value = anyValueOf(m.message(), budget, depth);
    else m.skip(t.wire);
  }
  into[key] = value;
}

function anyValueOf(r: WireReader, budget: DecodeBudget, depth: number): AttrValue {
  if (depth >= MAX_VALUE_DEPTH) throw new MalformedBody(`attribute values nest deeper than ${MAX_VALUE_DEPTH} levels`);
  let value: AttrValue = null;
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1 && wire === WIRE_LEN) value = r.string();
    else if (field === 2 && wire === WIRE_VARINT) value = r.bool();
    else if (field === 3 && wire === WIRE_VARINT) value = intValue(r.int64());
    else if (field === 4 && wire === WIRE_I64) value = doubleValue(r.double());
    else if (field === 5 && wire === WIRE_LEN) {
      const m = r.message();
      const values: AttrValue[] = [];
      while (!m.done) {
        const t = m.tag();
        if (t.field === 1 && t.wire === WIRE_LEN) {
          budget.value();
          values.push(anyValueOf(m.message(), budget, depth + 1));
        } else m.skip(t.wire);
      }
      value = values;
    } else if (field === 6 && wire === WIRE_LEN) {
      const m = r.message();
      const values = newAttributes();
      while (!m.done) {
        const t = m.tag();
        if (t.field === 1) keyValueInto(m, t.wire, values, budget, depth + 1);
        else m.skip(t.wire);
      }
      value = values;
    } else if (field === 7 && wire === WIRE_LEN) value = Buffer.from(r.bytesField()).toString("base64");
    else r.skip(wire);
  }
  return value;
}
