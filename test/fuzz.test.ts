// A fuzz pass generated from the served OpenAPI document: for every operation, one
// valid-looking request built from its schemas, then one field at a time made hostile (NUL, a
// lone surrogate, an over-long value, a number out of range or of the wrong type, deep
// nesting, bytes that are not UTF-8; `%00`, 10,000 characters and hex, octal, exponent and
// padded numbers in path and query parameters). Every answer must be a 4xx in the route's
// envelope, never a 5xx, and no table may change. A second pass sends values that may be valid
// (huge and negative numbers, exponents, unicode edge cases, names and map keys such as
// `constructor` and `__proto__`): any answer but a 5xx, and a refusal always in the envelope.
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import net from "node:net";
import { it } from "node:test";
import { forEachStore, type TestApp, type TestResponse } from "./harness.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";
import { inlineRefs, sample } from "./support/openapi.js";

type Json = Record<string, unknown>;
interface Operation {
  id: string;
  method: string;
  path: string;
  flat: boolean;
  params: { name: string; in: string; schema: Json }[];
  body: Json | null;
}

const METHODS = ["get", "put", "post", "delete", "patch"];
const BODY_LIMIT = 65_536;
const DEEP = 100;

function operationsOf(doc: Json): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries(inlineRefs(doc).paths as Record<string, Json>)) {
    for (const [method, raw] of Object.entries(item)) {
      if (!METHODS.includes(method)) continue;
      const op = raw as Json;
      const tags = (op.tags as string[] | undefined) ?? [];
      const content = (op.requestBody as Json | undefined)?.content as Record<string, { schema: Json }> | undefined;
      out.push({
        id: String(op.operationId),
        method: method.toUpperCase(),
        path,
        flat: tags.includes("SandboxService"),
        params: ((op.parameters as Json[] | undefined) ?? []).map((p) => ({
          name: String(p.name),
          in: String(p.in),
          schema: (p.schema as Json) ?? {},
        })),
        body: content?.["application/json"]?.schema ?? null,
      });
    }
  }
  return out;
}

interface Mutation {
  name: string;
  apply(body: Json): void;
}

/** Byte sequences that are not UTF-8: CESU-8 surrogates (the red team's), a lone continuation byte, an overlong `/`, a cut sequence, 0xFF. */
const NOT_UTF8: [string, Buffer][] = [
  ["CESU-8 surrogate pair", Buffer.from([0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80])],
  ["CESU-8 lone surrogate", Buffer.from([0xed, 0xa0, 0x80])],
  ["lone continuation byte", Buffer.from([0x80])],
  ["overlong encoding", Buffer.from([0xc0, 0xaf])],
  ["cut sequence", Buffer.from([0xe2, 0x82])],
  ["byte 0xFF", Buffer.from([0xff])],
];
const MARK = "__not_utf8__";

/** The body as JSON bytes with the marker string's contents replaced by `bytes`. */
function withBytes(body: Json, bytes: Buffer): Buffer {
  const parts = JSON.stringify(body).split(MARK);
  const out: Buffer[] = [];
  parts.forEach((part, i) => {
    if (i > 0) out.push(bytes);
    out.push(Buffer.from(part, "utf8"));
  });
  return Buffer.concat(out);
}

/** Every string leaf of the body schema, for the invalid-bytes pass. */
function stringPaths(schema: Json, path: (string | number)[] = []): (string | number)[][] {
  const branches = (schema.anyOf ?? schema.oneOf) as Json[] | undefined;
  if (branches?.[0]) return stringPaths(branches[0], path);
  if (schema.type === "string") return [path];
  if (schema.type === "array") return stringPaths((schema.items as Json) ?? {}, [...path, 0]);
  if (schema.type !== "object") return [];
  return Object.entries((schema.properties as Record<string, Json>) ?? {}).flatMap(([key, child]) =>
    stringPaths(child, [...path, key]),
  );
}

