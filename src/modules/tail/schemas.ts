// Wire shapes of the run tail (docs/api-decisions.md "Run tail"). The stream is
// text/event-stream, so these type the `data` of its items rather than a JSON response.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";

export const TailQuery = Type.Object(
  {
    cursor: Type.Optional(
      Type.String({ maxLength: 64, description: "Resume after this SSE id (Last-Event-ID wins when both are sent)" }),
    ),
    lineage_path: Type.Optional(
      Type.String({
        maxLength: 1024,
        pattern: "^[A-Za-z0-9_.-]*$",
        description: "Only events whose lineage_path is this one or below it",
      }),
    ),
  },
  { additionalProperties: false },
);
export type TailQuery = Static<typeof TailQuery>;

/** The data of a telemetry event on the stream (the SSE `id` is its cursor). */
export const TailEvent = named(
  "TailEvent",
  Type.Object({
    event_id: Type.String(),
    name: Type.String(),
    kind: Type.Union([Type.Literal("event"), Type.Literal("annotation"), Type.Literal("span")], {
      description: "span: an OpenTelemetry span ingested by POST /v1/traces (the payload is the span)",
    }),
    project_id: Type.String(),
    run_id: Type.String(),
    lineage_path: Type.String(),
    /** Nanoseconds since the epoch, as a decimal string. */
    ts_wall_ns: Type.String(),
    principal: Type.Optional(Type.String()),
    payload: Type.Record(Type.String(), Type.Unknown()),
    schema_name: Type.Optional(Type.String()),
    schema_version: Type.Optional(Type.Integer()),
    target_event_id: Type.Optional(Type.String()),
  }),
);
export type TailEvent = Static<typeof TailEvent>;

/** The data of the final `end` item: the run completed (or was deleted) and everything before is sent. */
export const TailEnd = named(
  "TailEnd",
  Type.Object({
    run_id: Type.String(),
    status: Type.Optional(Type.String()),
    reason: Type.Union([Type.Literal("run_completed"), Type.Literal("run_deleted")]),
  }),
);
export type TailEnd = Static<typeof TailEnd>;
