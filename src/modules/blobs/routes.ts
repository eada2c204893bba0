// GET and PUT of the fs blob store's presigned URLs, `/v1/blobs/<key>?method=&expires=&signature=`.
// No bearer credential: the signature is the credential (config.auth false, as discovery).
// Hidden from the OpenAPI document: these URLs are minted by Warren for its own transfers,
// not an operation of the contract (docs/api-decisions.md "Blob URLs").
import { Type } from "@sinclair/typebox";
import type { App } from "../../http/types.js";
import type { SignedBlobService } from "./service.js";

const SignedQuery = Type.Object(
  {
    method: Type.Optional(Type.String({ maxLength: 8 })),
    expires: Type.Optional(Type.String({ maxLength: 16 })),
    signature: Type.Optional(Type.String({ maxLength: 128 })),
  },
  { additionalProperties: false },
);
const KeyParams = Type.Object({ "*": Type.String({ maxLength: 1024 }) });
const ROUTE = "/v1/blobs/*";

export function registerBlobRoutes(app: App, blobs: SignedBlobService): void {
  const schema = { hide: true, params: KeyParams, querystring: SignedQuery } as Record<string, unknown>;
  const config = { auth: false, envelope: "flat" as const };
  // A scope of its own, so that any body (of any media type, or none) reaches the PUT
  // handler as the raw stream instead of the JSON parser every other route uses.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_request, _payload, done) => done(null, undefined));

    scope.get(ROUTE, { config, schema }, async (request, reply) => {
      const key = (request.params as { "*": string })["*"];
      blobs.authorize("GET", key, request.query as Record<string, string>);
      const blob = await blobs.read(key);
      return reply.type("application/octet-stream").header("content-length", blob.size).send(blob.stream);
    });

    scope.put(ROUTE, { config, schema }, async (request, reply) => {
      const key = (request.params as { "*": string })["*"];
      blobs.authorize("PUT", key, request.query as Record<string, string>);
      const length = request.headers["content-length"];
      // Not destroyed when the service stops reading early (over the limit): that would
      // reset the connection before the 413 is written.
      const body = request.raw.iterator({ destroyOnReturn: false });
      const { written } = await blobs.write(key, body, length === undefined ? undefined : Number(length));
      return reply.code(written ? 201 : 200).send();
    });
  });
}
