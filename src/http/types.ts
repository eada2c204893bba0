import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import type {
  FastifyBaseLogger,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from "fastify";
import type { Span } from "../lib/tracing.js";
import type { Credential } from "../modules/identity/credential.js";
import type { EnvelopeKind } from "./errors.js";

export type App = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** Per-route settings read by the shared hooks. */
export interface RouteSettings {
  /** false for the unauthenticated routes (discovery, health, the OpenAPI document). */
  auth?: boolean;
  /** Which error envelope the route answers in (contract 7.1); "standard" when absent. */
  envelope?: EnvelopeKind;
  /** Operation name idempotency keys are scoped to; set on routes that honour Idempotency-Key. */
  idempotentOperation?: string;
}

export interface IdempotencyClaim {
  orgId: string;
  operation: string;
  key: string;
}

declare module "fastify" {
  interface FastifyContextConfig extends RouteSettings {}
  interface FastifyRequest {
    credential: Credential | null;
    idempotencyClaim: IdempotencyClaim | null;
    /** The request's span while OpenTelemetry tracing is on (src/lib/tracing.ts). */
    traceSpan: Span | null;
  }
}

/** The authenticated credential of a request on an authenticated route. */
export function credentialOf(request: { credential: Credential | null }): Credential {
  if (!request.credential) throw new Error("route reached without a credential; is auth disabled on it?");
  return request.credential;
}

/**
 * The fastify path of a custom verb on a resource, `POST /v1/things/{id}:verb`. The id is a
 * regex parameter so several verbs can share one resource path (find-my-way would otherwise
 * read `:id::a` and `:id::b` as the same route).
 */
export function verbPath(collection: string, param: string, verb: string): string {
  return `${collection}/:${param}(^[A-Za-z0-9_.-]+)::${verb}`;
}
