import { Type } from "@sinclair/typebox";
import { EmptyObject, standardResponses } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import {
  DataViewList,
  DataViewName,
  DataViewResponse,
  PutDataViewRequest,
  QueryResult,
  RunDataViewRequest,
  RunTelemetrySqlRequest,
} from "./schemas.js";
import type { TelemetryViewService } from "./service.js";

const TAGS = ["TelemetryViewService"];
const NameParams = Type.Object({ name: DataViewName });

export function registerTelemetryRoutes(app: App, views: TelemetryViewService): void {
  app.put(
    "/v1/data-views/:name",
    {
      schema: {
        operationId: "PutDataView",
        description:
          "Creates or replaces a data view (a SELECT spec); the SQL is validated against the current column allowlist (400 invalid_argument) and spec_version bumped on every upsert.",
        tags: TAGS,
        summary:
          "Create or replace a data view by name (spec_version bumped); the spec is validated through the gateway",
        params: NameParams,
        body: PutDataViewRequest,
        response: standardResponses({ 200: DataViewResponse }),
      },
    },
    async (request) => ({ view: await views.put(credentialOf(request), request.params.name, request.body) }),
  );

  app.get(
    "/v1/data-views",
    {
      schema: {
        operationId: "ListDataViews",
        description: "Lists the organization's data views by name.",
        tags: TAGS,
        summary: "Every data view of the organization, by name",
        response: standardResponses({ 200: DataViewList }),
      },
    },
    async (request) => ({ views: await views.list(credentialOf(request)) }),
  );

  app.post(
    verbPath("/v1/data-views", "name", "run"),
    {
      schema: {
        operationId: "RunDataView",
        description:
          "Runs a data view: its spec is validated and compiled again under the forced-organization SQL gateway, so a view over a dropped column fails with 400 invalid_argument. 504 deadline_exceeded when the statement runs past its timeout.",
        tags: TAGS,
        summary: "Compile the view's spec fresh and run it under the forced-organization gateway",
        params: NameParams,
        body: RunDataViewRequest,
        response: standardResponses({ 200: QueryResult }),
      },
    },
    async (request) => views.run(credentialOf(request), request.params.name, request.body),
  );

  app.delete(
    "/v1/data-views/:name",
    {
      schema: {
        operationId: "DeleteDataView",
        description: "Deletes a data view. 404 not_found for an unknown name.",
        tags: TAGS,
        summary: "Delete a data view; its name is free again",
        params: NameParams,
        response: standardResponses({ 200: EmptyObject }),
      },
    },
    async (request) => {
      await views.delete(credentialOf(request), request.params.name);
      return {};
    },
  );

  app.post(
    "/v1/telemetry/sql",
    {
      schema: {
        operationId: "RunTelemetrySql",
        description:
          "Runs one caller-written SELECT over the telemetry relations under the forced-organization SQL gateway, with row and byte caps (truncated says when they cut the result). 400 invalid_argument for anything but one allowed SELECT; 504 deadline_exceeded past the statement timeout.",
        tags: TAGS,
        summary: "Run one untrusted SELECT under the gateway with stricter caps; never stored",
        body: RunTelemetrySqlRequest,
        response: standardResponses({ 200: QueryResult }),
      },
    },
    async (request) => views.runSql(credentialOf(request), request.body.sql, request.body.limit),
  );
}
