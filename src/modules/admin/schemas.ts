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

export const EgressAllowlist = Type.Object(
  {
    organization_id: Type.String(),
    hosts: Type.Array(Type.String(), {
      description: "Exact lowercase host names and *.domain wildcards, sorted; empty: only the hosts of bound secrets",
    }),
  },
  { additionalProperties: false },
);

export const SetEgressAllowlistRequest = Type.Object(
  {
    hosts: Type.Array(Type.String({ minLength: 1, maxLength: 255 }), {
      maxItems: 256,
      description: "The whole list (it replaces the current one)",
    }),
  },
  { additionalProperties: false },
);