/** Query and path values a number parameter must refuse: JavaScript reads most of them as numbers. */
const NOT_DECIMAL = [
  "0x10",
  "0X1f",
  "0o7",
  "0b11",
  "1e1",
  "1E2",
  " 5",
  "5 ",
  "+5",
  "5.0",
  "010",
  "NaN",
  "Infinity",
  "-Infinity",
  "1_000",
  "",
  "9".repeat(400),
];

/** Values that may be valid for a field of this schema (or not): the server may take them, never fail on them. */
function edgeValuesOf(schema: Json, path: (string | number)[] = []): Mutation[] {
  const at = (value: unknown, name: string): Mutation => ({
    name: `${path.join(".") || "body"}: ${name}`,
    apply: (body) => setAt(body, path, value),
  });
  const branches = (schema.anyOf ?? schema.oneOf) as Json[] | undefined;
  if (branches?.[0]) return edgeValuesOf(branches[0], path);
  switch (schema.type) {
    case "string": {
      const max = typeof schema.maxLength === "number" ? schema.maxLength : 200;
      const fit = (text: string) => text.slice(0, Math.max(1, max));
      return [
        at(fit("\ufeffBOM"), "a byte order mark"),
        at(fit("\u202eRTL override"), "a right-to-left override"),
        at(fit("\ud835\udd4f astral"), "an astral character"),
        at(fit("\uffff\ufffe"), "noncharacters"),
        at(fit("e\u0301\u0301\u0301"), "stacked combining marks"),
        at(fit("\u0085\u2028\u2029"), "unicode line breaks"),
        at("\ud83d\ude00".repeat(Math.max(1, Math.floor(max / 2))), "emoji up to the length limit"),
        at(fit("../../etc/passwd"), "a path traversal"),
        at(fit("' OR 1=1 --"), "SQL text"),
        // Names of Object.prototype's members, as names a caller chooses (a key of a map in the server).
        at(fit("constructor"), "the name constructor"),
        at(fit("__proto__"), "the name __proto__"),
        at(fit("toString"), "the name toString"),
        at("", "empty"),
      ];
    }
    case "integer":
    case "number":
      return [
        at(-1, "negative"),
        at(0, "zero"),
        at(-0, "negative zero"),
        at(2 ** 31, "2^31"),
        at(2 ** 53 + 2, "beyond 2^53"),
        at(1e20, "1e20"),
        at(-1e20, "-1e20"),
        at(Number.MAX_VALUE, "the largest double"),
        at(5e-324, "the smallest double"),
        at("NaN", "the string NaN"),
        at("0x10", "a hex string"),
      ];
    case "boolean":
      return [at(0, "zero"), at("false", "the string false"), at(null, "null")];
    case "array":
      return [...edgeValuesOf((schema.items as Json) ?? {}, [...path, 0]), at([], "empty"), at(null, "null")];
    case "object": {
      const fields = Object.entries((schema.properties as Record<string, Json>) ?? {}).flatMap(([key, child]) =>
        edgeValuesOf(child, [...path, key]),
      );
      // A map (keys the caller names): keys that are Object.prototype's member names.
      const map = typeof schema.additionalProperties === "object" || schema.patternProperties !== undefined;
      return map
        ? [
            ...fields,
            at(JSON.parse('{"constructor":"x","toString":"z"}'), "keys constructor and toString"),
            at(JSON.parse('{"__proto__":"y"}'), "the key __proto__"),
          ]
        : fields;
    }
    default:
      return [at(null, "null")];
  }
}

/** Sets the value at `path` (keys and array indexes) inside a copy of the sample body. */
function setAt(root: Json, path: (string | number)[], value: unknown): void {
  let at: Record<string | number, unknown> = root;
  for (const key of path.slice(0, -1)) at = at[key] as Record<string | number, unknown>;
  at[path[path.length - 1] as string | number] = value;
}

