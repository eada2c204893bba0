// GetUsageSnapshot and product quotas: every metric with decimal-string limit and current,
// configured defaults, per-organization overrides, and the quota_exceeded rejection of
// CreateProject (429, Retry-After, details.quota, nothing created).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { it } from "node:test";
import type { ProjectJson } from "../src/modules/projects/schemas.js";
import type { QuotaLimitJson } from "../src/modules/usage/schemas.js";
import { forEachStore, type TestApp } from "./harness.js";
import { bodyOf } from "./support/assertions.js";
import { API_ONLY_RUNTIME, countRows } from "./support/fixtures.js";

const METRICS = [
  "sandboxes.running",
  "sandboxes.total",
  "sandboxes.workspace_capacity_gib",
  "projects.total",
  "snapshots.total",
];
// Deliberately unlike the built-in defaults, so the test sees the configuration flow through.
const DEFAULTS = {
  "sandboxes.running": 7,
  "sandboxes.total": 11,
  "sandboxes.workspace_capacity_gib": 13,
  "projects.total": 17,
  "snapshots.total": 19,
};

/** A fresh organization (with its default project) and an owner key, isolated from other tests. */
async function freshOrg(t: TestApp): Promise<{ id: string; key: string }> {
  const org = await t.c.identity.createOrganization({ slug: `usage-${randomBytes(4).toString("hex")}` });
  const issued = await t.c.identity.issueKey({ orgId: org.id, kind: "service_account", role: "owner", name: "usage" });
  return { id: org.id, key: issued.api_key };
}

async function snapshot(t: TestApp, key: string): Promise<Map<string, QuotaLimitJson>> {
  const snap = bodyOf<{ limits: QuotaLimitJson[] }>(await t.request("GET", "/v1/usage", { key }), "snapshot");
  assert.deepEqual(Object.keys(snap), ["limits"]);
  const byMetric = new Map(snap.limits.map((l) => [l.metric, l]));
  assert.equal(byMetric.size, snap.limits.length, "each metric appears once");
  return byMetric;
}

async function createProject(t: TestApp, key: string, slug: string) {
  return t.request("POST", "/v1/projects", { key, body: { name: `Project ${slug}`, slug } });
}

const projectCount = (t: TestApp, orgId: string) => countRows(t, "projects WHERE org_id = $1", [orgId]);

