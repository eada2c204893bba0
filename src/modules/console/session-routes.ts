// The console's sign-in and sign-out (docs/api-decisions.md "Console sessions"): an API key,
// sent once as the bearer credential, is exchanged for a session held in an HttpOnly cookie;
// the browser never keeps the key. Sign-out revokes the calling session and clears the cookie.
import { Type } from "@sinclair/typebox";
import { clearedSessionCookie, isSecureRequest, sessionCookie } from "../../http/console-auth.js";
import { EmptyObject, standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { requireOrgScoped } from "../identity/credential.js";
import { ConsoleSession } from "../identity/schemas.js";
import type { IdentityService } from "../identity/service.js";

// They issue and revoke a credential (contract 5.13, "how credentials are issued: not shown"): IdentityService.
const TAGS = ["IdentityService"];

export function registerConsoleSessionRoutes(app: App, identity: IdentityService, ttlSeconds: number): void {
  app.post(
    "/v1/console/sessions",
    {
      schema: {
        operationId: "CreateConsoleSession",
        tags: TAGS,
        summary:
          "Exchange the calling API key for a console session: an HttpOnly, SameSite=Strict cookie acting as the key (its organization, principal and role) until it expires or is revoked",
        description:
          "Exchanges the API key that authenticates the call for a browser session of the web console: a cookie (HttpOnly, SameSite=Strict, Secure over TLS) that acts as the key until it expires or is revoked; the key itself is never stored in the browser. Listed and revoked with the API keys. Errors: unauthenticated.",
        response: standardResponses({ 200: Type.Object({ session: ConsoleSession }, { additionalProperties: false }) }),
      },
    },
    async (request, reply) => {
      const cred = credentialOf(request);
      requireOrgScoped(cred, "open a console session");
      const opened = await identity.openConsoleSession(cred, ttlSeconds);
      void reply
        .header("set-cookie", sessionCookie(opened.secret, ttlSeconds, isSecureRequest(request)))
        .header("cache-control", "no-store");
      return {
        session: {
          session_id: opened.sessionId,
          expires_at: opened.expiresAt.toISOString(),
          created_at: opened.createdAt.toISOString(),
        },
      };
    },
  );

  app.delete(
    "/v1/console/sessions/current",
    {
      schema: {
        operationId: "DeleteConsoleSession",
        tags: TAGS,
        summary: "Sign out: revoke the calling console session (sent as its cookie) and clear the cookie",
        description:
          "Revokes the console session of the calling cookie (sign-out) and clears the cookie; later requests with it are unauthenticated. Errors: unauthenticated when the call carries no live session.",
        response: standardResponses({ 200: EmptyObject }),
      },
    },
    async (request, reply) => {
      const cred = credentialOf(request);
      requireOrgScoped(cred, "close a console session");
      await identity.closeConsoleSession(cred);
      void reply
        .header("set-cookie", clearedSessionCookie(isSecureRequest(request)))
        .header("cache-control", "no-store");
      return {};
    },
  );
}
