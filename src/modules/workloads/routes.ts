import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { EmptyObject, standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import {
  AddWorkloadFederationRequest,
  CreateWorkloadRequest,
  FederationConfig,
  ListWorkloadsResponse,
  Name,
  SetWorkloadLaunchAclRequest,
  Workload,
} from "./schemas.js";
import type { WorkloadService } from "./service.js";

const TAGS = ["WorkloadService"];
const NameParams = Type.Object({ name: Name });
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
        description:
          "Registers a workload identity with the default launch ACL (any member may launch). Open to any organization member; a sandbox-scoped credential is refused (403 permission_denied). 409 already_exists when the name is taken.",
        tags: TAGS,
        summary: "Register a workload identity (any member); it starts with the default MEMBERS launch ACL",
        body: CreateWorkloadRequest,
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
        description: "Gets one workload by name, its launch ACL included. 404 not_found for an unknown name.",
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
        description: "Lists the organization's workloads by name, with their launch ACLs and federation configs.",
        tags: TAGS,
        summary: "List workloads by name",
        querystring: Type.Object(PageQuery, { additionalProperties: false }),
        response: standardResponses({ 200: ListWorkloadsResponse }),
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
        description:
          "Deletes a workload and its federation configs. Owner or admin only (403 permission_denied). 404 not_found for an unknown name.",
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
        description:
          "Replaces a workload's launch ACL: RESTRICTED must list at least one launcher and MEMBERS none (400 invalid_argument). Owner or admin only (403 permission_denied).",
        tags: TAGS,
        summary: "Replace the launch ACL (owner or admin)",
        params: NameParams,
        body: SetWorkloadLaunchAclRequest,
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
        description:
          "Registers a cloud federation config for a workload; the server derives the audience from the cloud and descriptor (only the selected cloud's fields may be set, else 400 invalid_argument). A retry with the same Idempotency-Key and request returns the same row.",
        tags: TAGS,
        summary: "Register a cloud federation config (owner or admin); the server derives the audience",
        params: NameParams,
        body: AddWorkloadFederationRequest,
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
        description:
          "Lists a workload's live federation configs in creation order. 404 not_found for an unknown workload.",
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
        description:
          "Removes a federation config; removing an already removed config of the right workload succeeds again. A wrong workload or another organization's id is 404 not_found.",
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
