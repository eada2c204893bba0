// Map-shaped fields (contract section 8): sandbox metadata is at most 50 entries, keys at most
// 128 characters, at most 4096 bytes of values; enforced on create and update alike, and a
// refused request changes nothing. (The TypeBox Record's key schema used to be dropped.)
import assert from "node:assert/strict";
import { it } from "node:test";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import { forEachStore, type TestResponse } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { API_ONLY_RUNTIME, countRows } from "./support/fixtures.js";

function assertRefused(res: TestResponse): void {
  assertError(res, 400, "invalid_argument");
  assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"]);
  assert.ok(String(res.body.message).includes("metadata"), res.raw);
}

const TOO_MANY = Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, "v"]));
const BAD_METADATA: [string, Record<string, string>][] = [
  ["a 129-character key", { ["k".repeat(129)]: "v" }],
  ["a 100,000-character key", { ["k".repeat(100_000)]: "v" }],
  ["an empty key", { "": "v" }],
  ["51 entries", TOO_MANY],
  ["a 4097-character value", { k: "v".repeat(4097) }],
  ["4097 bytes of values in total", { a: "v".repeat(4000), b: "v".repeat(97) }],
];

forEachStore(
  "map-shaped fields",
  (t) => {
    const key = () => t().orgA.keys.owner;
    const sandboxes = () => countRows(t(), "sandboxes WHERE org_id = $1", [t().orgA.id]);

    it("accepts sandbox metadata at the limits: 50 entries, 128-character keys, 4096 bytes of values", async () => {
      const metadata = Object.fromEntries(
        Array.from({ length: 50 }, (_, i) => [`${String(i).padStart(2, "0")}${"k".repeat(126)}`, "v".repeat(81)]),
      );
      metadata["00".padEnd(128, "k")] = "v".repeat(4096 - 49 * 81);
      const res = await t().request("POST", "/v1/sandboxes", { key: key(), body: { metadata } });
      assert.equal(res.status, 200, res.raw);
      const got = await t().request("GET", `/v1/sandboxes/${res.body.id}`, { key: key() });
      assert.deepEqual((got.body.sandbox as SandboxJson).metadata, metadata);
    });

    for (const [name, metadata] of BAD_METADATA) {
      it(`refuses sandbox metadata with ${name} on create and update, changing nothing`, async () => {
        const before = await sandboxes();
        assertRefused(await t().request("POST", "/v1/sandboxes", { key: key(), body: { metadata } }));
        assert.equal(await sandboxes(), before);

        const created = await t().request("POST", "/v1/sandboxes", { key: key(), body: { metadata: { keep: "me" } } });
        assert.equal(created.status, 200, created.raw);
        const id = String(created.body.id);
        assertRefused(await t().request("PATCH", `/v1/sandboxes/${id}`, { key: key(), body: { metadata } }));
        const got = await t().request("GET", `/v1/sandboxes/${id}`, { key: key() });
        assert.deepEqual((got.body.sandbox as SandboxJson).metadata, { keep: "me" });
      });
    }
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);
