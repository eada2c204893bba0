// The HTTP edge: request ids, authentication, strict validation, idempotency, the error
// envelopes and the OpenAPI document. Modules add their routes; nothing here knows them.
import swagger from "@fastify/swagger";
import type { TypeBoxTypeProvider } from "@fastify/type-provider-typebox";
import Fastify, {
  type FastifyError,
  type FastifyReply,
  type FastifyRequest,
  LogController,
  type onSendAsyncHookHandler,
  type preHandlerAsyncHookHandler,
} from "fastify";
import { newId } from "../lib/ids.js";
import type { Logger } from "../lib/logger.js";
import type { IdentityService } from "../modules/identity/service.js";
import { AppError, errorBody } from "./errors.js";
import type { IdempotencyStore } from "./idempotency.js";
import { EmptyObject, ErrorEnvelope, FlatErrorEnvelope } from "./schemas.js";
import type { App, RouteSettings } from "./types.js";
import { describeValidationError, validatorCompiler } from "./validation.js";

export const API_TITLE = "Warren control-plane API";
export const API_VERSION = "0.0.1";

export interface HttpDeps {
  log: Logger;
  bodyLimitBytes: number;
  identity: IdentityService;
  idempotency: IdempotencyStore;
}

function bearerSecret(header: string | undefined): string {
  if (!header) throw new AppError("unauthenticated", "missing Authorization: Bearer <API key> header");
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match?.[1]) throw new AppError("unauthenticated", "the Authorization header must be Bearer <API key>");
  return match[1];
}

/** The organization and principal of an authenticated request, for its log lines (a child logger per request cost more than the line). */
function callerFields(request: FastifyRequest): { org_id?: string; principal_id?: string } {
  const cred = request.credential;
  return cred ? { org_id: cred.orgId, principal_id: cred.principalId } : {};
}

/** A route's own hooks of one kind as a list (fastify takes one function or an array). */
function hooksOf<T>(hooks: T | T[] | undefined): T[] {
  if (hooks === undefined) return [];
  return Array.isArray(hooks) ? hooks : [hooks];
}

function toAppError(error: FastifyError | AppError | Error): AppError {
  if (error instanceof AppError) return error;
  const fe = error as FastifyError;
  if (fe.validation) {
    return new AppError("invalid_argument", describeValidationError(fe.validationContext ?? "request", fe.validation));
  }
  switch (fe.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new AppError("payload_too_large", "the request body is larger than the server accepts");
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new AppError("unsupported_media_type", "request bodies must be application/json");
    case "FST_ERR_CTP_EMPTY_JSON_BODY":
      return new AppError("invalid_argument", "the request body is empty; send a JSON object");
    case "FST_ERR_CTP_INVALID_JSON_BODY":
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return new AppError("invalid_argument", "the request body is not valid JSON");
    default:
      break;
  }
  if (fe.statusCode === 400 && /JSON/i.test(fe.message)) {
    return new AppError("invalid_argument", "the request body is not valid JSON");
  }
  if (fe.statusCode === 413) return new AppError("payload_too_large", "the request body is too large");
  if (fe.statusCode === 404) return new AppError("not_found", "no such route");
  return new AppError("internal", "internal error");
}

export function sendError(request: FastifyRequest, reply: FastifyReply, error: AppError) {
  if (error.retryAfterSeconds !== undefined) reply.header("retry-after", String(error.retryAfterSeconds));
  return reply
    .code(error.status)
    .send(errorBody(error, request.id, request.routeOptions.config?.envelope ?? "standard"));
}

