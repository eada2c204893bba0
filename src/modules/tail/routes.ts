// GET /v1/runs/{id}/tail (TailRun): the run tail as server-sent events (docs/api-decisions.md
// "Run tail"). The OpenAPI document states its parameters, its text/event-stream answer and
// the standard error envelope answered before the stream starts.
// Errors (unknown run, bad cursor, stream limits) are answered in the standard envelope
// before the stream starts; after that the connection is ours (hijacked) until the run
// ends or the client goes.
import { Type } from "@sinclair/typebox";
import type { FastifyReply, FastifyRequest } from "fastify";
import { standardResponses } from "../../http/schemas.js";
import { type App, credentialOf } from "../../http/types.js";
import { TailQuery } from "./schemas.js";
import type { TailFrame, TailItem, TailService } from "./service.js";

/** How long a stream may take to hand its last bytes to its client once the server closes. */
const CLOSE_GRACE_MS = 1000;

const RunParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });

export function registerTailRoutes(app: App, tails: TailService): void {
  const streams = new Set<AbortController>();
  let closing = false;
  // Open streams would hold the server's close until their runs end: each is ended, and cut
  // when its client does not take the end (a full socket would hold the close for ever).
  app.addHook("preClose", (done) => {
    closing = true;
    for (const stream of streams) stream.abort();
    done();
  });

  app.get(
    "/v1/runs/:id/tail",
    {
      schema: {
        operationId: "TailRun",
        tags: ["TelemetryViewService"],
        summary: "Stream a run's telemetry events as server-sent events, resumable by cursor",
        description:
          "Each event's `id` is a resume cursor; reconnect with `Last-Event-ID` (or `cursor`) to get exactly the events after it, then live ones. `: heartbeat` comments keep an idle stream open; `event: end` closes it once the run has completed and its last event was sent.",
        params: RunParams,
        querystring: TailQuery,
        headers: Type.Object({
          "last-event-id": Type.Optional(
            Type.String({ maxLength: 128, description: "Resume cursor (wins over `cursor`)" }),
          ),
        }),
        response: {
          ...standardResponses({}),
          200: {
            description: "text/event-stream of {id, event?, data} items",
            content: { "text/event-stream": { schema: { type: "string" } } },
          },
        },
      },
    } as Record<string, unknown>,
    async (request: FastifyRequest<{ Params: { id: string }; Querystring: TailQuery }>, reply: FastifyReply) => {
      const lastEventId = request.headers["last-event-id"];
      const tail = await tails.open(credentialOf(request), {
        runId: request.params.id,
        cursor: typeof lastEventId === "string" && lastEventId !== "" ? lastEventId : request.query.cursor,
        lineagePath: request.query.lineage_path,
      });
      const abort = new AbortController();
      streams.add(abort);
      const res = reply.raw;
      res.on("close", () => abort.abort());
      reply.hijack();
      res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache, no-transform",
        "x-accel-buffering": "no",
        "x-request-id": request.id,
        // The connection ends with the stream: nothing lingers as an idle keep-alive socket.
        connection: "close",
      });
      res.flushHeaders();
      const started = Date.now();
      let sent = 0;
      try {
        for await (const frame of tail.frames(abort.signal)) {
          if (abort.signal.aborted) break;
          if (!res.write(frameText(frame))) await drained(res, abort.signal);
          if ("item" in frame) sent += 1;
        }
      } catch (error) {
        if (!abort.signal.aborted) request.log.error({ err: error, runId: tail.runId }, "run tail failed");
      } finally {
        tail.release();
        streams.delete(abort);
        if (!res.writableEnded) res.end();
        if (closing && !res.writableFinished) {
          const cut = setTimeout(() => res.destroy(), CLOSE_GRACE_MS);
          cut.unref();
          res.once("close", () => clearTimeout(cut));
        }
        request.log.info(
          { orgId: tail.orgId, runId: tail.runId, items: sent, ms: Date.now() - started, status: 200 },
          "run tail closed",
        );
      }
    },
  );
}

/** The SSE text of a frame: a comment for a heartbeat, else id/event/retry fields and one data line. */
export function frameText(frame: TailFrame): string {
  if (!("item" in frame)) return ": heartbeat\n\n";
  const { item } = frame;
  // One item goes to every tail of its run: its text is built once.
  let text = texts.get(item);
  if (text === undefined) {
    text = itemText(item);
    texts.set(item, text);
  }
  return text;
}

const texts = new WeakMap<TailItem, string>();

function itemText(item: TailItem): string {
  let text = "";
  if (item.id !== undefined) text += `id: ${item.id}\n`;
  if (item.event !== undefined) text += `event: ${item.event}\n`;
  if (item.retry !== undefined) text += `retry: ${item.retry}\n`;
  // JSON.stringify never writes a raw newline, so the data is one line.
  return `${text}data: ${JSON.stringify(item.data)}\n\n`;
}

function drained(res: NodeJS.WritableStream, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off("drain", done);
      signal.removeEventListener("abort", done);
      resolve();
    };
    res.on("drain", done);
    signal.addEventListener("abort", done);
  });
}
