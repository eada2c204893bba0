// The OpenAPI document: served without a credential, a valid OpenAPI 3.1 document (checked
// by a real validator), every implemented contract operation under its contract group, the
// error envelope on every operation, the bearer scheme matching what the server enforces,
// and the committed docs/openapi.json up to date with the route schemas.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import { isDeepStrictEqual } from "node:util";
import { Validator } from "@seriousme/openapi-schema-validator";
import { openApiDocumentText } from "../scripts/openapi-document.js";
import { forEachStore } from "./harness.js";

// Every operation the contract names, with its group (copied from the contract's
// operations list, sections 4.1 and 4.2, which is not part of this repository).
const CONTRACT_OPERATIONS: [group: string, operationId: string][] = [
  ["SandboxService", "CreateSandbox"],
  ["SandboxService", "GetSandbox"],
  ["SandboxService", "ListSandboxes"],
  ["SandboxService", "UpdateSandbox"],
  ["SandboxService", "DeleteSandbox"],
  ["SandboxService", "ExecSandbox"],
  ["SandboxService", "CreateSandboxSnapshot"],
  ["SandboxService", "ListSandboxSnapshots"],
  ["SandboxService", "DeleteSandboxSnapshot"],
  ["VolumeService", "CreateVolume"],
  ["VolumeService", "GetVolume"],
  ["VolumeService", "ListVolumes"],
  ["VolumeService", "DeleteVolume"],
  ["VolumeService", "StartVolumePush"],
  ["VolumeService", "RequestVolumeBlobUploads"],
  ["VolumeService", "PublishVolumeVersion"],
  ["SecretService", "CreateSandboxSecret"],
  ["SecretService", "ListSandboxSecrets"],
  ["SecretService", "GrantSandboxSecret"],
  ["SecretService", "UngrantSandboxSecret"],
  ["SecretService", "ListSandboxSecretGrants"],
  ["SecretService", "RotateSandboxSecret"],
  ["SecretService", "RevokeSandboxSecret"],
  ["WorkloadService", "CreateWorkload"],
  ["WorkloadService", "GetWorkload"],
  ["WorkloadService", "ListWorkloads"],
  ["WorkloadService", "DeleteWorkload"],
  ["WorkloadService", "SetWorkloadLaunchAcl"],
  ["WorkloadService", "AddWorkloadFederation"],
  ["WorkloadService", "ListWorkloadFederation"],
  ["WorkloadService", "RemoveWorkloadFederation"],
  ["ProjectService", "CreateProject"],
  ["ProjectService", "GetProject"],
  ["ProjectService", "ListProjects"],
  ["ProjectService", "UpdateProject"],
  ["ProjectService", "DeleteProject"],
  ["RunService", "StartRun"],
  ["RunService", "CompleteRun"],
  ["RunService", "GetRun"],
  ["RunService", "ListRuns"],
  ["AnnotationService", "Annotate"],
  ["AnnotationService", "AnnotateRange"],
  ["AnnotationService", "ListAnnotations"],
  ["AnnotationSchemaService", "RegisterAnnotationSchema"],
  ["AnnotationSchemaService", "GetAnnotationSchema"],
  ["AnnotationSchemaService", "ListAnnotationSchemas"],
  ["AnnotationSchemaService", "ArchiveAnnotationSchema"],
  ["TelemetryViewService", "PutDataView"],
  ["TelemetryViewService", "ListDataViews"],
  ["TelemetryViewService", "RunDataView"],
  ["TelemetryViewService", "DeleteDataView"],
  ["TelemetryViewService", "RunTelemetrySql"],
  ["TelemetryViewService", "TailRun"],
  ["UsageService", "GetUsageSnapshot"],
  ["IdentityService", "WhoAmI"],
  ["MetaService", "GetServiceConfig"],
  ["FeedbackService", "CreateFeedback"],
];
// Warren's own operations where the contract leaves the surface open, under the group they
// extend: IssueEndpointToken and IssueSshToken issue credentials (contract 5.13, "how credentials
// are issued: not shown"); StreamExecSandbox streams an exec over a WebSocket (issue 26); the
// console's sessions are a credential issued and revoked (issue 28).
// Background processes of a sandbox (issue 26, docs/api-decisions.md "Processes").
const PROCESS_OPERATIONS: [operationId: string, method: string, path: string][] = [
  ["StartSandboxProcess", "post", "/v1/sandboxes/{id}/processes"],
  ["ListSandboxProcesses", "get", "/v1/sandboxes/{id}/processes"],
  ["GetSandboxProcess", "get", "/v1/sandboxes/{id}/processes/{process_id}"],
  ["SignalSandboxProcess", "post", "/v1/sandboxes/{id}/processes/{process_id}:signal"],
  ["KillSandboxProcess", "post", "/v1/sandboxes/{id}/processes/{process_id}:kill"],
  ["WriteSandboxProcessStdin", "post", "/v1/sandboxes/{id}/processes/{process_id}:stdin"],
  ["ResizeSandboxProcess", "post", "/v1/sandboxes/{id}/processes/{process_id}:resize"],
  ["WaitSandboxProcess", "post", "/v1/sandboxes/{id}/processes/{process_id}:wait"],
  ["ReadSandboxProcessOutput", "get", "/v1/sandboxes/{id}/processes/{process_id}/output"],
  ["StreamSandboxProcessOutput", "get", "/v1/sandboxes/{id}/processes/{process_id}/output:stream"],
];
const WARREN_EXTENSIONS: [group: string, operationId: string][] = [
  ["IdentityService", "CreateConsoleSession"],
  ["IdentityService", "DeleteConsoleSession"],
  ["SandboxService", "IssueEndpointToken"],
  ["SandboxService", "IssueSshToken"],
  ["SandboxService", "StreamExecSandbox"],
  // OTLP/HTTP trace ingest (issue 29): spans into runs, beside the run tail.
  ["TelemetryViewService", "ExportTraces"],
  ...[
    "WriteSandboxFile",
    "UploadSandboxArchive",
    "ReadSandboxFile",
    "StatSandboxFile",
    "ListSandboxFiles",
    "MakeSandboxDirectory",
    "RemoveSandboxFile",
    "RenameSandboxFile",
    "WatchSandboxDirectory",
    ...PROCESS_OPERATIONS.map(([id]) => id),
  ].map((id): [string, string] => ["SandboxService", id]),
];
const CONTRACT_GROUP = new Map([...CONTRACT_OPERATIONS, ...WARREN_EXTENSIONS].map(([group, op]) => [op, group]));

