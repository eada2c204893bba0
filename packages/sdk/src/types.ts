// Names for the generated wire types (src/generated/openapi.ts, from docs/openapi.json).
import type { components, operations } from "./generated/openapi.js";

export type { components, operations, paths } from "./generated/openapi.js";
/** A named schema of the OpenAPI document (`components.schemas`), e.g. `Schema<"Sandbox">`. */
export type Schema<Name extends keyof components["schemas"]> = components["schemas"][Name];

type Json<T> = T extends { content: { "application/json": infer B } } ? B : never;
/** The JSON body of operation `Op`'s 200 (or first 2xx) answer. */
export type Ok<Op extends keyof operations> = operations[Op]["responses"] extends { 200: infer R }
  ? Json<R>
  : operations[Op]["responses"] extends { 202: infer R }
    ? Json<R>
    : operations[Op]["responses"] extends { 201: infer R }
      ? Json<R>
      : never;
/** The JSON request body of operation `Op`. */
export type Body<Op extends keyof operations> = operations[Op] extends { requestBody?: infer B }
  ? Json<NonNullable<B>>
  : never;
/** The query parameters of operation `Op`. */
export type Query<Op extends keyof operations> = operations[Op]["parameters"] extends { query?: infer Q }
  ? NonNullable<Q>
  : never;

export type SandboxRecord = Schema<"Sandbox">;
export type SandboxState = SandboxRecord["state"];
export type CreateSandboxBody = Body<"CreateSandbox">;
export type UpdateSandboxBody = Body<"UpdateSandbox">;
export type ExecBody = Body<"ExecSandbox">;
export type SnapshotRecord = Schema<"SandboxSnapshot">;
export type Project = Schema<"Project">;
export type Run = Schema<"Run">;
export type Volume = Schema<"Volume">;
export type Workload = Schema<"Workload">;
export type Secret = Schema<"SandboxSecret">;
export type AnnotationSchema = Schema<"AnnotationSchema">;
export type WhoAmI = Schema<"WhoAmI">;
export type UsageSnapshot = Ok<"GetUsageSnapshot">;
export type SqlResult = Schema<"QueryResult">;
