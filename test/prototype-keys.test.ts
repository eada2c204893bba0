// Names a caller chooses that are also Object.prototype's (`constructor`, `toString`,
// `__proto__`) are plain names (issue 24 A17c): a promoted field or a payload key so named is
// looked up among the object's own keys, a filter on it is kept, and canonical JSON (request
// hashes, supersession keys) keeps a `__proto__` key instead of dropping it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { canonicalJson } from "../src/lib/hash.js";
import type { ListAnnotationsJson } from "../src/modules/annotations/schemas.js";
import type { RunJson } from "../src/modules/runs/schemas.js";
import { forEachStore } from "./harness.js";
import { assertError } from "./support/assertions.js";

describe("canonical JSON and prototype keys", () => {
  it("keeps a __proto__ key (JSON.parse makes it an own key) rather than dropping it", () => {
    const hostile = JSON.parse('{"__proto__":{"a":1},"b":2}');
    assert.equal(canonicalJson(hostile), '{"__proto__":{"a":1},"b":2}');
    assert.notEqual(canonicalJson(hostile), canonicalJson({ b: 2 }));
    assert.equal(canonicalJson(JSON.parse('{"constructor":1}')), '{"constructor":1}');
    assert.equal(canonicalJson([{}, { toString: "x" }]), '[{},{"toString":"x"}]');
  });
});

forEachStore("prototype keys in annotation schemas and payloads", (t) => {
  const owner = () => t().orgA.keys.owner;
  const SCHEMA = JSON.stringify({
    type: "object",
    properties: { label: { type: "string" }, constructor: { type: "string" }, ["__proto__"]: { type: "string" } },
    required: ["label"],
  });

  it("refuses a promoted field the schema does not declare, also one named like Object.prototype's", async () => {
    for (const field of ["toString", "constructor", "hasOwnProperty", "__proto__"]) {
      const res = await t().request("POST", "/v1/annotation-schemas", {
        key: owner(),
        body: {
          name: `undeclared-${field.replaceAll("_", "u").toLowerCase()}`,
          json_schema: JSON.stringify({ type: "object", properties: { label: { type: "string" } } }),
          promoted_fields: [{ field, bloom: true }],
        },
      });
      assertError(res, 400, "invalid_argument");
      assert.match(String(res.body.message), /must be a top-level property declared in json_schema/, field);
    }
  });

  it("takes payloads without a declared `constructor`, and filters on `constructor` and `__proto__` by their own values", async () => {
    const registered = await t().request("POST", "/v1/annotation-schemas", {
      key: owner(),
      body: {
        name: "proto-keys",
        json_schema: SCHEMA,
        promoted_fields: [
          { field: "constructor", identity: true, bloom: true },
          { field: "__proto__", bloom: true },
        ],
      },
    });
    assert.equal(registered.status, 200, registered.raw);
    const run = await t().request("POST", "/v1/runs", { key: owner(), body: { label: "proto" } });
    const runId = (run.body.run as RunJson).id;
    const annotate = (payload: string) =>
      t().request("POST", "/v1/annotations", {
        key: owner(),
        body: { schema_name: "proto-keys", run_id: runId, payload_json: payload },
      });
    // A valid payload that leaves the optional `constructor` out (it is not Object's).
    const plain = await annotate(JSON.stringify({ label: "plain" }));
    assert.equal(plain.status, 200, plain.raw);
    const named = await annotate('{"label":"named","constructor":"c1","__proto__":"p1"}');
    assert.equal(named.status, 200, named.raw);
    const namedId = String(named.body.event_id);
    const list = async (query: Record<string, string>) => {
      const res = await t().request("GET", "/v1/annotations", {
        key: owner(),
        query: { schema_name: "proto-keys", run_id: runId, ...query },
      });
      assert.equal(res.status, 200, res.raw);
      return (res.body as unknown as ListAnnotationsJson).annotations.map((a) => a.event_id);
    };
    // Different identities (absent and "c1"): neither supersedes the other.
    assert.equal((await list({})).length, 2);
    assert.deepEqual(await list({ "promoted.constructor": "c1" }), [namedId]);
    assert.deepEqual(await list({ "promoted.__proto__": "p1" }), [namedId], "the filter is kept, not dropped");
    // An absent field has no value: not Object.prototype's, shown as "{}" or a function's text.
    assert.deepEqual(await list({ "promoted.__proto__": "{}" }), []);
    assert.deepEqual(await list({ "promoted.constructor": "function Object() { [native code] }" }), []);
  });
});
