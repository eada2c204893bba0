// Authentication at the API edge (contract 5) and the identity and discovery operations:
// WhoAmI for every credential kind, refusals as UNAUTHENTICATED, revocation, request ids,
// GetServiceConfig without a credential, and that credentials never reach the logs.
import assert from "node:assert/strict";
import { it } from "node:test";
import { BAD_CREDENTIALS, forEachStore, type KeyRole, type TestOrg, type TestResponse } from "./harness.js";
import { assertError as assertStandardError } from "./support/assertions.js";

const SANDBOX_ID = `sbx-${"a".repeat(40)}`;
const ROLES: KeyRole[] = ["owner", "admin", "member", "service", "workload"];

/** The exact WhoAmI body the harness's seeded key of `role` must produce. */
function expectedWhoAmI(org: TestOrg, role: KeyRole) {
  const email = role === "owner" || role === "admin" || role === "member" ? `${role}@${org.slug}.test` : "";
  const kind = role === "service" ? "service_account" : role === "workload" ? "workload" : "user";
  const keyName = role === "service" ? "ci-bot" : role === "workload" ? "agent" : role;
  return {
    organization: { id: org.id, slug: org.slug },
    principal: {
      id: org.principalIds[role],
      kind,
      email,
      key_id: org.keyIds[role],
      key_name: keyName,
      workload_name: role === "workload" ? "agent" : "",
    },
  };
}

/** Asserts the standard error envelope, and that its request id (the header's) is well formed. */
function assertError(res: TestResponse, status: number, code: string) {
  assertStandardError(res, status, code);
  const header = res.headers["x-request-id"];
  assert.equal(typeof header, "string");
  assert.match(header as string, /^req_[0-9a-z]{26}$/);
}

const SERVICE_URLS = {
  publicApiUrl: "https://api.warren.example",
  sessionPlaneUrl: "https://sessions.warren.example",
  sshHost: "ssh.warren.example",
};

