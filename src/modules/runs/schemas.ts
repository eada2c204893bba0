// Wire schemas of runs (contract 2.2) and their types, shared by the routes and the service.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { PageOf, Timestamp } from "../../http/schemas.js";

export const RUN_LABEL_MAX_CHARS = 256;
export const TERMINAL_RUN_STATUSES = ["succeeded", "failed", "canceled"] as const;

export const Run = named(
  "Run",
  Type.Object(
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
  ),
);

export const StartRunRequest = Type.Object(
  {
    project_id: Type.Optional(Type.String({ maxLength: 64, description: "Omit for the default project" })),
    label: Type.Optional(Type.String({ maxLength: RUN_LABEL_MAX_CHARS })),
    parent_run_id: Type.Optional(Type.String({ maxLength: 64, description: "Empty starts a new tree root" })),
    execute_as_workload: Type.Optional(
      Type.String({ maxLength: 100, description: "Registered workload name; empty runs as the caller" }),
    ),
  },
  { additionalProperties: false },
);

export const CompleteRunRequest = Type.Object(
  {
    id: Type.Optional(Type.String({ description: "When present, must equal the path id" })),
    status: Type.Union(TERMINAL_RUN_STATUSES.map((s) => Type.Literal(s))),
  },
  { additionalProperties: false },
);

export const ListRunsResponse = PageOf("runs", Run);

export type RunJson = Static<typeof Run>;
export type StartRunBody = Static<typeof StartRunRequest>;
export type CompleteRunBody = Static<typeof CompleteRunRequest>;
export type ListRunsJson = Static<typeof ListRunsResponse>;
