// The security matrix (style habit 14): for every operation of the served OpenAPI document, the
// answer to no credential, an unknown credential, each role of the harness, a sandbox-scoped
// credential and another organization's ids. An operation without an entry fails, and so
// does an entry naming no operation.
import assert from "node:assert/strict";
import { it } from "node:test";
import type { RunJson } from "../src/modules/runs/schemas.js";
import type { SecretJson } from "../src/modules/secrets/schemas.js";
import { BAD_CREDENTIALS, forEachStore, type KeyRole, type TestApp, type TestResponse } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { openSession, sameOrigin } from "./support/console-session.js";
import { API_ONLY_RUNTIME, sandboxScopedKey } from "./support/fixtures.js";
import { inlineRefs, sample } from "./support/openapi.js";

/** `allowed`: past authorization (any answer but 401/403); `denied`: 403 permission_denied. */
type Access = "allowed" | "denied";
interface Entry {
  /** false: the operation takes no credential (discovery). */
  auth: boolean;
  roles: Record<KeyRole, Access>;
  sandboxScoped: Access;
  /** `not_found`: another organization's ids in the path answer 404; null: no id of an organization's resource. */
  otherOrg: "not_found" | null;
}

const ROLES: KeyRole[] = ["owner", "admin", "member", "service", "workload"];
const everyone = (otherOrg: Entry["otherOrg"], sandboxScoped: Access = "denied"): Entry => ({
  auth: true,
  roles: { owner: "allowed", admin: "allowed", member: "allowed", service: "allowed", workload: "allowed" },
  sandboxScoped,
  otherOrg,
});
const ownerOrAdmin = (otherOrg: Entry["otherOrg"]): Entry => ({
  auth: true,
  roles: { owner: "allowed", admin: "allowed", member: "denied", service: "denied", workload: "denied" },
  sandboxScoped: "denied",
  otherOrg,
});
// The operator organization's owners only; org A is the operator organization in the harness.
const operator: Entry = {
  auth: true,
  roles: { owner: "allowed", admin: "denied", member: "denied", service: "denied", workload: "denied" },
  sandboxScoped: "denied",
  otherOrg: null,
};