forEachStore(
  "auth",
  (t) => {
    for (const org of ["orgA", "orgB"] as const) {
      for (const role of ROLES) {
        it(`WhoAmI returns exactly the organization and principal of the ${org} ${role} key`, async () => {
          const res = await t().request("GET", "/v1/whoami", { key: t()[org].keys[role] });
          assert.equal(res.status, 200, res.raw);
          assert.deepEqual(res.body, expectedWhoAmI(t()[org], role));
          assert.match(String(res.headers["x-request-id"]), /^req_[0-9a-z]{26}$/);
          assert.match(String(res.headers["content-type"]), /^application\/json/);
        });
      }
    }

    it("WhoAmI gives each key its own key_id while keys of one principal share the principal id", async () => {
      const a = await t().request("GET", "/v1/whoami", { key: t().orgA.keys.owner });
      const b = await t().request("GET", "/v1/whoami", { key: t().orgA.keys.member });
      const pa = a.body.principal as Record<string, string>;
      const pb = b.body.principal as Record<string, string>;
      assert.notEqual(pa.id, pb.id);
      assert.notEqual(pa.key_id, pb.key_id);
      const extra = await t().c.identity.issueKey({
        orgId: t().orgA.id,
        principalId: t().orgA.principalIds.owner,
        name: "second-owner-key",
      });
      const c = await t().request("GET", "/v1/whoami", { key: extra.api_key });
      assert.equal(c.status, 200);
      const pc = c.body.principal as Record<string, string>;
      assert.equal(pc.id, pa.id);
      assert.equal(pc.email, "owner@org-a.test");
      assert.equal(pc.key_id, extra.key_id);
      assert.equal(pc.key_name, "second-owner-key");
    });

    it("WhoAmI answers a sandbox-scoped credential with its own organization and key", async () => {
      const issued = await t().issueKey(t().orgB, { sandbox: { sandboxId: SANDBOX_ID, lineagePath: SANDBOX_ID } });
      const res = await t().request("GET", "/v1/whoami", { key: issued.key });
      assert.equal(res.status, 200, res.raw);
      assert.deepEqual(res.body.organization, { id: t().orgB.id, slug: "org-b" });
      const principal = res.body.principal as Record<string, string>;
      assert.equal(principal.id, issued.principalId);
      assert.equal(principal.key_id, issued.keyId);
      assert.equal(principal.kind, "service_account");
      assert.equal(principal.email, "");
    });

    for (const bad of BAD_CREDENTIALS) {
      it(`refuses ${bad.name} with 401 unauthenticated in the envelope`, async () => {
        const res = await t().request("GET", "/v1/whoami", { headers: bad.headers });
        assertError(res, 401, "unauthenticated");
        assert.equal(res.body.details, undefined);
      });
    }

    for (const [name, header] of [
      ["an empty Bearer header", "Bearer "],
      ["a Bearer header with two tokens", "Bearer wrn_one wrn_two"],
      ["a bare key without the Bearer scheme", "wrn_not-a-real-key"],
      ["a Token scheme", "Token wrn_not-a-real-key"],
    ] as const) {
      it(`refuses ${name} with 401 unauthenticated`, async () => {
        const res = await t().request("GET", "/v1/whoami", { headers: { authorization: header } });
        assertError(res, 401, "unauthenticated");
      });
    }

    it("refuses a real key sent without the Bearer scheme, or under a Basic scheme", async () => {
      const key = t().orgA.keys.owner;
      assertError(await t().request("GET", "/v1/whoami", { headers: { authorization: key } }), 401, "unauthenticated");
      assertError(
        await t().request("GET", "/v1/whoami", {
          headers: { authorization: `Basic ${Buffer.from(`x:${key}`).toString("base64")}` },
        }),
        401,
        "unauthenticated",
      );
    });

    it("accepts the Bearer scheme case-insensitively (RFC 7235)", async () => {
      const res = await t().request("GET", "/v1/whoami", {
        headers: { authorization: `bearer ${t().orgA.keys.member}` },
      });
      assert.equal(res.status, 200, res.raw);
      assert.deepEqual(res.body, expectedWhoAmI(t().orgA, "member"));
    });

    it("refuses every authenticated route without a credential, before looking at the request", async () => {
      const routes: [string, string, unknown][] = [
        ["GET", "/v1/usage", undefined],
        ["POST", "/v1/feedback", { title: "x", surface: "api" }],
        ["POST", "/v1/feedback", { not: "valid" }],
        ["GET", "/v1/projects", undefined],
        ["GET", "/v1/admin/organizations", undefined],
      ];
      for (const [method, url, body] of routes) {
        const res = await t().request(method, url, { body });
        assertError(res, 401, "unauthenticated");
      }
    });

    it("refuses a revoked key with 401 at once, while other keys of the organization keep working", async () => {
      const issued = await t().issueKey(t().orgA, { role: "admin" });
      const before = await t().request("GET", "/v1/whoami", { key: issued.key });
      assert.equal(before.status, 200, before.raw);
      await t().c.identity.revokeKey(issued.keyId);
      assertError(await t().request("GET", "/v1/whoami", { key: issued.key }), 401, "unauthenticated");
      assertError(await t().request("GET", "/v1/usage", { key: issued.key }), 401, "unauthenticated");
      const other = await t().request("GET", "/v1/whoami", { key: t().orgA.keys.admin });
      assert.equal(other.status, 200);
    });

    it("revoking an unknown key id is not_found", async () => {
      await assert.rejects(t().c.identity.revokeKey("key_doesnotexist"), (error: Error & { code?: string }) => {
        assert.equal(error.code, "not_found");
        return true;
      });
    });

    it("a key differing from a real one by a single character is unknown", async () => {
      const key = t().orgB.keys.owner;
      const last = key.at(-1) === "A" ? "B" : "A";
      assertError(
        await t().request("GET", "/v1/whoami", { key: `${key.slice(0, -1)}${last}` }),
        401,
        "unauthenticated",
      );
      assertError(await t().request("GET", "/v1/whoami", { key: `${key}x` }), 401, "unauthenticated");
    });

    it("gives every response, success or error, its own server-made x-request-id", async () => {
      const seen = new Set<string>();
      for (const key of [t().orgA.keys.owner, t().orgB.keys.member, null, "wrn_unknown"]) {
        const res = await t().request("GET", "/v1/whoami", { key });
        const id = String(res.headers["x-request-id"]);
        assert.match(id, /^req_[0-9a-z]{26}$/);
        if (res.status !== 200) assert.equal(res.body.request_id, id);
        seen.add(id);
      }
      assert.equal(seen.size, 4);
    });

    it("ignores a client-sent x-request-id", async () => {
      const res = await t().request("GET", "/v1/whoami", { headers: { "x-request-id": "req_client-chosen" } });
      assert.equal(res.status, 401);
      assert.notEqual(res.headers["x-request-id"], "req_client-chosen");
      assert.equal(res.body.request_id, res.headers["x-request-id"]);
    });

    it("GetServiceConfig answers without a credential with the configured URLs", async () => {
      const res = await t().request("GET", "/v1/service-config");
      assert.equal(res.status, 200, res.raw);
      assert.deepEqual(res.body, {
        api_base_url: SERVICE_URLS.publicApiUrl,
        session_plane_url: SERVICE_URLS.sessionPlaneUrl,
        ssh_host: SERVICE_URLS.sshHost,
        api_version: "0.0.1",
      });
      assert.match(String(res.headers["x-request-id"]), /^req_/);
    });

    it("GetServiceConfig ignores any credential sent, even an invalid one", async () => {
      for (const headers of [{ authorization: "Bearer wrn_not-a-real-key" }, { authorization: "Basic Zm9vOmJhcg==" }]) {
        const res = await t().request("GET", "/v1/service-config", { headers });
        assert.equal(res.status, 200, res.raw);
        assert.equal(res.body.api_base_url, SERVICE_URLS.publicApiUrl);
      }
      const withKey = await t().request("GET", "/v1/service-config", { key: t().orgA.keys.owner });
      assert.equal(withKey.status, 200);
      assert.equal(withKey.body.ssh_host, SERVICE_URLS.sshHost);
    });

    it("never logs a key or an Authorization header, and logs each request with its org and principal", async () => {
      const secrets: string[] = [];
      const expected = new Map<string, { org: string; principal: string }>();
      for (const org of [t().orgA, t().orgB]) {
        for (const role of ROLES) {
          const key = org.keys[role];
          secrets.push(key);
          const res = await t().request("GET", "/v1/whoami", { key });
          assert.equal(res.status, 200);
          expected.set(String(res.headers["x-request-id"]), { org: org.id, principal: org.principalIds[role] });
          // Error paths too: a refused body and an unknown route, with a valid key.
          await t().request("POST", "/v1/feedback", { key, body: { title: "" } });
          await t().request("GET", "/v1/does-not-exist", { key });
        }
      }
      const sandboxKey = await t().issueKey(t().orgA, { sandbox: { sandboxId: SANDBOX_ID, lineagePath: SANDBOX_ID } });
      secrets.push(sandboxKey.key);
      await t().request("GET", "/v1/whoami", { key: sandboxKey.key });
      const revoked = await t().issueKey(t().orgA, {});
      secrets.push(revoked.key);
      await t().c.identity.revokeKey(revoked.keyId);
      await t().request("GET", "/v1/whoami", { key: revoked.key });
      for (const bad of BAD_CREDENTIALS) await t().request("GET", "/v1/whoami", { headers: bad.headers });

      const logs = t().logs();
      for (const secret of secrets) assert.ok(!logs.includes(secret), "an API key secret was written to the log");
      assert.ok(!logs.includes("wrn_not-a-real-key"), "a presented (unknown) key was written to the log");
      assert.ok(!/authorization/i.test(logs), "an Authorization header was written to the log");
      assert.ok(!/bearer\s/i.test(logs), "a Bearer credential was written to the log");
      assert.ok(!logs.includes("Zm9vOmJhcg=="), "a Basic credential was written to the log");

      const lines = logs
        .split("\n")
        .filter((line) => line.trim() !== "")
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      const requestLines = new Map(lines.filter((l) => l.msg === "request").map((l) => [String(l.reqId), l]));
      for (const [requestId, who] of expected) {
        const line = requestLines.get(requestId);
        assert.ok(line, `no request log line for ${requestId}`);
        assert.equal(line.org_id, who.org);
        assert.equal(line.principal_id, who.principal);
        assert.equal(line.url, "/v1/whoami");
        assert.equal(line.status, 200);
        assert.equal(line.method, "GET");
      }
      const unauthenticated = lines.filter((l) => l.msg === "request" && l.status === 401);
      assert.ok(unauthenticated.length > 0);
      for (const line of unauthenticated) assert.equal(line.principal_id, undefined);
    });
  },
  { config: SERVICE_URLS },
);

