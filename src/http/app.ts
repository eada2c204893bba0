// The HTTP edge: request ids, authentication, strict validation, idempotency, the error
// envelopes and the OpenAPI document. Modules add their routes; nothing here knows them.

import type { Socket } from "node:net";
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
import { AppError } from "../lib/errors.js";
import { newId } from "../lib/ids.js";
import type { Logger } from "../lib/logger.js";
import { findTextProblem } from "../lib/text.js";
import { type Span, SpanStatusCode, type Tracing } from "../lib/tracing.js";
import type { IdentityService } from "../modules/identity/service.js";
import type { WarrenMetrics } from "../modules/metrics/registry.js";
import { checkConsoleOrigin, consoleCookieSecret } from "./console-auth.js";
import { type EnvelopeKind, errorBody, statusOf } from "./errors.js";
import type { IdempotencyStore } from "./idempotency.js";
import { API_TAGS, finishDocument } from "./openapi.js";
import { EmptyObject, ErrorEnvelope, FlatErrorEnvelope } from "./schemas.js";
import type { App, RouteSettings } from "./types.js";
import { routeUpgrades } from "./upgrade.js";
import { describeValidationError, validatorCompiler } from "./validation.js";

export const API_TITLE = "Warren control-plane API";
export const API_VERSION = "0.0.1";
/** Longest path parameter the router takes; longer ones are a 400 in the envelope. */
const MAX_PARAM_LENGTH = 2048;
/** Most of a refused (413) body read and dropped so its client hears the answer; past it the socket is closed. */
const MAX_DRAIN_BYTES = 64 * 1_048_576;
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });

export interface HttpDeps {
  log: Logger;
  bodyLimitBytes: number;
  identity: IdentityService;
  idempotency: IdempotencyStore;
  /** Request counts and latencies per operationId (GET /metrics); absent: none kept. */
  metrics?: WarrenMetrics | null;
  /** A span per request when OpenTelemetry tracing is on. */
  tracing?: Tracing | null;
  /** The API's public URL, the OpenAPI document's server (default http://127.0.0.1:8080). */
  publicApiUrl?: string;
}

/**
 * The label and span name of a request: its route's operationId, else the route's pattern
 * (health, OpenAPI document), else `unmatched`. Never the URL itself, so a scanner probing
 * random paths adds no series.
 */
function operationOf(request: FastifyRequest): string {
  const options = request.routeOptions;
  const operationId = (options.schema as { operationId?: unknown } | undefined)?.operationId;
  if (typeof operationId === "string") return operationId;
  return options.url ?? "unmatched";
}

/** The secret of an `Authorization: Bearer <secret>` header; AppError unauthenticated otherwise. */
export function bearerSecret(header: string | undefined): string {
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
  if (fe.statusCode === 415) return new AppError("unsupported_media_type", "request bodies must be application/json");
  if (fe.statusCode === 404) return new AppError("not_found", "no such route");
  if (fe.statusCode === 405) return new AppError("method_not_allowed", "method not allowed");
  // Any other refusal of the framework is the client's request, not a fault of ours.
  if (fe.statusCode !== undefined && fe.statusCode >= 400 && fe.statusCode < 500) {
    return new AppError("invalid_argument", "the request is malformed");
  }
  return new AppError("internal", "internal error");
}

/**
 * The envelope for a request no route has taken (a URL the router refused, a request the
 * HTTP parser refused): flat on the sandbox and snapshot paths. Without quota details the
 * two envelopes hold the same fields, so a guess cannot produce a wrong shape.
 */
function envelopeForUrl(url: string | undefined): EnvelopeKind {
  return /^\/v1\/(sandboxes|snapshots)(?=[/:?]|$)/.test(url ?? "") ? "flat" : "standard";
}

/**
 * A regular expression matching the concrete paths of a fastify route pattern (`:id`,
 * `:id(^re$)`, `::` for a literal colon, `*`), for the 405 answer's `Allow`.
 */