const MATRIX: Record<string, Entry> = {
  GetServiceConfig: { ...everyone(null, "allowed"), auth: false },
  WhoAmI: everyone(null, "allowed"),
  // Opened with an API key (a session opens none); closing one with a key is 400 failed_precondition.
  CreateConsoleSession: everyone(null),
  DeleteConsoleSession: everyone(null),
  GetUsageSnapshot: everyone(null),
  CreateFeedback: everyone(null, "allowed"),
  CreateProject: everyone(null),
  ListProjects: everyone(null),
  GetProject: everyone("not_found"),
  UpdateProject: everyone("not_found"),
  DeleteProject: ownerOrAdmin("not_found"),
  StartRun: everyone(null),
  ListRuns: everyone(null),
  CompleteRun: everyone("not_found"),
  GetRun: everyone("not_found"),
  CreateWorkload: everyone(null),
  ListWorkloads: everyone(null),
  GetWorkload: everyone("not_found"),
  DeleteWorkload: ownerOrAdmin("not_found"),
  SetWorkloadLaunchAcl: ownerOrAdmin("not_found"),
  AddWorkloadFederation: ownerOrAdmin("not_found"),
  ListWorkloadFederation: everyone("not_found"),
  RemoveWorkloadFederation: ownerOrAdmin("not_found"),
  CreateSandboxSecret: ownerOrAdmin(null),
  ListSandboxSecrets: everyone(null),
  GrantSandboxSecret: ownerOrAdmin("not_found"),
  ListSandboxSecretGrants: everyone("not_found"),
  UngrantSandboxSecret: ownerOrAdmin("not_found"),
  RotateSandboxSecret: ownerOrAdmin("not_found"),
  RevokeSandboxSecret: ownerOrAdmin("not_found"),
  RegisterAnnotationSchema: everyone(null),
  ListAnnotationSchemas: everyone(null),
  GetAnnotationSchema: everyone("not_found"),
  ArchiveAnnotationSchema: ownerOrAdmin("not_found"),
  Annotate: everyone(null),
  ListAnnotations: everyone(null),
  AnnotateRange: everyone(null),
  PutDataView: everyone(null),
  ListDataViews: everyone(null),
  RunDataView: everyone("not_found"),
  DeleteDataView: everyone("not_found"),
  RunTelemetrySql: everyone(null),
  CreateSandbox: everyone(null),
  ListSandboxes: everyone(null, "allowed"),
  GetSandbox: everyone("not_found", "allowed"),
  UpdateSandbox: everyone("not_found"),
  DeleteSandbox: everyone("not_found"),
  ExecSandbox: everyone("not_found", "allowed"),
  StreamExecSandbox: everyone("not_found", "allowed"),
  // A sandbox-scoped credential neither opens endpoints nor issues their tokens (docs/api-decisions.md).
  IssueEndpointToken: everyone("not_found"),
  IssueSshToken: everyone("not_found"),
  CreateSandboxSnapshot: everyone("not_found", "allowed"),
  // The file API is exec's: a sandbox-scoped key on its own sandbox only (docs/api-decisions.md "Files").
  WriteSandboxFile: everyone("not_found", "allowed"),
  UploadSandboxArchive: everyone("not_found", "allowed"),
  ReadSandboxFile: everyone("not_found", "allowed"),
  StatSandboxFile: everyone("not_found", "allowed"),
  ListSandboxFiles: everyone("not_found", "allowed"),
  MakeSandboxDirectory: everyone("not_found", "allowed"),
  RemoveSandboxFile: everyone("not_found", "allowed"),
  RenameSandboxFile: everyone("not_found", "allowed"),
  WatchSandboxDirectory: everyone("not_found", "allowed"),
  // Processes are exec's too (docs/api-decisions.md "Processes").
  StartSandboxProcess: everyone("not_found", "allowed"),
  ListSandboxProcesses: everyone("not_found", "allowed"),
  GetSandboxProcess: everyone("not_found", "allowed"),
  SignalSandboxProcess: everyone("not_found", "allowed"),
  KillSandboxProcess: everyone("not_found", "allowed"),
  WriteSandboxProcessStdin: everyone("not_found", "allowed"),
  ResizeSandboxProcess: everyone("not_found", "allowed"),
  WaitSandboxProcess: everyone("not_found", "allowed"),
  ReadSandboxProcessOutput: everyone("not_found", "allowed"),
  StreamSandboxProcessOutput: everyone("not_found", "allowed"),
  // Past authorization a scoped key gets 404 for any run but its sandbox's own.
  TailRun: everyone("not_found", "allowed"),
  // OTLP ingest: any credential of the organization; a sandbox-scoped one writes into its ambient
  // run only. Another organization's run named in a span is a rejected span, not a path id.
  ExportTraces: everyone(null, "allowed"),
  ListSandboxSnapshots: everyone(null, "allowed"),
  DeleteSandboxSnapshot: everyone("not_found"),
  CreateVolume: everyone(null),
  ListVolumes: everyone(null),
  GetVolume: everyone("not_found"),
  DeleteVolume: everyone("not_found"),
  StartVolumePush: everyone("not_found"),
  RequestVolumeBlobUploads: everyone("not_found"),
  PublishVolumeVersion: everyone("not_found"),
  AdminCreateOrganization: operator,
  AdminListOrganizations: operator,
  AdminCreateApiKey: operator,
  AdminListApiKeys: operator,
  AdminRevokeApiKey: operator,
  AdminRotateMasterKey: operator,
  AdminQuarantineSandbox: operator,
  AdminReleaseSandbox: operator,
  AdminSetQuota: operator,
  // Also WARREN_METRICS_TOKEN, which is no API key (test/metrics.test.ts).
  GetMetrics: operator,
  AdminGetEgressAllowlist: operator,
  AdminSetEgressAllowlist: operator,
  AdminListHosts: operator,
  AdminDrainHost: operator,
  AdminCordonHost: operator,
  AdminUncordonHost: operator,
};

