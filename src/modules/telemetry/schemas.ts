// Wire schemas of TelemetryViewService (contract 2.8, 4.2; shapes the contract leaves
// "not shown" are recorded in docs/api-decisions.md).
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { Timestamp } from "../../http/schemas.js";
import { PARAM_TYPES } from "./sql/catalog.js";

export const DATA_VIEW_NAME_PATTERN = "^[a-z0-9](?:[a-z0-9._-]{0,126}[a-z0-9])?$";
export const DataViewName = Type.String({ minLength: 1, maxLength: 128, pattern: DATA_VIEW_NAME_PATTERN });

/** Longest SQL text a view or a raw query may hold. */
export const MAX_SQL_CHARS = 20_000;
const PARAM_NAME_PATTERN = "^[a-z_][a-z0-9_]{0,62}$";

export const DataViewParam = named(
  "DataViewParam",
  Type.Object(
    {
      name: Type.String({ pattern: PARAM_NAME_PATTERN, description: "Bound as $n, n its 1-based place in params" }),
      type: Type.Union(
        PARAM_TYPES.map((t) => Type.Literal(t)),
        { description: "The SQL type the value is cast to" },
      ),
    },
    { additionalProperties: false },
  ),
);

export const DataViewSpec = named(
  "DataViewSpec",
  Type.Object(
    {
      type: Type.Literal("sql.v1", { description: "The tag of the spec format" }),
      sql: Type.String({
        minLength: 1,
        maxLength: MAX_SQL_CHARS,
        description: "One SELECT over the published relations",
      }),
      params: Type.Optional(Type.Array(DataViewParam, { maxItems: 32 })),
      render: Type.Optional(
        Type.Object({}, { additionalProperties: true, description: "Opaque render config, stored as sent" }),
      ),
    },
    { additionalProperties: false },
  ),
);

export const DataViewObject = named(
  "DataView",
  Type.Object(
    {
      name: Type.String(),
      description: Type.String(),
      spec: DataViewSpec,
      spec_version: Type.Integer({ minimum: 1, description: "Bumped on each upsert" }),
      created_at: Timestamp,
      updated_at: Timestamp,
    },
    { additionalProperties: false },
  ),
);

export const PutDataViewRequest = Type.Object(
  {
    name: Type.Optional(Type.String({ description: "When present, equal to the path name" })),
    description: Type.Optional(Type.String({ maxLength: 4096 })),
    spec: DataViewSpec,
  },
  { additionalProperties: false },
);

export const DataViewResponse = Type.Object({ view: DataViewObject }, { additionalProperties: false });
export const DataViewList = Type.Object({ views: Type.Array(DataViewObject) }, { additionalProperties: false });

const ParamValue = Type.Union([Type.String({ maxLength: 10_000 }), Type.Number(), Type.Boolean(), Type.Null()]);

export const RunDataViewRequest = Type.Object(
  {
    params: Type.Optional(
      Type.Record(Type.String(), ParamValue, {
        maxProperties: 32,
        description: "Values of the view's declared params by name; a missing one is null",
      }),
    ),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000, description: "Row cap (default 1000)" })),
  },
  { additionalProperties: false },
);

export const RunTelemetrySqlRequest = Type.Object(
  {
    sql: Type.String({ minLength: 1, maxLength: MAX_SQL_CHARS }),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, description: "Row cap (default 100)" })),
  },
  { additionalProperties: false },
);

export const QueryColumn = named(
  "QueryColumn",
  Type.Object(
    { name: Type.String(), type: Type.String({ description: "PostgreSQL type name (format_type)" }) },
    { additionalProperties: false },
  ),
);

export const QueryResult = named(
  "QueryResult",
  Type.Object(
    {
      columns: Type.Array(QueryColumn),
      rows: Type.Array(Type.Array(Type.Unknown()), { description: "Rows as arrays in column order" }),
      row_count: Type.Integer(),
      truncated: Type.Boolean({ description: "True when a row or byte cap cut the result" }),
      truncated_reason: Type.Optional(Type.Union([Type.Literal("row_limit"), Type.Literal("byte_limit")])),
      spec_version: Type.Optional(Type.Integer({ description: "The view version that ran (RunDataView)" })),
    },
    { additionalProperties: false },
  ),
);

export type DataViewJson = Static<typeof DataViewObject>;
export type DataViewSpecJson = Static<typeof DataViewSpec>;
export type PutDataViewBody = Static<typeof PutDataViewRequest>;
export type RunDataViewBody = Static<typeof RunDataViewRequest>;
export type QueryResultJson = Static<typeof QueryResult>;
