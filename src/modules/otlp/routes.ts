// POST /v1/traces, OTLP/HTTP 1.x (https://opentelemetry.io/docs/specs/otlp/#otlphttp): a body
// of application/x-protobuf or application/json, optionally gzip or deflate, answered in the
// same content type. The body is read raw (a scope with no parser) and bounded twice: as sent
// and once decompressed. Errors are the standard envelope for JSON, and for protobuf the
// google.rpc.Status message OTLP names, carrying the envelope's code and message.
import { promisify } from "node:util";
import { gunzip, inflate, inflateRaw } from "node:zlib";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { OtlpSettings } from "../../config.js";
import { type App, credentialOf } from "../../http/types.js";
import { AppError } from "../../lib/errors.js";
import type { Credential } from "../identity/credential.js";
import { decodeJsonRequest } from "./decode-json.js";
import { decodeProtobufRequest } from "./decode-proto.js";
import type { IngestResult, OtlpService } from "./service.js";
import { MalformedBody, WireWriter } from "./wire.js";

// Under the telemetry group, beside the run tail: the contract has no trace group (docs/api-decisions.md).
const TAGS = ["TelemetryViewService"];
export const TRACES_PATH = "/v1/traces";

type Format = "protobuf" | "json";

const gunzipAsync = promisify(gunzip);
const inflateAsync = promisify(inflate);
const inflateRawAsync = promisify(inflateRaw);

/** The request's format from its Content-Type (parameters such as charset ignored); null when unsupported. */
export function formatOf(contentType: string | undefined): Format | null {
  const type = (contentType ?? "").split(";")[0]?.trim().toLowerCase();
  if (type === "application/x-protobuf" || type === "application/protobuf") return "protobuf";
  if (type === "application/json") return "json";
  return null;
}

async function readBody(request: FastifyRequest, maxBytes: number): Promise<Buffer> {
  const declared = Number(request.headers["content-length"] ?? Number.NaN);
  if (declared > maxBytes) throw tooLarge(maxBytes, "as sent");
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request.raw.iterator({ destroyOnReturn: false })) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw tooLarge(maxBytes, "as sent");
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks, size);
}

const tooLarge = (limit: number, how: string) =>
  new AppError("payload_too_large", `the request body is larger than ${limit} bytes ${how}`);

/** The body decompressed, at most `maxBytes` of it (zlib stops there rather than inflate a bomb). */
async function decompressed(body: Buffer, encoding: string, maxBytes: number): Promise<Buffer> {
  const options = { maxOutputLength: maxBytes };
  const refuse = (error: unknown, what: string): never => {
    if ((error as { code?: string }).code === "ERR_BUFFER_TOO_LARGE") throw tooLarge(maxBytes, "decompressed");
    throw new AppError("invalid_argument", `the request body is not valid ${what}`);
  };
  if (encoding === "" || encoding === "identity") {
    if (body.length > maxBytes) throw tooLarge(maxBytes, "decompressed");
    return body;
  }
  if (encoding === "gzip" || encoding === "x-gzip") return gunzipAsync(body, options).catch((e) => refuse(e, "gzip"));
  if (encoding === "deflate") {
    // HTTP's deflate is the zlib format; some clients send the raw deflate stream instead.
    return inflateAsync(body, options).catch((e) =>
      (e as { code?: string }).code === "ERR_BUFFER_TOO_LARGE"
        ? refuse(e, "deflate")
        : inflateRawAsync(body, options).catch((e2) => refuse(e2, "deflate")),
    );
  }
  throw new AppError("unsupported_media_type", `Content-Encoding ${encoding} is not supported: use gzip or deflate`);
}

const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });

/** ExportTraceServiceResponse: empty when every span was accepted (OTLP: partial_success unset). */
export function responseBody(format: Format, result: IngestResult): Buffer | string {
  if (format === "json") {
    return JSON.stringify(
      result.rejectedSpans > 0
        ? { partialSuccess: { rejectedSpans: String(result.rejectedSpans), errorMessage: result.errorMessage } }
        : {},
    );
  }
  const out = new WireWriter();
  if (result.rejectedSpans > 0) {
    out.message(1, new WireWriter().varint(1, result.rejectedSpans).string(2, result.errorMessage));
  }
  return Buffer.from(out.finish());
}

/** gRPC status codes (google.rpc.Code) by HTTP status, for the protobuf error answer. */
const GRPC_CODE: Record<number, number> = {
  400: 3,
  401: 16,
  403: 7,
  404: 5,
  405: 12,
  408: 4,
  409: 10,
  412: 9,
  413: 8,
  415: 3,
  422: 9,
  429: 8,
  431: 8,
  500: 13,
  503: 14,
  504: 4,
};