// With the credential cache on, a revoke in this process must still take effect at once.
forEachStore(
  "auth with a credential cache",
  (t) => {
    it("refuses a cached key with 401 as soon as it is revoked", async () => {
      const issued = await t().issueKey(t().orgA, { role: "owner", kind: "user" });
      for (let i = 0; i < 3; i++) {
        const res = await t().request("GET", "/v1/whoami", { key: issued.key });
        assert.equal(res.status, 200, res.raw);
      }
      await t().c.identity.revokeKey(issued.keyId);
      assertError(await t().request("GET", "/v1/whoami", { key: issued.key }), 401, "unauthenticated");
    });

    it("refuses a cached key revoked through the admin route at once", async () => {
      const issued = await t().issueKey(t().orgB, {});
      assert.equal((await t().request("GET", "/v1/whoami", { key: issued.key })).status, 200);
      const revoke = await t().request("POST", `/v1/admin/api-keys/${issued.keyId}:revoke`, {
        key: t().orgA.keys.owner,
      });
      assert.equal(revoke.status, 200, revoke.raw);
      assertError(await t().request("GET", "/v1/whoami", { key: issued.key }), 401, "unauthenticated");
    });

    it("GetServiceConfig reports empty sibling URLs when none are deployed", async () => {
      const res = await t().request("GET", "/v1/service-config");
      assert.equal(res.status, 200);
      assert.deepEqual(res.body, {
        api_base_url: "http://127.0.0.1:8080",
        session_plane_url: "",
        ssh_host: "",
        api_version: "0.0.1",
      });
    });
  },
  { config: { authCacheTtlMs: 60_000 } },
);