/** Bodies the schema sample gets wrong (a service rule beyond the schema), so authorization decides. */
const BODIES: Record<string, Record<string, unknown>> = {
  MakeSandboxDirectory: { path: "/workspace/d" },
  RemoveSandboxFile: { path: "/workspace/d" },
  RenameSandboxFile: { from: "/workspace/d", to: "/workspace/e" },
  GrantSandboxSecret: { subject_kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", subject_id: "prn_x" },
  ArchiveAnnotationSchema: {},
  UpdateSandbox: { idle_timeout_seconds: 60 },
  ExecSandbox: { cmd: ["true"] },
  CreateVolume: { name: "matrix", quota_bytes: "1" },
  RequestVolumeBlobUploads: { blobs: [{ digest: `blake3:${"0".repeat(64)}`, size_bytes: "1" }] },
  CreateSandbox: {},
  PutDataView: { spec: { type: "sql.v1", sql: "SELECT 1" } },
  RunTelemetrySql: { sql: "SELECT 1" },
  SetWorkloadLaunchAcl: { acl: { policy: "WORKLOAD_LAUNCH_POLICY_MEMBERS", launchers: [] } },
  AddWorkloadFederation: { cloud: "aws", descriptor: { role_arn: "arn:aws:iam::123456789012:role/deploy" } },
};

interface Operation {
  id: string;
  method: string;
  path: string;
  flat: boolean;
  body: Record<string, unknown> | undefined;
}

/** Drops body fields that repeat a path parameter (`{id, ...}`), which must equal it when present. */
function withoutPathEcho(body: Record<string, unknown>, path: string): Record<string, unknown> {
  const names = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
  return Object.fromEntries(Object.entries(body).filter(([key]) => !names.includes(key)));
}

function operationsOf(doc: Record<string, unknown>): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries(
    inlineRefs(doc).paths as Record<string, Record<string, Record<string, unknown>>>,
  )) {
    for (const [method, op] of Object.entries(item)) {
      if (!["get", "put", "post", "delete", "patch"].includes(method)) continue;
      const tags = (op.tags as string[] | undefined) ?? [];
      const content = (op.requestBody as { content?: Record<string, { schema: Record<string, unknown> }> } | undefined)
        ?.content;
      const schema = content?.["application/json"]?.schema;
      out.push({
        id: String(op.operationId),
        method: method.toUpperCase(),
        path,
        flat: tags.includes("SandboxService"),
        // A body that passes validation, so authorization (checked after it) decides the answer.
        body:
          BODIES[String(op.operationId)] ??
          (schema ? withoutPathEcho(sample(schema) as Record<string, unknown>, path) : undefined),
      });
    }
  }
  return out;
}

const orgBIdsOf = new WeakMap<TestApp, Promise<Record<string, string>>>();

/** Org B's resources, named in org A's requests as "another organization's ids" (made once per app). */
function orgBIds(t: TestApp): Promise<Record<string, string>> {
  let ids = orgBIdsOf.get(t);
  if (!ids) {
    ids = makeOrgBIds(t);
    orgBIdsOf.set(t, ids);
  }
  return ids;
}

