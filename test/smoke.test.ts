import assert from "node:assert/strict";
import { it } from "node:test";
import { forEachStore } from "./harness.js";

forEachStore("smoke", (t) => {
  it("answers WhoAmI for an owner key", async () => {
    const res = await t().request("GET", "/v1/whoami", { key: t().orgA.keys.owner });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body.organization, { id: t().orgA.id, slug: "org-a" });
  });
});
