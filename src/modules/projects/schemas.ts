// Wire schema of a project (contract 2.1) and its type, shared by the routes and the service.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { DecimalString, Timestamp } from "../../http/schemas.js";

export const Project = named(
  "Project",
  Type.Object(
    {
      id: Type.String(),
      name: Type.String(),
      slug: Type.String(),
      description: Type.String(),
      created_at: Timestamp,
      updated_at: Timestamp,
      created_by: Type.String(),
      last_run_at: Type.Optional(Timestamp),
      run_count: DecimalString,
      version: DecimalString,
      is_default: Type.Boolean({ description: "The organization's default project" }),
    },
    { additionalProperties: false },
  ),
);

export type ProjectJson = Static<typeof Project>;
