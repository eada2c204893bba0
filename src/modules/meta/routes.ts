import { Type } from "@sinclair/typebox";
import type { Config } from "../../config.js";
import { API_VERSION } from "../../http/app.js";
import { standardResponses } from "../../http/schemas.js";
import type { App } from "../../http/types.js";

export const ServiceConfigResponse = Type.Object(
  {
    api_base_url: Type.String({ description: "Base URL of this API (the /v1 routes hang off it)" }),
    session_plane_url: Type.String({ description: "Session-plane base URL; empty when none is deployed" }),
    ssh_host: Type.String({ description: "SSH gateway host; empty when none is deployed" }),
    api_version: Type.String(),
  },
  { additionalProperties: false },
);

/** `sessionPlaneUrl`: the plane's public base URL, known once it listens ("" when none runs). */
export function registerMetaRoutes(app: App, config: Config, sessionPlaneUrl: () => string): void {
  const body = () => ({
    api_base_url: config.publicApiUrl,
    session_plane_url: sessionPlaneUrl(),
    ssh_host: config.sshHost,
    api_version: API_VERSION,
  });
  app.get(
    "/v1/service-config",
    {
      config: { auth: false },
      schema: {
        operationId: "GetServiceConfig",
        description:
          "Discovery: the client-visible service URLs of this deployment (API, session plane, SSH gateway) and the API version. Unauthenticated.",
        tags: ["MetaService"],
        summary: "Client-visible sibling service URLs (unauthenticated discovery)",
        security: [],
        response: standardResponses({ 200: ServiceConfigResponse }),
      },
    },
    async () => body(),
  );
}
