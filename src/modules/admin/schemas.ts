// Wire schemas of operator administration and their types, shared by the routes, the service
// and the admin CLI.
import { type Static, Type } from "@sinclair/typebox";
import { Timestamp } from "../../http/schemas.js";

export const OrgRef = Type.String({ minLength: 1, maxLength: 64, description: "Organization id or slug" });

export const Organization = Type.Object(
  {
    id: Type.String(),
    slug: Type.String(),
    name: Type.String(),
    is_operator: Type.Optional(Type.Boolean()),
    default_project_id: Type.Optional(Type.String()),
    created_at: Timestamp,
  },
  { additionalProperties: false },
);

export const AdminCreateApiKeyRequest = Type.Object(
  {
    organization: OrgRef,
    name: Type.String({ minLength: 1, maxLength: 200 }),
    kind: Type.Optional(Type.Union([Type.Literal("user"), Type.Literal("service_account"), Type.Literal("workload")])),
    role: Type.Optional(Type.Union([Type.Literal("owner"), Type.Literal("admin"), Type.Literal("member")])),
    email: Type.Optional(Type.String({ format: "email", maxLength: 320 })),
    workload_name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    principal_id: Type.Optional(Type.String({ maxLength: 64 })),
    project_id: Type.Optional(Type.String({ maxLength: 64, description: "Default project of the key" })),
  },
  { additionalProperties: false },
);

export type OrganizationJson = Static<typeof Organization>;
export type AdminCreateApiKeyBody = Static<typeof AdminCreateApiKeyRequest>;