// Operations implemented so far, with the method and path docs/api-decisions.md gives them.
const REQUIRED: [operationId: string, method: string, path: string][] = [
  ["WhoAmI", "get", "/v1/whoami"],
  ["GetServiceConfig", "get", "/v1/service-config"],
  ["IssueEndpointToken", "post", "/v1/sandboxes/{id}/endpoints/{port}:token"],
  ["IssueSshToken", "post", "/v1/sandboxes/{id}:issueSshToken"],
  ["StreamExecSandbox", "get", "/v1/sandboxes/{id}/exec/stream"],
  ["CreateConsoleSession", "post", "/v1/console/sessions"],
  ["DeleteConsoleSession", "delete", "/v1/console/sessions/current"],
  ["WriteSandboxFile", "put", "/v1/sandboxes/{id}/files"],
  ["ExportTraces", "post", "/v1/traces"],
  ["UploadSandboxArchive", "post", "/v1/sandboxes/{id}/files:upload"],
  ["ReadSandboxFile", "get", "/v1/sandboxes/{id}/files"],
  ["StatSandboxFile", "get", "/v1/sandboxes/{id}/files:stat"],
  ["ListSandboxFiles", "get", "/v1/sandboxes/{id}/files:list"],
  ["MakeSandboxDirectory", "post", "/v1/sandboxes/{id}/files:mkdir"],
  ["RemoveSandboxFile", "post", "/v1/sandboxes/{id}/files:remove"],
  ["RenameSandboxFile", "post", "/v1/sandboxes/{id}/files:rename"],
  ["WatchSandboxDirectory", "get", "/v1/sandboxes/{id}/files:watch"],
  ...PROCESS_OPERATIONS,
  ["GetUsageSnapshot", "get", "/v1/usage"],
  ["CreateFeedback", "post", "/v1/feedback"],
  ["CreateProject", "post", "/v1/projects"],
  ["GetProject", "get", "/v1/projects/{id}"],
  ["ListProjects", "get", "/v1/projects"],
  ["UpdateProject", "patch", "/v1/projects/{id}"],
  ["DeleteProject", "delete", "/v1/projects/{id}"],
  ["StartRun", "post", "/v1/runs"],
  ["CompleteRun", "post", "/v1/runs/{id}:complete"],
  ["GetRun", "get", "/v1/runs/{id}"],
  ["ListRuns", "get", "/v1/runs"],
];

const METHODS = ["get", "put", "post", "delete", "patch", "head", "options", "trace"];
const DOC_PATH = new URL("../docs/openapi.json", import.meta.url);

type Json = Record<string, unknown>;
interface Operation {
  method: string;
  path: string;
  op: Json;
}

