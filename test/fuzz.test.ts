// A fuzz pass generated from the served OpenAPI document: for every operation, one
// valid-looking request built from its schemas, then one field at a time made hostile (NUL, a
// lone surrogate, an over-long value, a number out of range or of the wrong type, deep
// nesting; `%00` and 10,000 characters in path and query parameters). Every answer must be a
// 4xx in the route's envelope, never a 5xx, and no table may change.
import assert from "node:assert/strict";
import { it } from "node:test";
import { forEachStore, type TestApp, type TestResponse } from "./harness.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";
import { sample } from "./support/openapi.js";

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
  for (const [path, item] of Object.entries(doc.paths as Record<string, Json>)) {
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
        }
      }
      assert.ok(cases > 500, `ran ${cases} cases`);
      assert.deepEqual(await tableCounts(t()), before, "a refused request changed a table");
    });
  },
  { config: { bodyLimitBytes: BODY_LIMIT }, overrides: { runtime: API_ONLY_RUNTIME } },
);
