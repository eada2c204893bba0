// Wire schemas of credentials as the API shows them (WhoAmI, issued and listed API keys) and
// their types, shared by the identity and admin routes and the services.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { Timestamp } from "../../http/schemas.js";

const OrgRef = named(
  "OrgRef",
  Type.Object({ id: Type.String(), slug: Type.String() }, { additionalProperties: false }),
);
const Principal = named(
  "Principal",
  Type.Object(
    {
      id: Type.String(),
      kind: Type.Union([Type.Literal("user"), Type.Literal("service_account"), Type.Literal("workload")]),
      email: Type.String({ description: "Empty for non-users" }),
      key_id: Type.String({ description: "Empty for a browser session" }),
      key_name: Type.String({ description: "Empty for a browser session" }),
      workload_name: Type.String({ description: "Empty unless bound to a registered workload" }),
    },
    { additionalProperties: false },
  ),
);

export const WhoAmIResponse = named(
  "WhoAmI",
  Type.Object(
    {
      organization: OrgRef,
      principal: Principal,
    },
    { additionalProperties: false },
  ),
);

export const ApiKeyInfo = named(
  "ApiKeyInfo",
  Type.Object(
    {
      key_id: Type.String(),
      key_name: Type.String(),
      principal_id: Type.String(),
      kind: Type.String(),
      role: Type.String(),
      email: Type.String(),
      workload_name: Type.String(),
      project_id: Type.String(),
      created_at: Timestamp,
      revoked_at: Type.String({ description: "Empty while the key is live" }),
      expires_at: Type.String({
        description: "A console session's expiry; empty for an API key (keys do not expire)",
      }),
      session_of_key_id: Type.String({
        description: "A console session: the API key it was exchanged for (and acts as); empty for an API key",
      }),
    },
    { additionalProperties: false },
  ),
);

export const IssuedApiKey = named(
  "IssuedApiKey",
  Type.Object(
    {
      key_id: Type.String(),
      key_name: Type.String(),
      principal_id: Type.String(),
      org_id: Type.String(),
      api_key: Type.String({ description: "The secret; shown only in this response" }),
    },
    { additionalProperties: false },
  ),
);

export const ConsoleSession = named(
  "ConsoleSession",
  Type.Object(
    {
      session_id: Type.String({ description: "Listed and revoked with the API keys (AdminListApiKeys)" }),
      expires_at: Timestamp,
      created_at: Timestamp,
    },
    { additionalProperties: false },
  ),
);

export type WhoAmIJson = Static<typeof WhoAmIResponse>;
export type ApiKeyInfoJson = Static<typeof ApiKeyInfo>;
export type IssuedApiKeyJson = Static<typeof IssuedApiKey>;
