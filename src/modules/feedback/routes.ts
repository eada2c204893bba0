import { standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { CreateFeedbackRequest, FeedbackCreated } from "./schemas.js";
import type { FeedbackService } from "./service.js";

export function registerFeedbackRoutes(app: App, feedback: FeedbackService): void {
  app.post(
    "/v1/feedback",
    {
      config: { idempotentOperation: "CreateFeedback" },
      schema: {
        operationId: "CreateFeedback",
        tags: ["FeedbackService"],
        summary: "Submit product feedback; a repeated fingerprint returns the original report's id",
        body: CreateFeedbackRequest,
        response: standardResponses({
          200: FeedbackCreated,
        }),
      },
    },
    async (request) => feedback.create(credentialOf(request), request.body),
  );
}
