import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { standardResponses, Timestamp } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import type { AnnotationService } from "./annotation-service.js";
import { type AnnotationSchemaService, SCHEMA_NAME_PATTERN } from "./schema-service.js";

const SCHEMA_TAGS = ["AnnotationSchemaService"];
const TAGS = ["AnnotationService"];
const SchemaName = Type.String({ minLength: 1, maxLength: 128, pattern: SCHEMA_NAME_PATTERN });
const Version = Type.String({
  pattern: "^[0-9]{1,9}$",
  description: "Decimal string; 0 or omitted means the latest live version",
});
const Id = Type.String({ minLength: 1, maxLength: 64 });
const EventId = Type.String({ minLength: 1, maxLength: 64, description: "26-character ULID" });
const NsString = Type.String({ pattern: "^[0-9]{1,19}$", description: "Wall-clock nanoseconds as a decimal string" });
const PROMOTED_PREFIX = "promoted.";

export const PromotedField = Type.Object(
  {
    field: Type.String(),
    identity: Type.Boolean(),
    bloom: Type.Boolean(),
    slot: Type.String({ description: "Indexed column assigned by the server; stable for the schema name" }),
  },
  { additionalProperties: false },
);

export const AnnotationSchema = Type.Object(
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
);
const SchemaResponse = Type.Object({ schema: AnnotationSchema }, { additionalProperties: false });

const AnnotationRow = Type.Object(
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
);

const EventIdResponse = Type.Object({ event_id: Type.String() }, { additionalProperties: false });
const PayloadJson = Type.String({ minLength: 2, maxLength: 262_144, description: "A JSON object as a string" });

export function registerAnnotationRoutes(
  app: App,
  schemas: AnnotationSchemaService,
  annotations: AnnotationService,
): void {
  app.post(
    "/v1/annotation-schemas",
    {
      config: { idempotentOperation: "RegisterAnnotationSchema" },
      schema: {
        operationId: "RegisterAnnotationSchema",
        tags: SCHEMA_TAGS,
        summary:
          "Register a schema version; refused (failed_precondition) when not backward compatible with the latest live version",
        body: Type.Object(
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
        ),
        response: standardResponses({ 200: SchemaResponse }),
      },
    },
    async (request) => ({ schema: await schemas.register(credentialOf(request), request.body) }),
  );

  app.get(
    "/v1/annotation-schemas/:name",
    {
      schema: {
        operationId: "GetAnnotationSchema",
        tags: SCHEMA_TAGS,
        summary: "Get a schema version (default: the latest live one)",
        params: Type.Object({ name: SchemaName }),
        querystring: Type.Object({ version: Type.Optional(Version) }, { additionalProperties: false }),
        response: standardResponses({ 200: SchemaResponse }),
      },
    },
    async (request) => ({
      schema: await schemas.get(credentialOf(request), request.params.name, request.query.version),
    }),
  );

  app.get(
    "/v1/annotation-schemas",
    {
      schema: {
        operationId: "ListAnnotationSchemas",
        tags: SCHEMA_TAGS,
        summary: "The latest live version per name; with include_archived every version, newest first",
        querystring: Type.Object({ include_archived: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
        response: standardResponses({
          200: Type.Object({ schemas: Type.Array(AnnotationSchema) }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => ({
      schemas: await schemas.list(credentialOf(request), request.query.include_archived ?? false),
    }),
  );

  app.post(
    "/v1/annotation-schemas/:name(^[a-z0-9._-]+)::archive",
    {
      schema: {
        operationId: "ArchiveAnnotationSchema",
        tags: SCHEMA_TAGS,
        summary: "Stamp archived_at on a version (never deletes)",
        params: Type.Object({ name: SchemaName }),
        body: Type.Object(
          { name: Type.Optional(Type.String()), version: Type.Optional(Version) },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: SchemaResponse }),
      },
    },
    async (request) => {
      if (request.body.name !== undefined && request.body.name !== request.params.name) {
        throw invalid("body name must equal the path name");
      }
      return { schema: await schemas.archive(credentialOf(request), request.params.name, request.body.version) };
    },
  );

  app.post(
    "/v1/annotations",
    {
      schema: {
        operationId: "Annotate",
        tags: TAGS,
        summary: "Annotate a run (or one of its events) or a project",
        body: Type.Object(
          {
            schema_name: SchemaName,
            payload_json: PayloadJson,
            event_id: Type.Optional(EventId),
            run_id: Type.Optional(Id),
            project_id: Type.Optional(Id),
            target_event_id: Type.Optional(EventId),
          },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: EventIdResponse }),
      },
    },
    async (request) => annotations.annotate(credentialOf(request), request.body),
  );

  app.post(
    "/v1/annotations::range",
    {
      schema: {
        operationId: "AnnotateRange",
        tags: TAGS,
        summary: "Annotate a time window of a run, by nanosecond bounds or by two of its events",
        body: Type.Object(
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
        ),
        response: standardResponses({ 200: EventIdResponse }),
      },
    },
    async (request) => annotations.annotateRange(credentialOf(request), request.body),
  );

  const ListQuery = Type.Object(
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

  app.get(
    "/v1/annotations",
    {
      schema: {
        operationId: "ListAnnotations",
        tags: TAGS,
        summary: "Annotations newest first; by default the latest version per supersession key",
        querystring: ListQuery,
        response: standardResponses({
          200: Type.Object(
            {
              annotations: Type.Array(AnnotationRow),
              skipped: Type.Array(
                Type.Object({ event_id: Type.String(), reason: Type.String() }, { additionalProperties: false }),
              ),
              superseded_count: Type.String({ description: "Stored versions hidden behind the rows of this page" }),
              next_page_token: Type.String(),
            },
            { additionalProperties: false },
          ),
        }),
      },
    },
    async (request) => {
      const query = request.query as Record<string, unknown> & typeof request.query;
      const promoted: Record<string, string> = {};
      for (const [key, value] of Object.entries(query)) {
        if (key.startsWith(PROMOTED_PREFIX)) promoted[key.slice(PROMOTED_PREFIX.length)] = String(value);
      }
      return annotations.list(credentialOf(request), {
        run_id: query.run_id,
        project_id: query.project_id,
        schema_name: query.schema_name,
        target_event_id: query.target_event_id,
        history: query.history,
        promoted,
        pageSize: query.page_size ?? DEFAULT_PAGE_SIZE,
        pageToken: query.page_token,
      });
    },
  );
}
