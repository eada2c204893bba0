// WorkloadService over HTTP (contract 2.5, 4.1, 4.2, 5.8, 5.9, 7.3): registration and names,
// reads and paging, deletion, launch ACLs, cloud federation with server-derived audiences,
// StartRun's execute_as_workload check, WhoAmI's workload_name, and per-route security.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import type { WhoAmIJson } from "../src/modules/identity/schemas.js";
import type { RunJson } from "../src/modules/runs/schemas.js";
import type { FederationConfigJson, WorkloadJson } from "../src/modules/workloads/schemas.js";
import { BAD_CREDENTIALS, forEachStore, type TestApp, type TestOrg, type TestResponse } from "./harness.js";
import { assertError, bodyOf } from "./support/assertions.js";
import { countRows, freshOrg, sandboxScopedKey } from "./support/fixtures.js";

const SANDBOX_ID = `sbx-${"c".repeat(40)}`;
const MEMBERS = "WORKLOAD_LAUNCH_POLICY_MEMBERS";
const RESTRICTED = "WORKLOAD_LAUNCH_POLICY_RESTRICTED";
const GCP_AUDIENCE = (number: string, pool: string, provider: string) =>
  `//iam.googleapis.com/projects/${number}/locations/global/workloadIdentityPools/${pool}/providers/${provider}`;
const GUID_A = "0b8c4f5e-1d2a-4c3b-9e8f-7a6b5c4d3e2f";
const GUID_B = "9F8E7D6C-5B4A-4321-8FED-CBA987654321";

const workloadOf = (res: TestResponse) => bodyOf<WorkloadJson>(res, "workload");
const federationOf = (res: TestResponse) => bodyOf<FederationConfigJson>(res, "federation_config");

const uniqueName = (prefix = "wl") => `${prefix}-${randomBytes(5).toString("hex")}`;

async function createWorkload(t: TestApp, key: string, name = uniqueName(), description?: string) {
  return workloadOf(
    await t.request("POST", "/v1/workloads", {
      key,
      body: description === undefined ? { name } : { name, description },
    }),
  );
}

function setAcl(t: TestApp, key: string, name: string, acl: unknown, extra: Record<string, unknown> = {}) {
  return t.request("PUT", `/v1/workloads/${name}/launch-acl`, { key, body: { ...extra, acl } });
}

function addFederation(t: TestApp, key: string, name: string, body: unknown, headers?: Record<string, string>) {
  return t.request("POST", `/v1/workloads/${name}/federation`, { key, body, ...(headers ? { headers } : {}) });
}

const AWS = { cloud: "aws", descriptor: { role_arn: "arn:aws:iam::123456789012:role/deploy" } };

const countWorkloads = (t: TestApp, orgId: string) => countRows(t, "workloads WHERE org_id = $1", [orgId]);
const countFederations = (t: TestApp, where: string, params: unknown[]) =>
  countRows(t, `workload_federations WHERE ${where}`, params);
const countRuns = (t: TestApp, orgId: string) => countRows(t, "runs WHERE org_id = $1", [orgId]);

const sandboxKey = (t: TestApp, org: TestOrg, role?: "owner" | "admin" | "member") =>
  sandboxScopedKey(t, org, SANDBOX_ID, role);

function startRun(t: TestApp, key: string, workload: string) {
  return t.request("POST", "/v1/runs", { key, body: { execute_as_workload: workload } });
}

function assertIso(value: string): void {
  assert.equal(typeof value, "string");
  assert.equal(new Date(value).toISOString(), value);
  assert.ok(Math.abs(Date.parse(value) - Date.now()) < 120_000);
}

