// An OTLP trace export request that sets every field of the trace proto (resource, scope,
// span, span event, link, status, every AnyValue variant), written once as OTLP/JSON and once
// as protobuf (field numbers from opentelemetry-proto trace/v1/trace.proto, encoded here by
// hand), so both decoders can be checked against the same expected rows.
import type { Credential } from "../../src/modules/identity/credential.js";
import { decodeJsonRequest } from "../../src/modules/otlp/decode-json.js";
import type { OtlpService } from "../../src/modules/otlp/service.js";
import { WireWriter } from "../../src/modules/otlp/wire.js";

export interface FixtureIds {
  traceId: string;
  rootId: string;
  childId: string;
  linkTraceId: string;
  linkSpanId: string;
}

export function fixtureIds(seed: number): FixtureIds {
  const hex = (n: number, len: number) => (n.toString(16) + "0".repeat(len)).slice(0, len).padStart(len, "0");
  return {
    traceId: `${hex(seed + 1, 16)}${"ab".repeat(8)}`,
    rootId: `${hex(seed + 2, 8)}${"01".repeat(4)}`,
    childId: `${hex(seed + 3, 8)}${"02".repeat(4)}`,
    linkTraceId: `${"cd".repeat(16)}`,
    linkSpanId: `${"ef".repeat(8)}`,
  };
}

export const START_NS = 1_767_225_600_000_000_000n; // 2026-01-01T00:00:00Z
const BYTES_B64 = Buffer.from([0, 1, 2, 250]).toString("base64");

/** The request as OTLP/JSON (lowerCamelCase, ids hex, 64-bit integers as strings). */
export function jsonFixture(ids: FixtureIds, runId?: string): Record<string, unknown> {
  const kv = (key: string, value: Record<string, unknown>) => ({ key, value });
  return {
    resourceSpans: [
      {
        resource: {
          attributes: [
            kv("service.name", { stringValue: "fixture-svc" }),
            kv("user.id", { stringValue: "resource-user" }),
            ...(runId ? [kv("warren.run_id", { stringValue: runId })] : []),
          ],
          droppedAttributesCount: 1,
        },
        schemaUrl: "https://opentelemetry.io/schemas/1.30.0",
        scopeSpans: [
          {
            scope: {
              name: "fixture-scope",
              version: "9.9.9",
              attributes: [kv("scope.attr", { boolValue: true })],
              droppedAttributesCount: 2,
            },
            schemaUrl: "https://opentelemetry.io/schemas/1.31.0",
            spans: [
              {
                traceId: ids.traceId,
                spanId: ids.rootId,
                name: "root",
                kind: 2,
                startTimeUnixNano: String(START_NS),
                endTimeUnixNano: String(START_NS + 5_000_000_000n),
                attributes: [kv("session.id", { stringValue: "sess-1" }), kv("tag.tags", arrayOf(["t1", "t2"]))],
                status: { code: 1, message: "" },
              },
              {
                traceId: ids.traceId,
                spanId: ids.childId,
                traceState: "vendor=1",
                parentSpanId: ids.rootId,
                flags: 257,
                name: "chat model-x",
                kind: 3,
                startTimeUnixNano: String(START_NS + 1_000_000_000n),
                endTimeUnixNano: String(START_NS + 3_500_000_000n),
                attributes: [
                  kv("gen_ai.operation.name", { stringValue: "chat" }),
                  kv("gen_ai.provider.name", { stringValue: "openai" }),
                  kv("gen_ai.request.model", { stringValue: "model-x" }),
                  kv("gen_ai.usage.input_tokens", { intValue: "120" }),
                  kv("gen_ai.usage.output_tokens", { intValue: 30 }),
                  kv("gen_ai.usage.cost", { doubleValue: 0.25 }),
                  kv("gen_ai.usage.reasoning_tokens", { intValue: "9007199254740993" }),
                  kv("gen_ai.input.messages", { stringValue: '[{"role":"user","content":"hi"}]' }),
                  kv("output.value", { stringValue: "hello" }),
                  kv("huge.double", { doubleValue: "Infinity" }),
                  kv("raw.bytes", { bytesValue: BYTES_B64 }),
                  kv("nested", {
                    kvlistValue: {
                      values: [kv("inner", { arrayValue: { values: [{ intValue: "1" }, { stringValue: "x" }] } })],
                    },
                  }),
                  kv("empty", {}),
                  kv("__proto__", { stringValue: "plain key" }),
                ],
                droppedAttributesCount: 3,
                events: [
                  {
                    timeUnixNano: String(START_NS + 2_000_000_000n),
                    name: "exception",
                    attributes: [kv("exception.message", { stringValue: "boom" })],
                    droppedAttributesCount: 4,
                  },
                ],
                droppedEventsCount: 5,
                links: [
                  {
                    traceId: ids.linkTraceId,
                    spanId: ids.linkSpanId,
                    traceState: "link=1",
                    attributes: [kv("link.attr", { doubleValue: 1.5 })],
                    droppedAttributesCount: 6,
                    flags: 1,
                  },
                ],
                droppedLinksCount: 7,
                status: { code: 2, message: "rate limited" },
              },
            ],
          },
        ],
      },
    ],
  };
}

