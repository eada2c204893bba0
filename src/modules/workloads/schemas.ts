// Wire schemas of workload identities (launch ACLs, cloud federation) and their types, shared
// by the routes and the service.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { PageOf, Timestamp } from "../../http/schemas.js";

export const WORKLOAD_NAME_PATTERN = "^[a-z0-9](?:[a-z0-9._-]{0,98}[a-z0-9])?$";

export const Name = Type.String({ minLength: 1, maxLength: 100, pattern: WORKLOAD_NAME_PATTERN });
export const Policy = named(
  "WorkloadLaunchPolicy",
  Type.Union([
    Type.Literal("WORKLOAD_LAUNCH_POLICY_UNSPECIFIED"),
    Type.Literal("WORKLOAD_LAUNCH_POLICY_MEMBERS"),
    Type.Literal("WORKLOAD_LAUNCH_POLICY_RESTRICTED"),
  ]),
);
export const Cloud = named(
  "WorkloadCloud",
  Type.Union([Type.Literal("aws"), Type.Literal("gcp"), Type.Literal("azure")]),
);
const Field = (description: string) => Type.Optional(Type.String({ maxLength: 2048, description }));

export const FederationDescriptor = named(
  "WorkloadFederationDescriptor",
  Type.Object(
    {
      role_arn: Field("aws: IAM role ARN (required)"),
      region: Field("aws: region; empty means us-east-1"),
      project_id: Field("gcp: project id (required)"),
      project_number: Field("gcp: project number (required)"),
      pool_id: Field("gcp: workload identity pool id (required)"),
      provider_id: Field("gcp: pool provider id (required)"),
      service_account_email: Field("gcp: service account to impersonate (optional)"),
      application_id: Field("azure: Entra application (client) id (required)"),
      entra_tenant_id: Field("azure: Entra tenant id (required)"),
    },
    { additionalProperties: false, description: "Only the selected cloud's fields may be set" },
  ),
);

export const FederationConfig = named(
  "WorkloadFederationConfig",
  Type.Object(
    {
      id: Type.String(),
      workload_id: Type.String(),
      cloud: Cloud,
      audience: Type.String({ description: "Provider-canonical audience derived by the server" }),
      descriptor: FederationDescriptor,
      created_by: Type.String(),
      created_at: Timestamp,
    },
    { additionalProperties: false },
  ),
);

const Launcher = named(
  "WorkloadLauncher",
  Type.Object(
    {
      kind: Type.String({ description: '"user" (or empty): a member by user id; "service_account": a key id' }),
      principal_id: Type.String(),
    },
    { additionalProperties: false },
  ),
);

const WorkloadLaunchAcl = named(
  "WorkloadLaunchAcl",
  Type.Object(
    {
      policy: Policy,
      launchers: Type.Array(Launcher, { description: "Meaningful only for RESTRICTED; empty otherwise" }),
    },
    { additionalProperties: false },
  ),
);

export const Workload = named(
  "Workload",
  Type.Object(
    {
      id: Type.String(),
      name: Type.String(),
      description: Type.String(),
      launch_acl: WorkloadLaunchAcl,
      federation_configs: Type.Array(FederationConfig),
      created_by: Type.String(),
      created_at: Timestamp,
      updated_at: Timestamp,
    },
    { additionalProperties: false },
  ),
);
export const CreateWorkloadRequest = Type.Object(
  { name: Name, description: Type.Optional(Type.String({ maxLength: 4096 })) },
  { additionalProperties: false },
);

export const SetWorkloadLaunchAclRequest = Type.Object(
  {
    name: Type.Optional(Type.String({ description: "When present, must equal the path name" })),
    acl: Type.Object(
      {
        policy: Policy,
        launchers: Type.Optional(
          Type.Array(
            Type.Object(
              {
                kind: Type.Optional(Type.String({ maxLength: 32 })),
                principal_id: Type.String({ minLength: 1, maxLength: 64 }),
              },
              { additionalProperties: false },
            ),
            { maxItems: 200 },
          ),
        ),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);

export const AddWorkloadFederationRequest = Type.Object(
  {
    name: Type.Optional(Type.String({ description: "When present, must equal the path name" })),
    cloud: Cloud,
    descriptor: FederationDescriptor,
  },
  { additionalProperties: false },
);

export const ListWorkloadsResponse = PageOf("workloads", Workload);

export type CloudJson = Static<typeof Cloud>;
export type FederationDescriptorJson = Static<typeof FederationDescriptor>;
export type FederationConfigJson = Static<typeof FederationConfig>;
export type WorkloadJson = Static<typeof Workload>;
export type CreateWorkloadBody = Static<typeof CreateWorkloadRequest>;
export type SetWorkloadLaunchAclBody = Static<typeof SetWorkloadLaunchAclRequest>;
export type AddWorkloadFederationBody = Static<typeof AddWorkloadFederationRequest>;
export type ListWorkloadsJson = Static<typeof ListWorkloadsResponse>;
