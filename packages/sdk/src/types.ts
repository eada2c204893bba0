// Names for the generated wire types (src/generated/openapi.ts, from docs/openapi.json).
import type { operations } from "./generated/openapi.js";

export type { operations, paths } from "./generated/openapi.js";

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

export type SandboxRecord = Ok<"GetSandbox">["sandbox"];
export type SandboxState = SandboxRecord["state"];
export type CreateSandboxBody = Body<"CreateSandbox">;
export type UpdateSandboxBody = Body<"UpdateSandbox">;
export type ExecBody = Body<"ExecSandbox">;
export type SnapshotRecord = Ok<"ListSandboxSnapshots">["snapshots"][number];
export type Project = Ok<"GetProject">["project"];
export type Run = Ok<"GetRun">["run"];
export type Volume = Ok<"GetVolume">["volume"];
export type Workload = Ok<"GetWorkload">["workload"];
export type Secret = Ok<"CreateSandboxSecret">["secret"];
export type AnnotationSchema = Ok<"GetAnnotationSchema">["schema"];
export type WhoAmI = Ok<"WhoAmI">;
export type UsageSnapshot = Ok<"GetUsageSnapshot">;
export type SqlResult = Ok<"RunTelemetrySql">;
