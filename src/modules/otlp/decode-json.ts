// ExportTraceServiceRequest in OTLP/JSON (the protobuf JSON mapping with the OTLP rules: ids
// as hex, enums as integers, 64-bit integers as decimal strings or numbers). Field names are
// read in lowerCamelCase and in the proto's snake_case, unknown fields are ignored, and a
// field of the wrong JSON type is MalformedBody naming it.
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
  type OtlpScopeSpans,
  type OtlpSpan,
  SPAN_KINDS,
  STATUS_CODES,
} from "./model.js";
import { MalformedBody } from "./wire.js";

type Json = Record<string, unknown>;

const snake = (camel: string) => camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function field(o: Json, camel: string): unknown {
  if (Object.hasOwn(o, camel)) return o[camel];
  const s = snake(camel);
  return Object.hasOwn(o, s) ? o[s] : undefined;
}

function object(value: unknown, path: string): Json | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "object" || Array.isArray(value)) throw new MalformedBody(`${path} must be an object`);
  return value as Json;
}

function array(value: unknown, path: string): unknown[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new MalformedBody(`${path} must be an array`);
  return value;
}

function string(value: unknown, path: string): string {
  if (value === undefined || value === null) return "";
  if (typeof value !== "string") throw new MalformedBody(`${path} must be a string`);
  return value;
}

const INTEGER = /^-?[0-9]{1,20}$/;

function integer(value: unknown, path: string): bigint {
  if (value === undefined || value === null) return 0n;
  if (typeof value === "number" && Number.isInteger(value)) return BigInt(value);
  if (typeof value === "string" && INTEGER.test(value)) return BigInt(value);
  throw new MalformedBody(`${path} must be an integer (a number or a decimal string)`);
}

function uint32(value: unknown, path: string): number {
  const n = integer(value, path);
  if (n < 0n || n > 0xffff_ffffn) throw new MalformedBody(`${path} is out of range`);
  return Number(n);
}

function nanos(value: unknown, path: string): bigint {
  const n = integer(value, path);
  if (n < 0n || n > 0xffff_ffff_ffff_ffffn) throw new MalformedBody(`${path} is out of range`);
  return n;
}

function enumValue(value: unknown, names: readonly string[], prefix: string, path: string): number {
  if (typeof value === "string" && value.startsWith(prefix)) {
    const at = names.indexOf(value.slice(prefix.length).toLowerCase());
    if (at >= 0) return at;
  }
  if (typeof value === "string" && !INTEGER.test(value)) throw new MalformedBody(`${path} is not a known value`);
  return uint32(value, path);
}

const HEX = /^[0-9a-fA-F]{0,64}$/;

function hexId(value: unknown, path: string): string {
  const text = string(value, path);
  if (!HEX.test(text)) throw new MalformedBody(`${path} must be hexadecimal (OTLP/JSON ids are hex, not base64)`);
  return text.toLowerCase();
}

export function decodeJsonRequest(body: unknown, limits: DecodeLimits): OtlpRequest {
  const budget = new DecodeBudget(limits);
  const root = object(body, "the request body");
  if (!root) throw new MalformedBody("the request body must be an ExportTraceServiceRequest object");
  return {
    resourceSpans: array(field(root, "resourceSpans"), "resourceSpans").map((rs, i) =>
      resourceSpansOf(rs, `resourceSpans[${i}]`, budget),
    ),
  };
}

function resourceSpansOf(value: unknown, path: string, budget: DecodeBudget): OtlpResourceSpans {
  const o = object(value, path) ?? {};
  const resource = object(field(o, "resource"), `${path}.resource`) ?? {};
  return {
    resource: {
      attributes: attributesOf(field(resource, "attributes"), `${path}.resource.attributes`, budget, 0),
      droppedAttributesCount: uint32(
        field(resource, "droppedAttributesCount"),
        `${path}.resource.droppedAttributesCount`,
      ),
    },
    schemaUrl: string(field(o, "schemaUrl"), `${path}.schemaUrl`),
    scopeSpans: array(field(o, "scopeSpans"), `${path}.scopeSpans`).map((ss, i) =>
      scopeSpansOf(ss, `${path}.scopeSpans[${i}]`, budget),
    ),
  };
}

function scopeSpansOf(value: unknown, path: string, budget: DecodeBudget): OtlpScopeSpans {
  const o = object(value, path) ?? {};
  const s = object(field(o, "scope"), `${path}.scope`);
  const scope = emptyScope();
  if (s) {
    scope.name = string(field(s, "name"), `${path}.scope.name`);
    scope.version = string(field(s, "version"), `${path}.scope.version`);
    scope.attributes = attributesOf(field(s, "attributes"), `${path}.scope.attributes`, budget, 0);
    scope.droppedAttributesCount = uint32(field(s, "droppedAttributesCount"), `${path}.scope.droppedAttributesCount`);
  }
  return {
    scope,
    schemaUrl: string(field(o, "schemaUrl"), `${path}.schemaUrl`),
    spans: array(field(o, "spans"), `${path}.spans`).map((span, i) => {
      budget.span();
      return spanOf(span, `${path}.spans[${i}]`, budget);
    }),
  };
}

