import { Type } from "@sinclair/typebox";
import { idempotencyKeyOf } from "../../http/idempotency.js";
import { named } from "../../http/openapi.js";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { FLAT, flatResponses, PageOf } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import type { ExecService } from "./exec-service.js";
import {
  CreateSandboxRequest,
  ExecRequest,
  ExecResponse,
  RequestState,
  SANDBOX_ID_PATTERN,
  Sandbox,
  StateEnum,
  UpdateSandboxRequest,
} from "./schemas.js";
import type { SandboxService } from "./service.js";

const TAGS = ["SandboxService"];
const NetworkAccessReceipt = named(
  "NetworkAccessReceipt",
  Type.Object(
    {
      network_access: Type.String(),
      pod_uid: Type.String(),
      pod_resource_version: Type.String(),
      policies: Type.Array(
        named(
          "NetworkAccessPolicy",
          Type.Object(
            {
              policy_name: Type.String(),
              policy_endpoint_name: Type.String(),
              policy_endpoint_uid: Type.String(),
              policy_endpoint_resource_version: Type.String(),
            },
            { additionalProperties: false },
          ),
        ),
      ),
    },
    {
      additionalProperties: false,
      description: "Policy objects select the sandbox now: an observation, not proof of data-plane enforcement",
    },
  ),
);
const IdParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128, description: "Sandbox id (or, for GetSandbox, a name)" }),
});
export function registerSandboxRoutes(app: App, sandboxes: SandboxService, execs: ExecService): void {
  app.post(
    "/v1/sandboxes",
    {
      config: { ...FLAT, idempotentOperation: "CreateSandbox" },
      schema: {
        operationId: "CreateSandbox",
        description:
          "Creates a sandbox from an image (or, with snapshot_id, from a snapshot) and returns at once with request_state requested and the sandbox's ambient run; poll GetSandbox for the observed state. 409 name_conflict for a duplicate name in the project, 422 unsupported_capability for a GPU request the deployment cannot schedule, 429 quota_exceeded (metric sandboxes.running, sandboxes.total or sandboxes.workspace_capacity_gib). A retry with the same Idempotency-Key returns the same sandbox and run.",
        tags: TAGS,
        summary: "Create a sandbox from an image (or, with snapshot_id, from a snapshot); returns at once",
        body: CreateSandboxRequest,
        response: flatResponses(
          {
            200: Type.Object(
              {
                id: Type.String({ pattern: SANDBOX_ID_PATTERN }),
                request_state: Type.Literal("requested"),
                run_id: Type.String(),
              },
              { additionalProperties: false },
            ),
          },
          true,
        ),
      },
    },
    async (request) => sandboxes.create(credentialOf(request), request.body),
  );

  app.get(
    "/v1/sandboxes/:id",
    {
      config: FLAT,
      schema: {
        operationId: "GetSandbox",
        description:
          "Gets a sandbox by id, or by name within the selected project. With wait_state and wait_timeout_seconds it answers as soon as that state is observed, or with the current row at the deadline. 404 not_found for an unknown sandbox, another organization's, or a failed or terminated one past retention.",
        tags: TAGS,
        summary: "Get a sandbox by id, or by name within the selected project; optionally wait for a state",
        params: IdParams,
        querystring: Type.Object(
          {
            wait_state: Type.Optional(StateEnum),
            wait_timeout_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 25 })),
            project_id: Type.Optional(Type.String({ maxLength: 64, description: "Project a name is resolved in" })),
          },
          { additionalProperties: false },
        ),
        response: flatResponses({ 200: Type.Object({ sandbox: Sandbox }, { additionalProperties: false }) }),
      },
    },
    async (request) =>
      sandboxes.get(credentialOf(request), request.params.id, {
        projectId: request.query.project_id,
        waitState: request.query.wait_state,
        waitTimeoutSeconds: request.query.wait_timeout_seconds,
      }),
  );

  app.get(
    "/v1/sandboxes",
    {
      config: FLAT,
      schema: {
        operationId: "ListSandboxes",
        description:
          "Lists the selected project's sandboxes in every visible state, created_at descending then id descending, a page at a time; name is an exact filter.",
        tags: TAGS,
        summary: "List the selected project's sandboxes, created_at descending then id descending",
        querystring: Type.Object(
          {
            ...PageQuery,
            name: Type.Optional(Type.String({ minLength: 1, maxLength: 63, description: "Exact name filter" })),
            project_id: Type.Optional(Type.String({ maxLength: 64 })),
          },
          { additionalProperties: false },
        ),
        response: flatResponses({
          200: PageOf("sandboxes", Sandbox),
        }),
      },
    },
    async (request) =>
      sandboxes.list(credentialOf(request), {
        name: request.query.name,
        projectId: request.query.project_id,
        pageSize: request.query.page_size ?? DEFAULT_PAGE_SIZE,
        pageToken: request.query.page_token,
      }),
  );

  app.patch(
    "/v1/sandboxes/:id",
    {
      config: FLAT,
      schema: {
        operationId: "UpdateSandbox",
        description:
          "Stops or wakes a sandbox, or changes its timeouts, metadata (a full replacement) or workspace capacity; network_access must be the only field and answers with a receipt. Asynchronous: poll GetSandbox. 409 quarantined, 409 workspace_shrink_unsupported below the current capacity, 409 operation_conflict when another change is in flight, 429 quota_exceeded on a wake or growth.",
        tags: TAGS,
        summary: "Stop, wake, or change timeouts, metadata, workspace capacity or (alone) network access",
        params: IdParams,
        body: UpdateSandboxRequest,
        response: flatResponses(
          {
            200: Type.Object(
              {
                id: Type.String(),
                request_state: Type.Literal("requested"),
                network_access_receipt: Type.Optional(NetworkAccessReceipt),
              },
              { additionalProperties: false },
            ),
            // A wake admits sandboxes.running and a growth sandboxes.workspace_capacity_gib.
          },
          true,
        ),
      },
    },
    async (request) => sandboxes.update(credentialOf(request), request.params.id, request.body),
  );

  app.delete(
    "/v1/sandboxes/:id",
    {
      config: FLAT,
      schema: {
        operationId: "DeleteSandbox",
        description:
          "Deletes a sandbox: 202 with Location and Retry-After; it is terminating, then terminated. Accepted once: a second delete is 404 not_found. 409 quarantined for a quarantined sandbox.",
        tags: TAGS,
        summary: "Delete a sandbox: terminating, then terminated",
        params: IdParams,
        response: flatResponses({ 202: RequestState }),
      },
    },
    async (request, reply) => {
      const result = await sandboxes.delete(credentialOf(request), request.params.id);
      reply.code(202).header("location", `/v1/sandboxes/${result.id}`).header("retry-after", "1");
      return result;
    },
  );

  app.post(
    verbPath("/v1/sandboxes", "id", "exec"),
    {
      config: FLAT,
      schema: {
        operationId: "ExecSandbox",
        description:
          "Runs a command in a running sandbox and answers 200 with one of three outcomes: completed (exit code), timed out or indeterminate (dispatched, outcome unread), each with stdout, stderr and truncated. Send an Idempotency-Key so a retry replays the recorded outcome instead of running the command again. 409 sandbox_not_running (never wakes it), 409 quarantined; spawn_failed (422) and sandbox_stopped (409) mean the command did not run.",
        tags: TAGS,
        summary: "Run a command in a running sandbox; completed, timed-out or indeterminate (all 200)",
        params: IdParams,
        body: ExecRequest,
        response: flatResponses({ 200: ExecResponse }),
      },
    },
    async (request) => {
      return execs.exec(credentialOf(request), request.params.id, request.body, idempotencyKeyOf(request));
    },
  );
}
