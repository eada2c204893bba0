// The organization egress allowlist routes (/v1/admin/organizations/{org}/egress-allowlist)
// on both stores: validation, replacement, per-organization storage, operator-only access.
import assert from "node:assert/strict";
import { it } from "node:test";
import { forEachStore } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";

forEachStore(
  "egress allowlist",
  (t) => {
    const owner = () => t().orgA.keys.owner;
    const put = (org: string, body: unknown, key = owner()) =>
      t().request("PUT", `/v1/admin/organizations/${org}/egress-allowlist`, { key, body });
    const get = (org: string, key = owner()) =>
      t().request("GET", `/v1/admin/organizations/${org}/egress-allowlist`, { key });

    it("is empty by default", async () => {
      const res = await get(t().orgB.id);
      assert.equal(res.status, 200, res.raw);
      assert.deepEqual(res.body, { organization_id: t().orgB.id, hosts: [] });
    });

    it("replaces the whole list, folds duplicates, sorts, and keeps organizations apart", async () => {
      const set = await put(t().orgB.slug, { hosts: ["b.test", "*.example.com", "b.test"] });
      assert.equal(set.status, 200, set.raw);
      assert.deepEqual(set.body, { organization_id: t().orgB.id, hosts: ["*.example.com", "b.test"] });
      assert.deepEqual((await get(t().orgB.id)).body.hosts, ["*.example.com", "b.test"]);
      assert.deepEqual((await get(t().orgA.id)).body.hosts, []);
      assert.equal((await put(t().orgB.id, { hosts: ["c.test"] })).status, 200);
      assert.deepEqual((await get(t().orgB.id)).body.hosts, ["c.test"]);
      assert.equal((await put(t().orgB.id, { hosts: [] })).status, 200);
      assert.deepEqual((await get(t().orgB.id)).body.hosts, []);
    });

    it("refuses addresses, bare and top-level wildcards, uppercase, ports, URLs and bad bodies, changing nothing", async () => {
      assert.equal((await put(t().orgA.id, { hosts: ["kept.test"] })).status, 200);
      for (const hosts of [
        ["*"],
        ["10.0.0.1"],
        ["::1"],
        ["Upper.example.com"],
        ["*.com"],
        ["http://x.test"],
        ["a.test:443"],
        ["ok.test", "bad host"],
        Array.from({ length: 257 }, (_, i) => `h${i}.test`),
      ]) {
        const res = await put(t().orgA.id, { hosts });
        assertError(res, 400, "invalid_argument");
      }
      for (const body of [{ hosts: "a.test" }, {}, { hosts: [""] }, { hosts: ["a.test"], extra: 1 }, { hosts: [1] }]) {
        assertError(await put(t().orgA.id, body), 400, "invalid_argument");
      }
      assert.deepEqual((await get(t().orgA.id)).body.hosts, ["kept.test"]);
    });

    it("is for owners of the operator organization only; an unknown organization is 404", async () => {
      assertError(await put("no-such-org", { hosts: [] }), 404, "not_found");
      assertError(await get("no-such-org"), 404, "not_found");
      assertError(await get(t().orgB.id, t().orgB.keys.owner), 403, "permission_denied");
      assertError(await put(t().orgA.id, { hosts: [] }, t().orgA.keys.admin), 403, "permission_denied");
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);