forEachStore(
  "usage",
  (t) => {
    it("returns every configured quota with decimal-string limit, current and reserved", async () => {
      const limits = await snapshot(t(), t().orgA.keys.member);
      assert.deepEqual([...limits.keys()].sort(), [...METRICS].sort());
      for (const metric of METRICS) {
        const limit = limits.get(metric) as QuotaLimitJson;
        assert.deepEqual(Object.keys(limit).sort(), ["current", "limit", "metric", "reserved", "unit"]);
        for (const field of ["limit", "current", "reserved"] as const) {
          assert.equal(typeof limit[field], "string", `${metric}.${field}`);
          assert.match(limit[field], /^(0|[1-9][0-9]*)$/, `${metric}.${field}`);
        }
        assert.equal(limit.limit, String(DEFAULTS[metric as keyof typeof DEFAULTS]), metric);
        assert.ok(limit.unit.length > 0);
      }
      assert.equal(limits.get("sandboxes.workspace_capacity_gib")?.unit, "GiB");
    });

    it("reports no sandbox use while no sandboxes exist", async () => {
      const limits = await snapshot(t(), t().orgB.keys.owner);
      for (const metric of ["sandboxes.running", "sandboxes.total", "sandboxes.workspace_capacity_gib"]) {
        assert.equal(limits.get(metric)?.current, "0", metric);
      }
    });

    it("answers every org-scoped key kind with its own organization's snapshot", async () => {
      for (const role of ["owner", "admin", "member", "service", "workload"] as const) {
        const limits = await snapshot(t(), t().orgB.keys[role]);
        assert.equal(limits.get("projects.total")?.limit, "17");
      }
    });

    it("refuses a sandbox-scoped credential with 403 permission_denied", async () => {
      const sandboxId = `sbx-${"c".repeat(40)}`;
      const issued = await t().issueKey(t().orgA, { role: "owner", sandbox: { sandboxId, lineagePath: sandboxId } });
      const res = await t().request("GET", "/v1/usage", { key: issued.key });
      assert.equal(res.status, 403, res.raw);
      assert.equal(res.body.code, "permission_denied");
      assert.equal(res.body.snapshot, undefined);
    });

    it("refuses a request without a credential", async () => {
      const res = await t().request("GET", "/v1/usage");
      assert.equal(res.status, 401);
      assert.equal(res.body.code, "unauthenticated");
    });

    it("counts the default project, and each project CreateProject adds, for that organization only", async () => {
      const org = await freshOrg(t());
      const other = await freshOrg(t());
      assert.equal((await snapshot(t(), org.key)).get("projects.total")?.current, "1");
      for (const [i, slug] of ["alpha", "beta", "gamma"].entries()) {
        const res = await createProject(t(), org.key, slug);
        assert.equal(res.status, 200, res.raw);
        assert.equal((await snapshot(t(), org.key)).get("projects.total")?.current, String(i + 2));
      }
      assert.equal(await projectCount(t(), org.id), 4);
      assert.equal((await snapshot(t(), other.key)).get("projects.total")?.current, "1");
    });

    it("applies a per-organization override only to that organization, and resets it", async () => {
      const org = await freshOrg(t());
      const other = await freshOrg(t());
      await t().c.admin.setQuota(org.id, "projects.total", 3);
      await t().c.admin.setQuota(org.id, "sandboxes.running", 0);
      const limits = await snapshot(t(), org.key);
      assert.equal(limits.get("projects.total")?.limit, "3");
      assert.equal(limits.get("sandboxes.running")?.limit, "0");
      assert.equal(limits.get("sandboxes.total")?.limit, "11");
      const otherLimits = await snapshot(t(), other.key);
      assert.equal(otherLimits.get("projects.total")?.limit, "17");
      assert.equal(otherLimits.get("sandboxes.running")?.limit, "7");

      await t().c.admin.setQuota(org.id, "projects.total", null);
      const reset = await snapshot(t(), org.key);
      assert.equal(reset.get("projects.total")?.limit, "17");
      assert.equal(reset.get("sandboxes.running")?.limit, "0");
    });

    it("carries a large limit exactly as a decimal string", async () => {
      const org = await freshOrg(t());
      await t().c.admin.setQuota(org.id, "sandboxes.workspace_capacity_gib", 1_000_000_000);
      assert.equal((await snapshot(t(), org.key)).get("sandboxes.workspace_capacity_gib")?.limit, "1000000000");
    });

    it("refuses CreateProject at the projects.total limit with 429 quota_exceeded and creates nothing", async () => {
      const org = await freshOrg(t());
      await t().c.admin.setQuota(org.id, "projects.total", 2);
      const ok = await createProject(t(), org.key, "within-limit");
      assert.equal(ok.status, 200, ok.raw);

      const refused = await createProject(t(), org.key, "over-limit");
      assert.equal(refused.status, 429, refused.raw);
      assert.equal(refused.body.code, "quota_exceeded");
      assert.equal(typeof refused.body.message, "string");
      assert.deepEqual(Object.keys(refused.body).sort(), ["code", "details", "message", "request_id"]);
      assert.equal(refused.body.request_id, refused.headers["x-request-id"]);
      const retryAfter = String(refused.headers["retry-after"]);
      assert.match(retryAfter, /^[1-9][0-9]*$/, "Retry-After is a whole number of seconds");
      const details = refused.body.details as { quota: Record<string, unknown> };
      assert.deepEqual(details.quota, {
        metric: "projects.total",
        limit: "2",
        current: "2",
        reserved: "0",
        retry_after_seconds: Number(retryAfter),
      });

      assert.equal(await projectCount(t(), org.id), 2);
      const list = await t().request("GET", "/v1/projects", { key: org.key });
      assert.equal(list.status, 200);
      const slugs = (list.body.projects as ProjectJson[]).map((p) => p.slug).sort();
      assert.deepEqual(slugs, ["default", "within-limit"]);
      assert.equal((await snapshot(t(), org.key)).get("projects.total")?.current, "2");
    });

    it("refuses every CreateProject once the limit is below current use", async () => {
      const org = await freshOrg(t());
      await t().c.admin.setQuota(org.id, "projects.total", 0);
      const refused = await createProject(t(), org.key, "none-allowed");
      assert.equal(refused.status, 429, refused.raw);
      const quota = (refused.body.details as { quota: Record<string, unknown> }).quota;
      assert.equal(quota.limit, "0");
      assert.equal(quota.current, "1");
      assert.equal(await projectCount(t(), org.id), 1);
    });

    it("admits again once the limit is raised, and an override elsewhere changes nothing", async () => {
      const org = await freshOrg(t());
      const other = await freshOrg(t());
      await t().c.admin.setQuota(org.id, "projects.total", 1);
      await t().c.admin.setQuota(other.id, "projects.total", 1);
      assert.equal((await createProject(t(), org.key, "blocked")).status, 429);
      await t().c.admin.setQuota(other.id, "projects.total", 100);
      assert.equal((await createProject(t(), org.key, "blocked")).status, 429);
      await t().c.admin.setQuota(org.id, "projects.total", 2);
      const res = await createProject(t(), org.key, "blocked");
      assert.equal(res.status, 200, res.raw);
      assert.equal((await createProject(t(), org.key, "blocked-again")).status, 429);
    });

    it("never overshoots the limit under concurrent CreateProject calls", async () => {
      const org = await freshOrg(t());
      await t().c.admin.setQuota(org.id, "projects.total", 3);
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) => createProject(t(), org.key, `concurrent-${i}`)),
      );
      const statuses = results.map((r) => r.status).sort();
      assert.deepEqual(statuses, [200, 200, 429, 429, 429, 429, 429, 429], results.map((r) => r.raw).join("\n"));
      assert.equal(await projectCount(t(), org.id), 3);
    });

    it("does not count another organization's projects towards the limit", async () => {
      const org = await freshOrg(t());
      const busy = await freshOrg(t());
      for (const slug of ["b1", "b2", "b3"]) assert.equal((await createProject(t(), busy.key, slug)).status, 200);
      await t().c.admin.setQuota(org.id, "projects.total", 2);
      assert.equal((await createProject(t(), org.key, "mine")).status, 200);
    });
  },
  { config: { quotaDefaults: DEFAULTS } },
);

