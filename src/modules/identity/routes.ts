import { standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { WhoAmIResponse } from "./schemas.js";
import { whoAmIView } from "./service.js";

export function registerIdentityRoutes(app: App): void {
  app.get(
    "/v1/whoami",
    {
      schema: {
        operationId: "WhoAmI",
        description:
          "The caller's organization and principal, resolved from the bearer credential. 401 unauthenticated without a valid key.",
        tags: ["IdentityService"],
        summary: "The organization and principal of the calling credential",
        response: standardResponses({ 200: WhoAmIResponse }),
      },
    },
    async (request) => whoAmIView(credentialOf(request)),
  );
}