export async function buildHttp(deps: HttpDeps): Promise<App> {
  const app = Fastify({
    loggerInstance: deps.log,
    // One log line per request, written by the onResponse hook below with org and principal.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: deps.bodyLimitBytes,
    genReqId: () => newId("req"),
    // Fastify hands every request's child logger an options object (empty unless the route
    // sets a level or serializers), which sends pino down its slower child path; without
    // options the child is the same logger, built faster.
    childLoggerFactory: (logger, bindings, opts) =>
      logger.child(bindings, opts.level !== undefined || opts.serializers !== undefined ? opts : undefined),
    requestIdHeader: false,
    // Long path parameters reach the schemas (and a 400 in the envelope), not a router 414.
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 2048 },
    ajv: { customOptions: { strict: false } },
  }).withTypeProvider<TypeBoxTypeProvider>() as unknown as App;

  app.setValidatorCompiler(validatorCompiler);
  // Bodies are JSON only: without fastify's built-in text/plain parser, any other media type is 415.
  app.removeContentTypeParser("text/plain");
  app.decorateRequest("credential", null);
  app.decorateRequest("idempotencyClaim", null);
  app.addSchema(ErrorEnvelope);
  app.addSchema(FlatErrorEnvelope);

  await app.register(swagger, {
    openapi: {
      openapi: "3.1.0",
      info: {
        title: API_TITLE,
        version: API_VERSION,
        description:
          "Sandboxes, runs and their telemetry, scoped to the organization of the caller's credential. See docs/api-decisions.md for every choice the contract leaves open.",
      },
      components: {
        securitySchemes: {
          bearerAuth: { type: "http", scheme: "bearer", description: "Authorization: Bearer <API key>" },
        },
      },
      security: [{ bearerAuth: [] }],
    },
    // Custom verbs are written `:verb` in fastify paths (escaped as `::`); the generator
    // reads them as parameters, so they are put back to the contract's `{id}:verb` form.
    transformObject: (documents) => {
      const doc = "openapiObject" in documents ? documents.openapiObject : documents.swaggerObject;
      if (doc.paths) {
        doc.paths = Object.fromEntries(
          Object.entries(doc.paths).map(([route, item]) => [route.replace(/\}:\{([a-z]+)\}$/i, "}:$1"), item]),
        ) as typeof doc.paths;
      }
      return doc;
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === "string" ? json.$id : `def-${i}`),
    },
  });

  // Idempotency-Key handling, on the routes that take one (a hook on every route costs every request).
  const claimIdempotencyKey: preHandlerAsyncHookHandler = async (request, reply) => {
    const operation = request.routeOptions.config?.idempotentOperation;
    if (!operation || !request.credential) return;
    const proceed = await deps.idempotency.begin(request, reply, request.credential.orgId, operation);
    if (!proceed) return reply;
  };
  const storeIdempotentResponse: onSendAsyncHookHandler = async (request, reply, payload) => {
    const claim = request.idempotencyClaim;
    if (claim) {
      request.idempotencyClaim = null;
      await deps.idempotency.finish(claim, reply.statusCode, typeof payload === "string" ? payload : "");
    }
    return payload;
  };

  app.addHook("onRoute", (route) => {
    // Query strings are as strict as bodies: a route that declares no query parameters refuses any.
    if (!route.schema?.querystring) route.schema = { ...route.schema, querystring: EmptyObject };
    if ((route.config as RouteSettings | undefined)?.idempotentOperation) {
      route.preHandler = [...hooksOf(route.preHandler), claimIdempotencyKey];
      route.onSend = [...hooksOf(route.onSend), storeIdempotentResponse];
    }
  });

  app.addHook("onRequest", async (request, reply) => {
    reply.header("x-request-id", request.id);
    if (request.routeOptions.config?.auth === false || !request.routeOptions.url) return;
    const secret = bearerSecret(request.headers.authorization);
    const cred = await deps.identity.authenticate(secret);
    request.credential = cred;
  });

  // A POST without a body is read as `{}`, so verbs whose fields are all optional need none
  // and a missing required field is named rather than "body must be object".
  app.addHook("preValidation", (request, _reply, done) => {
    if (request.body === undefined && request.routeOptions.schema?.body) request.body = {};
    done();
  });

  app.addHook("onResponse", (request, reply, done) => {
    request.log.info(
      {
        ...callerFields(request),
        method: request.method,
        url: request.url.split("?")[0],
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 100) / 100,
      },
      "request",
    );
    done();
  });

  app.setErrorHandler((error: FastifyError | AppError, request, reply) => {
    const appError = toAppError(error);
    if (appError.status >= 500) request.log.error({ ...callerFields(request), err: error }, "request failed");
    return sendError(request, reply, appError);
  });

  app.setNotFoundHandler((request, reply) =>
    sendError(request, reply, new AppError("not_found", `no route ${request.method} ${request.url.split("?")[0]}`)),
  );

  return app;
}
