// Unauthenticated operational routes: liveness, readiness and the OpenAPI document.
import type { App } from "../../http/types.js";
import type { Db } from "../../store/db.js";

export function registerSystemRoutes(app: App, db: Db): void {
  const hidden = { hide: true } as Record<string, unknown>;
  app.get("/healthz", { config: { auth: false }, schema: hidden }, async () => ({ status: "ok" }));
  app.get("/readyz", { config: { auth: false }, schema: hidden }, async (_request, reply) => {
    try {
      await db.query("SELECT 1");
      return { status: "ready" };
    } catch {
      return reply
        .code(503)
        .send({ code: "unavailable", message: "the store is not reachable", request_id: _request.id });
    }
  });
  app.get("/v1/openapi.json", { config: { auth: false }, schema: hidden }, async () => app.swagger());
}
