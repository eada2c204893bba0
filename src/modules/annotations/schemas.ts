// Wire schemas of annotation schemas and annotations (contract 2.7) and their types, shared by
// the routes and the services.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { PageQuery } from "../../http/pagination.js";
import { Timestamp } from "../../http/schemas.js";

export const SCHEMA_NAME_PATTERN = "^[a-z0-9](?:[a-z0-9._-]{0,126}[a-z0-9])?$";

export const SchemaName = Type.String({ minLength: 1, maxLength: 128, pattern: SCHEMA_NAME_PATTERN });
export const Version = Type.String({
  pattern: "^[0-9]{1,9}$",
  description: "Decimal string; 0 or omitted means the latest live version",
});
const Id = Type.String({ minLength: 1, maxLength: 64 });
const EventId = Type.String({ minLength: 1, maxLength: 64, description: "26-character ULID" });
const NsString = Type.String({ pattern: "^[0-9]{1,19}$", description: "Wall-clock nanoseconds as a decimal string" });
const PayloadJson = Type.String({ minLength: 2, maxLength: 262_144, description: "A JSON object as a string" });

export const PromotedField = named(
  "PromotedField",
  Type.Object(
    {
      field: Type.String(),
      identity: Type.Boolean(),
      bloom: Type.Boolean(),
      slot: Type.String({ description: "Indexed column assigned by the server; stable for the schema name" }),
    },
    { additionalProperties: false },
  ),
);

export const AnnotationSchema = named(
  "AnnotationSchema",
  Type.Object(
    {
      id: Type.String(),
      name: Type.String(),
      version: Type.String({ description: "Monotonic per organization and name, from 1 (decimal string)" }),
      description: Type.String(),
      json_schema: Type.String({ description: "JSON Schema draft 2020-12 document" }),
      promoted_fields: Type.Array(PromotedField),
      created_at: Timestamp,
      archived_at: Type.Optional(Timestamp),
    },
    { additionalProperties: false },
  ),
);

export const RegisterAnnotationSchemaRequest = Type.Object(
  {
    name: SchemaName,
    description: Type.Optional(Type.String({ maxLength: 4096 })),
    json_schema: Type.String({ minLength: 1, maxLength: 262_144 }),
    promoted_fields: Type.Optional(
      Type.Array(
        Type.Object(
          {
            field: Type.String({ minLength: 1, maxLength: 128 }),
            identity: Type.Optional(Type.Boolean()),
            bloom: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        { maxItems: 8 },
      ),
    ),
  },
  { additionalProperties: false },
);

export const Annotation = named(
  "Annotation",
  Type.Object(
    {
      event_id: Type.String(),
      run_id: Type.Optional(Type.String()),
      project_id: Type.String(),
      lineage_path: Type.Optional(Type.String()),
      schema_name: Type.String(),
      schema_version: Type.Optional(Type.String()),
      ts_wall_ns: Type.String(),
      principal: Type.Optional(Type.String()),
      target_event_id: Type.Optional(Type.String()),
      range_start_ns: Type.Optional(Type.String()),
      range_end_ns: Type.Optional(Type.String()),
      range_start_event_id: Type.Optional(Type.String()),
      range_end_event_id: Type.Optional(Type.String()),
      payload_json: Type.String({ description: "The annotated JSON object exactly as sent" }),
    },
    { additionalProperties: false },
  ),
);

export const EventIdResponse = Type.Object({ event_id: Type.String() }, { additionalProperties: false });

export const AnnotateRequest = Type.Object(
  {
    schema_name: SchemaName,
    payload_json: PayloadJson,
    event_id: Type.Optional(EventId),
    run_id: Type.Optional(Id),
    project_id: Type.Optional(Id),
    target_event_id: Type.Optional(EventId),
  },
  { additionalProperties: false },
);

export const AnnotateRangeRequest = Type.Object(
  {
    run_id: Id,
    schema_name: SchemaName,
    payload_json: PayloadJson,
    event_id: Type.Optional(EventId),
    range_start_ns: Type.Optional(NsString),
    range_end_ns: Type.Optional(NsString),
    range_start_event_id: Type.Optional(EventId),
    range_end_event_id: Type.Optional(EventId),
  },
  { additionalProperties: false },
);

export const ListAnnotationsQuery = Type.Object(
  {
    ...PageQuery,
    run_id: Type.Optional(Id),
    project_id: Type.Optional(Id),
    schema_name: Type.Optional(SchemaName),
    target_event_id: Type.Optional(EventId),
    history: Type.Optional(Type.Boolean({ description: "Every version instead of the latest per supersession key" })),
  },
  {
    additionalProperties: false,
    patternProperties: {
      "^promoted\\.": Type.String({
        maxLength: 1024,
        description: "promoted.<field>=<value>: equality on a bloom-indexed promoted field (needs schema_name)",
      }),
    },
  },
);

const SkippedAnnotation = named(
  "SkippedAnnotation",
  Type.Object(
    { event_id: Type.String(), reason: Type.String() },
    {
      additionalProperties: false,
      description: "A stored row that could not be decoded here, named rather than dropped",
    },
  ),
);

export const ListAnnotationsResponse = Type.Object(
  {
    annotations: Type.Array(Annotation),
    skipped: Type.Array(SkippedAnnotation),
    superseded_count: Type.String({ description: "Stored versions hidden behind the rows of this page" }),
    next_page_token: Type.String(),
  },
  { additionalProperties: false },
);

export type AnnotationSchemaJson = Static<typeof AnnotationSchema>;
export type RegisterAnnotationSchemaBody = Static<typeof RegisterAnnotationSchemaRequest>;
export type AnnotationJson = Static<typeof Annotation>;
export type EventIdJson = Static<typeof EventIdResponse>;
export type AnnotateBody = Static<typeof AnnotateRequest>;
export type AnnotateRangeBody = Static<typeof AnnotateRangeRequest>;
export type ListAnnotationsQueryJson = Static<typeof ListAnnotationsQuery>;
export type ListAnnotationsJson = Static<typeof ListAnnotationsResponse>;