function arrayOf(values: string[]) {
  return { arrayValue: { values: values.map((stringValue) => ({ stringValue })) } };
}

const idBytes = (hex: string) => Buffer.from(hex, "hex");

function fixed64(field: number, value: bigint): Uint8Array {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(value);
  return Buffer.concat([tagBytes(field, 1), b]);
}

function fixed32(field: number, value: number): Uint8Array {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(value);
  return Buffer.concat([tagBytes(field, 5), b]);
}

function doubleField(field: number, value: number): Uint8Array {
  const b = Buffer.alloc(8);
  b.writeDoubleLE(value);
  return Buffer.concat([tagBytes(field, 1), b]);
}

function tagBytes(field: number, wire: number): Buffer {
  const out: number[] = [];
  let v = (field << 3) | wire;
  do {
    let byte = v & 0x7f;
    v >>>= 7;
    if (v !== 0) byte |= 0x80;
    out.push(byte);
  } while (v !== 0);
  return Buffer.from(out);
}

/** Concatenated raw fields as one message's bytes. */
const msg = (...parts: Uint8Array[]) => Buffer.concat(parts);
const len = (field: number, bytes: Uint8Array) => new WireWriter().bytes(field, bytes).finish();
const str = (field: number, value: string) => new WireWriter().string(field, value).finish();
const varint = (field: number, value: number | bigint) => new WireWriter().varint(field, value).finish();

type Any =
  | { s: string }
  | { b: boolean }
  | { i: bigint }
  | { d: number }
  | { a: Any[] }
  | { kv: [string, Any][] }
  | { bytes: Buffer }
  | { none: true };

function anyValue(v: Any): Uint8Array {
  if ("s" in v) return str(1, v.s);
  if ("b" in v) return varint(2, v.b ? 1 : 0);
  if ("i" in v) return varint(3, v.i);
  if ("d" in v) return doubleField(4, v.d);
  if ("a" in v) return len(5, msg(...v.a.map((x) => len(1, anyValue(x)))));
  if ("kv" in v) return len(6, msg(...v.kv.map(([k, x]) => len(1, keyValue(k, x)))));
  if ("bytes" in v) return len(7, v.bytes);
  return new Uint8Array();
}

const keyValue = (key: string, value: Any) => msg(str(1, key), len(2, anyValue(value)));
const attr = (field: number, key: string, value: Any) => len(field, keyValue(key, value));