export function routePathRegExp(url: string): RegExp {
  let out = "";
  let i = 0;
  while (i < url.length) {
    const ch = url[i] as string;
    if (ch === ":" && url[i + 1] === ":") {
      out += ":";
      i += 2;
    } else if (ch === ":") {
      let j = i + 1;
      while (j < url.length && /[A-Za-z0-9_]/.test(url[j] as string)) j++;
      if (url[j] !== "(") {
        out += "[^/]+";
        i = j;
        continue;
      }
      let depth = 0;
      let k = j;
      for (; k < url.length; k++) {
        if (url[k] === "(") depth++;
        else if (url[k] === ")" && --depth === 0) break;
      }
      out += `(?:${url
        .slice(j + 1, k)
        .replace(/^\^/, "")
        .replace(/\$$/, "")})`;
      i = k + 1;
    } else if (ch === "*") {
      out += ".*";
      i++;
    } else {
      out += ch.replace(/[.+?^${}()|[\]\\]/g, "\\$&");
      i++;
    }
  }
  return new RegExp(`^${out}/?$`);
}

/** The single-line status text of the statuses the HTTP parser's refusals are answered with. */
const PARSER_STATUS_TEXT: Record<number, string> = {
  400: "Bad Request",
  408: "Request Timeout",
  431: "Request Header Fields Too Large",
};

/**
 * Node's HTTP parser refuses some requests before fastify sees them (a header with a control
 * byte, headers over the size limit, a malformed request line) and fastify's default answer
 * is not in our envelope; the answer is written to the socket here, in it, with a request id.
 */
