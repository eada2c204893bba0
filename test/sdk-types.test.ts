// The SDK's wire types are generated from docs/openapi.json (scripts/write-sdk-types.ts):
// the committed file must be what the generator writes now, and the generator must react to
// a change of the document.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import { SDK_TYPES_FILE, sdkTypesText } from "../scripts/write-sdk-types.js";

describe("SDK wire types", () => {
  it("are up to date with docs/openapi.json (run `node --import tsx scripts/write-sdk-types.ts`)", async () => {
    const committed = await readFile(SDK_TYPES_FILE, "utf8");
    assert.ok(committed === (await sdkTypesText()), `${SDK_TYPES_FILE} is stale: regenerate it`);
  });

  it("change with the document", async () => {
    const doc = JSON.parse(await readFile("docs/openapi.json", "utf8"));
    doc.paths["/v1/whoami"].get.operationId = "WhoAmIRenamed";
    const text = await sdkTypesText(JSON.stringify(doc));
    const operations = text.slice(text.indexOf("export interface operations"));
    assert.match(operations, /WhoAmIRenamed: \{/);
    assert.doesNotMatch(operations, /\bWhoAmI: \{/);
  });
});
