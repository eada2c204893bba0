// Wire schemas of write-only sandbox secrets and their grants, and their types, shared by the
// routes and the service.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { PageOf, Timestamp } from "../../http/schemas.js";

export const DELIVERIES = [
  "SANDBOX_SECRET_DELIVERY_UNSPECIFIED",
  "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS",
  "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY",
  "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT",
] as const;

export const SUBJECT_KINDS = [
  "SANDBOX_SECRET_GRANT_SUBJECT_KIND_UNSPECIFIED",
  "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER",
  "SANDBOX_SECRET_GRANT_SUBJECT_KIND_SERVICE_ACCOUNT",
  "SANDBOX_SECRET_GRANT_SUBJECT_KIND_WORKLOAD",
] as const;

export const SECRET_NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$";

export const Delivery = named("SandboxSecretDelivery", Type.Union(DELIVERIES.map((d) => Type.Literal(d))));
export const SubjectKind = named(
  "SandboxSecretGrantSubjectKind",
  Type.Union(SUBJECT_KINDS.map((k) => Type.Literal(k))),
);
export const Value = Type.String({ minLength: 1, maxLength: 65_536, description: "Write-only; never returned" });

export const SandboxSecret = named(
  "SandboxSecret",
  Type.Object(
    {
      id: Type.String(),
      name: Type.String(),
      delivery: Delivery,
      dest_host: Type.String({ description: "Exact public HTTPS host; empty for sandbox-environment delivery" }),
      current_version: Type.Integer({ minimum: 1 }),
      created_by: Type.String(),
      created_at: Timestamp,
      rotated_at: Type.Optional(Timestamp),
      expires_at: Type.Optional(Timestamp),
      revoked_at: Type.Optional(Timestamp),
    },
    { additionalProperties: false, description: "Metadata only: the value is never returned" },
  ),
);

export const SandboxSecretGrant = named(
  "SandboxSecretGrant",
  Type.Object(
    { secret_id: Type.String(), subject_kind: SubjectKind, subject_id: Type.String() },
    { additionalProperties: false },
  ),
);

export const CreateSecretRequest = Type.Object(
  {
    name: Type.String({ pattern: SECRET_NAME_PATTERN, maxLength: 128 }),
    value: Value,
    delivery: Type.Optional(Delivery),
    dest_host: Type.Optional(Type.String({ maxLength: 253 })),
    expires_at: Type.Optional(Type.String({ format: "date-time" })),
  },
  { additionalProperties: false },
);

export const ListSecretsResponse = PageOf("secrets", SandboxSecret);

export type SecretJson = Static<typeof SandboxSecret>;
export type GrantJson = Static<typeof SandboxSecretGrant>;
export type CreateSecretBody = Static<typeof CreateSecretRequest>;
export type ListSecretsJson = Static<typeof ListSecretsResponse>;
