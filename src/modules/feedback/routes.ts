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
        description:
          "Stores a product-feedback report. A fingerprint already stored (given, or derived from the content when omitted) returns the original report's id and stores no duplicate; `relayed` says whether it reached the review channel. Any organization-scoped credential may send one, a sandbox-scoped one included. 400 invalid_argument past the limits of contract 8.",
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
