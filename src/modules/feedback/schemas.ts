// Wire schemas of feedback and their types, shared by the routes and the service.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";

export const FEEDBACK_SURFACES = ["cli", "api", "web", "sandbox", "telemetry", "annotations", "docs", "other"] as const;
export const FEEDBACK_SEVERITIES = ["critical", "high", "medium", "low", ""] as const;

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

export const FeedbackCreated = named(
  "FeedbackCreated",
  Type.Object({ id: Type.String(), relayed: Type.Boolean() }, { additionalProperties: false }),
);

export type CreateFeedbackBody = Static<typeof CreateFeedbackRequest>;
export type FeedbackCreatedJson = Static<typeof FeedbackCreated>;