/** One hostile value per leaf of the body schema, and deep nesting and a bad key per object. */
function mutationsOf(schema: Json, path: (string | number)[] = []): Mutation[] {
  const at = (value: unknown, name: string): Mutation => ({
    name: `${path.join(".") || "body"}: ${name}`,
    apply: (body) => (path.length === 0 ? Object.assign(body, value) : setAt(body, path, value)),
  });
  const branches = (schema.anyOf ?? schema.oneOf) as Json[] | undefined;
  if (branches?.[0]) return mutationsOf(branches[0], path);
  const out: Mutation[] = [];
  switch (schema.type) {
    case "string": {
      const max = typeof schema.maxLength === "number" ? schema.maxLength : BODY_LIMIT;
      out.push(at("a\u0000b", "NUL"), at("a\ud800b", "lone surrogate"), at("y".repeat(max + 1), "over-long"));
      out.push(at(12345, "wrong type"));
      break;
    }
    case "integer":
    case "number":
      if (typeof schema.maximum === "number") out.push(at(schema.maximum + 1, "above maximum"));
      if (typeof schema.minimum === "number") out.push(at(schema.minimum - 1, "below minimum"));
      if (schema.type === "integer") out.push(at(1.5, "fraction"));
      out.push(at("1", "wrong type"), at(1e308 * 10, "overflow to null"));
      break;
    case "boolean":
      out.push(at("true", "wrong type"));
      break;
    case "array":
      out.push(...mutationsOf((schema.items as Json) ?? {}, [...path, 0]), at("not-an-array", "wrong type"));
      break;
    case "object": {
      for (const [key, child] of Object.entries((schema.properties as Record<string, Json>) ?? {})) {
        out.push(...mutationsOf(child, [...path, key]));
      }
      let deep: unknown = [];
      for (let i = 0; i < DEEP; i++) deep = [deep];
      if (path.length > 0) out.push(at(deep, "nested 100 deep"), at("not-an-object", "wrong type"));
      out.push({
        name: `${path.join(".") || "body"}: NUL in a key`,
        apply: (body) => {
          const target = path.length === 0 ? body : (path.reduce<unknown>((o, k) => (o as Json)[k], body) as Json);
          if (target && typeof target === "object") (target as Json)["k\u0000"] = "v";
        },
      });
      break;
    }
    default:
      break;
  }
  return out;
}

/** Rows in every table of the store: a refused request must change none. */
async function tableCounts(t: TestApp): Promise<Record<string, number>> {
  const { rows } = await t.c.db.query<{ table_name: string }>(
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
  );
  const counts: Record<string, number> = {};
  for (const { table_name } of rows) {
    const result = await t.c.db.query<{ n: string }>(`SELECT count(*)::text AS n FROM "${table_name}"`);
    counts[table_name] = Number(result.rows[0]?.n);
  }
  return counts;
}

function assertRefusal(res: TestResponse, op: Operation, what: string): void {
  const label = `${op.id} ${what}: ${res.status} ${res.raw.slice(0, 300)}`;
  assert.ok(res.status >= 400 && res.status < 500, label);
  assertEnvelope(res, op, label);
}

/** Any answer but a 5xx; a refusal in the route's envelope, a success a JSON object. */
function assertNoFault(res: TestResponse, op: Operation, what: string): void {
  const label = `${op.id} ${what}: ${res.status} ${res.raw.slice(0, 300)}`;
  assert.ok(res.status < 500, label);
  if (res.status >= 400) assertEnvelope(res, op, label);
  else if (res.raw !== "") assert.equal(typeof res.body, "object", label);
}

function assertEnvelope(res: TestResponse, op: Operation, label: string): void {
  assert.match(String(res.body.code), /^[a-z]+(_[a-z]+)*$/, label);
  assert.equal(typeof res.body.message, "string", label);
  assert.equal(res.body.request_id, res.headers["x-request-id"], label);
  const allowed = op.flat ? ["code", "message", "request_id"] : ["code", "message", "details", "request_id"];
  for (const key of Object.keys(res.body)) assert.ok(allowed.includes(key), `${label}: field ${key}`);
}

