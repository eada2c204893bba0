import { Type } from "@sinclair/typebox";
import { standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { requireOrgScoped } from "../identity/credential.js";
import { QuotaLimit } from "./schemas.js";
import type { QuotaService } from "./service.js";

export function registerUsageRoutes(app: App, quotas: QuotaService): void {
  app.get(
    "/v1/usage",
    {
      schema: {
        operationId: "GetUsageSnapshot",
        description:
          "Every configured product quota of the caller's organization with its current and reserved use (decimal strings).",
        tags: ["UsageService"],
        summary: "Every configured product quota of the organization with its limit and current use",
        response: standardResponses({
          200: Type.Object(
            { snapshot: Type.Object({ limits: Type.Array(QuotaLimit) }, { additionalProperties: false }) },
            { additionalProperties: false },
          ),
        }),
      },
    },
    async (request) => {
      const cred = credentialOf(request);
      requireOrgScoped(cred, "read usage");
      return { snapshot: await quotas.snapshot(cred.orgId) };
    },
  );
}
