// Wire schemas of operator administration and their types, shared by the routes, the service
// and the admin CLI.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { Timestamp } from "../../http/schemas.js";

export const OrgRef = Type.String({ minLength: 1, maxLength: 64, description: "Organization id or slug" });

export const Organization = named(
  "Organization",
  Type.Object(
    {
      id: Type.String(),
      slug: Type.String(),
      name: Type.String(),
      is_operator: Type.Optional(Type.Boolean()),
      default_project_id: Type.Optional(Type.String()),
      created_at: Timestamp,
    },
    { additionalProperties: false },
  ),
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

export const EgressAllowlist = named(
  "EgressAllowlist",
  Type.Object(
    {
      organization_id: Type.String(),
      hosts: Type.Array(Type.String(), {
        description:
          "Exact lowercase host names and *.domain wildcards, sorted; empty: only the hosts of bound secrets",
      }),
    },
    { additionalProperties: false },
  ),
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

export const HostId = Type.String({ pattern: "^h_[0-9a-f]{24}$", description: "A host id (h_ and 24 hex digits)" });

const HostCapacity = named(
  "HostCapacity",
  Type.Object(
    {
      cpu_millis: Type.Optional(Type.Integer()),
      memory_mib: Type.Optional(Type.Integer()),
      storage_bytes: Type.Optional(Type.Integer()),
    },
    { additionalProperties: false },
  ),
);

/** A host of the deployment as the operator sees it (GET /v1/admin/hosts). */
export const Host = named(
  "Host",
  Type.Object(
    {
      id: Type.String(),
      role: Type.String(),
      state: Type.Union(
        ["joining", "ready", "draining", "cordoned", "unreachable", "dead"].map((state) => Type.Literal(state)),
      ),
      operator_state: Type.Union([Type.Literal("draining"), Type.Literal("cordoned"), Type.Null()], {
        description:
          "What an operator asked (null: nothing); kept while the host is unreachable or dead, and taken again when it returns",
      }),
      epoch: Type.Integer(),
      address: Type.Union([Type.String(), Type.Null()]),
      plane_address: Type.Union([Type.String(), Type.Null()]),
      ssh_address: Type.Union([Type.String(), Type.Null()]),
      capacity: HostCapacity,
      joined_at: Timestamp,
      heartbeat_at: Timestamp,
      heartbeat_age_seconds: Type.Number({ description: "By the database's clock" }),
      state_changed_at: Timestamp,
      live_sandboxes: Type.Integer({ description: "Its sandboxes not terminated or failed" }),
      pool_members: Type.Integer({ description: "Warm pool members, as of its last heartbeat" }),
      pending_replications: Type.Integer({
        description: "Its snapshots whose replication to the blob store is pending",
      }),
      drained: Type.Boolean({
        description: "Draining, with no warm pool member and no pending replication left (its sandboxes stay)",
      }),
      collection_leader: Type.Boolean({
        description: "Whether this host's server holds the lease of blob and volume collection now",
      }),
    },
    { additionalProperties: false },
  ),
);

export type HostJson = Static<typeof Host>;
