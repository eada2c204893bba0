import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { EmptyObject, standardResponses } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import {
  CreateSecretRequest,
  ListSecretsResponse,
  SandboxSecret,
  SandboxSecretGrant,
  SubjectKind,
  Value,
} from "./schemas.js";
import { MAX_GRANTS, type SecretService } from "./service.js";

const TAGS = ["SecretService"];
const SecretId = Type.String({ minLength: 1, maxLength: 64 });
const IdParams = Type.Object({ id: SecretId });

const SecretResponse = Type.Object({ secret: SandboxSecret }, { additionalProperties: false });

function samePathId(bodyId: string | undefined, pathId: string): void {
  if (bodyId !== undefined && bodyId !== pathId) throw invalid("body id must equal the path id");
}

export function registerSecretRoutes(app: App, secrets: SecretService): void {
  app.post(
    "/v1/secrets",
    {
      config: { idempotentOperation: "CreateSandboxSecret" },
      schema: {
        operationId: "CreateSandboxSecret",
        description:
          "Stores a write-only secret bound to one delivery (and, for egress, one exact HTTPS host); the value is never returned. Owner or admin only (403 permission_denied); the creator is granted it. 409 already_exists when the name is taken.",
        tags: TAGS,
        summary: "Create a write-only secret (owner or admin); the creator is granted it",
        body: CreateSecretRequest,
        response: standardResponses({ 200: SecretResponse }),
      },
    },
    async (request) => ({ secret: await secrets.create(credentialOf(request), request.body) }),
  );

  app.get(
    "/v1/secrets",
    {
      schema: {
        operationId: "ListSandboxSecrets",
        description: "Lists the organization's secrets, newest first, metadata only (never a value).",
        tags: TAGS,
        summary: "List secrets, newest first (metadata only)",
        querystring: Type.Object(PageQuery, { additionalProperties: false }),
        response: standardResponses({ 200: ListSecretsResponse }),
      },
    },
    async (request) =>
      secrets.list(credentialOf(request), request.query.page_size ?? DEFAULT_PAGE_SIZE, request.query.page_token),
  );

  app.post(
    "/v1/secrets/:id/grants",
    {
      schema: {
        operationId: "GrantSandboxSecret",
        description:
          "Grants a subject (user, service account or workload) the use of a secret; idempotent. At most 200 grants per secret, the creator's included (400 invalid_argument past it); 400 failed_precondition for a revoked secret.",
        tags: TAGS,
        summary: `Grant a subject the use of a secret (owner or admin; idempotent; at most ${MAX_GRANTS} grants)`,
        params: IdParams,
        body: Type.Object(
          {
            id: Type.Optional(Type.String({ description: "When present, must equal the path id" })),
            subject_kind: SubjectKind,
            subject_id: Type.String({ minLength: 1, maxLength: 64 }),
          },
          { additionalProperties: false },
        ),
        response: standardResponses({
          200: Type.Object({ grant: SandboxSecretGrant }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => {
      samePathId(request.body.id, request.params.id);
      const { subject_kind, subject_id } = request.body;
      return { grant: await secrets.grant(credentialOf(request), request.params.id, subject_kind, subject_id) };
    },
  );

  app.delete(
    "/v1/secrets/:id/grants/:subject_kind/:subject_id",
    {
      schema: {
        operationId: "UngrantSandboxSecret",
        description: "Removes one subject's grant of a secret. 404 not_found for an unknown secret.",
        tags: TAGS,
        summary: "Remove a subject's grant (owner or admin; idempotent)",
        params: Type.Object({
          id: SecretId,
          subject_kind: SubjectKind,
          subject_id: Type.String({ minLength: 1, maxLength: 64 }),
        }),
        response: standardResponses({ 200: EmptyObject }),
      },
    },
    async (request) => {
      const { id, subject_kind, subject_id } = request.params;
      await secrets.ungrant(credentialOf(request), id, subject_kind, subject_id);
      return {};
    },
  );

  app.get(
    "/v1/secrets/:id/grants",
    {
      schema: {
        operationId: "ListSandboxSecretGrants",
        description:
          "Lists a secret's grants, sorted by subject kind and id (at most 200). 404 not_found for an unknown secret.",
        tags: TAGS,
        summary: "List a secret's grants, sorted by subject kind then id",
        params: IdParams,
        response: standardResponses({
          200: Type.Object({ grants: Type.Array(SandboxSecretGrant) }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => ({ grants: await secrets.listGrants(credentialOf(request), request.params.id) }),
  );

  app.post(
    verbPath("/v1/secrets", "id", "rotate"),
    {
      schema: {
        operationId: "RotateSandboxSecret",
        description:
          "Replaces a secret's value: current_version is incremented and rotated_at stamped; the value is never returned. Owner or admin only; 400 failed_precondition for a revoked secret.",
        tags: TAGS,
        summary: "Replace the value (owner or admin): current_version + 1, rotated_at stamped",
        params: IdParams,
        body: Type.Object(
          { id: Type.Optional(Type.String({ description: "When present, must equal the path id" })), value: Value },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: SecretResponse }),
      },
    },
    async (request) => {
      samePathId(request.body.id, request.params.id);
      return { secret: await secrets.rotate(credentialOf(request), request.params.id, request.body.value) };
    },
  );

  app.post(
    verbPath("/v1/secrets", "id", "revoke"),
    {
      schema: {
        operationId: "RevokeSandboxSecret",
        description:
          "Revokes a secret: revoked_at is stamped and it can no longer be delivered or granted. Owner or admin only (403 permission_denied).",
        tags: TAGS,
        summary: "Revoke a secret (owner or admin): revoked_at stamped; it can never be delivered again",
        params: IdParams,
        body: Type.Object(
          { id: Type.Optional(Type.String({ description: "When present, must equal the path id" })) },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: SecretResponse }),
      },
    },
    async (request) => {
      samePathId(request.body.id, request.params.id);
      return { secret: await secrets.revoke(credentialOf(request), request.params.id) };
    },
  );
}