function operationsOf(doc: Json): Operation[] {
  const out: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths as Record<string, Json>)) {
    for (const [method, op] of Object.entries(item)) {
      if (METHODS.includes(method)) out.push({ method, path, op: op as Json });
    }
  }
  return out;
}

const byId = (ops: Operation[]) => new Map(ops.map((o) => [String(o.op.operationId), o]));

/** Which operations (and other parts) differ between two documents, for a short failure message. */
function staleness(committed: Json, current: Json): string {
  const index = (doc: Json) =>
    new Map(operationsOf(doc).map((o) => [`${o.method.toUpperCase()} ${o.path}`, JSON.stringify(o.op)]));
  const before = index(committed);
  const now = index(current);
  const changes: string[] = [];
  for (const [route, op] of now) {
    if (!before.has(route)) changes.push(`new ${route}`);
    else if (before.get(route) !== op) changes.push(`changed ${route}`);
  }
  for (const route of before.keys()) if (!now.has(route)) changes.push(`removed ${route}`);
  for (const key of new Set([...Object.keys(committed), ...Object.keys(current)])) {
    if (key !== "paths" && !isDeepStrictEqual(committed[key], current[key])) changes.push(`changed ${key}`);
  }
  return changes.length > 0 ? changes.join("; ") : "only the formatting differs";
}

const STALE = "docs/openapi.json is stale: run `make openapi` to regenerate it from the route schemas";

