// The file API of a sandbox (docs/api-decisions.md "Files"), in the sandbox routes' flat
// envelope. Bodies of PUT .../files and POST .../files:upload are the raw stream (a scope with
// no body parser: no request cap, the sandbox's disk bounds them), piped into the sandbox with
// backpressure; a download and a watch are hijacked streams whose every write is awaited
// (drained) before the sandbox's output is acknowledged.
import { Type } from "@sinclair/typebox";
import type { FastifyReply, FastifyRequest } from "fastify";
import { FLAT, flatResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { writeDrained } from "../../http/write-drained.js";
import { AppError } from "../../lib/errors.js";
import { MAX_PATH_BYTES } from "./records.js";
import type { FileService } from "./service.js";
import { MAX_WATCH_ENTRIES, type WatchEvent, watchDirectory } from "./watch.js";

const TAGS = ["SandboxService"];
const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128, description: "Sandbox id" }) });
const PathString = Type.String({
  minLength: 1,
  maxLength: MAX_PATH_BYTES,
  description: `Absolute path inside the sandbox (at most ${MAX_PATH_BYTES} bytes; no NUL, no . or .. segment)`,
});
const Mode = Type.String({ maxLength: 5, description: "Octal permission bits, e.g. 644 or 0755" });
export const FileInfo = Type.Object(
  {
    path: Type.String(),
    name: Type.String(),
    type: Type.Union(
      ["file", "directory", "symlink", "fifo", "socket", "char_device", "block_device"].map((t) => Type.Literal(t)),
    ),
    size: Type.String({ pattern: "^[0-9]+$", description: "Bytes, as a decimal string" }),
    mode: Type.String({ description: "Permission bits in octal (four digits)" }),
    modified_at: Type.String({ format: "date-time" }),
    accessed_at: Type.String({ format: "date-time" }),
    uid: Type.Integer(),
    gid: Type.Integer(),
    links: Type.Integer(),
    link_target: Type.Optional(Type.String({ description: "A symlink's target, as stored (never followed)" })),
  },
  { additionalProperties: false, $id: "FileInfo" },
);
const FileRef = Type.Unsafe<unknown>({ $ref: "FileInfo#" });
const PathQuery = Type.Object({ path: PathString }, { additionalProperties: false });

/** SSE keeps an idle watch open with a comment this often. */
const WATCH_HEARTBEAT_MS = 15_000;