/** A google.rpc.Status for an error envelope (code 1, message 2): "<code>: <message> (request <id>)". */
export function statusMessage(
  httpStatus: number,
  envelope: { code?: unknown; message?: unknown; request_id?: unknown },
) {
  const text = `${String(envelope.code ?? "internal")}: ${String(envelope.message ?? "")}${
    envelope.request_id ? ` (request ${String(envelope.request_id)})` : ""
  }`;
  return Buffer.from(
    new WireWriter()
      .varint(1, GRPC_CODE[httpStatus] ?? 2)
      .string(2, text)
      .finish(),
  );
}

export function registerOtlpRoutes(app: App, otlp: OtlpService, settings: OtlpSettings): void {
  // Requests being read, decoded and stored: each may hold its body as sent and decompressed
  // (up to maxBodyBytes + maxDecodedBytes) and the decoded spans, so the count bounds memory.
  let inFlight = 0;
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_request, _payload, done) => done(null, undefined));
    // An error answers a protobuf request in protobuf: the envelope the error handler wrote,
    // re-encoded as google.rpc.Status (OTLP/HTTP "Failures").
    scope.addHook("onSend", async (request, reply, payload) => {
      if (reply.statusCode < 400 || formatOf(request.headers["content-type"]) !== "protobuf") return payload;
      let envelope: Record<string, unknown> = {};
      try {
        envelope = JSON.parse(String(payload)) as Record<string, unknown>;
      } catch {
        // Not an envelope (nothing else is sent on an error): the status line still says it.
      }
      reply.type("application/x-protobuf");
      return statusMessage(reply.statusCode, envelope);
    });

    scope.post(
      TRACES_PATH,
      {
        schema: {
          operationId: "ExportTraces",
          tags: TAGS,
          summary: "Ingest OpenTelemetry spans (OTLP/HTTP: protobuf or JSON, gzip or deflate)",
          description:
            "The body is an OTLP ExportTraceServiceRequest as `application/x-protobuf` or `application/json`, " +
            "optionally with `Content-Encoding: gzip` or `deflate`; the answer (ExportTraceServiceResponse, with " +
            "partialSuccess when spans were rejected) is in the request's content type. A span goes to the run its " +
            "`warren.run_id` attribute (or its resource's) names, else to its trace's run: a sandbox credential's " +
            "ambient run, or a run the trace gets when first seen. docs/api-decisions.md, OpenTelemetry ingest.",
          response: {
            200: {
              description: "ExportTraceServiceResponse, in the request's content type",
              content: {
                "application/json": {
                  schema: {
                    type: "object",
                    properties: {
                      partialSuccess: {
                        type: "object",
                        properties: { rejectedSpans: { type: "string" }, errorMessage: { type: "string" } },
                      },
                    },
                  },
                },
                "application/x-protobuf": { schema: { type: "string", format: "binary" } },
              },
            },
            429: { $ref: "ErrorEnvelope#", description: "Quota or rate-limit rejection" },
            default: { $ref: "ErrorEnvelope#", description: "Error (a google.rpc.Status for protobuf requests)" },
          },
        } as Record<string, unknown>,
      },
      async (request: FastifyRequest, reply: FastifyReply) => {
        const format = formatOf(request.headers["content-type"]);
        if (!format) {
          throw new AppError(
            "unsupported_media_type",
            "OTLP/HTTP bodies are application/x-protobuf or application/json",
          );
        }
        const cred = credentialOf(request);
        if (inFlight >= settings.maxConcurrentRequests) {
          throw new AppError("unavailable", "too many trace exports in progress on this server; retry", {
            retryAfterSeconds: 1,
          });
        }
        inFlight++;
        try {
          return await ingest(request, reply, format, cred);
        } finally {
          inFlight--;
        }
      },
    );
  });

  async function ingest(request: FastifyRequest, reply: FastifyReply, format: Format, cred: Credential) {
    const raw = await readBody(request, settings.maxBodyBytes);
    const encoding = String(request.headers["content-encoding"] ?? "")
      .trim()
      .toLowerCase();
    const body = await decompressed(raw, encoding, settings.maxDecodedBytes);
    const limits = { maxSpans: settings.maxSpans, maxValues: settings.maxValues };
    let decoded: ReturnType<typeof decodeProtobufRequest>;
    try {
      if (format === "protobuf") decoded = decodeProtobufRequest(body, limits);
      else {
        let json: unknown;
        try {
          json = JSON.parse(STRICT_UTF8.decode(body));
        } catch {
          throw new MalformedBody("the body is not JSON (UTF-8)");
        }
        decoded = decodeJsonRequest(json, limits);
      }
    } catch (error) {
      if (error instanceof MalformedBody) throw new AppError("invalid_argument", `malformed OTLP: ${error.message}`);
      throw error;
    }
    const result = await otlp.ingest(cred, decoded);
    return reply
      .code(200)
      .type(format === "json" ? "application/json" : "application/x-protobuf")
      .send(responseBody(format, result));
  }
}