forEachStore("openapi", (t) => {
  let cached: Json | null = null;
  const doc = async (): Promise<Json> => {
    if (cached) return cached;
    const res = await t().request("GET", "/v1/openapi.json");
    assert.equal(res.status, 200, res.raw);
    cached = res.body;
    return cached;
  };

  it("serves the document without a credential as OpenAPI 3.1.0, version 0.0.1", async () => {
    const res = await t().request("GET", "/v1/openapi.json");
    assert.equal(res.status, 200, res.raw);
    assert.match(String(res.headers["content-type"]), /^application\/json/);
    assert.equal(res.body.openapi, "3.1.0");
    const info = res.body.info as Json;
    assert.equal(info.version, "0.0.1");
    assert.equal(typeof info.title, "string");
    // A key, even an unknown one, changes nothing.
    const withBadKey = await t().request("GET", "/v1/openapi.json", { key: "wrn_not-a-real-key" });
    assert.equal(withBadKey.status, 200);
    assert.deepEqual(withBadKey.body, res.body);
  });

  it("passes a real OpenAPI 3.1 validator", async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(await doc()));
    assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2));
    assert.equal(validator.version, "3.1");
  });

  it("the validator does reject a broken document", async () => {
    const broken = structuredClone(await doc());
    const whoami = (broken.paths as Record<string, Json>)["/v1/whoami"] as Json;
    (whoami.get as Json).responses = "not an object";
    const result = await new Validator().validate(broken);
    assert.equal(result.valid, false);
  });

  for (const [operationId, method, path] of REQUIRED) {
    it(`documents ${operationId} as ${method.toUpperCase()} ${path} under ${CONTRACT_GROUP.get(operationId)}`, async () => {
      const found = byId(operationsOf(await doc())).get(operationId);
      assert.ok(found, `${operationId} is missing`);
      assert.equal(found.method, method);
      assert.equal(found.path, path);
      assert.deepEqual(found.op.tags, [CONTRACT_GROUP.get(operationId)]);
      assert.equal(typeof found.op.summary, "string");
    });
  }

  it("tags every contract operation it documents with the contract's group, and nothing else", async () => {
    const ops = operationsOf(await doc());
    const ids = ops.map((o) => String(o.op.operationId));
    assert.equal(new Set(ids).size, ids.length, "operationIds are unique");
    for (const { op, method, path } of ops) {
      const id = String(op.operationId);
      assert.ok(id.length > 0, `${method} ${path} has no operationId`);
      const group = CONTRACT_GROUP.get(id);
      if (group) {
        assert.deepEqual(op.tags, [group], id);
      } else {
        // Operations outside the contract are the operator's administration routes.
        assert.deepEqual(op.tags, ["AdminService"], `${id} is neither a contract operation nor an admin one`);
        // GET /metrics keeps the path Prometheus scrapes by default (docs/metrics.md).
        if (id === "GetMetrics") {
          assert.equal(path, "/metrics");
          continue;
        }
        assert.match(id, /^Admin[A-Z]/);
        assert.match(path, /^\/v1\/admin\//);
      }
    }
  });

  it("gives every operation a 429 and a default error response in the error envelope", async () => {
    const components = (await doc()).components as Json;
    const schemas = components.schemas as Record<string, Json>;
    for (const { op } of operationsOf(await doc())) {
      const id = String(op.operationId);
      const responses = op.responses as Record<string, Json>;
      // Sandbox and snapshot routes answer in the flat envelope and type their own quota
      // rejection (contract 7.1); every other operation documents 429 and default in ErrorEnvelope.
      const sandbox = CONTRACT_GROUP.get(id) === "SandboxService";
      const envelope = sandbox ? "FlatErrorEnvelope" : "ErrorEnvelope";
      for (const status of sandbox ? ["default"] : ["429", "default"]) {
        const response = responses[status];
        assert.ok(response, `${id} has no ${status} response`);
        assert.equal(typeof response.description, "string");
        const content = response.content as Record<string, { schema: Json }>;
        assert.deepEqual(content["application/json"]?.schema, { $ref: `#/components/schemas/${envelope}` }, id);
      }
      // A WebSocket route succeeds with its 101 (StreamExecSandbox).
      assert.ok(
        Object.keys(responses).some((s) => /^2\d\d$/.test(s) || s === "101"),
        `${id} documents a success response`,
      );
    }
    const envelope = schemas.ErrorEnvelope as Json;
    assert.ok(envelope, "components.schemas.ErrorEnvelope exists");
    assert.equal(envelope.additionalProperties, false);
    const properties = envelope.properties as Record<string, Json>;
    assert.deepEqual(Object.keys(properties).sort(), ["code", "details", "message", "request_id"]);
    assert.deepEqual([...(envelope.required as string[])].sort(), ["code", "message"]);
    const quota = ((properties.details as Json).properties as Record<string, Json>).quota as Json;
    assert.deepEqual(Object.keys(quota.properties as Json).sort(), [
      "current",
      "limit",
      "metric",
      "reserved",
      "retry_after_seconds",
    ]);
    const flat = schemas.FlatErrorEnvelope as Json;
    assert.deepEqual(Object.keys(flat.properties as Json).sort(), ["code", "message", "request_id"]);
    assert.equal(flat.additionalProperties, false);
  });

  it("declares a bearer scheme, required everywhere except discovery", async () => {
    const d = await doc();
    const schemes = (d.components as Json).securitySchemes as Record<string, Json>;
    const bearer = Object.entries(schemes).filter(([, s]) => s.type === "http" && s.scheme === "bearer");
    assert.equal(bearer.length, 1, "one HTTP bearer security scheme");
    const [name] = bearer[0] as [string, Json];
    assert.deepEqual(d.security, [{ [name]: [] }]);
    for (const { op } of operationsOf(d)) {
      if (op.operationId === "GetServiceConfig") assert.deepEqual(op.security, []);
      else assert.equal(op.security, undefined, `${op.operationId} must not override the bearer requirement`);
    }
  });

  it("matches what the server enforces: 401 without a key on every secured operation", async () => {
    for (const { op, method, path } of operationsOf(await doc())) {
      const url = path.replace(/\{[^}]+\}/g, "x");
      const res = await t().request(method.toUpperCase(), url);
      if (op.operationId === "GetServiceConfig") assert.equal(res.status, 200, `${method} ${url}`);
      else assert.equal(res.status, 401, `${method} ${url} (${op.operationId}) answered ${res.status} without a key`);
    }
  });

  it("declares every path parameter its path names, and no others", async () => {
    for (const { op, path } of operationsOf(await doc())) {
      const named = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]).sort();
      const declared = ((op.parameters as Json[] | undefined) ?? [])
        .filter((p) => p.in === "path")
        .map((p) => {
          assert.equal(p.required, true, `${op.operationId} path parameter ${p.name} is required`);
          return String(p.name);
        })
        .sort();
      assert.deepEqual(declared, named, `${op.operationId} ${path}`);
    }
  });

  it("serves the same document as the committed docs/openapi.json", async () => {
    const committed = JSON.parse(await readFile(DOC_PATH, "utf8")) as Json;
    const served = await doc();
    if (!isDeepStrictEqual(served, committed)) assert.fail(`${STALE} (${staleness(committed, served)})`);
  });
});

describe("docs/openapi.json", () => {
  it("is what the route schemas produce now (run `make openapi` when this fails)", async () => {
    const committed = await readFile(DOC_PATH, "utf8");
    const generated = await openApiDocumentText();
    if (committed !== generated) {
      assert.fail(`${STALE} (${staleness(JSON.parse(committed) as Json, JSON.parse(generated) as Json)})`);
    }
  });
});
