// What POST /v1/traces refuses, on both stores, and in which form: malformed protobuf and JSON
// (400), bodies past the limits as sent and decompressed (413), more spans or values than a
// request may hold (413), media types and encodings it does not take (415), bad credentials,
// spans naming another organization's run (rejected, as OTLP's partial success), and mutated
// bodies, none of which may be a 500. A protobuf request's error is a google.rpc.Status.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import net from "node:net";
import { it } from "node:test";
import { deflateSync, gzipSync } from "node:zlib";
import { loadConfig } from "../src/config.js";
import { WireReader, WireWriter } from "../src/modules/otlp/wire.js";
import { forEachStore, type TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";
import { baseUrl, sql } from "./support/otlp.js";
import { fixtureIds, jsonFixture, protobufFixture } from "./support/otlp-fixtures.js";

const LIMITS = {
  maxBodyBytes: 64 * 1024,
  maxDecodedBytes: 256 * 1024,
  maxSpans: 50,
  maxValues: 5000,
  maxConcurrentRequests: 1,
};

async function post(t: TestApp, key: string | null, body: Buffer | string, contentType: string, headers = {}) {
  return t.app.inject({
    method: "POST",
    url: "/v1/traces",
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), "content-type": contentType, ...headers },
    payload: body,
  });
}

/** google.rpc.Status: code (1) and message (2). */
function status(bytes: Buffer): { code: number; message: string } {
  const r = new WireReader(new Uint8Array(bytes));
  const out = { code: 0, message: "" };
  while (!r.done) {
    const { field, wire } = r.tag();
    if (field === 1) out.code = r.uint32();
    else if (field === 2) out.message = r.string();
    else r.skip(wire);
  }
  return out;
}

type Injected = Awaited<ReturnType<typeof post>>;

function assertProtoError(res: Injected, httpStatus: number, code: string, grpc: number): void {
  assert.equal(res.statusCode, httpStatus, res.body);
  assert.equal(res.headers["content-type"], "application/x-protobuf");
  const s = status(res.rawPayload);
  assert.equal(s.code, grpc);
  assert.ok(s.message.startsWith(`${code}: `), s.message);
  assert.ok(s.message.includes(String(res.headers["x-request-id"])), "the request id is in the message");
}

function assertJsonError(res: Injected, httpStatus: number, code: string): void {
  assert.equal(res.statusCode, httpStatus, res.body);
  assert.match(String(res.headers["content-type"]), /^application\/json/);
  const body = JSON.parse(res.body);
  assert.equal(body.code, code);
  assert.equal(body.request_id, res.headers["x-request-id"]);
}

/** A request of `n` minimal spans (one resource, one scope) in protobuf. */
function manySpans(n: number, attributesEach = 0): Buffer {
  const scope = new WireWriter();
  for (let i = 0; i < n; i++) {
    const span = new WireWriter().bytes(1, randomBytes(16)).bytes(2, randomBytes(8)).string(5, `s${i}`);
    for (let a = 0; a < attributesEach; a++) {
      span.message(9, new WireWriter().string(1, `k${a}`).message(2, new WireWriter().string(1, "v")));
    }
    scope.message(2, span);
  }
  return Buffer.from(new WireWriter().message(1, new WireWriter().message(2, scope)).finish());
}