/** The operation's URL with each path parameter given (encoded already) and a query. */
function urlOf(op: Operation, pathValues: Record<string, string>, query: Record<string, string>): string {
  const path = op.path.replace(/\{([^}]+)\}/g, (_, name: string) => pathValues[name] ?? "x");
  const search = Object.entries(query)
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
  return search ? `${path}?${search}` : path;
}

/**
 * Sends a request head and a body of `bodyBytes` over a real socket, writing all of it as a
 * client that does not look for an early answer would, and returns what came back. A write
 * error (the server reset the connection under the client) is returned, not thrown.
 */
async function sendWhole(
  port: number,
  head: string,
  bodyBytes: number,
): Promise<{ answer: string; error: string | null }> {
  return await new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    let error: string | null = null;
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.on("error", (e: NodeJS.ErrnoException) => {
      error = e.code ?? e.message;
    });
    socket.on("close", () => resolve({ answer: Buffer.concat(chunks).toString("utf8"), error }));
    socket.write(head);
    const chunk = Buffer.alloc(65_536, 0x20);
    let sent = 0;
    const pump = () => {
      while (sent < bodyBytes && !socket.destroyed) {
        sent += chunk.length;
        if (!socket.write(chunk)) {
          socket.once("drain", pump);
          return;
        }
      }
      socket.end();
    };
    pump();
  });
}

