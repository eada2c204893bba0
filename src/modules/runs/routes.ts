import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { standardResponses, Timestamp } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import { RUN_LABEL_MAX_CHARS, type RunService, TERMINAL_RUN_STATUSES } from "./service.js";

const TAGS = ["RunService"];
const RunId = Type.String({ minLength: 1, maxLength: 64 });

export const Run = Type.Object(
  {
    id: Type.String(),
    project_id: Type.String(),
    label: Type.String(),
    parent_run_id: Type.Optional(Type.String()),
    root_run_id: Type.String(),
    lineage_path: Type.String({ description: "Dotted run ids from the tree root to this run" }),
    depth: Type.Integer({ description: "0 for a root run" }),
    status: Type.Union([
      Type.Literal("running"),
      Type.Literal("succeeded"),
      Type.Literal("failed"),
      Type.Literal("canceled"),
    ]),
    started_at: Timestamp,
    ended_at: Type.Optional(Timestamp),
    created_by: Type.String(),
    execute_as_workload: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);
const RunResponse = Type.Object({ run: Run }, { additionalProperties: false });

export function registerRunRoutes(app: App, runs: RunService): void {
  app.post(
    "/v1/runs",
    {
      config: { idempotentOperation: "StartRun" },
      schema: {
        operationId: "StartRun",
        tags: TAGS,
        summary: "Start a run: a new tree root, or a child of parent_run_id",
        body: Type.Object(
          {
            project_id: Type.Optional(Type.String({ maxLength: 64, description: "Omit for the default project" })),
            label: Type.Optional(Type.String({ maxLength: RUN_LABEL_MAX_CHARS })),
            parent_run_id: Type.Optional(Type.String({ maxLength: 64, description: "Empty starts a new tree root" })),
            execute_as_workload: Type.Optional(
              Type.String({ maxLength: 100, description: "Registered workload name; empty runs as the caller" }),
            ),
          },
          { additionalProperties: false },
        ),
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
        tags: TAGS,
        summary: "Record a run's terminal status and end time (once)",
        params: Type.Object({ id: RunId }),
        body: Type.Object(
          {
            id: Type.Optional(Type.String({ description: "When present, must equal the path id" })),
            status: Type.Union(TERMINAL_RUN_STATUSES.map((s) => Type.Literal(s))),
          },
          { additionalProperties: false },
        ),
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
        response: standardResponses({
          200: Type.Object({ runs: Type.Array(Run), next_page_token: Type.String() }, { additionalProperties: false }),
        }),
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