forEachStore(
  "OTLP refusals",
  (t) => {
    const owner = () => t().orgA.keys.owner;

    it("refuses malformed protobuf with 400 and a google.rpc.Status", async () => {
      const good = protobufFixture(fixtureIds(10));
      const cases: [string, Buffer][] = [
        ["cut short", good.subarray(0, good.length - 7)],
        ["a length past the end", Buffer.from([0x0a, 0xff, 0x01, 0x00])],
        ["a varint longer than ten bytes", Buffer.from([0x08, ...Array(11).fill(0xff), 0x01])],
        ["field number zero", Buffer.from([0x00, 0x01])],
        ["a group (wire type 3)", Buffer.from([0x0b])],
        ["resource_spans as a varint", Buffer.from([0x08, 0x01])],
        ["invalid UTF-8 in a span name", manyInvalidUtf8()],
        ["values nested past the depth limit", deepValue(40)],
      ];
      for (const [what, body] of cases) {
        const res = await post(t(), owner(), body, "application/x-protobuf");
        assert.equal(res.statusCode, 400, `${what}: ${res.statusCode}`);
        assertProtoError(res, 400, "invalid_argument", 3);
      }
    });

    it("refuses malformed JSON with 400 in the standard envelope", async () => {
      for (const body of [
        "{",
        "[]",
        '{"resourceSpans": {}}',
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "not hex!"}]}]}]}',
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "12x"}]}]}]}',
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": "a", "value": {"boolValue": "yes"}}]}]}]}]}',
      ]) {
        assertJsonError(await post(t(), owner(), body, "application/json"), 400, "invalid_argument");
      }
      assertJsonError(
        await post(t(), owner(), Buffer.from([0x7b, 0xff, 0x7d]), "application/json"),
        400,
        "invalid_argument",
      );
    });

    it("refuses bodies past the limits, as sent and decompressed, and too many spans or values", async () => {
      const big = Buffer.alloc(LIMITS.maxBodyBytes + 1, 0x20);
      assertJsonError(await post(t(), owner(), big, "application/json"), 413, "payload_too_large");
      assertProtoError(await post(t(), owner(), big, "application/x-protobuf"), 413, "payload_too_large", 8);
      // A gzip bomb: 64 MiB of zeros in well under the limit as sent.
      const bomb = gzipSync(Buffer.alloc(64 * 1024 * 1024));
      assert.ok(bomb.length < LIMITS.maxBodyBytes);
      assertProtoError(
        await post(t(), owner(), bomb, "application/x-protobuf", { "content-encoding": "gzip" }),
        413,
        "payload_too_large",
        8,
      );
      assertProtoError(
        await post(t(), owner(), manySpans(LIMITS.maxSpans + 1), "application/x-protobuf"),
        413,
        "payload_too_large",
        8,
      );
      assertProtoError(
        await post(t(), owner(), manySpans(20, 300), "application/x-protobuf"),
        413,
        "payload_too_large",
        8,
      );
      // At the span limit, every span is stored.
      const res = await post(t(), owner(), deflateSync(manySpans(LIMITS.maxSpans)), "application/x-protobuf", {
        "content-encoding": "deflate",
      });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(res.rawPayload.length, 0);
    });

    it("refuses other media types and encodings with 415, and bad compressed bytes with 400", async () => {
      const body = JSON.stringify(jsonFixture(fixtureIds(11)));
      for (const type of ["text/plain", "application/grpc", "application/octet-stream", "application/jsonx"]) {
        assertJsonError(await post(t(), owner(), body, type), 415, "unsupported_media_type");
      }
      const noType = await t().app.inject({
        method: "POST",
        url: "/v1/traces",
        headers: { authorization: `Bearer ${owner()}` },
        payload: body,
      });
      assertJsonError(noType, 415, "unsupported_media_type");
      assertJsonError(
        await post(t(), owner(), body, "application/json", { "content-encoding": "br" }),
        415,
        "unsupported_media_type",
      );
      assertJsonError(
        await post(t(), owner(), body, "application/json", { "content-encoding": "gzip" }),
        400,
        "invalid_argument",
      );
      // Media type parameters and case do not matter.
      const ok = await post(t(), owner(), body, "Application/JSON; charset=utf-8");
      assert.equal(ok.statusCode, 200, ok.body);
    });

    it("answers a missing or unknown credential 401, in the request's content type", async () => {
      const body = protobufFixture(fixtureIds(12));
      assertProtoError(await post(t(), null, body, "application/x-protobuf"), 401, "unauthenticated", 16);
      assertJsonError(await post(t(), "wrn_nope", "{}", "application/json"), 401, "unauthenticated");
    });

    it("rejects spans naming another organization's run, storing none there, and keeps the rest", async () => {
      const foreign = await t().request("POST", "/v1/runs", { key: t().orgB.keys.owner, body: { label: "b" } });
      const foreignRun = (foreign.body.run as { id: string }).id;
      const ids = fixtureIds(13);
      const request = jsonFixture(ids) as { resourceSpans: Record<string, unknown>[] };
      const named = jsonFixture(fixtureIds(14), foreignRun) as { resourceSpans: Record<string, unknown>[] };
      request.resourceSpans.push(...named.resourceSpans);
      const res = await post(t(), owner(), JSON.stringify(request), "application/json");
      assert.equal(res.statusCode, 200, res.body);
      const partial = JSON.parse(res.body).partialSuccess;
      assert.equal(partial.rejectedSpans, "2");
      assert.match(partial.errorMessage, /not found/);
      assert.equal((await sql(t(), owner(), `SELECT 1 FROM spans WHERE trace_id = '${ids.traceId}'`)).length, 2);
      assert.equal((await sql(t(), t().orgB.keys.owner, `SELECT 1 FROM spans`)).length, 0);
      // The same answer for a run that exists nowhere, and in protobuf: ExportTracePartialSuccess.
      const nowhere = await post(t(), owner(), protobufFixture(fixtureIds(15), "run_nope"), "application/x-protobuf");
      assert.equal(nowhere.statusCode, 200);
      const r = new WireReader(new Uint8Array(nowhere.rawPayload));
      const { field } = r.tag();
      assert.equal(field, 1);
      const partialProto = r.message();
      assert.equal(partialProto.tag().field, 1);
      assert.equal(partialProto.uint32(), 2);
    });

    it("rejects spans with bad ids or unstorable text one by one, keeping the others", async () => {
      const request = jsonFixture(fixtureIds(16)) as {
        resourceSpans: { scopeSpans: { spans: Record<string, unknown>[] }[] }[];
      };
      const spans = request.resourceSpans[0]?.scopeSpans[0]?.spans as Record<string, unknown>[];
      const template = spans[0] as Record<string, unknown>;
      spans.push({ ...template, spanId: "00".repeat(8) });
      spans.push({ ...template, traceId: "ab" });
      spans.push({ ...template, spanId: "12".repeat(8), name: "nul\u0000inside" });
      spans.push({ ...template, spanId: "13".repeat(8), endTimeUnixNano: "18446744073709551615" });
      const res = await post(t(), owner(), JSON.stringify(request), "application/json");
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(JSON.parse(res.body).partialSuccess.rejectedSpans, "4");
    });

    it("answers 503 with Retry-After past the requests in progress, and takes requests again once one ends", async () => {
      const url = new URL(await baseUrl(t()));
      const body = JSON.stringify(jsonFixture(fixtureIds(18)));
      // A client that sends its headers and part of its body, then waits: its request holds the
      // one place. A probe that raced it in may take the place first and the slow request is
      // answered 503 instead; then a new slow request tries again.
      let slow: net.Socket | null = null;
      const busy = await eventually("a 503 while a slow request is read", async () => {
        if (!slow || slow.destroyed) {
          const socket = net.connect(Number(url.port), url.hostname);
          socket.on("error", () => undefined);
          socket.on("data", () => socket.destroy());
          socket.write(
            `POST /v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${owner()}\r\n` +
              `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 10)}`,
          );
          slow = socket;
        }
        const res = await post(t(), owner(), body, "application/json");
        return res.statusCode === 503 && !slow.destroyed ? res : null;
      });
      assertJsonError(busy, 503, "unavailable");
      assert.equal(busy.headers["retry-after"], "1");
      (slow as net.Socket | null)?.end(body.slice(10));
      const after = await eventually("a 200 once the slow request ended", async () => {
        const res = await post(t(), owner(), body, "application/json");
        return res.statusCode === 200 ? res : null;
      });
      assert.equal(after.statusCode, 200);
      (slow as net.Socket | null)?.destroy();
    });

    it("never answers a mutated body with a 500", async () => {
      const good = protobufFixture(fixtureIds(17));
      for (let i = 0; i < 300; i++) {
        const body = Buffer.from(good);
        const flips = 1 + (i % 4);
        for (let f = 0; f < flips; f++) body[(i * 7919 + f * 104729) % body.length] = (i * 31 + f * 17) & 0xff;
        const res = await post(t(), owner(), body, "application/x-protobuf");
        assert.ok([200, 400, 413].includes(res.statusCode), `mutation ${i}: ${res.statusCode} ${res.body}`);
      }
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME }, config: { otlp: { ...loadConfig({}).otlp, ...LIMITS } } },
);

function manyInvalidUtf8(): Buffer {
  const span = new WireWriter().bytes(5, Buffer.from([0xc3, 0x28]));
  return Buffer.from(
    new WireWriter().message(1, new WireWriter().message(2, new WireWriter().message(2, span))).finish(),
  );
}

function deepValue(depth: number): Buffer {
  let value = new WireWriter().string(1, "leaf");
  for (let i = 0; i < depth; i++) value = new WireWriter().message(5, new WireWriter().message(1, value));
  const span = new WireWriter()
    .bytes(1, randomBytes(16))
    .bytes(2, randomBytes(8))
    .message(9, new WireWriter().string(1, "deep").message(2, value));
  return Buffer.from(
    new WireWriter().message(1, new WireWriter().message(2, new WireWriter().message(2, span))).finish(),
  );
}
