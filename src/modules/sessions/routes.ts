import { Type } from "@sinclair/typebox";
import { FLAT, flatResponses } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import type { SessionService } from "./service.js";
import { DEFAULT_TOKEN_TTL_SECONDS, MAX_TOKEN_TTL_SECONDS } from "./tokens.js";

export const EndpointTokenResponse = Type.Object(
  {
    token: Type.String({
      description: "Pass as Authorization: Bearer, the warren_token query parameter, or the cookie",
    }),
    url: Type.String({ description: "The endpoint's URL with the token as warren_token (a GET moves it to a cookie)" }),
    expires_at: Type.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

export const SshTokenResponse = Type.Object(
  {
    token: Type.String({ description: "The password for the SSH gateway (user: the sandbox id)" }),
    user: Type.String({ description: "The SSH user: the sandbox id" }),
    expires_at: Type.String({ format: "date-time" }),
  },
  { additionalProperties: false },
);

const TtlBody = Type.Optional(
  Type.Object(
    {
      ttl_seconds: Type.Optional(
        Type.Integer({
          minimum: 60,
          maximum: MAX_TOKEN_TTL_SECONDS,
          description: `Lifetime of the token; default ${DEFAULT_TOKEN_TTL_SECONDS}`,
        }),
      ),
    },
    { additionalProperties: false },
  ),
);

export function registerSessionRoutes(app: App, sessions: SessionService): void {
  app.post(
    verbPath("/v1/sandboxes", "id", "issueSshToken"),
    {
      config: FLAT,
      schema: {
        operationId: "IssueSshToken",
        description:
          "Issues a short-lived token for an SSH session into a running sandbox through the SSH gateway. 409 sandbox_not_running; 503 host_unavailable when its host cannot be reached.",
        tags: ["SandboxService"],
        summary: "Issue a short-lived token that logs in to the SSH gateway as one sandbox",
        params: Type.Object({ id: Type.String({ minLength: 1, maxLength: 128, description: "Sandbox id" }) }),
        body: TtlBody,
        response: flatResponses({ 200: SshTokenResponse }),
      },
    },
    async (request) => {
      const body = (request.body ?? {}) as { ttl_seconds?: number };
      return sessions.issueSshToken(
        credentialOf(request),
        request.params.id,
        body.ttl_seconds ?? DEFAULT_TOKEN_TTL_SECONDS,
      );
    },
  );

  app.post(
    verbPath("/v1/sandboxes/:id/endpoints", "port", "token"),
    {
      config: FLAT,
      schema: {
        operationId: "IssueEndpointToken",
        description:
          "Issues a short-lived token for one port endpoint of a sandbox on the session plane. 400 failed_precondition for a sandbox with network_access none; 403 permission_denied for a sandbox-scoped credential.",
        tags: ["SandboxService"],
        summary: "Issue a short-lived token that opens one port endpoint of one sandbox",
        params: Type.Object({
          id: Type.String({ minLength: 1, maxLength: 128, description: "Sandbox id" }),
          port: Type.Integer({ minimum: 1, maximum: 65_535, description: "A guest port among the sandbox's ports" }),
        }),
        body: Type.Optional(
          Type.Object(
            {
              ttl_seconds: Type.Optional(
                Type.Integer({
                  minimum: 60,
                  maximum: MAX_TOKEN_TTL_SECONDS,
                  description: `Lifetime of the token; default ${DEFAULT_TOKEN_TTL_SECONDS}`,
                }),
              ),
            },
            { additionalProperties: false },
          ),
        ),
        response: flatResponses({ 200: EndpointTokenResponse }),
      },
    },
    async (request) => {
      const body = (request.body ?? {}) as { ttl_seconds?: number };
      const issued = await sessions.issueToken(
        credentialOf(request),
        request.params.id,
        request.params.port,
        body.ttl_seconds ?? DEFAULT_TOKEN_TTL_SECONDS,
      );
      const separator = issued.url.includes("?") ? "&" : "?";
      return { ...issued, url: `${issued.url}${separator}warren_token=${encodeURIComponent(issued.token)}` };
    },
  );
}