async function makeOrgBIds(t: TestApp): Promise<Record<string, string>> {
  const key = t.orgB.keys.owner;
  const run = await t.request("POST", "/v1/runs", { key, body: { label: "b" } });
  const workload = await t.request("POST", "/v1/workloads", { key, body: { name: "only-in-b" } });
  assert.equal(workload.status, 200, workload.raw);
  const secret = await t.request("POST", "/v1/secrets", {
    key,
    body: { name: "only-in-b", value: "v", delivery: "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT" },
  });
  assert.equal(secret.status, 200, secret.raw);
  const schema = await t.request("POST", "/v1/annotation-schemas", {
    key,
    body: { name: "only-in-b", json_schema: JSON.stringify({ type: "object" }) },
  });
  assert.equal(schema.status, 200, schema.raw);
  const view = await t.request("PUT", "/v1/data-views/only-in-b", {
    key,
    body: { spec: { type: "sql.v1", sql: "SELECT count(*) FROM runs" } },
  });
  assert.equal(view.status, 200, view.raw);
  const sandbox = await t.request("POST", "/v1/sandboxes", { key, body: {} });
  // A sealed snapshot of org B's sandbox (the API-only runtime takes none), written as the service would.
  const snapshotId = `snp-${"b".repeat(40)}`;
  await t.c.db.query(
    `INSERT INTO sandbox_snapshots (id, org_id, project_id, source_sandbox_id, run_id, image, lineage_path,
       storage_class, state, durability, request_hash, created_at)
     SELECT $2, org_id, project_id, id, run_id, image, lineage_path, storage_class, 'sealed', 'local', 'x', now()
       FROM sandboxes WHERE id = $1 ON CONFLICT DO NOTHING`,
    [String(sandbox.body.id), snapshotId],
  );
  const volume = await t.request("POST", "/v1/volumes", { key, body: { name: "only-in-b", quota_bytes: "1" } });
  assert.equal(volume.status, 200, volume.raw);
  const volumeId = (volume.body.volume as { id: string }).id;
  const push = await t.request("POST", `/v1/volumes/${volumeId}/pushes`, { key, body: {} });
  assert.equal(push.status, 200, push.raw);
  return {
    "/v1/volumes/{id}": volumeId,
    "/v1/volume-pushes/{push_id}": String(push.body.push_id),
    "/v1/snapshots/{id}": snapshotId,
    "/v1/projects/{id}": t.orgB.defaultProjectId,
    "/v1/runs/{id}": (run.body.run as RunJson).id,
    "/v1/workloads/{name}": "only-in-b",
    "/v1/secrets/{id}": (secret.body.secret as SecretJson).id,
    "/v1/annotation-schemas/{name}": "only-in-b",
    "/v1/sandboxes/{id}": String(sandbox.body.id),
    "/v1/data-views/{name}": "only-in-b",
  };
}

/** Required query parameters, so that validation passes and authorization decides. */
const QUERIES: Record<string, string> = Object.fromEntries(
  [
    "WriteSandboxFile",
    "UploadSandboxArchive",
    "ReadSandboxFile",
    "StatSandboxFile",
    "ListSandboxFiles",
    "WatchSandboxDirectory",
  ].map((id) => [id, "?path=/workspace"]),
);

/** Path parameters after the first whose "x" the route's schema refuses before authorization. */
const LATER_PARAMS: Record<string, string> = { subject_kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", port: "8080" };

/** The path with its first parameter set to `id` (the others "x", or their LATER_PARAMS value). */
function urlWith(path: string, id: string): string {
  let first = true;
  return path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    if (!first) return LATER_PARAMS[name] ?? "x";
    first = false;
    return encodeURIComponent(id);
  });
}

function assertEnvelope(res: TestResponse, op: Operation, status: number, code: string, label: string): void {
  assert.equal(res.status, status, `${label}: ${res.raw}`);
  assertError(res, status, code);
  if (op.flat) assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"], label);
}

