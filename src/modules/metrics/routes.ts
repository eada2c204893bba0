// GET /metrics (GetMetrics): the Prometheus text exposition, on the API port, for the
// operator (docs/metrics.md, docs/api-decisions.md "Metrics"). It authenticates itself: a
// Prometheus server may hold WARREN_METRICS_TOKEN, which is no API key.
import type { FastifyReply, FastifyRequest } from "fastify";
import { bearerSecret } from "../../http/app.js";
import { standardResponses } from "../../http/schemas.js";
import type { App } from "../../http/types.js";
import type { MetricsService } from "./service.js";

export function registerMetricsRoutes(app: App, metrics: MetricsService): void {
  app.get(
    "/metrics",
    {
      config: { auth: false },
      onRequest: async (request: FastifyRequest) => metrics.authorize(bearerSecret(request.headers.authorization)),
      schema: {
        operationId: "GetMetrics",
        description:
          "Prometheus metrics of this server (text format 0.0.4), for WARREN_METRICS_TOKEN or an owner key of the operator organization.",
        tags: ["AdminService"],
        summary:
          "Prometheus metrics (text format 0.0.4); WARREN_METRICS_TOKEN or an owner key of the operator organization",
        response: {
          ...standardResponses({}),
          200: {
            description: "Prometheus text exposition format; every metric is described in docs/metrics.md",
            content: { "text/plain": { schema: { type: "string" } } },
          },
        },
      },
    } as Record<string, unknown>,
    async (_request: FastifyRequest, reply: FastifyReply) => {
      const { contentType, body } = await metrics.scrape();
      return reply.type(contentType).send(body);
    },
  );
}