function spanOf(value: unknown, path: string, budget: DecodeBudget): OtlpSpan {
  const o = object(value, path) ?? {};
  const status = object(field(o, "status"), `${path}.status`) ?? {};
  return {
    traceId: hexId(field(o, "traceId"), `${path}.traceId`),
    spanId: hexId(field(o, "spanId"), `${path}.spanId`),
    traceState: string(field(o, "traceState"), `${path}.traceState`),
    parentSpanId: hexId(field(o, "parentSpanId"), `${path}.parentSpanId`),
    flags: uint32(field(o, "flags"), `${path}.flags`),
    name: string(field(o, "name"), `${path}.name`),
    kind: enumValue(field(o, "kind"), SPAN_KINDS, "SPAN_KIND_", `${path}.kind`),
    startNs: nanos(field(o, "startTimeUnixNano"), `${path}.startTimeUnixNano`),
    endNs: nanos(field(o, "endTimeUnixNano"), `${path}.endTimeUnixNano`),
    attributes: attributesOf(field(o, "attributes"), `${path}.attributes`, budget, 0),
    droppedAttributesCount: uint32(field(o, "droppedAttributesCount"), `${path}.droppedAttributesCount`),
    events: array(field(o, "events"), `${path}.events`).map((e, i) => {
      budget.value();
      return eventOf(e, `${path}.events[${i}]`, budget);
    }),
    droppedEventsCount: uint32(field(o, "droppedEventsCount"), `${path}.droppedEventsCount`),
    links: array(field(o, "links"), `${path}.links`).map((l, i) => {
      budget.value();
      return linkOf(l, `${path}.links[${i}]`, budget);
    }),
    droppedLinksCount: uint32(field(o, "droppedLinksCount"), `${path}.droppedLinksCount`),
    status: {
      code: enumValue(field(status, "code"), STATUS_CODES, "STATUS_CODE_", `${path}.status.code`),
      message: string(field(status, "message"), `${path}.status.message`),
    },
  };
}

function eventOf(value: unknown, path: string, budget: DecodeBudget): OtlpEvent {
  const o = object(value, path) ?? {};
  return {
    timeNs: nanos(field(o, "timeUnixNano"), `${path}.timeUnixNano`),
    name: string(field(o, "name"), `${path}.name`),
    attributes: attributesOf(field(o, "attributes"), `${path}.attributes`, budget, 0),
    droppedAttributesCount: uint32(field(o, "droppedAttributesCount"), `${path}.droppedAttributesCount`),
  };
}

function linkOf(value: unknown, path: string, budget: DecodeBudget): OtlpLink {
  const o = object(value, path) ?? {};
  return {
    traceId: hexId(field(o, "traceId"), `${path}.traceId`),
    spanId: hexId(field(o, "spanId"), `${path}.spanId`),
    traceState: string(field(o, "traceState"), `${path}.traceState`),
    attributes: attributesOf(field(o, "attributes"), `${path}.attributes`, budget, 0),
    droppedAttributesCount: uint32(field(o, "droppedAttributesCount"), `${path}.droppedAttributesCount`),
    flags: uint32(field(o, "flags"), `${path}.flags`),
  };
}

function attributesOf(value: unknown, path: string, budget: DecodeBudget, depth: number): Attributes {
  const out = newAttributes();
  array(value, path).forEach((kv, i) => {
    budget.value();
    const o = object(kv, `${path}[${i}]`) ?? {};
    const key = string(field(o, "key"), `${path}[${i}].key`);
    out[key] = anyValueOf(field(o, "value"), `${path}[${i}].value`, budget, depth);
  });
  return out;
}

function anyValueOf(value: unknown, path: string, budget: DecodeBudget, depth: number): AttrValue {
  if (depth >= MAX_VALUE_DEPTH) throw new MalformedBody(`attribute values nest deeper than ${MAX_VALUE_DEPTH} levels`);
  const o = object(value, path);
  if (!o) return null;
  const pick = (name: string) => field(o, name);
  if (pick("stringValue") !== undefined) return string(pick("stringValue"), `${path}.stringValue`);
  if (pick("boolValue") !== undefined) {
    const b = pick("boolValue");
    if (typeof b !== "boolean") throw new MalformedBody(`${path}.boolValue must be a boolean`);
    return b;
  }
  if (pick("intValue") !== undefined) {
    const n = integer(pick("intValue"), `${path}.intValue`);
    if (n < -(2n ** 63n) || n >= 2n ** 63n) throw new MalformedBody(`${path}.intValue is out of range`);
    return intValue(n);
  }
  if (pick("doubleValue") !== undefined) {
    const d = pick("doubleValue");
    if (typeof d === "number") return d;
    if (d === "NaN" || d === "Infinity" || d === "-Infinity") return doubleValue(Number(d));
    throw new MalformedBody(`${path}.doubleValue must be a number`);
  }
  if (pick("arrayValue") !== undefined) {
    const a = object(pick("arrayValue"), `${path}.arrayValue`) ?? {};
    return array(field(a, "values"), `${path}.arrayValue.values`).map((v, i) => {
      budget.value();
      return anyValueOf(v, `${path}.arrayValue.values[${i}]`, budget, depth + 1);
    });
  }
  if (pick("kvlistValue") !== undefined) {
    const kv = object(pick("kvlistValue"), `${path}.kvlistValue`) ?? {};
    return attributesOf(field(kv, "values"), `${path}.kvlistValue.values`, budget, depth + 1);
  }
  if (pick("bytesValue") !== undefined) return string(pick("bytesValue"), `${path}.bytesValue`);
  return null;
}
