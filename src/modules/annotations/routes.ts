import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE } from "../../http/pagination.js";
import { standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import type { AnnotationService } from "./annotation-service.js";
import type { AnnotationSchemaService } from "./schema-service.js";
import {
  AnnotateRangeRequest,
  AnnotateRequest,
  AnnotationSchema,
  EventIdResponse,
  ListAnnotationsQuery,
  ListAnnotationsResponse,
  RegisterAnnotationSchemaRequest,
  SchemaName,
  Version,
} from "./schemas.js";

const SCHEMA_TAGS = ["AnnotationSchemaService"];
const TAGS = ["AnnotationService"];
const PROMOTED_PREFIX = "promoted.";
const SchemaResponse = Type.Object({ schema: AnnotationSchema }, { additionalProperties: false });

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
        description:
          "Registers a new version of an annotation schema (version 1 for a new name). A change that is not backward compatible with the latest live version is 400 failed_precondition; a json_schema that is not JSON Schema draft 2020-12 is 400 invalid_argument.",
        tags: SCHEMA_TAGS,
        summary:
          "Register a schema version; refused (failed_precondition) when not backward compatible with the latest live version",
        body: RegisterAnnotationSchemaRequest,
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
        description:
          "Gets one annotation schema by name, at a version or the latest live one. 404 not_found for an unknown name or version.",
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
        description:
          "Lists annotation schemas: by default the latest live version per name; with include_archived every version, newest first.",
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
        description:
          "Archives a schema version (0 or omitted: the latest live one): archived_at is stamped, nothing is deleted. 404 not_found for an unknown name or version.",
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
        description:
          "Writes an annotation on a run (optionally on one of its events) or on a project; the payload is validated against the named schema at ingest (400 invalid_argument when it does not match). Resending the same event_id returns the existing annotation instead of a duplicate.",
        tags: TAGS,
        summary: "Annotate a run (or one of its events) or a project",
        body: AnnotateRequest,
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
        description:
          "Writes an annotation over a window of a run: either range_start_ns and range_end_ns, or two event ids of the run (mutually exclusive; 400 invalid_argument otherwise). Resending the same event_id returns the existing annotation.",
        tags: TAGS,
        summary: "Annotate a time window of a run, by nanosecond bounds or by two of its events",
        body: AnnotateRangeRequest,
        response: standardResponses({ 200: EventIdResponse }),
      },
    },
    async (request) => annotations.annotateRange(credentialOf(request), request.body),
  );

  app.get(
    "/v1/annotations",
    {
      schema: {
        operationId: "ListAnnotations",
        description:
          "Lists annotations newest first: the latest version per supersession key (superseded_count says how many were hidden), or every version with history. Rows that cannot be decoded are listed in skipped, never dropped.",
        tags: TAGS,
        summary: "Annotations newest first; by default the latest version per supersession key",
        querystring: ListAnnotationsQuery,
        response: standardResponses({ 200: ListAnnotationsResponse }),
      },
    },
    async (request) => {
      const query = request.query as Record<string, unknown> & typeof request.query;
      // No prototype: a filter `promoted.__proto__` is a key like any other, not a lost assignment.
      const promoted: Record<string, string> = Object.create(null);
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
