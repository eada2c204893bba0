// The operator routes under /v1/admin: only an owner key of the operator organization may
// call them; organizations, API keys of every kind and role (secrets shown once, never
// listed), revocation, and per-organization quota limits.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { it } from "node:test";
import type { QuotaLimitJson } from "../src/modules/usage/schemas.js";
import { forEachStore, type TestApp } from "./harness.js";
import { assertErrorEnvelope, fieldOf } from "./support/assertions.js";

const SANDBOX_ID = `sbx-${"b".repeat(40)}`;
// expires_at and session_of_key_id: set on console sessions, listed with the keys (issue 28).
const KEY_INFO_FIELDS = [
  "created_at",
  "email",
  "expires_at",
  "key_id",
  "key_name",
  "kind",
  "principal_id",
  "project_id",
  "revoked_at",
  "role",
  "session_of_key_id",
  "workload_name",
];

const uniqueSlug = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`;
const sha256 = (value: string) => createHash("sha256").update(value).digest("hex");

/** Every admin route, with a request that would succeed for the operator owner. */
function adminCalls(t: TestApp): { name: string; method: string; url: string; body?: unknown }[] {
  return [
    { name: "list organizations", method: "GET", url: "/v1/admin/organizations" },
    { name: "create organization", method: "POST", url: "/v1/admin/organizations", body: { slug: uniqueSlug("deny") } },
    {
      name: "create API key",
      method: "POST",
      url: "/v1/admin/api-keys",
      body: { organization: "org-b", name: "sneaky", kind: "user", role: "owner", email: "x@org-b.test" },
    },
    { name: "list API keys", method: "GET", url: "/v1/admin/organizations/org-a/api-keys" },
    { name: "revoke API key", method: "POST", url: `/v1/admin/api-keys/${t.orgA.keyIds.member}:revoke` },
    { name: "rotate master key", method: "POST", url: "/v1/admin/master-key:rotate" },
    { name: "list hosts", method: "GET", url: "/v1/admin/hosts" },
    ...["drain", "cordon", "uncordon"].map((verb) => ({
      name: `${verb} a host`,
      method: "POST",
      url: `/v1/admin/hosts/h_${"0".repeat(24)}:${verb}`,
    })),
    {
      name: "set quota",
      method: "PUT",
      url: "/v1/admin/organizations/org-b/quotas/projects.total",
      body: { limit: 100_000 },
    },
  ];
}

forEachStore("admin", (t) => {
  const owner = () => t().orgA.keys.owner;
  const admin = (method: string, url: string, body?: unknown) => t().request(method, url, { key: owner(), body });

  async function createOrg(slug = uniqueSlug("acme"), name?: string) {
    const res = await admin("POST", "/v1/admin/organizations", name === undefined ? { slug } : { slug, name });
    return fieldOf<Record<string, string>>(res, "organization");
  }

  async function createKey(body: Record<string, unknown>) {
    const res = await admin("POST", "/v1/admin/api-keys", body);
    assert.equal(res.status, 200, res.raw);
    return res.body as Record<string, string>;
  }

  // Authorization.
  for (const [who, key] of [
    ["the operator organization's admin", () => t().orgA.keys.admin],
    ["the operator organization's member", () => t().orgA.keys.member],
    ["the operator organization's service account", () => t().orgA.keys.service],
    ["the operator organization's workload", () => t().orgA.keys.workload],
    ["another organization's owner", () => t().orgB.keys.owner],
    ["another organization's admin", () => t().orgB.keys.admin],
  ] as const) {
    it(`refuses ${who} on every admin route with 403 permission_denied`, async () => {
      for (const call of adminCalls(t())) {
        const res = await t().request(call.method, call.url, { key: key(), body: call.body });
        assertErrorEnvelope(res, 403, "permission_denied");
      }
      // Nothing happened: the member key still works, org-b keeps its default quota.
      assert.equal((await t().request("GET", "/v1/whoami", { key: t().orgA.keys.member })).status, 200);
      const usage = await t().request("GET", "/v1/usage", { key: t().orgB.keys.member });
      const limits = (usage.body.snapshot as { limits: QuotaLimitJson[] }).limits;
      assert.equal(limits.find((l) => l.metric === "projects.total")?.limit, "1000");
    });
  }

  it("refuses a sandbox-scoped owner credential of the operator organization", async () => {
    const issued = await t().issueKey(t().orgA, {
      role: "owner",
      kind: "user",
      sandbox: { sandboxId: SANDBOX_ID, lineagePath: SANDBOX_ID },
    });
    for (const call of adminCalls(t())) {
      assertErrorEnvelope(
        await t().request(call.method, call.url, { key: issued.key, body: call.body }),
        403,
        "permission_denied",
      );
    }
  });

  it("refuses a non-operator with 403 whatever the request holds", async () => {
    const key = t().orgB.keys.owner;
    const calls: [string, string, unknown][] = [
      ["PUT", "/v1/admin/organizations/org-b/quotas/not.a.metric", { limit: 5 }],
      ["PUT", "/v1/admin/organizations/org-b/quotas/projects.total", { limit: "lots" }],
      ["POST", "/v1/admin/organizations", { slug: "NOT A SLUG", extra: true }],
      ["POST", "/v1/admin/api-keys", {}],
      ["GET", "/v1/admin/organizations/no-such-org/api-keys", undefined],
      ["POST", "/v1/admin/api-keys/key_unknown:revoke", undefined],
    ];
    for (const [method, url, body] of calls) {
      assertErrorEnvelope(await t().request(method, url, { key, body }), 403, "permission_denied");
    }
  });

  it("refuses admin routes without a credential with 401", async () => {
    for (const call of adminCalls(t())) {
      assertErrorEnvelope(await t().request(call.method, call.url, { body: call.body }), 401, "unauthenticated");
    }
  });

  // Organizations.
  it("lists organizations with the operator flag", async () => {
    const res = await admin("GET", "/v1/admin/organizations");
    assert.equal(res.status, 200, res.raw);
    const orgs = res.body.organizations as Record<string, unknown>[];
    const a = orgs.find((o) => o.slug === "org-a");
    const b = orgs.find((o) => o.slug === "org-b");
    assert.equal(a?.id, t().orgA.id);
    assert.equal(a?.is_operator, true);
    assert.equal(b?.id, t().orgB.id);
    assert.equal(b?.is_operator, false);
    for (const org of orgs) assert.ok(!Number.isNaN(Date.parse(String(org.created_at))));
  });

  it("creates an organization with its default project", async () => {
    const slug = uniqueSlug("acme");
    const org = await createOrg(slug, "Acme Inc");
    assert.equal(org.slug, slug);
    assert.equal(org.name, "Acme Inc");
    assert.match(org.id ?? "", /^org_/);
    assert.match(org.default_project_id ?? "", /^prj_/);
    assert.ok(!Number.isNaN(Date.parse(org.created_at ?? "")));

    const listed = await admin("GET", "/v1/admin/organizations");
    const found = (listed.body.organizations as Record<string, unknown>[]).find((o) => o.id === org.id);
    assert.equal(found?.slug, slug);
    assert.equal(found?.is_operator, false);

    const key = await createKey({ organization: slug, name: "first", kind: "service_account", role: "owner" });
    const projects = await t().request("GET", "/v1/projects", { key: key.api_key });
    assert.equal(projects.status, 200, projects.raw);
    const list = projects.body.projects as Record<string, unknown>[];
    assert.equal(list.length, 1);
    assert.equal(list[0]?.id, org.default_project_id);
    assert.equal(list[0]?.is_default, true);
  });

  it("names a new organization after its slug when no name is given", async () => {
    const slug = uniqueSlug("plain");
    assert.equal((await createOrg(slug)).name, slug);
  });

  it("refuses a duplicate slug with 409 already_exists", async () => {
    const slug = uniqueSlug("twice");
    await createOrg(slug);
    assertErrorEnvelope(await admin("POST", "/v1/admin/organizations", { slug }), 409, "already_exists");
    assertErrorEnvelope(await admin("POST", "/v1/admin/organizations", { slug: "org-a" }), 409, "already_exists");
  });

  it("refuses an invalid organization body with 400", async () => {
    for (const body of [
      {},
      { slug: "Upper-Case" },
      { slug: "-leading-dash" },
      { slug: "a".repeat(64) },
      { slug: "ok-slug", name: "n".repeat(201) },
      { slug: "ok-slug", is_operator: true },
    ]) {
      assertErrorEnvelope(await admin("POST", "/v1/admin/organizations", body), 400, "invalid_argument");
    }
  });

  // API keys.
  const KEY_SPECS: { kind: "user" | "service_account" | "workload"; role: "owner" | "admin" | "member" }[] = [];
  for (const kind of ["user", "service_account", "workload"] as const) {
    for (const role of ["owner", "admin", "member"] as const) KEY_SPECS.push({ kind, role });
  }

  it("issues keys of every kind and role that authenticate in the new organization", async () => {
    const org = await createOrg();
    const issuedKeys: { kind: string; role: string; key: string }[] = [];
    for (const [i, spec] of KEY_SPECS.entries()) {
      const body: Record<string, unknown> = {
        // Alternate referring to the organization by slug and by id.
        organization: i % 2 === 0 ? org.slug : org.id,
        name: `${spec.kind}-${spec.role}`,
        kind: spec.kind,
        role: spec.role,
      };
      if (spec.kind === "user") body.email = `${spec.role}@acme.test`;
      if (spec.kind === "workload") body.workload_name = `builder-${spec.role}`;
      const issued = await createKey(body);
      assert.deepEqual(Object.keys(issued).sort(), ["api_key", "key_id", "key_name", "org_id", "principal_id"]);
      assert.equal(issued.org_id, org.id);
      assert.equal(issued.key_name, body.name);
      assert.ok((issued.api_key ?? "").length >= 32, "the secret has enough entropy to be a key");

      const who = await t().request("GET", "/v1/whoami", { key: issued.api_key });
      assert.equal(who.status, 200, who.raw);
      assert.deepEqual(who.body, {
        organization: { id: org.id, slug: org.slug },
        principal: {
          id: issued.principal_id,
          kind: spec.kind,
          email: spec.kind === "user" ? `${spec.role}@acme.test` : "",
          key_id: issued.key_id,
          key_name: body.name,
          // Empty until a workload of that name is registered (docs/api-decisions.md).
          workload_name: "",
        },
      });
      issuedKeys.push({ ...spec, key: issued.api_key ?? "" });
    }

    // Once the workloads are registered, WhoAmI names them for the workload keys.
    const memberKey = issuedKeys.find((k) => k.kind === "user" && k.role === "member")?.key ?? "";
    for (const role of ["owner", "admin", "member"]) {
      const res = await t().request("POST", "/v1/workloads", { key: memberKey, body: { name: `builder-${role}` } });
      assert.equal(res.status, 200, res.raw);
    }
    for (const issued of issuedKeys) {
      const who = await t().request("GET", "/v1/whoami", { key: issued.key });
      const principal = who.body.principal as Record<string, string>;
      assert.equal(principal.workload_name, issued.kind === "workload" ? `builder-${issued.role}` : "");
    }

    const listed = await admin("GET", `/v1/admin/organizations/${org.slug}/api-keys`);
    assert.equal(listed.status, 200, listed.raw);
    const keys = listed.body.api_keys as Record<string, string>[];
    assert.equal(keys.length, KEY_SPECS.length);
    for (const spec of KEY_SPECS) {
      const info = keys.find((k) => k.key_name === `${spec.kind}-${spec.role}`);
      assert.ok(info, `${spec.kind}-${spec.role} is listed`);
      assert.equal(info.kind, spec.kind);
      assert.equal(info.role, spec.role);
      assert.equal(info.revoked_at, "");
    }
  });

  it("defaults a new key to a member service account", async () => {
    const org = await createOrg();
    const issued = await createKey({ organization: org.id, name: "defaults" });
    const who = await t().request("GET", "/v1/whoami", { key: issued.api_key });
    assert.equal((who.body.principal as Record<string, string>).kind, "service_account");
    const keys = (await admin("GET", `/v1/admin/organizations/${org.id}/api-keys`)).body.api_keys as Record<
      string,
      string
    >[];
    assert.equal(keys.find((k) => k.key_id === issued.key_id)?.role, "member");
  });

  it("issues a further key for an existing principal", async () => {
    const org = await createOrg();
    const first = await createKey({ organization: org.slug, name: "laptop", kind: "user", email: "dev@acme.test" });
    const second = await createKey({ organization: org.slug, name: "ci", principal_id: first.principal_id });
    assert.equal(second.principal_id, first.principal_id);
    assert.notEqual(second.key_id, first.key_id);
    assert.notEqual(second.api_key, first.api_key);
    const who = await t().request("GET", "/v1/whoami", { key: second.api_key });
    const principal = who.body.principal as Record<string, string>;
    assert.equal(principal.id, first.principal_id);
    assert.equal(principal.email, "dev@acme.test");
    assert.equal(principal.key_name, "ci");
  });

  it("binds a key to a default project of its organization only", async () => {
    const org = await createOrg();
    const bound = await createKey({ organization: org.slug, name: "bound", project_id: org.default_project_id });
    const keys = (await admin("GET", `/v1/admin/organizations/${org.slug}/api-keys`)).body.api_keys as Record<
      string,
      string
    >[];
    assert.equal(keys.find((k) => k.key_id === bound.key_id)?.project_id, org.default_project_id);
    assertErrorEnvelope(
      await admin("POST", "/v1/admin/api-keys", {
        organization: org.slug,
        name: "foreign",
        project_id: t().orgB.defaultProjectId,
      }),
      404,
      "not_found",
    );
  });

  it("refuses invalid key requests", async () => {
    const org = await createOrg();
    const cases: [Record<string, unknown>, number, string][] = [
      [{ organization: org.slug, name: "u", kind: "user" }, 400, "invalid_argument"],
      [{ organization: org.slug, name: "w", kind: "workload" }, 400, "invalid_argument"],
      [{ organization: org.slug, name: "e", kind: "user", email: "not-an-email" }, 400, "invalid_argument"],
      [{ organization: org.slug, name: "r", role: "superuser" }, 400, "invalid_argument"],
      [{ organization: org.slug, name: "k", kind: "robot" }, 400, "invalid_argument"],
      [{ organization: org.slug, name: "" }, 400, "invalid_argument"],
      [{ organization: org.slug }, 400, "invalid_argument"],
      [{ name: "no-org" }, 400, "invalid_argument"],
      [{ organization: org.slug, name: "s", secret: "chosen" }, 400, "invalid_argument"],
      [{ organization: "no-such-org", name: "x" }, 404, "not_found"],
      [{ organization: org.slug, name: "p", principal_id: t().orgB.principalIds.owner }, 404, "not_found"],
      [{ organization: org.slug, name: "p", principal_id: "prn_unknown" }, 404, "not_found"],
    ];
    for (const [body, status, code] of cases) {
      assertErrorEnvelope(await admin("POST", "/v1/admin/api-keys", body), status, code);
    }
    const keys = (await admin("GET", `/v1/admin/organizations/${org.slug}/api-keys`)).body.api_keys as unknown[];
    assert.equal(keys.length, 0, "no key was issued by a refused request");
  });

  it("lists keys without any secret or hash", async () => {
    const org = await createOrg();
    const secrets: string[] = [];
    for (const kind of ["user", "service_account", "workload"] as const) {
      const issued = await createKey({
        organization: org.slug,
        name: kind,
        kind,
        email: kind === "user" ? "u@acme.test" : undefined,
        workload_name: kind === "workload" ? "wl" : undefined,
      });
      secrets.push(issued.api_key ?? "");
    }
    for (const ref of [org.slug, org.id]) {
      const res = await admin("GET", `/v1/admin/organizations/${ref}/api-keys`);
      assert.equal(res.status, 200, res.raw);
      assert.deepEqual(Object.keys(res.body), ["api_keys"]);
      const keys = res.body.api_keys as Record<string, unknown>[];
      assert.equal(keys.length, 3);
      for (const key of keys) assert.deepEqual(Object.keys(key).sort(), KEY_INFO_FIELDS);
      for (const secret of secrets) {
        assert.ok(!res.raw.includes(secret), "a secret was listed");
        assert.ok(!res.raw.includes(sha256(secret)), "a key hash was listed");
      }
    }
    // The seeded organizations' keys are listed without secrets too.
    const seeded = await admin("GET", "/v1/admin/organizations/org-a/api-keys");
    for (const role of ["owner", "admin", "member", "service", "workload"] as const) {
      assert.ok(seeded.raw.includes(t().orgA.keyIds[role]));
      assert.ok(!seeded.raw.includes(t().orgA.keys[role]));
      assert.ok(!seeded.raw.includes(sha256(t().orgA.keys[role])));
    }
  });

  it("lists only the named organization's keys", async () => {
    const res = await admin("GET", "/v1/admin/organizations/org-b/api-keys");
    const ids = (res.body.api_keys as Record<string, string>[]).map((k) => k.key_id);
    for (const role of ["owner", "admin", "member", "service", "workload"] as const) {
      assert.ok(ids.includes(t().orgB.keyIds[role]));
      assert.ok(!ids.includes(t().orgA.keyIds[role]));
    }
  });

  it("refuses to list the keys of an unknown organization with 404", async () => {
    assertErrorEnvelope(await admin("GET", "/v1/admin/organizations/no-such-org/api-keys"), 404, "not_found");
  });

  // Revocation.
  it("revokes a key: it is refused from then on and listed as revoked", async () => {
    const org = await createOrg();
    const doomed = await createKey({ organization: org.slug, name: "doomed" });
    const kept = await createKey({ organization: org.slug, name: "kept" });
    assert.equal((await t().request("GET", "/v1/whoami", { key: doomed.api_key })).status, 200);

    const res = await admin("POST", `/v1/admin/api-keys/${doomed.key_id}:revoke`);
    assert.equal(res.status, 200, res.raw);
    assert.deepEqual(res.body, {});
    assertErrorEnvelope(await t().request("GET", "/v1/whoami", { key: doomed.api_key }), 401, "unauthenticated");
    assert.equal((await t().request("GET", "/v1/whoami", { key: kept.api_key })).status, 200);

    const keys = (await admin("GET", `/v1/admin/organizations/${org.slug}/api-keys`)).body.api_keys as Record<
      string,
      string
    >[];
    const revokedAt = keys.find((k) => k.key_id === doomed.key_id)?.revoked_at ?? "";
    assert.ok(!Number.isNaN(Date.parse(revokedAt)), `revoked_at is a timestamp: "${revokedAt}"`);
    assert.equal(keys.find((k) => k.key_id === kept.key_id)?.revoked_at, "");

    // Revoking again changes nothing.
    assert.equal((await admin("POST", `/v1/admin/api-keys/${doomed.key_id}:revoke`)).status, 200);
    const again = (await admin("GET", `/v1/admin/organizations/${org.slug}/api-keys`)).body.api_keys as Record<
      string,
      string
    >[];
    assert.equal(again.find((k) => k.key_id === doomed.key_id)?.revoked_at, revokedAt);
    assertErrorEnvelope(await t().request("GET", "/v1/whoami", { key: doomed.api_key }), 401, "unauthenticated");
  });

  it("revokes a key of another organization", async () => {
    const issued = await t().issueKey(t().orgB, { role: "owner", kind: "user" });
    assert.equal((await admin("POST", `/v1/admin/api-keys/${issued.keyId}:revoke`)).status, 200);
    assertErrorEnvelope(await t().request("GET", "/v1/whoami", { key: issued.key }), 401, "unauthenticated");
    assert.equal((await t().request("GET", "/v1/whoami", { key: t().orgB.keys.owner })).status, 200);
  });

  it("refuses to revoke an unknown key with 404", async () => {
    assertErrorEnvelope(await admin("POST", "/v1/admin/api-keys/key_unknown:revoke"), 404, "not_found");
  });

  it("does not route a revoke without the :revoke verb", async () => {
    const issued = await t().issueKey(t().orgB, {});
    for (const url of [`/v1/admin/api-keys/${issued.keyId}`, `/v1/admin/api-keys/${issued.keyId}:delete`]) {
      const res = await admin("POST", url);
      assert.equal(res.status, 404, res.raw);
    }
    assert.equal((await t().request("GET", "/v1/whoami", { key: issued.key })).status, 200);
  });

  // Quotas.
  it("sets a quota limit, which usage then reports, and resets it with null", async () => {
    const org = await createOrg();
    const key = await createKey({ organization: org.slug, name: "reader" });
    const limitOf = (body: Record<string, unknown>, metric: string) =>
      (body.snapshot as { limits: QuotaLimitJson[] }).limits.find((l) => l.metric === metric)?.limit;

    const set = await admin("PUT", `/v1/admin/organizations/${org.slug}/quotas/projects.total`, { limit: 5 });
    assert.equal(set.status, 200, set.raw);
    assert.equal(limitOf(set.body, "projects.total"), "5");
    assert.equal(limitOf(set.body, "sandboxes.running"), "10");
    const usage = await t().request("GET", "/v1/usage", { key: key.api_key });
    assert.equal(limitOf(usage.body, "projects.total"), "5");
    const otherUsage = await t().request("GET", "/v1/usage", { key: t().orgB.keys.member });
    assert.equal(limitOf(otherUsage.body, "projects.total"), "1000");

    const byId = await admin("PUT", `/v1/admin/organizations/${org.id}/quotas/sandboxes.running`, { limit: 0 });
    assert.equal(byId.status, 200, byId.raw);
    assert.equal(limitOf(byId.body, "sandboxes.running"), "0");
    assert.equal(limitOf(byId.body, "projects.total"), "5");

    const reset = await admin("PUT", `/v1/admin/organizations/${org.slug}/quotas/projects.total`, { limit: null });
    assert.equal(reset.status, 200, reset.raw);
    assert.equal(limitOf(reset.body, "projects.total"), "1000");
    assert.equal(limitOf(reset.body, "sandboxes.running"), "0");
    const after = await t().request("GET", "/v1/usage", { key: key.api_key });
    assert.equal(limitOf(after.body, "projects.total"), "1000");

    // Resetting a limit that has no override is harmless.
    const resetAgain = await admin("PUT", `/v1/admin/organizations/${org.slug}/quotas/projects.total`, { limit: null });
    assert.equal(resetAgain.status, 200);
  });

  it("enforces a quota set through the admin route", async () => {
    const org = await createOrg();
    const key = await createKey({ organization: org.slug, name: "builder" });
    await admin("PUT", `/v1/admin/organizations/${org.slug}/quotas/projects.total`, { limit: 1 });
    const res = await t().request("POST", "/v1/projects", { key: key.api_key, body: { name: "P", slug: "p" } });
    assertErrorEnvelope(res, 429, "quota_exceeded");
  });

  it("refuses a quota for an unknown organization with 404", async () => {
    assertErrorEnvelope(
      await admin("PUT", "/v1/admin/organizations/no-such-org/quotas/projects.total", { limit: 1 }),
      404,
      "not_found",
    );
  });

  it("refuses an unknown metric or an invalid limit with 400", async () => {
    const cases: [string, unknown][] = [
      ["not.a.metric", { limit: 1 }],
      ["sandboxes", { limit: 1 }],
      ["projects.total", { limit: -1 }],
      ["projects.total", { limit: 1.5 }],
      ["projects.total", { limit: "5" }],
      ["projects.total", { limit: 1_000_000_001 }],
      ["projects.total", {}],
      ["projects.total", { limit: 1, metric: "sandboxes.total" }],
    ];
    for (const [metric, body] of cases) {
      assertErrorEnvelope(
        await admin("PUT", `/v1/admin/organizations/org-b/quotas/${metric}`, body),
        400,
        "invalid_argument",
      );
    }
    const usage = await t().request("GET", "/v1/usage", { key: t().orgB.keys.member });
    const limits = (usage.body.snapshot as { limits: QuotaLimitJson[] }).limits;
    assert.equal(limits.find((l) => l.metric === "projects.total")?.limit, "1000", "nothing was changed");
  });

  it("names the valid metrics when refusing an unknown one", async () => {
    const res = await admin("PUT", "/v1/admin/organizations/org-b/quotas/not.a.metric", { limit: 1 });
    for (const metric of [
      "sandboxes.running",
      "sandboxes.total",
      "sandboxes.workspace_capacity_gib",
      "projects.total",
    ]) {
      assert.ok(String(res.body.message).includes(metric), res.raw);
    }
  });

  it("never logs an issued secret", async () => {
    const org = await createOrg();
    const issued = await createKey({ organization: org.slug, name: "logged?", kind: "user", email: "l@acme.test" });
    await t().request("GET", "/v1/whoami", { key: issued.api_key });
    const logs = t().logs();
    assert.ok(!logs.includes(issued.api_key ?? "missing"), "an issued secret was logged");
    assert.ok(!logs.includes(owner()), "the operator key was logged");
    assert.ok(!/authorization/i.test(logs), "an Authorization header was logged");
  });
});
