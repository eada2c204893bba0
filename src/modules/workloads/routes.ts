import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { EmptyObject, standardResponses, Timestamp } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import { WORKLOAD_NAME_PATTERN, type WorkloadService } from "./service.js";

const TAGS = ["WorkloadService"];
const Name = Type.String({ minLength: 1, maxLength: 100, pattern: WORKLOAD_NAME_PATTERN });
const NameParams = Type.Object({ name: Name });
const Policy = Type.Union([
  Type.Literal("WORKLOAD_LAUNCH_POLICY_UNSPECIFIED"),
  Type.Literal("WORKLOAD_LAUNCH_POLICY_MEMBERS"),
  Type.Literal("WORKLOAD_LAUNCH_POLICY_RESTRICTED"),
]);
const Cloud = Type.Union([Type.Literal("aws"), Type.Literal("gcp"), Type.Literal("azure")]);
const Field = (description: string) => Type.Optional(Type.String({ maxLength: 2048, description }));

export const FederationDescriptor = Type.Object(
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
);

export const FederationConfig = Type.Object(
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
);

const Launcher = Type.Object(
  {
    kind: Type.String({ description: '"user" (or empty): a member by user id; "service_account": a key id' }),
    principal_id: Type.String(),
  },
  { additionalProperties: false },
);

export const Workload = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    description: Type.String(),
    launch_acl: Type.Object({ policy: Policy, launchers: Type.Array(Launcher) }, { additionalProperties: false }),
    federation_configs: Type.Array(FederationConfig),
    created_by: Type.String(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { additionalProperties: false },
);
const WorkloadResponse = Type.Object({ workload: Workload }, { additionalProperties: false });

function sameName(bodyName: string | undefined, pathName: string): void {
  if (bodyName !== undefined && bodyName !== pathName) throw invalid("body name must equal the path name");
}

export function registerWorkloadRoutes(app: App, workloads: WorkloadService): void {
  app.post(
    "/v1/workloads",
    {
      config: { idempotentOperation: "CreateWorkload" },
      schema: {
        operationId: "CreateWorkload",
        tags: TAGS,
        summary: "Register a workload identity (any member); it starts with the default MEMBERS launch ACL",
        body: Type.Object(
          { name: Name, description: Type.Optional(Type.String({ maxLength: 4096 })) },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: WorkloadResponse }),
      },
    },
    async (request) => ({ workload: await workloads.create(credentialOf(request), request.body) }),
  );

  app.get(
    "/v1/workloads/:name",
    {
      schema: {
        operationId: "GetWorkload",
        tags: TAGS,
        summary: "Get a workload, including its launch ACL",
        params: NameParams,
        response: standardResponses({ 200: WorkloadResponse }),
      },
    },
    async (request) => ({ workload: await workloads.get(credentialOf(request), request.params.name) }),
  );

  app.get(
    "/v1/workloads",
    {
      schema: {
        operationId: "ListWorkloads",
        tags: TAGS,
        summary: "List workloads by name",
        querystring: Type.Object(PageQuery, { additionalProperties: false }),
        response: standardResponses({
          200: Type.Object(
            { workloads: Type.Array(Workload), next_page_token: Type.String() },
            { additionalProperties: false },
          ),
        }),
      },
    },
    async (request) =>
      workloads.list(credentialOf(request), request.query.page_size ?? DEFAULT_PAGE_SIZE, request.query.page_token),
  );

  app.delete(
    "/v1/workloads/:name",
    {
      schema: {
        operationId: "DeleteWorkload",
        tags: TAGS,
        summary: "Delete a workload and its federation configs (owner or admin)",
        params: NameParams,
        response: standardResponses({ 200: EmptyObject }),
      },
    },
    async (request) => {
      await workloads.delete(credentialOf(request), request.params.name);
      return {};
    },
  );

  app.put(
    "/v1/workloads/:name/launch-acl",
    {
      schema: {
        operationId: "SetWorkloadLaunchAcl",
        tags: TAGS,
        summary: "Replace the launch ACL (owner or admin)",
        params: NameParams,
        body: Type.Object(
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
        ),
        response: standardResponses({ 200: WorkloadResponse }),
      },
    },
    async (request) => {
      sameName(request.body.name, request.params.name);
      return { workload: await workloads.setLaunchAcl(credentialOf(request), request.params.name, request.body.acl) };
    },
  );

  app.post(
    "/v1/workloads/:name/federation",
    {
      config: { idempotentOperation: "AddWorkloadFederation" },
      schema: {
        operationId: "AddWorkloadFederation",
        tags: TAGS,
        summary: "Register a cloud federation config (owner or admin); the server derives the audience",
        params: NameParams,
        body: Type.Object(
          {
            name: Type.Optional(Type.String({ description: "When present, must equal the path name" })),
            cloud: Cloud,
            descriptor: FederationDescriptor,
          },
          { additionalProperties: false },
        ),
        response: standardResponses({
          200: Type.Object({ federation_config: FederationConfig }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => {
      sameName(request.body.name, request.params.name);
      const { cloud, descriptor } = request.body;
      return {
        federation_config: await workloads.addFederation(credentialOf(request), request.params.name, {
          cloud,
          descriptor,
        }),
      };
    },
  );

  app.get(
    "/v1/workloads/:name/federation",
    {
      schema: {
        operationId: "ListWorkloadFederation",
        tags: TAGS,
        summary: "List the workload's live federation configs in creation order",
        params: NameParams,
        response: standardResponses({
          200: Type.Object({ federation_configs: Type.Array(FederationConfig) }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => ({
      federation_configs: await workloads.listFederation(credentialOf(request), request.params.name),
    }),
  );

  app.delete(
    "/v1/workloads/:name/federation/:federation_id",
    {
      schema: {
        operationId: "RemoveWorkloadFederation",
        tags: TAGS,
        summary: "Remove a federation config; idempotent for the right workload",
        params: Type.Object({ name: Name, federation_id: Type.String({ minLength: 1, maxLength: 64 }) }),
        response: standardResponses({ 200: EmptyObject }),
      },
    },
    async (request) => {
      await workloads.removeFederation(credentialOf(request), request.params.name, request.params.federation_id);
      return {};
    },
  );
}
