// An OTLP trace export request as both decoders (protobuf, JSON) produce it: the OTLP trace
// proto's fields, with ids as lowercase hex and attributes as plain JSON values (the form they
// are stored and queried in; docs/api-decisions.md "OpenTelemetry ingest" gives the mapping).
import { AppError } from "../../lib/errors.js";

export type AttrValue = string | number | boolean | null | AttrValue[] | { [key: string]: AttrValue };
/** Attribute maps have no prototype: a key such as `__proto__` is an ordinary key. */
export type Attributes = Record<string, AttrValue>;

export const newAttributes = (): Attributes => Object.create(null) as Attributes;

export interface OtlpEvent {
  timeNs: bigint;
  name: string;
  attributes: Attributes;
  droppedAttributesCount: number;
}

export interface OtlpLink {
  traceId: string;
  spanId: string;
  traceState: string;
  attributes: Attributes;
  droppedAttributesCount: number;
  flags: number;
}

export interface OtlpSpan {
  traceId: string;
  spanId: string;
  traceState: string;
  parentSpanId: string;
  flags: number;
  name: string;
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Attributes;
  droppedAttributesCount: number;
  events: OtlpEvent[];
  droppedEventsCount: number;
  links: OtlpLink[];
  droppedLinksCount: number;
  status: { code: number; message: string };
}

export interface OtlpScope {
  name: string;
  version: string;
  attributes: Attributes;
  droppedAttributesCount: number;
}

export interface OtlpScopeSpans {
  scope: OtlpScope;
  schemaUrl: string;
  spans: OtlpSpan[];
}

export interface OtlpResourceSpans {
  resource: { attributes: Attributes; droppedAttributesCount: number };
  schemaUrl: string;
  scopeSpans: OtlpScopeSpans[];
}

export interface OtlpRequest {
  resourceSpans: OtlpResourceSpans[];
}

/** How much one request may hold once decoded; both decoders count against it. */
export interface DecodeLimits {
  maxSpans: number;
  /** Attribute values, array elements, span events and links together. */
  maxValues: number;
}

/** Nesting of array and key-value-list values beyond this is refused (the decoders recurse on it). */
export const MAX_VALUE_DEPTH = 16;

export class DecodeBudget {
  spans = 0;
  values = 0;

  constructor(private readonly limits: DecodeLimits) {}

  span(): void {
    if (++this.spans > this.limits.maxSpans) {
      throw new AppError("payload_too_large", `the request holds more than ${this.limits.maxSpans} spans`);
    }
  }

  value(): void {
    if (++this.values > this.limits.maxValues) {
      throw new AppError(
        "payload_too_large",
        `the request holds more than ${this.limits.maxValues} attribute values, span events and links`,
      );
    }
  }
}

export const SPAN_KINDS = ["unspecified", "internal", "server", "client", "producer", "consumer"] as const;
export const STATUS_CODES = ["unset", "ok", "error"] as const;

export function emptyScope(): OtlpScope {
  return { name: "", version: "", attributes: newAttributes(), droppedAttributesCount: 0 };
}

/** A 64-bit integer attribute as JSON: a number when exact, else its decimal string. */
export function intValue(value: bigint): AttrValue {
  return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
    ? Number(value)
    : value.toString();
}

/** A double attribute as JSON: NaN and the infinities (which JSON has not) as their names. */
export function doubleValue(value: number): AttrValue {
  return Number.isFinite(value) ? value : String(value);
}