export function registerFileRoutes(app: App, files: FileService): void {
  app.addSchema(FileInfo);
  const base = "/v1/sandboxes/:id/files";

  // Raw bodies: a scope of its own with one parser that leaves the stream unread.
  void app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser("*", (_request, _payload, done) => done(null, undefined));
    scope.put(
      base,
      {
        config: FLAT,
        schema: {
          operationId: "WriteSandboxFile",
          description:
            "Writes one file in a running sandbox from the raw request body (streamed; parents created; renamed into place once whole) and answers its FileInfo. 409 sandbox_not_running, 413 payload_too_large past the file limit, 403 permission_denied when the sandbox's user may not write there, 400 failed_precondition when the path is a directory.",
          tags: TAGS,
          summary:
            "Write one file from the raw request body (streamed; parents created; renamed into place once whole)",
          params: IdParams,
          querystring: Type.Object({ path: PathString, mode: Type.Optional(Mode) }, { additionalProperties: false }),
          response: flatResponses({ 200: FileRef }),
        },
      },
      async (request) => {
        const { id } = request.params as { id: string };
        const query = request.query as { path: string; mode?: string };
        return files.writeFile(credentialOf(request), id, query, request.raw.iterator({ destroyOnReturn: false }));
      },
    );
    scope.post(
      `${base}::upload`,
      {
        config: FLAT,
        schema: {
          operationId: "UploadSandboxArchive",
          description:
            "Unpacks a tar stream (the request body, application/x-tar) into a directory of a running sandbox. Entries that would leave the directory are refused; 409 sandbox_not_running, 413 payload_too_large past the upload limit.",
          tags: TAGS,
          summary:
            "Extract a tar stream (the raw request body) under a directory, created with its parents; modes kept",
          params: IdParams,
          querystring: PathQuery,
          response: flatResponses({ 200: FileRef }),
        },
      },
      async (request) => {
        const { id } = request.params as { id: string };
        const query = request.query as { path: string };
        return files.extractTar(credentialOf(request), id, query, request.raw.iterator({ destroyOnReturn: false }));
      },
    );
  });

  app.get(
    base,
    {
      config: FLAT,
      schema: {
        operationId: "ReadSandboxFile",
        tags: TAGS,
        summary: "Download a regular file (raw bytes) or a directory (a tar stream); other file types are refused",
        description:
          "`x-warren-file-type` says which: `file` (application/octet-stream, content-length its size at open) or `directory` (application/x-tar). A stream cut short is an error, never a short success.",
        params: IdParams,
        querystring: PathQuery,
        response: {
          200: {
            description: "The file's bytes, or a tar of the directory",
            content: {
              "application/octet-stream": { schema: { type: "string", format: "binary" } },
              "application/x-tar": { schema: { type: "string", format: "binary" } },
            },
          },
          ...flatResponses({}),
        },
      } as Record<string, unknown>,
    },
    async (request: FastifyRequest<{ Params: { id: string }; Querystring: { path: string } }>, reply: FastifyReply) => {
      const download = await files.download(credentialOf(request), request.params.id, request.query);
      const res = reply.raw;
      res.once("close", () => download.cancel());
      reply.hijack();
      res.writeHead(200, {
        "content-type": download.kind === "file" ? "application/octet-stream" : "application/x-tar",
        "x-warren-file-type": download.kind,
        "x-request-id": request.id,
        ...(download.size !== null ? { "content-length": String(download.size) } : {}),
      });
      try {
        await download.pipe((data) => writeDrained(res, data));
        res.end();
      } catch (error) {
        if (!res.destroyed) request.log.warn({ err: (error as Error).message }, "a sandbox download was cut");
        res.destroy();
      }
    },
  );

  app.get(
    `${base}::stat`,
    {
      config: FLAT,
      schema: {
        operationId: "StatSandboxFile",
        description:
          "The FileInfo of one path in a running sandbox. 404 not_found when nothing is there; 409 sandbox_not_running.",
        tags: TAGS,
        summary: "A file's type, size, mode, times and owner (a symlink itself, with its target)",
        params: IdParams,
        querystring: PathQuery,
        response: flatResponses({ 200: FileRef }),
      },
    },
    async (request) => files.stat(credentialOf(request), request.params.id, request.query),
  );

  app.get(
    `${base}::list`,
    {
      config: FLAT,
      schema: {
        operationId: "ListSandboxFiles",
        description:
          "Lists a directory of a running sandbox (optionally recursive, bounded). 404 not_found for a missing directory, 400 failed_precondition for a path that is not one; 409 sandbox_not_running.",
        tags: TAGS,
        summary: "A directory's entries (sorted by name), at most `limit`; `truncated` when there were more",
        params: IdParams,
        querystring: Type.Object(
          {
            path: PathString,
            limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000, default: 1000 })),
          },
          { additionalProperties: false },
        ),
        response: flatResponses({
          200: Type.Object(
            { path: Type.String(), entries: Type.Array(FileRef), truncated: Type.Boolean() },
            { additionalProperties: false },
          ),
        }),
      },
    },
    async (request) =>
      files.list(credentialOf(request), request.params.id, {
        path: request.query.path,
        limit: request.query.limit ?? 1000,
      }),
  );

  app.post(
    `${base}::mkdir`,
    {
      config: FLAT,
      schema: {
        operationId: "MakeSandboxDirectory",
        description:
          "Creates a directory and its parents in a running sandbox (an existing directory is fine) and answers its FileInfo. 409 sandbox_not_running; 403 permission_denied when the sandbox's user may not write there.",
        tags: TAGS,
        summary: "Make a directory and its parents (an existing directory is fine)",
        params: IdParams,
        body: Type.Object({ path: PathString, mode: Type.Optional(Mode) }, { additionalProperties: false }),
        response: flatResponses({ 200: FileRef }),
      },
    },
    async (request) => files.mkdir(credentialOf(request), request.params.id, request.body),
  );

  app.post(
    `${base}::remove`,
    {
      config: FLAT,
      schema: {
        operationId: "RemoveSandboxFile",
        description:
          "Removes a file or directory in a running sandbox; a non-empty directory needs recursive (400 failed_precondition otherwise). 204 with no body. 404 not_found when nothing is there.",
        tags: TAGS,
        summary: "Remove a file, a symlink (never its target), an empty directory, or with recursive a tree",
        params: IdParams,
        body: Type.Object(
          { path: PathString, recursive: Type.Optional(Type.Boolean()) },
          { additionalProperties: false },
        ),
        response: flatResponses({ 204: Type.Null() }),
      },
    },
    async (request, reply) => {
      await files.remove(credentialOf(request), request.params.id, request.body);
      return reply.code(204).send(null);
    },
  );

  app.post(
    `${base}::rename`,
    {
      config: FLAT,
      schema: {
        operationId: "RenameSandboxFile",
        description:
          "Renames (moves) a path within a running sandbox and answers the new path's FileInfo. 404 not_found for a missing source; 409 already_exists when the target exists and overwrite is not set.",
        tags: TAGS,
        summary: "Rename (move) a file or directory; parents of `to` created; an existing `to` only with overwrite",
        params: IdParams,
        body: Type.Object(
          { from: PathString, to: PathString, overwrite: Type.Optional(Type.Boolean()) },
          { additionalProperties: false },
        ),
        response: flatResponses({ 200: FileRef }),
      },
    },
    async (request) => files.rename(credentialOf(request), request.params.id, request.body),
  );

  app.get(
    `${base}::watch`,
    {
      config: FLAT,
      schema: {
        operationId: "WatchSandboxDirectory",
        tags: TAGS,
        summary: "A directory's changes as server-sent events: ready, then created, modified and deleted entries",
        description: `The sandbox lists the directory every interval_seconds and the server compares passes (no inotify: changes inside one interval that cancel out are not seen). \`event: error\` ends the stream (more than ${MAX_WATCH_ENTRIES} entries, the directory gone, malformed output).`,
        params: IdParams,
        querystring: Type.Object(
          { path: PathString, interval_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 60, default: 1 })) },
          { additionalProperties: false },
        ),
        response: {
          200: {
            description: "text/event-stream: event ready | created | modified | deleted | error, data JSON",
            content: { "text/event-stream": { schema: { type: "string" } } },
          },
          ...flatResponses({}),
        },
      } as Record<string, unknown>,
    },
    async (
      request: FastifyRequest<{ Params: { id: string }; Querystring: { path: string; interval_seconds?: number } }>,
      reply: FastifyReply,
    ) => {
      const cred = credentialOf(request);
      // Errors before the stream (not found, not running, a bad path) are answered as usual.
      const dir = await files.stat(cred, request.params.id, { path: request.query.path });
      if (dir.type !== "directory") {
        throw new AppError("failed_precondition", "a watch needs a directory", { details: { reason: "wrong_type" } });
      }
      const res = reply.raw;
      const abort = new AbortController();
      res.once("close", () => abort.abort());
      reply.hijack();
      res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache, no-transform",
        "x-accel-buffering": "no",
        "x-request-id": request.id,
        connection: "close",
      });
      res.flushHeaders();
      const heartbeat = setInterval(() => {
        if (res.writableLength === 0) res.write(": heartbeat\n\n");
      }, WATCH_HEARTBEAT_MS);
      try {
        await watchDirectory(
          files,
          cred,
          request.params.id,
          { path: request.query.path, interval_seconds: request.query.interval_seconds ?? 1 },
          (event) => writeDrained(res, Buffer.from(eventText(event))),
          abort.signal,
        );
      } catch (error) {
        if (!abort.signal.aborted) {
          const code = (error as { code?: unknown }).code;
          const message = (error as Error).message;
          await writeDrained(
            res,
            Buffer.from(
              `event: error\ndata: ${JSON.stringify({ code: typeof code === "string" ? code : "internal", message })}\n\n`,
            ),
          ).catch(() => undefined);
        }
      } finally {
        clearInterval(heartbeat);
        if (!res.writableEnded) res.end();
      }
    },
  );
}

function eventText(event: WatchEvent): string {
  if (event.kind === "ready")
    return `event: ready\ndata: ${JSON.stringify({ path: event.path, entries: event.entries })}\n\n`;
  return `event: ${event.kind}\ndata: ${JSON.stringify(event.entry)}\n\n`;
}