// Issue 24 A7: snapshots count against `snapshots.total` (pending and sealed ones), whoever
// asks, a sandbox-scoped credential too (contract 5.6 lets it snapshot its own sandbox), and
// the refusal is CreateSandbox's typed 429. With the API-only runtime a snapshot admitted past
// the quota fails at the host, so the kept ones are written as the service would.
forEachStore(
  "snapshot quota",
  (t) => {
    it("refuses a snapshot past snapshots.total with the typed 429, for a sandbox-scoped credential too", async () => {
      const org = await freshOrg(t());
      const sandbox = await t().request("POST", "/v1/sandboxes", { key: org.key, body: {} });
      assert.equal(sandbox.status, 200, sandbox.raw);
      const id = String(sandbox.body.id);
      await t().c.db.query("UPDATE sandboxes SET state = 'stopped', desired_state = 'stopped' WHERE id = $1", [id]);
      const keep = async (n: number, state: "sealed" | "failed") => {
        for (let i = 0; i < n; i++) {
          await t().c.db.query(
            `INSERT INTO sandbox_snapshots (id, org_id, project_id, source_sandbox_id, run_id, image, lineage_path,
               storage_class, state, durability, request_hash, created_at)
             SELECT $2, org_id, project_id, id, run_id, image, lineage_path, storage_class, $3, 'local', 'x', now()
               FROM sandboxes WHERE id = $1`,
            [id, `snp-${randomBytes(20).toString("hex")}`, state],
          );
        }
      };
      await keep(3, "sealed");
      await keep(2, "failed");
      await t().c.admin.setQuota(org.id, "snapshots.total", 3);
      const principal = (await t().c.identity.authenticate(org.key)).principalId;
      const scoped = (
        await t().c.identity.issueKey({
          orgId: org.id,
          principalId: principal,
          name: "scoped",
          sandbox: { sandboxId: id, lineagePath: id },
        })
      ).api_key;
      for (const key of [org.key, scoped]) {
        const refused = await t().request("POST", `/v1/sandboxes/${id}:snapshot`, { key, body: {} });
        assert.equal(refused.status, 429, refused.raw);
        assert.deepEqual(refused.body, {
          code: "quota_exceeded",
          message: refused.body.message,
          request_id: refused.body.request_id,
          metric: "snapshots.total",
          limit: "3",
          retry_after_seconds: 60,
          details: { quota: { metric: "snapshots.total" } },
        });
        assert.equal(refused.headers["retry-after"], "60");
      }
      assert.equal(await countRows(t(), "sandbox_snapshots WHERE org_id = $1", [org.id]), 5, "nothing was written");
      const usage = await snapshot(t(), org.key);
      assert.equal(usage.get("snapshots.total")?.current, "3", "failed snapshots do not count");
      // One more allowed: admitted (the API-only host then fails it: 503, not a quota answer).
      await t().c.admin.setQuota(org.id, "snapshots.total", 4);
      const admitted = await t().request("POST", `/v1/sandboxes/${id}:snapshot`, { key: scoped, body: {} });
      assert.notEqual(admitted.status, 429, admitted.raw);
      assert.equal(admitted.body.code, "unavailable", "past the quota, to the host");
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);