forEachStore(
  "security matrix",
  (t) => {
    const served = async () => operationsOf((await t().request("GET", "/v1/openapi.json")).body);

    it("has an entry for every operation of the served document, and none for operations it lacks", async () => {
      const ids = (await served()).map((op) => op.id).sort();
      assert.deepEqual(Object.keys(MATRIX).sort(), ids);
    });

    it("answers each operation as the matrix says for every credential", async () => {
      const ops = await served();
      const b = await orgBIds(t());
      const sandbox = await t().request("POST", "/v1/sandboxes", { key: t().orgA.keys.owner, body: {} });
      assert.equal(sandbox.status, 200, sandbox.raw);
      const scopedKey = await sandboxScopedKey(t(), t().orgA, String(sandbox.body.id));
      for (const op of ops) {
        const entry = MATRIX[op.id] as Entry;
        const url = urlWith(op.path, "x") + (QUERIES[op.id] ?? "");
        const send = (key: string | null, headers: Record<string, string> = {}, target = url) =>
          t().request(op.method, target, {
            key,
            headers,
            ...(op.body ? { body: op.body } : {}),
          });

        for (const bad of BAD_CREDENTIALS) {
          const res = await send(null, bad.headers);
          if (entry.auth) assertEnvelope(res, op, 401, "unauthenticated", `${op.id} ${bad.name}`);
          else assert.ok(res.status < 500 && res.status !== 401, `${op.id} ${bad.name}: ${res.raw}`);
        }
        for (const role of ROLES) {
          const res = await send(t().orgA.keys[role]);
          const label = `${op.id} as ${role}`;
          if (entry.roles[role] === "denied") assertEnvelope(res, op, 403, "permission_denied", label);
          else assert.ok(![401, 403].includes(res.status) && res.status < 500, `${label}: ${res.status} ${res.raw}`);
        }
        const scoped = await send(scopedKey);
        if (entry.sandboxScoped === "denied") {
          assertEnvelope(scoped, op, 403, "permission_denied", `${op.id} sandbox-scoped`);
        } else {
          assert.ok(
            ![401, 403].includes(scoped.status) && scoped.status < 500,
            `${op.id} sandbox-scoped: ${scoped.raw}`,
          );
        }
        if (entry.otherOrg === "not_found") {
          const prefix = Object.keys(b).find((p) => op.path.startsWith(p));
          assert.ok(prefix, `${op.id}: no org B id for ${op.path}`);
          const res = await send(
            t().orgA.keys.owner,
            {},
            urlWith(op.path, b[prefix] as string) + (QUERIES[op.id] ?? ""),
          );
          assertEnvelope(res, op, 404, "not_found", `${op.id} with another organization's id`);
        }
      }
    });

    // Issue 24 A3: a secret is released on the calling credential's own exact grant (contract
    // 2.6, 5.12), for every credential kind: not on the sandbox creator's grant, and never for
    // a sandbox-scoped credential (code in the sandbox, directly or through the gateway's API
    // relay). The grant is checked before the sandbox's state, so on this API-only sandbox
    // (never running) a caller that holds it gets 409 sandbox_not_running and any other 400.
    it("releases a sandbox-environment secret into an exec only on the caller's own grant", async () => {
      const org = t().orgA;
      const secret = await t().request("POST", "/v1/secrets", {
        key: org.keys.owner,
        body: {
          name: "matrix-env",
          value: "s3cret-env-value",
          delivery: "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT",
        },
      });
      assert.equal(secret.status, 200, secret.raw);
      const secretId = (secret.body.secret as SecretJson).id;
      const sandbox = await t().request("POST", "/v1/sandboxes", { key: org.keys.owner, body: {} });
      assert.equal(sandbox.status, 200, sandbox.raw);
      const id = String(sandbox.body.id);
      const exec = (key: string, headers: Record<string, string> = {}) =>
        t().request("POST", `/v1/sandboxes/${id}:exec`, {
          key,
          headers,
          body: { cmd: ["true"], secret_environment: [{ secret_name: "matrix-env", variable_name: "V" }] },
        });
      const scoped = await sandboxScopedKey(t(), org, id);
      const callers: [string, string][] = [
        ...ROLES.filter((role) => role !== "owner").map((role): [string, string] => [role, org.keys[role]]),
        ["sandbox-scoped (the owner's)", scoped],
      ];
      for (const [label, key] of callers) {
        assertEnvelope(await exec(key), FLAT_OP, 400, "invalid_argument", `exec with the owner's secret as ${label}`);
        // Nor does a replay under an Idempotency-Key skip the check.
        assertEnvelope(
          await exec(key, { "idempotency-key": "k" }),
          FLAT_OP,
          400,
          "invalid_argument",
          `${label} replay`,
        );
      }
      assertEnvelope(await exec(org.keys.owner), FLAT_OP, 409, "sandbox_not_running", "the owner holds the grant");
      // A grant to the member is the member's alone; the sandbox's own credential still has none.
      const granted = await t().request("POST", `/v1/secrets/${secretId}/grants`, {
        key: org.keys.owner,
        body: { subject_kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", subject_id: org.principalIds.member },
      });
      assert.equal(granted.status, 200, granted.raw);
      assertEnvelope(await exec(org.keys.member), FLAT_OP, 409, "sandbox_not_running", "the member, granted");
      assertEnvelope(await exec(org.keys.admin), FLAT_OP, 400, "invalid_argument", "the admin, still not granted");
      assertEnvelope(await exec(scoped), FLAT_OP, 400, "invalid_argument", "sandbox-scoped, after the grant");
      const memberScoped = await sandboxScopedKey(t(), org, id, "member");
      assertEnvelope(await exec(memberScoped), FLAT_OP, 400, "invalid_argument", "a member's sandbox-scoped key");
    });

    // A console session (docs/api-decisions.md "Console sessions") answers every operation as
    // its key's role does; from another origin, expired or revoked, it is refused everywhere.
    it("answers each operation by a console session's cookie as by its key, and refuses a dead or foreign one", async () => {
      // Not DeleteConsoleSession (it would sign the sessions out), nor GetMetrics (read by
      // Prometheus with a bearer credential only: no cookie is read there).
      const ops = (await served()).filter((op) => op.id !== "DeleteConsoleSession" && op.id !== "GetMetrics");
      const b = await orgBIds(t());
      const sessions = {} as Record<KeyRole, Awaited<ReturnType<typeof openSession>>>;
      for (const role of ROLES) sessions[role] = await openSession(t(), t().orgA.keys[role]);
      const expired = await openSession(t(), t().orgA.keys.owner);
      await t().c.db.query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [
        expired.sessionId,
      ]);
      const revoked = await openSession(t(), t().orgA.keys.owner);
      await t().c.identity.revokeKey(revoked.sessionId);
      for (const op of ops) {
        const entry = MATRIX[op.id] as Entry;
        if (!entry.auth) continue;
        const url = urlWith(op.path, "x") + (QUERIES[op.id] ?? "");
        const send = (headers: Record<string, string>, target = url) =>
          t().request(op.method, target, { headers, ...(op.body ? { body: op.body } : {}) });
        for (const role of ROLES) {
          const res = await send(sameOrigin(sessions[role]));
          const label = `${op.id} by the ${role}'s session`;
          // A session opens no session (permission_denied), whatever the role.
          if (entry.roles[role] === "denied" || op.id === "CreateConsoleSession") {
            assertEnvelope(res, op, 403, "permission_denied", label);
          } else assert.ok(![401, 403].includes(res.status) && res.status < 500, `${label}: ${res.status} ${res.raw}`);
        }
        assertEnvelope(await send(sameOrigin(expired)), op, 401, "unauthenticated", `${op.id} expired session`);
        assertEnvelope(await send(sameOrigin(revoked)), op, 401, "unauthenticated", `${op.id} revoked session`);
        const foreign = { ...sameOrigin(sessions.owner), origin: "http://8080-sbx-x.localhost:7081" };
        assertEnvelope(await send(foreign), op, 403, "permission_denied", `${op.id} from a sandbox endpoint's origin`);
        if (entry.otherOrg === "not_found") {
          const prefix = Object.keys(b).find((p) => op.path.startsWith(p)) as string;
          const res = await send(
            sameOrigin(sessions.owner),
            urlWith(op.path, b[prefix] as string) + (QUERIES[op.id] ?? ""),
          );
          assertEnvelope(res, op, 404, "not_found", `${op.id} by a session with another organization's id`);
        }
      }
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);

const FLAT_OP: Operation = { id: "ExecSandbox", method: "POST", path: "", flat: true, body: undefined };
