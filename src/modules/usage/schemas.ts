// Wire schema of a quota limit and its type, shared by the usage and admin routes and the service.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { DecimalString } from "../../http/schemas.js";

export const QuotaLimit = named(
  "QuotaLimit",
  Type.Object(
    {
      metric: Type.String({ description: "Stable quota name, e.g. sandboxes.running" }),
      unit: Type.String(),
      limit: DecimalString,
      current: DecimalString,
      reserved: DecimalString,
    },
    { additionalProperties: false },
  ),
);

export type QuotaLimitJson = Static<typeof QuotaLimit>;