/** The same request as jsonFixture, in the protobuf encoding. */
export function protobufFixture(ids: FixtureIds, runId?: string): Buffer {
  const resource = msg(
    attr(1, "service.name", { s: "fixture-svc" }),
    attr(1, "user.id", { s: "resource-user" }),
    ...(runId ? [attr(1, "warren.run_id", { s: runId })] : []),
    varint(2, 1),
  );
  const scope = msg(str(1, "fixture-scope"), str(2, "9.9.9"), attr(3, "scope.attr", { b: true }), varint(4, 2));
  const root = msg(
    len(1, idBytes(ids.traceId)),
    len(2, idBytes(ids.rootId)),
    str(5, "root"),
    varint(6, 2),
    fixed64(7, START_NS),
    fixed64(8, START_NS + 5_000_000_000n),
    attr(9, "session.id", { s: "sess-1" }),
    attr(9, "tag.tags", { a: [{ s: "t1" }, { s: "t2" }] }),
    len(15, msg(varint(3, 1))),
  );
  const child = msg(
    len(1, idBytes(ids.traceId)),
    len(2, idBytes(ids.childId)),
    str(3, "vendor=1"),
    len(4, idBytes(ids.rootId)),
    str(5, "chat model-x"),
    varint(6, 3),
    fixed64(7, START_NS + 1_000_000_000n),
    fixed64(8, START_NS + 3_500_000_000n),
    attr(9, "gen_ai.operation.name", { s: "chat" }),
    attr(9, "gen_ai.provider.name", { s: "openai" }),
    attr(9, "gen_ai.request.model", { s: "model-x" }),
    attr(9, "gen_ai.usage.input_tokens", { i: 120n }),
    attr(9, "gen_ai.usage.output_tokens", { i: 30n }),
    attr(9, "gen_ai.usage.cost", { d: 0.25 }),
    attr(9, "gen_ai.usage.reasoning_tokens", { i: 9007199254740993n }),
    attr(9, "gen_ai.input.messages", { s: '[{"role":"user","content":"hi"}]' }),
    attr(9, "output.value", { s: "hello" }),
    attr(9, "huge.double", { d: Number.POSITIVE_INFINITY }),
    attr(9, "raw.bytes", { bytes: Buffer.from([0, 1, 2, 250]) }),
    attr(9, "nested", { kv: [["inner", { a: [{ i: 1n }, { s: "x" }] }]] }),
    attr(9, "empty", { none: true }),
    attr(9, "__proto__", { s: "plain key" }),
    varint(10, 3),
    len(
      11,
      msg(
        fixed64(1, START_NS + 2_000_000_000n),
        str(2, "exception"),
        attr(3, "exception.message", { s: "boom" }),
        varint(4, 4),
      ),
    ),
    varint(12, 5),
    len(
      13,
      msg(
        len(1, idBytes(ids.linkTraceId)),
        len(2, idBytes(ids.linkSpanId)),
        str(3, "link=1"),
        attr(4, "link.attr", { d: 1.5 }),
        varint(5, 6),
        fixed32(6, 1),
      ),
    ),
    varint(14, 7),
    len(15, msg(str(2, "rate limited"), varint(3, 2))),
    fixed32(16, 257),
    // An unknown field (number 99), which a reader must skip.
    str(99, "future field"),
  );
  const scopeSpans = msg(len(1, scope), len(2, root), len(2, child), str(3, "https://opentelemetry.io/schemas/1.31.0"));
  const resourceSpans = msg(len(1, resource), len(2, scopeSpans), str(3, "https://opentelemetry.io/schemas/1.30.0"));
  return msg(len(1, resourceSpans));
}

/**
 * Stores the fixture's two spans in `runId` through the ingest itself (OtlpService), with each
 * text value passed through `mark` (the SQL tests' organization marker) and ids from `seed`.
 */
export async function seedSpans(
  t: { c: { otlp: OtlpService; identity: { authenticate(key: string): Promise<Credential> } } },
  ownerKey: string,
  runId: string,
  seed: number,
  mark: (text: string) => string,
): Promise<void> {
  const words = ["root", "chat model-x", "fixture-svc", "sess-1", "resource-user", "t1", "hello", "boom", "model-x"];
  let text = JSON.stringify(jsonFixture(fixtureIds(seed), runId));
  for (const w of words) text = text.replaceAll(`"${w}"`, JSON.stringify(mark(w)));
  const cred = await t.c.identity.authenticate(ownerKey);
  const result = await t.c.otlp.ingest(cred, decodeJsonRequest(JSON.parse(text), { maxSpans: 100, maxValues: 10_000 }));
  if (result.rejectedSpans !== 0) throw new Error(`seeded spans rejected: ${result.errorMessage}`);
}
