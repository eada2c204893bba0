// Shared wire schemas: the two error envelopes of contract 7.1 and helpers that attach them
// to every route's responses, so the OpenAPI document states them for each operation.
import { type TArray, type TSchema, type TString, Type } from "@sinclair/typebox";
import { named } from "./openapi.js";

export const ErrorEnvelope = Type.Object(
  {
    code: Type.String({ description: "Stable snake_case machine code" }),
    message: Type.String({ description: "Human text; clients must not parse it" }),
    details: Type.Optional(
      Type.Object(
        {
          quota: Type.Optional(
            Type.Object(
              {
                metric: Type.String(),
                limit: Type.String({ description: "Configured limit (decimal string)" }),
                current: Type.String({ description: "Current use (decimal string)" }),
                reserved: Type.String({ description: "Use reserved by admissions in flight (decimal string)" }),
                retry_after_seconds: Type.Integer(),
              },
              { additionalProperties: false },
            ),
          ),
        },
        { additionalProperties: true },
      ),
    ),
    request_id: Type.Optional(Type.String({ description: "Correlation id (also in the x-request-id header)" })),
  },
  { $id: "ErrorEnvelope", additionalProperties: false, description: "Error envelope of the non-sandbox services" },
);

export const FlatErrorEnvelope = Type.Object(
  {
    code: Type.String({ description: "Stable snake_case machine code" }),
    message: Type.String({ description: "Human text; clients must not parse it" }),
    request_id: Type.String({ description: "Correlation id" }),
  },
  {
    $id: "FlatErrorEnvelope",
    additionalProperties: false,
    description: "Flat error envelope of sandbox and snapshot routes",
  },
);

export const ErrorRef = Type.Unsafe<unknown>({ $ref: "ErrorEnvelope#" });
export const FlatErrorRef = Type.Unsafe<unknown>({ $ref: "FlatErrorEnvelope#" });

/** Success responses plus the 429 and default error of the standard envelope (contract 7.1). */
export function standardResponses(success: Record<number, TSchema>): Record<string, TSchema> {
  const out: Record<string, TSchema> = {};
  for (const [status, schema] of Object.entries(success)) out[status] = schema;
  out["429"] = Type.Unsafe<unknown>({ $ref: "ErrorEnvelope#", description: "Quota or rate-limit rejection" });
  out.default = Type.Unsafe<unknown>({ $ref: "ErrorEnvelope#", description: "Error" });
  return out;
}

export const EmptyObject = Type.Object({}, { additionalProperties: false });

export const Timestamp = Type.String({ format: "date-time" });
export const DecimalString = Type.String({ pattern: "^-?[0-9]+$", description: "64-bit integer as a decimal string" });

/**
 * An object of string keys to string values with bounded keys, values and entry count.
 * TypeBox's `Record` keeps a key schema only as `patternProperties: {"^.*$": ...}`, so a
 * `maxLength` on the key never reached the validator; `propertyNames` carries it.
 */
export function StringMap(limits: {
  maxEntries: number;
  keyMaxLength: number;
  valueMaxLength: number;
  description: string;
}) {
  return Type.Record(Type.String(), Type.String({ maxLength: limits.valueMaxLength }), {
    maxProperties: limits.maxEntries,
    propertyNames: { minLength: 1, maxLength: limits.keyMaxLength },
    description: limits.description,
  });
}

/** A page of a list: the items under `key`, then `next_page_token` (empty on the last page). */
export function PageOf<K extends string, T extends TSchema>(key: K, item: T) {
  const properties = { [key]: Type.Array(item), next_page_token: Type.String() } as { [P in K]: TArray<T> } & {
    next_page_token: TString;
  };
  return Type.Object(properties, { additionalProperties: false });
}

export const FLAT = { envelope: "flat" as const };

const FlatQuotaError = named(
  "SandboxQuotaError",
  Type.Object(
    {
      code: Type.String(),
      message: Type.String(),
      request_id: Type.String(),
      metric: Type.String({
        description:
          "sandboxes.running, sandboxes.total or sandboxes.workspace_capacity_gib; snapshots.total on CreateSandboxSnapshot",
      }),
      limit: Type.String({ description: "Configured limit for the organization (decimal string)" }),
      retry_after_seconds: Type.Integer(),
      details: Type.Object({ quota: Type.Object({ metric: Type.String() }) }),
    },
    { additionalProperties: false, description: "Quota rejection of sandbox or snapshot admission" },
  ),
);

/** Flat-envelope error responses for the sandbox routes. */
export function flatResponses<const S extends Record<number, TSchema>>(success: S, quota = false) {
  return {
    ...success,
    429: quota ? FlatQuotaError : { ...FlatErrorRef, description: "Rate limited" },
    default: { ...FlatErrorRef, description: "Error (flat envelope)" },
  };
}