forEachStore("workloads", (t) => {
  describe("CreateWorkload", () => {
    it("registers a workload with the default MEMBERS launch ACL and returns it exactly", async () => {
      const name = uniqueName();
      const res = await t().request("POST", "/v1/workloads", {
        key: t().orgA.keys.member,
        body: { name, description: "nightly evaluator" },
      });
      const w = workloadOf(res);
      assert.deepEqual(Object.keys(w).sort(), [
        "created_at",
        "created_by",
        "description",
        "federation_configs",
        "id",
        "launch_acl",
        "name",
        "updated_at",
      ]);
      assert.match(w.id, /^wl_[0-9a-z]{26}$/);
      assert.equal(w.name, name);
      assert.equal(w.description, "nightly evaluator");
      assert.deepEqual(w.launch_acl, { policy: MEMBERS, launchers: [] });
      assert.deepEqual(w.federation_configs, []);
      assert.equal(w.created_by, t().orgA.principalIds.member);
      assertIso(w.created_at);
      assert.equal(w.updated_at, w.created_at);
      const got = workloadOf(await t().request("GET", `/v1/workloads/${name}`, { key: t().orgA.keys.owner }));
      assert.deepEqual(got, w);
    });

    it("defaults the description to empty and accepts 4096 characters but not 4097", async () => {
      assert.equal((await createWorkload(t(), t().orgA.keys.member)).description, "");
      const long = await createWorkload(t(), t().orgA.keys.member, uniqueName(), "d".repeat(4096));
      assert.equal(long.description.length, 4096);
      const name = uniqueName();
      const res = await t().request("POST", "/v1/workloads", {
        key: t().orgA.keys.member,
        body: { name, description: "d".repeat(4097) },
      });
      assertError(res, 400, "invalid_argument");
      assertError(await t().request("GET", `/v1/workloads/${name}`, { key: t().orgA.keys.owner }), 404, "not_found");
    });

    it("lets every organization-scoped role and kind register (owner, admin, member, service, workload)", async () => {
      for (const role of ["owner", "admin", "member", "service", "workload"] as const) {
        const w = await createWorkload(t(), t().orgA.keys[role]);
        assert.equal(w.created_by, t().orgA.principalIds[role]);
      }
    });

    it("accepts names just inside the rules", async () => {
      // 100 characters exactly, starting and ending with a letter or digit.
      const longest = `x${randomBytes(4).toString("hex")}${"y".repeat(90)}9`;
      assert.equal(longest.length, 100);
      const names = [
        "a",
        "7",
        "ab",
        `a.b_c-d${randomBytes(2).toString("hex")}`,
        `a..${randomBytes(3).toString("hex")}__--z`,
        `0${randomBytes(3).toString("hex")}9`,
        longest,
      ];
      for (const name of names) {
        const w = await createWorkload(t(), t().orgA.keys.member, name);
        assert.equal(w.name, name);
        assert.equal(
          workloadOf(await t().request("GET", `/v1/workloads/${name}`, { key: t().orgA.keys.member })).id,
          w.id,
        );
      }
    });

    it("refuses names just outside the rules with 400 and registers nothing", async () => {
      const before = await countWorkloads(t(), t().orgA.id);
      const bad = [
        "",
        `x${"y".repeat(100)}`, // 101 characters
        "Upper",
        "A",
        ".leading-dot",
        "trailing-dot.",
        "-leading-dash",
        "trailing-dash-",
        "_leading-underscore",
        "trailing-underscore_",
        "has space",
        "has/slash",
        "has@at",
        "has:colon",
        "ünicode",
        "tab\tname",
      ];
      for (const name of bad) {
        const res = await t().request("POST", "/v1/workloads", { key: t().orgA.keys.owner, body: { name } });
        assertError(res, 400, "invalid_argument");
      }
      assertError(
        await t().request("POST", "/v1/workloads", { key: t().orgA.keys.owner, body: {} }),
        400,
        "invalid_argument",
      );
      for (const body of [{ name: 7 }, { name: uniqueName(), extra: true }, { name: uniqueName(), description: 5 }]) {
        assertError(
          await t().request("POST", "/v1/workloads", { key: t().orgA.keys.owner, body }),
          400,
          "invalid_argument",
        );
      }
      assert.equal(await countWorkloads(t(), t().orgA.id), before);
    });

    it("answers 409 already_exists for a duplicate name in the organization, but not across organizations", async () => {
      const name = uniqueName();
      const first = await createWorkload(t(), t().orgA.keys.member, name, "first");
      const dup = await t().request("POST", "/v1/workloads", {
        key: t().orgA.keys.owner,
        body: { name, description: "second" },
      });
      assertError(dup, 409, "already_exists");
      const kept = workloadOf(await t().request("GET", `/v1/workloads/${name}`, { key: t().orgA.keys.member }));
      assert.equal(kept.id, first.id);
      assert.equal(kept.description, "first");
      const other = await createWorkload(t(), t().orgB.keys.member, name);
      assert.notEqual(other.id, first.id);
    });

    it("replays a CreateWorkload retry with the same Idempotency-Key", async () => {
      const name = uniqueName();
      const headers = { "idempotency-key": `create-${name}` };
      const first = await t().request("POST", "/v1/workloads", { key: t().orgA.keys.member, body: { name }, headers });
      const again = await t().request("POST", "/v1/workloads", { key: t().orgA.keys.member, body: { name }, headers });
      assert.equal(workloadOf(again).id, workloadOf(first).id);
      assert.equal(again.headers["idempotent-replayed"], "true");
    });

    it("refuses a sandbox-scoped credential with 403, even an owner's", async () => {
      const before = await countWorkloads(t(), t().orgA.id);
      for (const role of ["owner", "member"] as const) {
        const res = await t().request("POST", "/v1/workloads", {
          key: await sandboxKey(t(), t().orgA, role),
          body: { name: uniqueName() },
        });
        assertError(res, 403, "permission_denied");
      }
      assert.equal(await countWorkloads(t(), t().orgA.id), before);
    });
  });

  describe("GetWorkload and ListWorkloads", () => {
    it("lets every organization-scoped kind read a workload", async () => {
      const w = await createWorkload(t(), t().orgA.keys.owner);
      for (const role of ["owner", "admin", "member", "service", "workload"] as const) {
        assert.deepEqual(
          workloadOf(await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys[role] })),
          w,
        );
      }
    });

    it("answers 404 for an unknown name and for another organization's workload", async () => {
      const w = await createWorkload(t(), t().orgA.keys.owner);
      assertError(await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgB.keys.owner }), 404, "not_found");
      assertError(
        await t().request("GET", `/v1/workloads/${uniqueName("missing")}`, { key: t().orgA.keys.owner }),
        404,
        "not_found",
      );
    });

    it("answers 400 for a path name that breaks the naming rules", async () => {
      for (const name of ["UPPER", "-x", "x.", "a_"]) {
        assertError(
          await t().request("GET", `/v1/workloads/${name}`, { key: t().orgA.keys.owner }),
          400,
          "invalid_argument",
        );
      }
    });

    // fastify's router would refuse path parameters over its default maxParamLength (100)
    // with its own 414 body, outside the error envelope; the app raises that limit.
    it("answers a 101-character path name in the standard error envelope", async () => {
      for (const url of [`/v1/workloads/${"x".repeat(101)}`, `/v1/workloads/${"x".repeat(101)}/federation`]) {
        assertError(await t().request("GET", url, { key: t().orgA.keys.owner }), 400, "invalid_argument");
      }
    });

    it("lists by name across pages, only the caller's organization", async () => {
      const org = await freshOrg(t(), "owner");
      const names = ["b-two", "a-one", "d-four", "c-three", "e.five", "a0"];
      for (const name of names) {
        workloadOf(await t().request("POST", "/v1/workloads", { key: org.key, body: { name } }));
      }
      const seen: string[] = [];
      let token = "";
      let pages = 0;
      do {
        const res = await t().request("GET", "/v1/workloads", {
          key: org.key,
          query: { page_size: "4", ...(token ? { page_token: token } : {}) },
        });
        assert.equal(res.status, 200, res.raw);
        assert.deepEqual(Object.keys(res.body).sort(), ["next_page_token", "workloads"]);
        const page = res.body.workloads as WorkloadJson[];
        assert.ok(page.length <= 4);
        for (const w of page) assert.deepEqual(w.launch_acl, { policy: MEMBERS, launchers: [] });
        seen.push(...page.map((w) => w.name));
        token = res.body.next_page_token as string;
        pages += 1;
      } while (token && pages < 10);
      assert.equal(pages, 2);
      assert.deepEqual(seen, [...names].sort());
      const all = await t().request("GET", "/v1/workloads", { key: org.key });
      assert.equal(all.status, 200);
      assert.equal(all.body.next_page_token, "");
      assert.deepEqual(
        (all.body.workloads as WorkloadJson[]).map((w) => w.name),
        [...names].sort(),
      );
    });

    it("includes each workload's live federation configs in the list", async () => {
      const org = await freshOrg(t(), "owner");
      workloadOf(await t().request("POST", "/v1/workloads", { key: org.key, body: { name: "fed" } }));
      const fed = federationOf(await addFederation(t(), org.key, "fed", AWS));
      const res = await t().request("GET", "/v1/workloads", { key: org.key });
      const [w] = res.body.workloads as WorkloadJson[];
      assert.deepEqual(w?.federation_configs, [fed]);
    });

    it("refuses page tokens it did not issue and page sizes outside 1 to 200", async () => {
      const key = t().orgA.keys.member;
      const queries: Record<string, string>[] = [
        { page_token: "garbage" },
        { page_token: Buffer.from(JSON.stringify(["projects", "x"])).toString("base64url") },
        { page_size: "0" },
        { page_size: "201" },
        { page_size: "ten" },
        { name: "agent" },
      ];
      for (const query of queries) {
        assertError(await t().request("GET", "/v1/workloads", { key, query }), 400, "invalid_argument");
      }
      assert.equal((await t().request("GET", "/v1/workloads", { key, query: { page_size: "200" } })).status, 200);
      assert.equal((await t().request("GET", "/v1/workloads", { key, query: { page_size: "1" } })).status, 200);
    });

    it("refuses sandbox-scoped credentials on reads", async () => {
      const key = await sandboxKey(t(), t().orgA);
      assertError(await t().request("GET", "/v1/workloads", { key }), 403, "permission_denied");
      assertError(await t().request("GET", "/v1/workloads/agent", { key }), 403, "permission_denied");
      assertError(await t().request("GET", "/v1/workloads/agent/federation", { key }), 403, "permission_denied");
    });
  });

  describe("DeleteWorkload", () => {
    it("refuses members, service accounts and workload keys with 403 and keeps the workload", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      for (const role of ["member", "service", "workload"] as const) {
        assertError(
          await t().request("DELETE", `/v1/workloads/${w.name}`, { key: t().orgA.keys[role] }),
          403,
          "permission_denied",
        );
      }
      assert.equal((await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys.member })).status, 200);
    });

    it("lets an admin and an owner delete; a second delete is 404", async () => {
      for (const role of ["admin", "owner"] as const) {
        const w = await createWorkload(t(), t().orgA.keys.member);
        const res = await t().request("DELETE", `/v1/workloads/${w.name}`, { key: t().orgA.keys[role] });
        assert.equal(res.status, 200, res.raw);
        assert.deepEqual(res.body, {});
        assertError(
          await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys.member }),
          404,
          "not_found",
        );
        assertError(
          await t().request("DELETE", `/v1/workloads/${w.name}`, { key: t().orgA.keys[role] }),
          404,
          "not_found",
        );
      }
    });

    it("deletes the workload's federation configs with it, and a re-registered name starts clean", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      federationOf(await addFederation(t(), t().orgA.keys.admin, w.name, AWS));
      assert.equal(await countFederations(t(), "workload_id = $1", [w.id]), 1);
      assert.equal((await t().request("DELETE", `/v1/workloads/${w.name}`, { key: t().orgA.keys.admin })).status, 200);
      assert.equal(await countFederations(t(), "workload_id = $1", [w.id]), 0);
      const again = await createWorkload(t(), t().orgA.keys.member, w.name);
      assert.notEqual(again.id, w.id);
      assert.deepEqual(again.federation_configs, []);
      assert.deepEqual(again.launch_acl, { policy: MEMBERS, launchers: [] });
    });

    it("answers 404 for another organization's workload and leaves it in place", async () => {
      const name = uniqueName();
      const b = await createWorkload(t(), t().orgB.keys.member, name);
      assertError(await t().request("DELETE", `/v1/workloads/${name}`, { key: t().orgA.keys.owner }), 404, "not_found");
      assert.equal(
        workloadOf(await t().request("GET", `/v1/workloads/${name}`, { key: t().orgB.keys.member })).id,
        b.id,
      );
    });

    it("refuses a sandbox-scoped owner credential with 403", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      assertError(
        await t().request("DELETE", `/v1/workloads/${w.name}`, { key: await sandboxKey(t(), t().orgA) }),
        403,
        "permission_denied",
      );
      assert.equal((await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys.member })).status, 200);
    });
  });

  describe("SetWorkloadLaunchAcl", () => {
    it("refuses members, service accounts and workload keys with 403 and leaves the ACL", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const acl = { policy: RESTRICTED, launchers: [{ kind: "user", principal_id: t().orgA.principalIds.member }] };
      for (const role of ["member", "service", "workload"] as const) {
        assertError(await setAcl(t(), t().orgA.keys[role], w.name, acl), 403, "permission_denied");
      }
      assertError(await setAcl(t(), await sandboxKey(t(), t().orgA), w.name, acl), 403, "permission_denied");
      const got = workloadOf(await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys.member }));
      assert.deepEqual(got.launch_acl, { policy: MEMBERS, launchers: [] });
    });

    it("lets admins and owners replace the ACL; GetWorkload shows it and updated_at moves", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const first = workloadOf(
        await setAcl(t(), t().orgA.keys.admin, w.name, {
          policy: RESTRICTED,
          launchers: [
            { kind: "user", principal_id: t().orgA.principalIds.member },
            { kind: "service_account", principal_id: t().orgA.keyIds.service },
          ],
        }),
      );
      assert.deepEqual(first.launch_acl, {
        policy: RESTRICTED,
        launchers: [
          { kind: "user", principal_id: t().orgA.principalIds.member },
          { kind: "service_account", principal_id: t().orgA.keyIds.service },
        ],
      });
      assert.equal(first.id, w.id);
      assert.equal(first.created_at, w.created_at);
      assert.ok(Date.parse(first.updated_at) >= Date.parse(w.updated_at));
      assert.deepEqual(
        workloadOf(await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys.member })),
        first,
      );
      // A replacement, not a merge.
      const second = workloadOf(
        await setAcl(t(), t().orgA.keys.owner, w.name, {
          policy: RESTRICTED,
          launchers: [{ kind: "user", principal_id: t().orgA.principalIds.admin }],
        }),
      );
      assert.deepEqual(second.launch_acl.launchers, [{ kind: "user", principal_id: t().orgA.principalIds.admin }]);
      const third = workloadOf(await setAcl(t(), t().orgA.keys.owner, w.name, { policy: MEMBERS, launchers: [] }));
      assert.deepEqual(third.launch_acl, { policy: MEMBERS, launchers: [] });
      const fourth = workloadOf(await setAcl(t(), t().orgA.keys.owner, w.name, { policy: MEMBERS }));
      assert.deepEqual(fourth.launch_acl, { policy: MEMBERS, launchers: [] });
    });

    it("reads an empty or missing launcher kind as user, and folds duplicates", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const res = await setAcl(t(), t().orgA.keys.admin, w.name, {
        policy: RESTRICTED,
        launchers: [
          { principal_id: t().orgA.principalIds.member },
          { kind: "", principal_id: t().orgA.principalIds.owner },
          { kind: "user", principal_id: t().orgA.principalIds.member },
        ],
      });
      assert.deepEqual(workloadOf(res).launch_acl.launchers, [
        { kind: "user", principal_id: t().orgA.principalIds.member },
        { kind: "user", principal_id: t().orgA.principalIds.owner },
      ]);
    });

    it("requires at least one launcher for RESTRICTED and none for MEMBERS; UNSPECIFIED is refused", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const member = { kind: "user", principal_id: t().orgA.principalIds.member };
      for (const acl of [
        { policy: RESTRICTED, launchers: [] },
        { policy: RESTRICTED },
        { policy: MEMBERS, launchers: [member] },
        { policy: "WORKLOAD_LAUNCH_POLICY_UNSPECIFIED" },
        { policy: "WORKLOAD_LAUNCH_POLICY_UNSPECIFIED", launchers: [member] },
        { policy: "WORKLOAD_LAUNCH_POLICY_EVERYONE" },
        { launchers: [member] },
        { policy: RESTRICTED, launchers: [member], extra: 1 },
      ]) {
        assertError(await setAcl(t(), t().orgA.keys.owner, w.name, acl), 400, "invalid_argument");
      }
      assertError(
        await t().request("PUT", `/v1/workloads/${w.name}/launch-acl`, { key: t().orgA.keys.owner, body: {} }),
        400,
        "invalid_argument",
      );
      const got = workloadOf(await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys.member }));
      assert.deepEqual(got.launch_acl, { policy: MEMBERS, launchers: [] });
      assert.equal(got.updated_at, w.updated_at);
    });

    it("rejects launcher kinds other than user and service_account, and ids of the wrong kind or organization", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const a = t().orgA;
      const b = t().orgB;
      const sandboxed = await t().issueKey(a, { sandbox: { sandboxId: SANDBOX_ID, lineagePath: SANDBOX_ID } });
      const bad: WorkloadJson["launch_acl"]["launchers"] = [
        { kind: "group", principal_id: a.principalIds.member },
        { kind: "USER", principal_id: a.principalIds.member },
        { kind: "workload", principal_id: a.principalIds.workload },
        { kind: "service-account", principal_id: a.keyIds.service },
        // A user launcher names a user principal of this organization.
        { kind: "user", principal_id: b.principalIds.member },
        { kind: "user", principal_id: a.principalIds.service },
        { kind: "user", principal_id: a.principalIds.workload },
        { kind: "user", principal_id: a.keyIds.member },
        { kind: "user", principal_id: "prn_does_not_exist" },
        // A service_account launcher names an org-scoped service account key of this organization.
        { kind: "service_account", principal_id: a.principalIds.service },
        { kind: "service_account", principal_id: a.keyIds.member },
        { kind: "service_account", principal_id: a.keyIds.workload },
        { kind: "service_account", principal_id: b.keyIds.service },
        { kind: "service_account", principal_id: sandboxed.keyId },
      ];
      for (const launcher of bad) {
        const res = await setAcl(t(), a.keys.owner, w.name, {
          policy: RESTRICTED,
          launchers: [{ kind: "user", principal_id: a.principalIds.member }, launcher],
        });
        assertError(res, 400, "invalid_argument");
      }
      const got = workloadOf(await t().request("GET", `/v1/workloads/${w.name}`, { key: a.keys.member }));
      assert.deepEqual(got.launch_acl, { policy: MEMBERS, launchers: [] });
    });

    it("takes at most 200 launcher entries", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const entry = { kind: "user", principal_id: t().orgA.principalIds.member };
      const ok = await setAcl(t(), t().orgA.keys.owner, w.name, {
        policy: RESTRICTED,
        launchers: Array.from({ length: 200 }, () => entry),
      });
      assert.deepEqual(workloadOf(ok).launch_acl.launchers, [entry]);
      assertError(
        await setAcl(t(), t().orgA.keys.owner, w.name, {
          policy: RESTRICTED,
          launchers: Array.from({ length: 201 }, () => entry),
        }),
        400,
        "invalid_argument",
      );
    });

    it("requires a body name, when present, to equal the path name", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const acl = { policy: RESTRICTED, launchers: [{ principal_id: t().orgA.principalIds.member }] };
      assertError(await setAcl(t(), t().orgA.keys.owner, w.name, acl, { name: "other" }), 400, "invalid_argument");
      assert.equal(workloadOf(await setAcl(t(), t().orgA.keys.owner, w.name, acl, { name: w.name })).name, w.name);
    });

    it("answers 404 for an unknown workload and for another organization's", async () => {
      const b = await createWorkload(t(), t().orgB.keys.member);
      const acl = { policy: MEMBERS, launchers: [] };
      assertError(await setAcl(t(), t().orgA.keys.owner, b.name, acl), 404, "not_found");
      assertError(await setAcl(t(), t().orgA.keys.owner, uniqueName("missing"), acl), 404, "not_found");
    });
  });

  describe("AddWorkloadFederation", () => {
    it("derives the AWS audience and defaults the region to us-east-1", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const fed = federationOf(await addFederation(t(), t().orgA.keys.admin, w.name, AWS));
      assert.deepEqual(Object.keys(fed).sort(), [
        "audience",
        "cloud",
        "created_at",
        "created_by",
        "descriptor",
        "id",
        "workload_id",
      ]);
      assert.match(fed.id, /^fed_[0-9a-z]{26}$/);
      assert.equal(fed.workload_id, w.id);
      assert.equal(fed.cloud, "aws");
      assert.equal(fed.audience, "sts.amazonaws.com");
      assert.deepEqual(fed.descriptor, { role_arn: "arn:aws:iam::123456789012:role/deploy", region: "us-east-1" });
      assert.equal(fed.created_by, t().orgA.principalIds.admin);
      assertIso(fed.created_at);

      const empty = federationOf(
        await addFederation(t(), t().orgA.keys.owner, w.name, {
          cloud: "aws",
          descriptor: { role_arn: "arn:aws-us-gov:iam::210987654321:role/ci/path/runner", region: "" },
        }),
      );
      assert.equal(empty.descriptor.region, "us-east-1");
      const eu = federationOf(
        await addFederation(t(), t().orgA.keys.owner, w.name, {
          cloud: "aws",
          descriptor: { role_arn: "arn:aws:iam::123456789012:role/deploy", region: "eu-west-2" },
        }),
      );
      assert.deepEqual(eu.descriptor, { role_arn: "arn:aws:iam::123456789012:role/deploy", region: "eu-west-2" });
      assert.equal(eu.audience, "sts.amazonaws.com");
    });

    it("derives the GCP audience from project number, pool and provider", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const descriptor = {
        project_id: "my-project-123",
        project_number: "123456789012",
        pool_id: "warren-pool",
        provider_id: "warren-oidc",
      };
      const fed = federationOf(await addFederation(t(), t().orgA.keys.admin, w.name, { cloud: "gcp", descriptor }));
      assert.equal(fed.audience, GCP_AUDIENCE("123456789012", "warren-pool", "warren-oidc"));
      assert.deepEqual(fed.descriptor, descriptor);
      const withEmail = {
        ...descriptor,
        pool_id: "pool-2",
        service_account_email: "runner@my-project-123.iam.gserviceaccount.com",
      };
      const fed2 = federationOf(
        await addFederation(t(), t().orgA.keys.admin, w.name, { cloud: "gcp", descriptor: withEmail }),
      );
      assert.deepEqual(fed2.descriptor, withEmail);
      assert.equal(fed2.audience, GCP_AUDIENCE("123456789012", "pool-2", "warren-oidc"));
    });

    it("derives the Azure audience api://AzureADTokenExchange", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const descriptor = { application_id: GUID_A, entra_tenant_id: GUID_B };
      const fed = federationOf(await addFederation(t(), t().orgA.keys.owner, w.name, { cloud: "azure", descriptor }));
      assert.equal(fed.audience, "api://AzureADTokenExchange");
      assert.deepEqual(fed.descriptor, descriptor);
    });

    it("requires each cloud's required fields", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const gcp = { project_id: "my-project-123", project_number: "42", pool_id: "pool-1", provider_id: "prov-1" };
      const azure = { application_id: GUID_A, entra_tenant_id: GUID_B };
      const cases: { cloud: string; descriptor: Record<string, string> }[] = [
        { cloud: "aws", descriptor: {} },
        { cloud: "aws", descriptor: { region: "us-west-2" } },
        { cloud: "aws", descriptor: { role_arn: "" } },
      ];
      for (const field of Object.keys(gcp) as (keyof typeof gcp)[]) {
        const { [field]: _dropped, ...rest } = gcp;
        cases.push({ cloud: "gcp", descriptor: rest });
      }
      for (const field of Object.keys(azure) as (keyof typeof azure)[]) {
        const { [field]: _dropped, ...rest } = azure;
        cases.push({ cloud: "azure", descriptor: rest });
      }
      for (const body of cases) {
        assertError(await addFederation(t(), t().orgA.keys.owner, w.name, body), 400, "invalid_argument");
      }
      assertError(await addFederation(t(), t().orgA.keys.owner, w.name, { cloud: "aws" }), 400, "invalid_argument");
      // Sanity: the complete descriptors are accepted.
      federationOf(await addFederation(t(), t().orgA.keys.owner, w.name, { cloud: "gcp", descriptor: gcp }));
      federationOf(await addFederation(t(), t().orgA.keys.owner, w.name, { cloud: "azure", descriptor: azure }));
      assert.equal(await countFederations(t(), "workload_id = $1", [w.id]), 2);
    });

    it("refuses another cloud's fields, unknown fields and clouds, and malformed values", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const arn = "arn:aws:iam::123456789012:role/deploy";
      const gcp = { project_id: "my-project-123", project_number: "42", pool_id: "pool-1", provider_id: "prov-1" };
      const azure = { application_id: GUID_A, entra_tenant_id: GUID_B };
      const bad: unknown[] = [
        { cloud: "aws", descriptor: { role_arn: arn, project_id: "my-project-123" } },
        { cloud: "aws", descriptor: { role_arn: arn, entra_tenant_id: GUID_B } },
        { cloud: "gcp", descriptor: { ...gcp, role_arn: arn } },
        { cloud: "gcp", descriptor: { ...gcp, region: "us-east-1" } },
        { cloud: "azure", descriptor: { ...azure, service_account_email: "a@b.com" } },
        { cloud: "azure", descriptor: { ...azure, region: "us-east-1" } },
        { cloud: "aws", descriptor: { role_arn: arn, audience: "mine" } },
        { cloud: "oracle", descriptor: { role_arn: arn } },
        { cloud: "AWS", descriptor: { role_arn: arn } },
        { cloud: "aws", descriptor: { role_arn: arn }, audience: "sts.amazonaws.com" },
        { cloud: "aws", descriptor: { role_arn: 123456789012 } },
        // Malformed values.
        { cloud: "aws", descriptor: { role_arn: "arn:aws:iam::12345678901:role/deploy" } },
        { cloud: "aws", descriptor: { role_arn: "arn:aws:iam::123456789012:user/bob" } },
        { cloud: "aws", descriptor: { role_arn: "arn:aws:s3:::bucket" } },
        { cloud: "aws", descriptor: { role_arn: "arn:aws:iam:us-east-1:123456789012:role/deploy" } },
        { cloud: "aws", descriptor: { role_arn: "deploy" } },
        { cloud: "aws", descriptor: { role_arn: arn, region: "US-EAST-1" } },
        { cloud: "aws", descriptor: { role_arn: arn, region: "mars" } },
        { cloud: "gcp", descriptor: { ...gcp, project_id: "Bad_Project" } },
        { cloud: "gcp", descriptor: { ...gcp, project_id: "short" } },
        { cloud: "gcp", descriptor: { ...gcp, project_number: "0123" } },
        { cloud: "gcp", descriptor: { ...gcp, project_number: "12ab" } },
        { cloud: "gcp", descriptor: { ...gcp, pool_id: "gcp-reserved" } },
        { cloud: "gcp", descriptor: { ...gcp, pool_id: "abc" } },
        { cloud: "gcp", descriptor: { ...gcp, provider_id: "Provider" } },
        { cloud: "gcp", descriptor: { ...gcp, provider_id: "p".repeat(33) } },
        { cloud: "gcp", descriptor: { ...gcp, service_account_email: "not-an-email" } },
        { cloud: "azure", descriptor: { ...azure, application_id: "not-a-guid" } },
        { cloud: "azure", descriptor: { ...azure, entra_tenant_id: `${GUID_B}0` } },
      ];
      for (const body of bad) {
        assertError(await addFederation(t(), t().orgA.keys.owner, w.name, body), 400, "invalid_argument");
      }
      assert.equal(await countFederations(t(), "workload_id = $1", [w.id]), 0);
      // Just inside the limits: a 4- and a 32-character pool id, a 6- and 30-character project id.
      for (const descriptor of [
        { ...gcp, pool_id: "abcd", project_id: "abcdef" },
        { ...gcp, pool_id: "p".repeat(32), project_id: `a${"b".repeat(28)}c` },
      ]) {
        federationOf(await addFederation(t(), t().orgA.keys.owner, w.name, { cloud: "gcp", descriptor }));
      }
    });

    it("refuses members, service accounts, workload keys and sandbox-scoped credentials with 403", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      for (const key of [
        t().orgA.keys.member,
        t().orgA.keys.service,
        t().orgA.keys.workload,
        await sandboxKey(t(), t().orgA),
      ]) {
        assertError(await addFederation(t(), key, w.name, AWS), 403, "permission_denied");
      }
      assert.equal(await countFederations(t(), "workload_id = $1", [w.id]), 0);
    });

    it("answers 404 for an unknown workload and for another organization's", async () => {
      const b = await createWorkload(t(), t().orgB.keys.member);
      assertError(await addFederation(t(), t().orgA.keys.owner, b.name, AWS), 404, "not_found");
      assertError(await addFederation(t(), t().orgA.keys.owner, uniqueName("missing"), AWS), 404, "not_found");
      assert.equal(await countFederations(t(), "workload_id = $1", [b.id]), 0);
    });

    it("requires a body name, when present, to equal the path name", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      assertError(
        await addFederation(t(), t().orgA.keys.owner, w.name, { ...AWS, name: "someone-else" }),
        400,
        "invalid_argument",
      );
      federationOf(await addFederation(t(), t().orgA.keys.owner, w.name, { ...AWS, name: w.name }));
    });

    it("returns the same row for an Idempotency-Key retry, and 409 for the key with a different request", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const headers = { "idempotency-key": `fed-${w.name}` };
      const first = federationOf(await addFederation(t(), t().orgA.keys.admin, w.name, AWS, headers));
      const retry = await addFederation(t(), t().orgA.keys.admin, w.name, AWS, headers);
      assert.deepEqual(federationOf(retry), first);
      assert.equal(retry.headers["idempotent-replayed"], "true");
      assert.equal(await countFederations(t(), "workload_id = $1", [w.id]), 1);
      const conflict = await addFederation(
        t(),
        t().orgA.keys.admin,
        w.name,
        { cloud: "aws", descriptor: { role_arn: "arn:aws:iam::123456789012:role/other" } },
        headers,
      );
      assertError(conflict, 409, "idempotency_conflict");
      // A new key registers a second config.
      const second = federationOf(
        await addFederation(t(), t().orgA.keys.admin, w.name, AWS, { "idempotency-key": `fed2-${w.name}` }),
      );
      assert.notEqual(second.id, first.id);
      assert.equal(await countFederations(t(), "workload_id = $1", [w.id]), 2);
    });
  });

  describe("ListWorkloadFederation and RemoveWorkloadFederation", () => {
    async function withThreeConfigs() {
      const w = await createWorkload(t(), t().orgA.keys.member);
      const feds: FederationConfigJson[] = [];
      feds.push(federationOf(await addFederation(t(), t().orgA.keys.admin, w.name, AWS)));
      feds.push(
        federationOf(
          await addFederation(t(), t().orgA.keys.admin, w.name, {
            cloud: "azure",
            descriptor: { application_id: GUID_A, entra_tenant_id: GUID_B },
          }),
        ),
      );
      feds.push(
        federationOf(
          await addFederation(t(), t().orgA.keys.admin, w.name, {
            cloud: "gcp",
            descriptor: { project_id: "my-project-123", project_number: "9", pool_id: "pool-1", provider_id: "prov-1" },
          }),
        ),
      );
      return { w, feds };
    }

    function list(key: string, name: string) {
      return t().request("GET", `/v1/workloads/${name}/federation`, { key });
    }

    it("lists live configs in creation order to any member; GetWorkload carries the same list", async () => {
      const { w, feds } = await withThreeConfigs();
      for (const role of ["member", "service", "workload", "owner"] as const) {
        const res = await list(t().orgA.keys[role], w.name);
        assert.equal(res.status, 200, res.raw);
        assert.deepEqual(res.body, { federation_configs: feds });
      }
      const got = workloadOf(await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys.member }));
      assert.deepEqual(got.federation_configs, feds);
    });

    it("answers 404 listing an unknown workload or another organization's", async () => {
      const { w } = await withThreeConfigs();
      assertError(await list(t().orgB.keys.owner, w.name), 404, "not_found");
      assertError(await list(t().orgA.keys.owner, uniqueName("missing")), 404, "not_found");
    });

    it("removes a config idempotently through its own workload; the lists drop it", async () => {
      const { w, feds } = await withThreeConfigs();
      const [a, b, c] = feds as [FederationConfigJson, FederationConfigJson, FederationConfigJson];
      const url = `/v1/workloads/${w.name}/federation/${b.id}`;
      const first = await t().request("DELETE", url, { key: t().orgA.keys.admin });
      assert.equal(first.status, 200, first.raw);
      assert.deepEqual(first.body, {});
      const { rows } = await t().c.db.query<{ removed_at: Date }>(
        "SELECT removed_at FROM workload_federations WHERE id = $1",
        [b.id],
      );
      const removedAt = rows[0]?.removed_at;
      assert.ok(removedAt instanceof Date);
      const again = await t().request("DELETE", url, { key: t().orgA.keys.owner });
      assert.equal(again.status, 200, again.raw);
      assert.deepEqual(again.body, {});
      const after = await t().c.db.query<{ removed_at: Date }>(
        "SELECT removed_at FROM workload_federations WHERE id = $1",
        [b.id],
      );
      assert.equal(after.rows[0]?.removed_at.getTime(), removedAt.getTime());
      assert.deepEqual((await list(t().orgA.keys.member, w.name)).body, { federation_configs: [a, c] });
      const got = workloadOf(await t().request("GET", `/v1/workloads/${w.name}`, { key: t().orgA.keys.member }));
      assert.deepEqual(got.federation_configs, [a, c]);
    });

    it("answers 404 for a wrong workload, another organization's id and an unknown id", async () => {
      const { w, feds } = await withThreeConfigs();
      const target = feds[0] as FederationConfigJson;
      const otherA = await createWorkload(t(), t().orgA.keys.member);
      // Same name registered in org B, with a config of its own.
      await createWorkload(t(), t().orgB.keys.member, w.name);
      const bFed = federationOf(await addFederation(t(), t().orgB.keys.admin, w.name, AWS));
      for (const [key, url] of [
        [t().orgA.keys.admin, `/v1/workloads/${otherA.name}/federation/${target.id}`],
        [t().orgB.keys.admin, `/v1/workloads/${w.name}/federation/${target.id}`],
        [t().orgA.keys.admin, `/v1/workloads/${w.name}/federation/${bFed.id}`],
        [t().orgA.keys.admin, `/v1/workloads/${w.name}/federation/fed_00000000000000000000000000`],
        [t().orgA.keys.admin, `/v1/workloads/${uniqueName("missing")}/federation/${target.id}`],
      ] as const) {
        assertError(await t().request("DELETE", url, { key }), 404, "not_found");
      }
      assert.deepEqual((await list(t().orgA.keys.member, w.name)).body, { federation_configs: feds });
      assert.deepEqual((await list(t().orgB.keys.member, w.name)).body, { federation_configs: [bFed] });
    });

    it("refuses members, service accounts, workload keys and sandbox-scoped credentials with 403", async () => {
      const { w, feds } = await withThreeConfigs();
      const url = `/v1/workloads/${w.name}/federation/${feds[0]?.id}`;
      for (const key of [
        t().orgA.keys.member,
        t().orgA.keys.service,
        t().orgA.keys.workload,
        await sandboxKey(t(), t().orgA),
      ]) {
        assertError(await t().request("DELETE", url, { key }), 403, "permission_denied");
      }
      assert.deepEqual((await list(t().orgA.keys.member, w.name)).body, { federation_configs: feds });
    });
  });

  describe("StartRun with execute_as_workload", () => {
    it("lets any member launch a MEMBERS workload and records the workload on the run", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      for (const role of ["owner", "admin", "member", "service", "workload"] as const) {
        const res = await startRun(t(), t().orgA.keys[role], w.name);
        assert.equal(res.status, 200, res.raw);
        const run = res.body.run as RunJson;
        assert.equal(run.execute_as_workload, w.name);
        assert.equal(run.created_by, t().orgA.principalIds[role]);
        const got = await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.member });
        assert.equal((got.body.run as RunJson).execute_as_workload, w.name);
      }
      const launched = await startRun(t(), t().orgA.keys.workload, "agent");
      assert.equal((launched.body.run as RunJson).execute_as_workload, "agent");
    });

    it("under RESTRICTED lets only the listed launchers in; everyone else gets 403 and no run", async () => {
      const w = await createWorkload(t(), t().orgA.keys.member);
      workloadOf(
        await setAcl(t(), t().orgA.keys.owner, w.name, {
          policy: RESTRICTED,
          launchers: [
            { kind: "user", principal_id: t().orgA.principalIds.member },
            { kind: "service_account", principal_id: t().orgA.keyIds.service },
          ],
        }),
      );
      // Another key of the listed user is the same principal; another service account key is not.
      const memberSecondKey = await t().c.identity.issueKey({
        orgId: t().orgA.id,
        principalId: t().orgA.principalIds.member,
        name: "member-laptop",
      });
      const otherService = await t().issueKey(t().orgA, { kind: "service_account", role: "admin" });
      for (const key of [t().orgA.keys.member, memberSecondKey.api_key, t().orgA.keys.service]) {
        const res = await startRun(t(), key, w.name);
        assert.equal(res.status, 200, res.raw);
        assert.equal((res.body.run as RunJson).execute_as_workload, w.name);
      }
      const before = await countRuns(t(), t().orgA.id);
      for (const key of [t().orgA.keys.owner, t().orgA.keys.admin, t().orgA.keys.workload, otherService.key]) {
        assertError(await startRun(t(), key, w.name), 403, "permission_denied");
      }
      assert.equal(await countRuns(t(), t().orgA.id), before);
      // Back to MEMBERS: everyone may launch again.
      workloadOf(await setAcl(t(), t().orgA.keys.admin, w.name, { policy: MEMBERS }));
      assert.equal((await startRun(t(), t().orgA.keys.owner, w.name)).status, 200);
    });

    it("answers 404 for an unknown workload, another organization's and a deleted one, creating no run", async () => {
      const b = await createWorkload(t(), t().orgB.keys.member);
      const gone = await createWorkload(t(), t().orgA.keys.member);
      assert.equal(
        (await t().request("DELETE", `/v1/workloads/${gone.name}`, { key: t().orgA.keys.admin })).status,
        200,
      );
      const before = await countRuns(t(), t().orgA.id);
      for (const name of [uniqueName("missing"), b.name, gone.name]) {
        assertError(await startRun(t(), t().orgA.keys.owner, name), 404, "not_found");
      }
      assert.equal(await countRuns(t(), t().orgA.id), before);
    });

    it("refuses a sandbox-scoped credential", async () => {
      const before = await countRuns(t(), t().orgA.id);
      assertError(await startRun(t(), await sandboxKey(t(), t().orgA), "agent"), 403, "permission_denied");
      assert.equal(await countRuns(t(), t().orgA.id), before);
    });
  });

  describe("authentication", () => {
    it("answers 401 on every workload route without a valid credential", async () => {
      const routes: [string, string, unknown][] = [
        ["POST", "/v1/workloads", { name: "nope" }],
        ["GET", "/v1/workloads", undefined],
        ["GET", "/v1/workloads/agent", undefined],
        ["DELETE", "/v1/workloads/agent", undefined],
        ["PUT", "/v1/workloads/agent/launch-acl", { acl: { policy: MEMBERS } }],
        ["POST", "/v1/workloads/agent/federation", AWS],
        ["GET", "/v1/workloads/agent/federation", undefined],
        ["DELETE", "/v1/workloads/agent/federation/fed_x", undefined],
      ];
      for (const [method, url, body] of routes) {
        for (const bad of BAD_CREDENTIALS) {
          const res = await t().request(method, url, { headers: bad.headers, ...(body ? { body } : {}) });
          assertError(res, 401, "unauthenticated");
        }
      }
      assert.equal((await t().request("GET", "/v1/workloads/agent", { key: t().orgA.keys.member })).status, 200);
    });
  });

  describe("WhoAmI workload_name", () => {
    it("names the bound workload while it is registered, and is empty after it is deleted", async () => {
      const whoami = async (org: TestOrg) => {
        const res = await t().request("GET", "/v1/whoami", { key: org.keys.workload });
        assert.equal(res.status, 200, res.raw);
        return (res.body as WhoAmIJson).principal.workload_name;
      };
      assert.equal(await whoami(t().orgA), "agent");
      assert.equal(await whoami(t().orgB), "agent");
      assert.equal((await t().request("DELETE", "/v1/workloads/agent", { key: t().orgA.keys.admin })).status, 200);
      assert.equal(await whoami(t().orgA), "");
      // Org B's workload of the same name is untouched.
      assert.equal(await whoami(t().orgB), "agent");
      // The key still authenticates, and registering the name again binds it again.
      await createWorkload(t(), t().orgA.keys.member, "agent");
      assert.equal(await whoami(t().orgA), "agent");
    });
  });
});
