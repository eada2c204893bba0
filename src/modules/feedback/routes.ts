import { Type } from "@sinclair/typebox";
import { standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { FEEDBACK_SEVERITIES, FEEDBACK_SURFACES, type FeedbackService } from "./service.js";

const LongText = Type.Optional(Type.String({ maxLength: 10_000 }));

export const CreateFeedbackRequest = Type.Object(
  {
    title: Type.String({ minLength: 1, maxLength: 300 }),
    surface: Type.Union(FEEDBACK_SURFACES.map((s) => Type.Literal(s))),
    body: LongText,
    expected: LongText,
    actual: LongText,
    repro: LongText,
    severity: Type.Optional(
      Type.Union(
        FEEDBACK_SEVERITIES.map((s) => Type.Literal(s)),
        { description: "Empty for general feedback" },
      ),
    ),
    fingerprint: Type.Optional(Type.String({ maxLength: 300 })),
    svc_version: Type.Optional(Type.String({ maxLength: 100 })),
    evidence: Type.Optional(Type.Array(Type.String({ maxLength: 256 }), { maxItems: 50 })),
  },
  { additionalProperties: false },
);

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
          200: Type.Object({ id: Type.String(), relayed: Type.Boolean() }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => feedback.create(credentialOf(request), request.body),
  );
}