function answerClientError(log: Logger, error: Error & { code?: string }, socket: Socket): void {
  if (error.code === "ECONNRESET" || socket.destroyed) return;
  const appError =
    error.code === "HPE_HEADER_OVERFLOW"
      ? new AppError("headers_too_large", "the request line and headers are larger than the server accepts")
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? new AppError("request_timeout", "the request was not received in time")
        : new AppError("invalid_argument", "the request is not valid HTTP (a malformed request line or header)");
  const requestId = newId("req");
  const body = JSON.stringify(errorBody(appError, requestId, "standard"));
  log.info({ reqId: requestId, status: statusOf(appError), reason: error.code }, "request refused by the HTTP parser");
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${statusOf(appError)} ${PARSER_STATUS_TEXT[statusOf(appError)] ?? "Bad Request"}\r\n` +
        `content-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
        `x-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

function endRequestSpan(span: Span, request: FastifyRequest, status: number): void {
  span.setAttribute("http.response.status_code", status);
  if (request.credential) span.setAttribute("warren.org_id", request.credential.orgId);
  if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
  span.end();
}

/**
 * After a 413 the rest of the body is read and dropped (up to MAX_DRAIN_BYTES) instead of the
 * socket being closed under a client still sending: a reset would make most clients lose the
 * answer they have not read yet. The connection then closes once the request has ended.
 */
function drainRefusedBody(request: FastifyRequest, reply: FastifyReply): void {
  const raw = request.raw;
  const socket = raw.socket as Socket | null;
  // An injected request (tests) has no real socket to keep open.
  if (raw.complete || raw.destroyed || typeof socket?.end !== "function") return;
  // Node closes the socket as soon as a `connection: close` answer is written; without it, the
  // parser reads the body to its end and the close comes after.
  reply.removeHeader("connection");
  let drained = 0;
  const count = (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > MAX_DRAIN_BYTES) socket.destroy();
  };
  raw.on("data", count);
  raw.once("end", () => {
    raw.off("data", count);
    socket.end();
  });
  raw.resume();
}

export function sendError(request: FastifyRequest, reply: FastifyReply, error: AppError) {
  if (error.code === "payload_too_large") drainRefusedBody(request, reply);
  if (error.retryAfterSeconds !== undefined) reply.header("retry-after", String(error.retryAfterSeconds));
  return reply
    .code(statusOf(error))
    .send(errorBody(error, request.id, request.routeOptions.config?.envelope ?? "standard"));
}

/**
 * The first name or value of the URL's query that is not percent-encoded UTF-8 (`%ff`, `%zz`,
 * a lone `%`), at most 64 characters of it; null when all are. The query parser keeps such a
 * part undecoded, which would otherwise be read as literal text.
 */
export function badlyEncodedQueryPart(url: string | undefined): string | null {
  const at = url?.indexOf("?") ?? -1;
  if (!url || at < 0) return null;
  for (const pair of url.slice(at + 1).split("&")) {
    for (const part of pair.split("=")) {
      if (!part.includes("%")) continue;
      try {
        decodeURIComponent(part);
      } catch {
        return part.slice(0, 64);
      }
    }
  }
  return null;
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
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
    ajv: { customOptions: { strict: false } },
    // The router's own refusals (a URL that is not percent-encoded UTF-8, a path parameter
    // over maxParamLength) answer in the envelope like every other refusal.
    frameworkErrors: (error, request, reply) => {
      const appError =
        error.code === "FST_ERR_MAX_PARAM_LENGTH"
          ? new AppError("invalid_argument", `a path parameter is longer than ${MAX_PARAM_LENGTH} characters`)
          : error.code === "FST_ERR_BAD_URL"
            ? new AppError("invalid_argument", "the URL is not valid: a path segment is not percent-encoded UTF-8")
            : new AppError("invalid_argument", "the request could not be routed");
      const body = JSON.stringify(errorBody(appError, request.id, envelopeForUrl(request.raw.url)));
      reply.header("x-request-id", request.id);
      return (reply as FastifyReply).code(statusOf(appError)).type("application/json; charset=utf-8").send(body);
    },
    clientErrorHandler: (error, socket) => answerClientError(deps.log, error, socket),
  }).withTypeProvider<TypeBoxTypeProvider>() as unknown as App;

  app.setValidatorCompiler(validatorCompiler);
  routeUpgrades(app);
  // Bodies are JSON only: without fastify's built-in text/plain parser, any other media type is 415.
  app.removeContentTypeParser("text/plain");
  // An empty body labelled JSON (clients that always send the header, on a DELETE or a bodiless
  // POST) is no body; the rest goes to fastify's own parser (prototype poisoning refused).
  const parseJson = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  // Bytes that are not UTF-8 (CESU-8 surrogates, overlongs, a cut sequence) are refused rather
  // than read as U+FFFD and stored (docs/api-decisions.md "Text Warren accepts").
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (request, body, done) => {
    let text: string;
    try {
      text = typeof body === "string" ? body : STRICT_UTF8.decode(body);
    } catch {
      done(new AppError("invalid_argument", "the request body is not valid UTF-8"), undefined);
      return;
    }
    if (text.trim() === "") {
      done(null, undefined);
      return;
    }
    parseJson(request, text, done);
  });
  app.decorateRequest("credential", null);
  app.decorateRequest("idempotencyClaim", null);
  app.decorateRequest("traceSpan", null);
  app.addSchema(ErrorEnvelope);
  app.addSchema(FlatErrorEnvelope);

  await app.register(swagger, {
    openapi: {
      openapi: "3.1.0",
      info: {
        title: API_TITLE,
        version: API_VERSION,
        description:
          "Sandboxes, runs and their telemetry, scoped to the organization of the caller's credential. See docs/api-decisions.md for every choice the contract leaves open.\n\nEvery success is 200, except DeleteSandbox (202 with Location and Retry-After), RemoveSandboxFile (204, no body) and StreamExecSandbox (101, a WebSocket). Errors use the flat envelope on sandbox and snapshot routes and the standard envelope elsewhere; a retryable error carries Retry-After.",
        // No license has been chosen for Warren yet: the document names none it could point at.
        license: { name: "Unlicensed: no license granted (all rights reserved)" },
        contact: { name: "Warren maintainers" },
      },
      servers: [
        { url: deps.publicApiUrl ?? "http://127.0.0.1:8080", description: "This deployment (WARREN_PUBLIC_API_URL)" },
      ],
      tags: API_TAGS,
      components: {
        securitySchemes: {
          bearerAuth: { type: "http", scheme: "bearer", description: "Authorization: Bearer <API key>" },
        },
      },
      security: [{ bearerAuth: [] }],
    },
    transformObject: (documents) =>
      finishDocument("openapiObject" in documents ? documents.openapiObject : documents.swaggerObject),
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

  // Every route's path pattern and methods: a path that exists under other methods is 405 with Allow.
  const routePaths = new Map<string, { pattern: RegExp; methods: Set<string> }>();
  app.addHook("onRoute", (route) => {
    const known = routePaths.get(route.url) ?? { pattern: routePathRegExp(route.url), methods: new Set<string>() };
    for (const method of Array.isArray(route.method) ? route.method : [route.method]) known.methods.add(method);
    routePaths.set(route.url, known);
  });

  app.addHook("onRoute", (route) => {
    // Query strings are as strict as bodies: a route that declares no query parameters refuses any.
    if (!route.schema?.querystring) route.schema = { ...route.schema, querystring: EmptyObject };
    if ((route.config as RouteSettings | undefined)?.idempotentOperation) {
      route.preHandler = [...hooksOf(route.preHandler), claimIdempotencyKey];
      route.onSend = [...hooksOf(route.onSend), storeIdempotentResponse];
    }
  });

  const tracing = deps.tracing ?? null;
  if (tracing) {
    // First, so the span covers authentication too.
    app.addHook("onRequest", (request, _reply, done) => {
      request.traceSpan = tracing.startServer(
        operationOf(request),
        {
          "http.request.method": request.method,
          "http.route": request.routeOptions.url ?? "unmatched",
          "warren.request_id": request.id,
        },
        request.headers.traceparent,
      );
      done();
    });
  }

  /**
   * 405 with Allow when `path` matches routes (those `considered`) of other methods only;
   * false when it does not, and nothing is sent.
   */
  const answeredNotAllowed = (
    request: FastifyRequest,
    reply: FastifyReply,
    path: string,
    considered: (url: string) => boolean,
  ): boolean => {
    const allowed = new Set<string>();
    for (const [url, { pattern, methods }] of routePaths) {
      if (considered(url) && pattern.test(path)) for (const method of methods) allowed.add(method);
    }
    if (allowed.size === 0 || allowed.has(request.method)) return false;
    const allow = [...allowed].sort().join(", ");
    const error = new AppError("method_not_allowed", `${request.method} is not allowed on ${path}; allowed: ${allow}`);
    reply.header("x-request-id", request.id).header("allow", allow);
    void reply.code(statusOf(error)).send(errorBody(error, request.id, envelopeForUrl(request.raw.url)));
    return true;
  };

  // A custom verb under the wrong method (GET /v1/runs/{id}:complete) would be routed as the
  // id `{id}:complete` of the collection's item route; it is a 405 like any other method.
  app.addHook("onRequest", (request, reply, done) => {
    const route = request.routeOptions.url;
    const path = request.url.split("?")[0] ?? "";
    const last = path.slice(path.lastIndexOf("/") + 1);
    if (route && !route.includes("::") && last.includes(":")) {
      if (answeredNotAllowed(request, reply, path, (url) => url.includes("::"))) return;
    }
    done();
  });

  app.addHook("onRequest", async (request, reply) => {
    reply.header("x-request-id", request.id);
    if (request.routeOptions.config?.auth === false || !request.routeOptions.url) return;
    // The console's cookie, when no Authorization header is sent (src/http/console-auth.ts).
    const cookieSecret =
      request.headers.authorization === undefined ? consoleCookieSecret(request.headers.cookie) : null;
    if (cookieSecret !== null) {
      checkConsoleOrigin(request);
      request.credential = await deps.identity.authenticate(cookieSecret, "session");
      return;
    }
    const secret = bearerSecret(request.headers.authorization);
    const cred = await deps.identity.authenticate(secret);
    request.credential = cred;
  });

  // A POST without a body is read as `{}`, so verbs whose fields are all optional need none
  // and a missing required field is named rather than "body must be object".
  // Text Warren cannot store (NUL, lone surrogates) or nesting it will not walk is refused
  // here, once for every route, naming the field (docs/api-decisions.md "Text Warren accepts").
  app.addHook("preValidation", (request, _reply, done) => {
    if (request.body === undefined && request.routeOptions.schema?.body) request.body = {};
    const badQuery = badlyEncodedQueryPart(request.raw.url);
    if (badQuery !== null) {
      done(new AppError("invalid_argument", `query: "${badQuery}" is not percent-encoded UTF-8`));
      return;
    }
    const problem =
      findTextProblem(request.params, "params") ??
      findTextProblem(request.query, "query") ??
      findTextProblem(request.body, "body");
    if (problem) {
      done(new AppError("invalid_argument", `${problem.path}: ${problem.problem}`));
      return;
    }
    done();
  });

  const metrics = deps.metrics ?? null;
  app.addHook("onResponse", (request, reply, done) => {
    metrics?.requestAnswered(operationOf(request), reply.statusCode, reply.elapsedTime / 1000);
    if (request.traceSpan) endRequestSpan(request.traceSpan, request, reply.statusCode);
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
    // A query past its own deadline is the caller's 504, not the server's failure.
    const status = statusOf(appError);
    if (status >= 500) {
      const level = appError.code === "deadline_exceeded" ? "warn" : "error";
      request.log[level]({ ...callerFields(request), err: error }, "request failed");
    }
    return sendError(request, reply, appError);
  });

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split("?")[0] ?? "";
    if (answeredNotAllowed(request, reply, path, () => true)) return reply;
    return sendError(request, reply, new AppError("not_found", `no route ${request.method} ${path}`));
  });

  return app;
}
