// Console sessions (docs/api-decisions.md "Console sessions"): an API key exchanged for an
// HttpOnly cookie that acts as the key, from the console's own origin only, expiring,
// revocable, listed with the keys and revoked with its key.
import assert from "node:assert/strict";
import { it } from "node:test";
import { forEachStore } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { CONSOLE_ORIGIN, openSession, sameOrigin } from "./support/console-session.js";
import { API_ONLY_RUNTIME, sandboxScopedKey } from "./support/fixtures.js";

forEachStore(
  "console sessions",
  (t) => {
    it("sets an HttpOnly, SameSite=Strict cookie that acts as the key; the key is not in it", async () => {
      const session = await openSession(t(), t().orgA.keys.member);
      assert.match(
        session.setCookie,
        /^warren_console=wrn_[A-Za-z0-9_-]{43}; Path=\/; Max-Age=43200; HttpOnly; SameSite=Strict$/,
      );
      assert.notEqual(session.secret, t().orgA.keys.member);
      const who = await t().request("GET", "/v1/whoami", { headers: sameOrigin(session) });
      assert.equal(who.status, 200, who.raw);
      const body = who.body as { organization: { id: string }; principal: Record<string, string> };
      assert.equal(body.organization.id, t().orgA.id);
      assert.equal(body.principal.id, t().orgA.principalIds.member);
      // Contract 2.9: key_id and key_name are empty for a browser session.
      assert.equal(body.principal.key_id, "");
      assert.equal(body.principal.key_name, "");
      // The member's role: a project delete takes admin.
      const project = await t().request("POST", "/v1/projects", {
        headers: sameOrigin(session),
        body: { name: "from-the-console", slug: "from-the-console" },
      });
      assert.equal(project.status, 200, project.raw);
      const id = (project.body.project as { id: string }).id;
      assertError(
        await t().request("DELETE", `/v1/projects/${id}`, { headers: sameOrigin(session) }),
        403,
        "permission_denied",
      );
      const admin = await openSession(t(), t().orgA.keys.admin);
      const deleted = await t().request("DELETE", `/v1/projects/${id}`, { headers: sameOrigin(admin) });
      assert.equal(deleted.status, 200, deleted.raw);
    });

    it("is Secure with the __Host- prefix behind TLS", async () => {
      const session = await openSession(t(), t().orgA.keys.owner, { "x-forwarded-proto": "https" });
      assert.match(
        session.setCookie,
        /^__Host-warren_console=wrn_\S+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Strict; Secure$/,
      );
      const who = await t().request("GET", "/v1/whoami", { headers: sameOrigin(session) });
      assert.equal(who.status, 200, who.raw);
    });

    it("refuses the cookie from another origin, and unsafe methods or upgrades naming no origin", async () => {
      const session = await openSession(t(), t().orgA.keys.owner);
      const post = (headers: Record<string, string>) =>
        t().request("POST", "/v1/projects", { headers, body: { name: "csrf", slug: "csrf" } });
      const refusals: [string, Record<string, string>][] = [
        ["no Origin on a POST", { cookie: session.cookie }],
        ["another origin", { cookie: session.cookie, origin: "http://evil.example" }],
        ["a sandbox endpoint's origin", { cookie: session.cookie, origin: "http://8080-sbx-x.localhost:7081" }],
        ["the same host on another port", { cookie: session.cookie, origin: "http://localhost:7081" }],
        ["Origin null", { cookie: session.cookie, origin: "null" }],
        ["Sec-Fetch-Site cross-site", { ...sameOrigin(session), "sec-fetch-site": "cross-site" }],
        ["Sec-Fetch-Site same-site", { ...sameOrigin(session), "sec-fetch-site": "same-site" }],
      ];
      for (const [label, headers] of refusals) {
        const res = await post(headers);
        assert.equal(res.status, 403, `${label}: ${res.raw}`);
        assertError(res, 403, "permission_denied");
      }
      // A GET naming another origin is refused too; one naming none (a navigation) is served.
      assertError(
        await t().request("GET", "/v1/whoami", { headers: { cookie: session.cookie, origin: "http://evil.example" } }),
        403,
        "permission_denied",
      );
      assert.equal((await t().request("GET", "/v1/whoami", { headers: { cookie: session.cookie } })).status, 200);
      // A WebSocket upgrade (the terminal) must name the console's origin.
      const sandboxes = await t().request("GET", "/v1/sandboxes/sbx-x/exec/stream", {
        headers: { cookie: session.cookie, upgrade: "websocket", connection: "upgrade" },
      });
      assert.equal(sandboxes.status, 403, sandboxes.raw);
      assert.equal((await post(sameOrigin(session))).status, 200);
    });

    it("is refused once signed out, expired, or when its key is revoked", async () => {
      const out = await openSession(t(), t().orgA.keys.owner);
      const signOut = await t().request("DELETE", "/v1/console/sessions/current", { headers: sameOrigin(out) });
      assert.equal(signOut.status, 200, signOut.raw);
      assert.match(
        String(signOut.headers["set-cookie"]),
        /^warren_console=; Path=\/; Max-Age=0; HttpOnly; SameSite=Strict$/,
      );
      assertError(await t().request("GET", "/v1/whoami", { headers: sameOrigin(out) }), 401, "unauthenticated");

      const expired = await openSession(t(), t().orgA.keys.owner);
      await t().c.db.query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [
        expired.sessionId,
      ]);
      assertError(await t().request("GET", "/v1/whoami", { headers: sameOrigin(expired) }), 401, "unauthenticated");

      // A key of its own, so revoking it leaves the harness's keys alone.
      const own = await t().issueKey(t().orgA, { role: "admin" });
      const child = await openSession(t(), own.key);
      assert.equal((await t().request("GET", "/v1/whoami", { headers: sameOrigin(child) })).status, 200);
      const revoke = await t().request("POST", `/v1/admin/api-keys/${own.keyId}:revoke`, { key: t().orgA.keys.owner });
      assert.equal(revoke.status, 200, revoke.raw);
      assertError(await t().request("GET", "/v1/whoami", { headers: sameOrigin(child) }), 401, "unauthenticated");

      // A session is revoked alone, too, by its id, as a key is.
      const alone = await openSession(t(), t().orgA.keys.member);
      await t().request("POST", `/v1/admin/api-keys/${alone.sessionId}:revoke`, { key: t().orgA.keys.owner });
      assertError(await t().request("GET", "/v1/whoami", { headers: sameOrigin(alone) }), 401, "unauthenticated");
      assert.equal((await t().request("GET", "/v1/whoami", { key: t().orgA.keys.member })).status, 200);
    });

    it("is listed with the keys: its expiry and the key it came from", async () => {
      const session = await openSession(t(), t().orgB.keys.member);
      const list = await t().request("GET", `/v1/admin/organizations/${t().orgB.id}/api-keys`, {
        key: t().orgA.keys.owner,
      });
      assert.equal(list.status, 200, list.raw);
      const rows = list.body.api_keys as Record<string, string>[];
      const row = rows.find((r) => r.key_id === session.sessionId);
      assert.ok(row, list.raw);
      assert.equal(row.session_of_key_id, t().orgB.keyIds.member);
      assert.equal(row.principal_id, t().orgB.principalIds.member);
      assert.ok(Date.parse(String(row.expires_at)) > Date.now());
      const key = rows.find((r) => r.key_id === t().orgB.keyIds.member);
      assert.equal(key?.expires_at, "");
      assert.equal(key?.session_of_key_id, "");
      assert.ok(!list.raw.includes(session.secret));
      // Another organization's session is another organization's: org B cannot read org A's data by it.
      const bSandbox = await t().request("GET", `/v1/projects/${t().orgA.defaultProjectId}`, {
        headers: sameOrigin(session),
      });
      assertError(bSandbox, 404, "not_found");
    });

    it("serves the console's index to a deep link, with its CSP, and no credential needed", async () => {
      const page = await t().request("GET", "/console/runs/run_x?event=1");
      assert.equal(page.status, 200, page.raw.slice(0, 200));
      assert.match(String(page.headers["content-type"]), /^text\/html/);
      assert.match(String(page.headers["content-security-policy"]), /script-src 'self';/);
      assert.match(page.raw, /<div id="app"><\/div>/);
      assertError(await t().request("GET", "/console/assets/missing.js"), 404, "not_found");
    });

    it("takes no secret in the wrong place, and no session from a session or a sandbox-scoped key", async () => {
      const session = await openSession(t(), t().orgA.keys.owner);
      assertError(await t().request("GET", "/v1/whoami", { key: session.secret }), 401, "unauthenticated");
      assertError(
        await t().request("GET", "/v1/whoami", {
          headers: { cookie: `warren_console=${t().orgA.keys.owner}`, origin: CONSOLE_ORIGIN },
        }),
        401,
        "unauthenticated",
      );
      assertError(
        await t().request("POST", "/v1/console/sessions", { headers: sameOrigin(session) }),
        403,
        "permission_denied",
      );
      const sandbox = await t().request("POST", "/v1/sandboxes", { key: t().orgA.keys.owner, body: {} });
      const scoped = await sandboxScopedKey(t(), t().orgA, String(sandbox.body.id));
      assertError(await t().request("POST", "/v1/console/sessions", { key: scoped }), 403, "permission_denied");
      assertError(
        await t().request("DELETE", "/v1/console/sessions/current", { key: t().orgA.keys.owner }),
        400,
        "failed_precondition",
      );
      // A key's own secret is never echoed, and the session's only in its Set-Cookie.
      assert.ok(!t().logs().includes(session.secret));
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);
