import { Type } from "@sinclair/typebox";
import { EmptyObject, standardResponses } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import { ApiKeyInfo, IssuedApiKey } from "../identity/schemas.js";
import { QuotaLimit } from "../usage/schemas.js";
import { QUOTA_METRICS } from "../usage/service.js";
import {
  AdminCreateApiKeyRequest,
  EgressAllowlist,
  Host,
  HostId,
  Organization,
  OrgRef,
  SetEgressAllowlistRequest,
} from "./schemas.js";
import type { AdminService } from "./service.js";

const TAGS = ["AdminService"];
const Slug = Type.String({ pattern: "^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$" });

export function registerAdminRoutes(app: App, admin: AdminService): void {
  // Runs before validation, so a caller without rights gets 403 whatever the request holds.
  const operatorOnly = async (request: { credential: Parameters<typeof credentialOf>[0]["credential"] }) =>
    admin.authorize(credentialOf(request));

  app.post(
    "/v1/admin/organizations",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminCreateOrganization",
        description:
          "Operator: creates an organization with its default project. 409 already_exists when the slug is taken. Operator key only (403 permission_denied).",
        tags: TAGS,
        summary: "Create an organization (with its default project)",
        body: Type.Object(
          { slug: Slug, name: Type.Optional(Type.String({ maxLength: 200 })) },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: Type.Object({ organization: Organization }) }),
      },
    },
    async (request) => ({ organization: await admin.createOrganization(request.body.slug, request.body.name) }),
  );

  app.get(
    "/v1/admin/organizations",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminListOrganizations",
        description: "Operator: lists every organization.",
        tags: TAGS,
        summary: "List organizations",
        response: standardResponses({ 200: Type.Object({ organizations: Type.Array(Organization) }) }),
      },
    },
    async () => ({ organizations: await admin.listOrganizations() }),
  );

  app.post(
    "/v1/admin/api-keys",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminCreateApiKey",
        description:
          "Operator: issues an API key for an organization; its secret is in this answer only. 404 not_found for an unknown organization.",
        tags: TAGS,
        summary: "Issue an API key (for a new principal, or an existing one); the secret is returned once",
        body: AdminCreateApiKeyRequest,
        response: standardResponses({ 200: IssuedApiKey }),
      },
    },
    async (request) => admin.createKey(request.body),
  );

  app.get(
    "/v1/admin/organizations/:organization/api-keys",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminListApiKeys",
        description: "Operator: lists an organization's API keys (never their secrets).",
        tags: TAGS,
        summary: "List an organization's API keys (never their secrets)",
        params: Type.Object({ organization: OrgRef }),
        response: standardResponses({ 200: Type.Object({ api_keys: Type.Array(ApiKeyInfo) }) }),
      },
    },
    async (request) => ({ api_keys: await admin.listKeys(request.params.organization) }),
  );

  // A regex parameter, so the key id ends at the colon (a plain `:key_id::revoke` would be
  // read as one parameter named "key_id::revoke").
  app.post(
    "/v1/admin/api-keys/:key_id([^:/]+)::revoke",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminRevokeApiKey",
        description: "Operator: revokes an API key; it stops authenticating at once. 404 not_found for an unknown key.",
        tags: TAGS,
        summary: "Revoke an API key; it is refused from then on",
        params: Type.Object({ key_id: Type.String({ minLength: 1, maxLength: 64 }) }),
        response: standardResponses({ 200: EmptyObject }),
      },
    },
    async (request) => {
      await admin.revokeKey(request.params.key_id);
      return {};
    },
  );

  app.post(
    "/v1/admin/master-key::rotate",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminRotateMasterKey",
        description: "Operator: seals every stored secret and deployment key again under a new master key generation.",
        tags: TAGS,
        summary:
          "Re-wrap every secret data key under the current master key (a new one when keys live in the data dir)",
        response: standardResponses({
          200: Type.Object(
            { master_key_id: Type.String(), data_keys_rewrapped: Type.Integer() },
            { additionalProperties: false },
          ),
        }),
      },
    },
    async () => admin.rotateMasterKey(),
  );

  for (const verb of ["quarantine", "release"] as const) {
    app.post(
      verbPath("/v1/admin/sandboxes", "id", verb),
      {
        preValidation: operatorOnly,
        schema: {
          operationId: verb === "quarantine" ? "AdminQuarantineSandbox" : "AdminReleaseSandbox",
          description:
            verb === "quarantine"
              ? "Operator: quarantines a sandbox (every mutating verb then answers 409 quarantined) with a reason."
              : "Operator: releases a quarantined sandbox to the state it was in.",
          tags: TAGS,
          summary:
            verb === "quarantine"
              ? "Quarantine a sandbox: the reconciler leaves it alone and every mutating verb is 409 quarantined"
              : "Release a quarantined sandbox",
          params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }),
          body: Type.Object(
            { reason: Type.Optional(Type.String({ maxLength: 1024 })) },
            { additionalProperties: false },
          ),
          response: standardResponses({ 200: EmptyObject }),
        },
      },
      async (request) => {
        await admin.quarantine(request.params.id, verb === "quarantine", request.body.reason ?? "");
        return {};
      },
    );
  }

  app.get(
    "/v1/admin/hosts",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminListHosts",
        description:
          "Operator: every host of the deployment with its state, capacity, live sandboxes and heartbeat age.",
        tags: TAGS,
        summary:
          "List the hosts of the deployment: state, heartbeat, live sandboxes, and whether a draining one is drained",
        response: standardResponses({ 200: Type.Object({ hosts: Type.Array(Host) }, { additionalProperties: false }) }),
      },
    },
    async () => ({ hosts: await admin.listHosts() }),
  );

  const hostActions = {
    drain: [
      "AdminDrainHost",
      "Drain a host: placement skips it, its warm pool empties, its pending replications finish",
      "Operator: drains a host: no new sandbox is placed on it, its warm pool is emptied and its pending replications finish (drained says when); its sandboxes stay. 404 not_found for an unknown host.",
    ],
    cordon: [
      "AdminCordonHost",
      "Cordon a host: placement skips it, nothing else changes",
      "Operator: cordons a host: no new sandbox is placed on it; nothing else changes. 404 not_found for an unknown host.",
    ],
    uncordon: [
      "AdminUncordonHost",
      "Return a draining or cordoned host to ready",
      "Operator: takes a host back from draining or cordoned. 404 not_found for an unknown host.",
    ],
  } as const;
  for (const [action, [operationId, summary, description]] of Object.entries(hostActions) as [
    keyof typeof hostActions,
    (typeof hostActions)[keyof typeof hostActions],
  ][]) {
    app.post(
      `/v1/admin/hosts/:host_id([^:/]+)::${action}`,
      {
        preValidation: operatorOnly,
        schema: {
          operationId,
          description,
          tags: TAGS,
          summary,
          params: Type.Object({ host_id: HostId }),
          response: standardResponses({ 200: Type.Object({ host: Host }, { additionalProperties: false }) }),
        },
      },
      async (request) => ({ host: await admin.hostAction(request.params.host_id, action) }),
    );
  }

  app.put(
    "/v1/admin/organizations/:organization/quotas/:metric",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminSetQuota",
        description:
          "Operator: sets an organization's limit of one quota metric (decimal string). 400 invalid_argument for an unknown metric.",
        tags: TAGS,
        summary: "Set (or with limit null, reset to the default) one quota limit of an organization",
        params: Type.Object({
          organization: OrgRef,
          metric: Type.Union(QUOTA_METRICS.map((m) => Type.Literal(m))),
        }),
        body: Type.Object(
          { limit: Type.Union([Type.Integer({ minimum: 0, maximum: 1_000_000_000 }), Type.Null()]) },
          { additionalProperties: false },
        ),
        response: standardResponses({
          200: Type.Object({ snapshot: Type.Object({ limits: Type.Array(QuotaLimit) }) }),
        }),
      },
    },
    async (request) => ({
      snapshot: await admin.setQuota(request.params.organization, request.params.metric, request.body.limit),
    }),
  );

  app.get(
    "/v1/admin/organizations/:organization/egress-allowlist",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminGetEgressAllowlist",
        description: "Operator: the hosts an organization's gateway_only sandboxes may reach.",
        tags: TAGS,
        summary: "The hosts gateway_only sandboxes of an organization reach besides their secrets' hosts",
        params: Type.Object({ organization: OrgRef }),
        response: standardResponses({ 200: EgressAllowlist }),
      },
    },
    async (request) => admin.egressAllowlist(request.params.organization),
  );

  app.put(
    "/v1/admin/organizations/:organization/egress-allowlist",
    {
      preValidation: operatorOnly,
      schema: {
        operationId: "AdminSetEgressAllowlist",
        description:
          "Operator: replaces an organization's egress allowlist (exact host names and *.domain wildcards). 400 invalid_argument for a malformed host.",
        tags: TAGS,
        summary: "Replace an organization's egress allowlist (effective from the next request through the gateway)",
        params: Type.Object({ organization: OrgRef }),
        body: SetEgressAllowlistRequest,
        response: standardResponses({ 200: EgressAllowlist }),
      },
    },
    async (request) => admin.setEgressAllowlist(request.params.organization, request.body.hosts),
  );
}
