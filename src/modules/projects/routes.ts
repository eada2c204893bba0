import { Type } from "@sinclair/typebox";
import { DEFAULT_PAGE_SIZE, PageQuery } from "../../http/pagination.js";
import { DecimalString, PageOf, standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { invalid } from "../../lib/errors.js";
import { Project } from "./schemas.js";
import { type ProjectService, parseIfMatch } from "./service.js";

const TAGS = ["ProjectService"];
export const SLUG_PATTERN = "^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$";
const Name = Type.String({ minLength: 1, maxLength: 200 });
const Description = Type.String({ maxLength: 4096, description: "At most 4 KiB (UTF-8 bytes)" });

const ProjectResponse = Type.Object({ project: Project }, { additionalProperties: false });
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });

export function registerProjectRoutes(app: App, projects: ProjectService): void {
  app.post(
    "/v1/projects",
    {
      config: { idempotentOperation: "CreateProject" },
      schema: {
        operationId: "CreateProject",
        description:
          "Creates a project in the caller's organization. 409 already_exists when the slug is taken (slugs are unique per organization and immutable).",
        tags: TAGS,
        summary: "Create a project",
        body: Type.Object(
          {
            name: Name,
            slug: Type.String({ pattern: SLUG_PATTERN, minLength: 1, maxLength: 63 }),
            description: Type.Optional(Description),
          },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: ProjectResponse }),
      },
    },
    async (request) => ({ project: await projects.create(credentialOf(request), request.body) }),
  );

  app.get(
    "/v1/projects/:id",
    {
      schema: {
        operationId: "GetProject",
        description: "Gets one project by id. 404 not_found for an unknown id or another organization's.",
        tags: TAGS,
        summary: "Get a project; the ETag header carries its version",
        params: IdParams,
        response: standardResponses({ 200: ProjectResponse }),
      },
    },
    async (request, reply) => {
      const project = await projects.get(credentialOf(request), request.params.id);
      reply.header("etag", `"${project.version}"`);
      return { project };
    },
  );

  app.get(
    "/v1/projects",
    {
      schema: {
        operationId: "ListProjects",
        description:
          "Lists the organization's projects, newest first, a page at a time (empty next_page_token on the last page).",
        tags: TAGS,
        summary: "List projects, newest first",
        querystring: Type.Object(PageQuery, { additionalProperties: false }),
        response: standardResponses({
          200: PageOf("projects", Project),
        }),
      },
    },
    async (request) =>
      projects.list(credentialOf(request), request.query.page_size ?? DEFAULT_PAGE_SIZE, request.query.page_token),
  );

  app.patch(
    "/v1/projects/:id",
    {
      schema: {
        operationId: "UpdateProject",
        description:
          "Changes a project's name or description (omitted fields unchanged, an empty description clears it; the slug is immutable). With If-Match: <version>, 412 precondition_failed when the project changed meanwhile. 404 not_found for an unknown id.",
        tags: TAGS,
        summary: "Update name or description; If-Match makes it conditional on the version",
        params: IdParams,
        headers: Type.Object({
          "if-match": Type.Optional(Type.String({ description: 'The project version, e.g. "3"' })),
        }),
        body: Type.Object(
          {
            id: Type.Optional(Type.String({ description: "When present, must equal the path id" })),
            name: Type.Optional(Name),
            description: Type.Optional(Description),
          },
          { additionalProperties: false },
        ),
        response: standardResponses({ 200: ProjectResponse }),
      },
    },
    async (request, reply) => {
      const cred = credentialOf(request);
      const { id, ...change } = request.body;
      if (id !== undefined && id !== request.params.id) {
        await projects.get(cred, request.params.id);
        throw invalid("body id must equal the path id");
      }
      const project = await projects.update(cred, request.params.id, change, parseIfMatch(request.headers["if-match"]));
      reply.header("etag", `"${project.version}"`);
      return { project };
    },
  );

  app.delete(
    "/v1/projects/:id",
    {
      schema: {
        operationId: "DeleteProject",
        description:
          "Deletes a project. Without cascade only a project with no runs, API keys or volumes (else 400 failed_precondition); with cascade=true its dependents too, counted in the answer as decimal strings. The organization's default project cannot be deleted (400 failed_precondition).",
        tags: TAGS,
        summary: "Delete a project; with cascade=true also its runs, events and project-bound API keys",
        params: IdParams,
        querystring: Type.Object(
          { cascade: Type.Optional(Type.Boolean({ description: "Delete dependents too (default false)" })) },
          { additionalProperties: false },
        ),
        response: standardResponses({
          200: Type.Object(
            {
              api_keys_deleted: DecimalString,
              runs_deleted: DecimalString,
              secrets_deleted: DecimalString,
              volumes_deleted: DecimalString,
            },
            { additionalProperties: false },
          ),
        }),
      },
    },
    async (request) => projects.delete(credentialOf(request), request.params.id, request.query.cascade ?? false),
  );
}
