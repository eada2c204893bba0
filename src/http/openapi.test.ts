// finishDocument: marked schemas become components referenced with $ref (nested ones first),
// bodies are named after their operation, the contract's `{id}:verb` paths come back, and one
// name given two different schemas fails rather than picking one.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Type } from "@sinclair/typebox";
import { finishDocument, named } from "./openapi.js";

const json = (value: unknown) => JSON.parse(JSON.stringify(value));
const Inner = named("TestInner", Type.Object({ a: Type.String() }));
const Outer = named("TestOuter", Type.Object({ inner: Inner, list: Type.Array(Inner) }));

function documentOf(response: unknown, body?: unknown) {
  return {
    openapi: "3.1.0",
    paths: {
      "/v1/things/{id}:{frob}": {
        post: {
          operationId: "FrobThing",
          ...(body ? { requestBody: { content: { "application/json": { schema: json(body) } } } } : {}),
          responses: { 200: { content: { "application/json": { schema: json(response) } } } },
        },
      },
    },
  };
}

describe("finishDocument", () => {
  it("hoists marked schemas, the nested one first, and names the bodies after the operation", () => {
    const doc = finishDocument(documentOf(Type.Object({ outer: Outer }), Type.Object({ n: Type.Integer() })));
    const op = doc.paths["/v1/things/{id}:frob" as keyof typeof doc.paths] as unknown as {
      post: { requestBody: { content: Record<string, { schema: unknown }> }; responses: Record<string, unknown> };
    };
    assert.ok(op, "the verb path is put back");
    const components = (doc as unknown as { components: { schemas: Record<string, Record<string, unknown>> } })
      .components.schemas;
    assert.deepEqual(op.post.requestBody.content["application/json"]?.schema, {
      $ref: "#/components/schemas/FrobThingRequest",
    });
    assert.deepEqual(components.FrobThingResponse?.properties, { outer: { $ref: "#/components/schemas/TestOuter" } });
    assert.deepEqual(components.TestOuter?.properties, {
      inner: { $ref: "#/components/schemas/TestInner" },
      list: { type: "array", items: { $ref: "#/components/schemas/TestInner" } },
    });
    assert.equal(components.TestInner?.title, "TestInner");
  });

  it("refuses one name given two different schemas", () => {
    const twin = { ...json(Inner), properties: { b: { type: "number" } } };
    assert.throws(
      () => finishDocument(documentOf(Type.Object({ one: Inner, two: twin }))),
      /TestInner is given two different schemas/,
    );
  });

  it("refuses a name that is not PascalCase", () => {
    assert.throws(() => named("not-a-name", Type.String()), /not PascalCase/);
  });
});
