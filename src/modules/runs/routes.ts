import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { standardResponses } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import { CompleteRunRequest, ListRunsResponse, Run, StartRunRequest } from "./schemas.js";
import type { RunService } from "./service.js";

const TAGS = ["RunService"];
const RunId = Type.String({ minLength: 1, maxLength: 64 });

const RunResponse = Type.Object({ run: Run }, { additionalProperties: false });

export function registerRunRoutes(app: App, runs: RunService): void {
  app.post(
    "/v1/runs",
    {
      config: { idempotentOperation: "StartRun" },
      schema: {
        operationId: "StartRun",
        description:
          "Starts a run in a project (default: the credential's), as a new tree root or under parent_run_id; with execute_as_workload the caller must hold launch rights on that workload (403 permission_denied). 404 not_found for an unknown project, parent or workload.",
        tags: TAGS,
        summary: "Start a run: a new tree root, or a child of parent_run_id",
        body: StartRunRequest,
        response: standardResponses({ 200: RunResponse }),
      },
    },
    async (request) => ({ run: await runs.start(credentialOf(request), request.body) }),
  );

  app.post(
    verbPath("/v1/runs", "id", "complete"),
    {
      config: { idempotentOperation: "CompleteRun" },
      schema: {
        operationId: "CompleteRun",
        description:
          "Records a run's terminal status (succeeded, failed or canceled) and its end time. 400 failed_precondition when the run is already completed; 404 not_found for an unknown run.",
        tags: TAGS,
        summary: "Record a run's terminal status and end time (once)",
        params: Type.Object({ id: RunId }),
        body: CompleteRunRequest,
        response: standardResponses({ 200: RunResponse }),
      },
    },
    async (request) => {
      const cred = credentialOf(request);
      if (request.body.id !== undefined && request.body.id !== request.params.id) {
        await runs.get(cred, request.params.id);
        throw invalid("body id must equal the path id");
      }
      return { run: await runs.complete(cred, request.params.id, request.body.status) };
    },
  );

  app.get(
    "/v1/runs/:id",
    {
      schema: {
        operationId: "GetRun",
        description: "Gets one run with its lineage fields. 404 not_found for an unknown id or another organization's.",
        tags: TAGS,
        summary: "Get a run",
        params: Type.Object({ id: RunId }),
        response: standardResponses({ 200: RunResponse }),
      },
    },
    async (request) => ({ run: await runs.get(credentialOf(request), request.params.id) }),
  );

  app.get(
    "/v1/runs",
    {
      schema: {
        operationId: "ListRuns",
        description: "Lists the organization's runs, newest first, a page at a time.",
        tags: TAGS,
        summary: "List runs, newest first",
        querystring: Type.Object(
          {
            ...PageQuery,
            project_id: Type.Optional(Type.String({ maxLength: 64, description: "Only runs of this project" })),
            parent_run_id: Type.Optional(Type.String({ maxLength: 64, description: "Only children of this run" })),
          },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: ListRunsResponse }),
      },
    },
    async (request) =>
      runs.list(
        credentialOf(request),
        { projectId: request.query.project_id, parentRunId: request.query.parent_run_id },
        request.query.page_size ?? DEFAULT_PAGE_SIZE,
        request.query.page_token,
      ),
  );
}
