import { Type } from "@sinclair/typebox";
import { standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { whoAmIView } from "./service.js";

export const WhoAmIResponse = Type.Object(
  {
    organization: Type.Object({ id: Type.String(), slug: Type.String() }, { additionalProperties: false }),
    principal: Type.Object(
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
  },
  { additionalProperties: false },
);

export function registerIdentityRoutes(app: App): void {
  app.get(
    "/v1/whoami",
    {
      schema: {
        operationId: "WhoAmI",
        tags: ["IdentityService"],
        summary: "The organization and principal of the calling credential",
        response: standardResponses({ 200: WhoAmIResponse }),
      },
    },
    async (request) => whoAmIView(credentialOf(request)),
  );
}