forEachStore(
  "fuzz",
  (t) => {
    it("answers every hostile field of every operation with a 4xx in its envelope and changes nothing", async () => {
      const served = await t().request("GET", "/v1/openapi.json");
      assert.equal(served.status, 200);
      const operations = operationsOf(served.body);
      assert.ok(operations.length > 40, "the document lists the operations");
      const key = t().orgA.keys.owner;
      const before = await tableCounts(t());
      let cases = 0;
      for (const op of operations) {
        const send = async (url: string, body: unknown, what: string) => {
          const res = await t().request(op.method, url, { key, ...(body !== undefined ? { body } : {}) });
          assertRefusal(res, op, what);
          cases++;
        };
        const base = op.body ? (sample(op.body) as Json) : undefined;
        const query = Object.fromEntries(
          op.params.filter((p) => p.in === "query").map((p) => [p.name, encodeURIComponent(String(sample(p.schema)))]),
        );
        for (const param of op.params.filter((p) => p.in === "path" || p.in === "query")) {
          for (const [what, value] of [
            ["%00", "a%00b"],
            ["10,000 characters", "a".repeat(10_000)],
            ["a lone surrogate", "a%ED%A0%80"],
          ] as const) {
            const url =
              param.in === "path"
                ? urlOf(op, { [param.name]: value }, query)
                : urlOf(op, {}, { ...query, [param.name]: value });
            await send(url, base, `${param.in} ${param.name} ${what}`);
          }
          if (["integer", "number"].includes(String(param.schema.type))) {
            for (const text of NOT_DECIMAL) {
              const value = encodeURIComponent(text);
              const url =
                param.in === "path"
                  ? urlOf(op, { [param.name]: value }, query)
                  : urlOf(op, {}, { ...query, [param.name]: value });
              await send(url, base, `${param.in} ${param.name} ${JSON.stringify(text.slice(0, 20))}`);
            }
          }
          if (param.in === "query" && ["integer", "number", "boolean"].includes(String(param.schema.type))) {
            await send(
              urlOf(op, {}, { ...query, [param.name]: "not-a-number" }),
              base,
              `query ${param.name} wrong type`,
            );
          }
          if (param.in === "query" && typeof param.schema.maximum === "number") {
            const above = String(param.schema.maximum + 1);
            await send(urlOf(op, {}, { ...query, [param.name]: above }), base, `query ${param.name} above maximum`);
          }
        }
        if (op.body) {
          for (const mutation of mutationsOf(op.body)) {
            const body = structuredClone(base) as Json;
            mutation.apply(body);
            await send(urlOf(op, {}, {}), body, mutation.name);
          }
          for (const path of stringPaths(op.body)) {
            for (const [what, bytes] of NOT_UTF8) {
              const body = structuredClone(base) as Json;
              setAt(body, path, path.length === 0 ? MARK : `a${MARK}b`);
              const res = await t().request(op.method, urlOf(op, {}, {}), {
                key,
                body: withBytes(body, bytes),
                headers: { "content-type": "application/json" },
              });
              const label = `${path.join(".")}: ${what}`;
              assertRefusal(res, op, label);
              assert.equal(res.body.code, "invalid_argument", `${op.id} ${label}: ${res.raw}`);
              cases++;
            }
          }
        }
      }
      assert.ok(cases > 500, `ran ${cases} cases`);
      assert.deepEqual(await tableCounts(t()), before, "a refused request changed a table");
    });

    it("answers a 2 MiB and a 20 MiB body with 413 payload_too_large in the envelope, the client still sending", async () => {
      await t().app.listen({ host: "127.0.0.1", port: 0 });
      const { port } = t().app.server.address() as AddressInfo;
      for (const size of [2 * 1_048_576, 20 * 1_048_576]) {
        const head =
          `POST /v1/feedback HTTP/1.1\r\nhost: warren\r\nauthorization: Bearer ${t().orgA.keys.member}\r\n` +
          `content-type: application/json\r\ncontent-length: ${size}\r\n\r\n`;
        const { answer, error } = await sendWhole(port, head, size);
        assert.equal(error, null, `${size} bytes: the connection was reset under the client (${answer.slice(0, 200)})`);
        const [statusLine = "", body = ""] = [answer.split("\r\n")[0], answer.split("\r\n\r\n")[1]];
        assert.match(statusLine, /^HTTP\/1\.1 413 /, answer);
        const envelope = JSON.parse(body) as Record<string, unknown>;
        assert.equal(envelope.code, "payload_too_large");
        assert.equal(typeof envelope.request_id, "string");
      }
    });

    it("answers every path of the document under a method it does not take with 405 and Allow, in its envelope", async () => {
      const served = await t().request("GET", "/v1/openapi.json");
      const operations = operationsOf(served.body);
      const byPath = new Map<string, Operation[]>();
      for (const op of operations) byPath.set(op.path, [...(byPath.get(op.path) ?? []), op]);
      for (const [path, ops] of byPath) {
        const taken = ops.map((op) => op.method);
        const url = urlOf(ops[0] as Operation, {}, {});
        for (const method of ["GET", "POST", "PUT", "PATCH", "DELETE"].filter((m) => !taken.includes(m))) {
          const res = await t().request(method, url, { key: t().orgA.keys.owner });
          assertRefusal(res, ops[0] as Operation, `${method} ${path}`);
          assert.equal(res.status, 405, `${method} ${path}: ${res.raw}`);
          const allow = String(res.headers.allow).split(", ");
          for (const m of taken)
            assert.ok(allow.includes(m), `${method} ${path}: Allow ${res.headers.allow} lacks ${m}`);
        }
      }
    });

    it("never fails (5xx) on values that may be valid: huge, negative, exponents, unicode edge cases", async () => {
      const served = await t().request("GET", "/v1/openapi.json");
      const key = t().orgA.keys.owner;
      let cases = 0;
      for (const op of operationsOf(served.body)) {
        if (!op.body) continue;
        const base = sample(op.body) as Json;
        for (const mutation of edgeValuesOf(op.body)) {
          const body = structuredClone(base);
          mutation.apply(body);
          const res = await t().request(op.method, urlOf(op, {}, {}), { key, body });
          assertNoFault(res, op, mutation.name);
          cases++;
        }
      }
      assert.ok(cases > 500, `ran ${cases} cases`);
    });
  },
  { config: { bodyLimitBytes: BODY_LIMIT }, overrides: { runtime: API_ONLY_RUNTIME } },
);
