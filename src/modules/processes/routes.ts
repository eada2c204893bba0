// The background processes of a sandbox (docs/api-decisions.md "Processes"), in the sandbox
// routes' flat envelope: start, list, get, :signal, :kill, :stdin, :resize, :wait, one output
// read (JSON, base64 bytes) and the output as server-sent events from an offset (re-attach
// with `offset` or Last-Event-ID: every event's id is the offset after it).
import { Type } from "@sinclair/typebox";
import type { FastifyReply, FastifyRequest } from "fastify";
import { FLAT, flatResponses } from "../../http/schemas.js";
import { type App, credentialOf, verbPath } from "../../http/types.js";
import { writeDrained } from "../../http/write-drained.js";
import { AppError } from "../../lib/errors.js";
import {
  MAX_READ_BYTES,
  MAX_STDIN_BYTES,
  MAX_WAIT_SECONDS,
  type ProcessService,
  type ProcessStart,
  SIGNAL_NAMES,
} from "./service.js";

const TAGS = ["SandboxService"];
const HEARTBEAT_MS = 15_000;
const Params = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128, description: "Sandbox id" }) });
const ProcessParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128, description: "Sandbox id" }),
  process_id: Type.String({ minLength: 1, maxLength: 64, description: "Process id (proc_...)" }),
});
const Pty = Type.Object(
  { rows: Type.Integer({ minimum: 1, maximum: 65535 }), cols: Type.Integer({ minimum: 1, maximum: 65535 }) },
  { additionalProperties: false },
);
export const SandboxProcess = Type.Object(
  {
    id: Type.String(),
    sandbox_id: Type.String(),
    state: Type.Union(["starting", "running", "exited", "lost"].map((s) => Type.Literal(s))),
    cmd: Type.Array(Type.String()),
    cwd: Type.Union([Type.String(), Type.Null()]),
    pty: Type.Union([Pty, Type.Null()]),
    stdin: Type.Boolean({ description: "Whether stdin is a pipe fed by :stdin (always with a pty)" }),
    pid: Type.Union([Type.Integer(), Type.Null()], { description: "In the sandbox's PID namespace" }),
    exit_code: Type.Union([Type.Integer(), Type.Null()], { description: "128 + signal when a signal ended it" }),
    end_reason: Type.Union(
      [...["exited", "killed", "timeout", "sandbox_stopped", "lost"].map((s) => Type.Literal(s)), Type.Null()],
      { description: "lost: no agent kept it any more (the sandbox's agent died); its outcome is not known" },
    ),
    output_kept: Type.Boolean({ description: "Whether its output can still be read" }),
    timeout_seconds: Type.Union([Type.Integer(), Type.Null()]),
    created_at: Type.String({ format: "date-time" }),
    started_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
    ended_at: Type.Union([Type.String({ format: "date-time" }), Type.Null()]),
  },
  { additionalProperties: false, $id: "SandboxProcess" },
);
const ProcessRef = Type.Unsafe<unknown>({ $ref: "SandboxProcess#" });
const Offset = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: "Output byte offset" });

export function registerProcessRoutes(app: App, processes: ProcessService): void {
  app.addSchema(SandboxProcess);
  const base = "/v1/sandboxes/:id/processes";
  const one = `${base}/:process_id`;

  app.post(
    base,
    {
      config: FLAT,
      schema: {
        operationId: "StartSandboxProcess",
        tags: TAGS,
        summary: "Start a background process; answers at once with its id (it outlives every connection)",
        description:
          "Starts `cmd` in the running sandbox (with `env`, `cwd`, an optional stdin pipe, an optional terminal and `timeout_seconds`) and answers 201 with the process at once; the exec agent keeps it and its last 1 MiB of output across client connections and server restarts. Errors: not_found (another organization's sandbox), sandbox_not_running, quarantined, invalid_argument (argv and env past the contract's limits), failed_precondition (the sandbox already has 32 live processes).",
        params: Params,
        body: Type.Object(
          {
            cmd: Type.Array(Type.String({ maxLength: 4096 }), { minItems: 1, maxItems: 256 }),
            env: Type.Optional(Type.Record(Type.String(), Type.String())),
            cwd: Type.Optional(Type.String({ maxLength: 4096 })),
            stdin: Type.Optional(Type.Boolean({ description: "Give it a stdin pipe (fed by :stdin); else /dev/null" })),
            pty: Type.Optional(Type.Union([Pty, Type.Null()])),
            timeout_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 604800 })),
          },
          { additionalProperties: false },
        ),
        response: flatResponses({ 201: ProcessRef }),
      },
    },
    async (request, reply) => {
      const view = await processes.start(credentialOf(request), request.params.id, request.body as ProcessStart);
      return reply.code(201).send(view);
    },
  );

  app.get(
    base,
    {
      config: FLAT,
      schema: {
        operationId: "ListSandboxProcesses",
        tags: TAGS,
        summary: "The sandbox's processes, newest first",
        description:
          "Lists the sandbox's processes newest first, running and ended, paginated with page_size and page_token like the other lists. Errors: not_found for another organization's sandbox or a sandbox-scoped credential of another sandbox.",
        params: Params,
        querystring: Type.Object(
          {
            page_size: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })),
            page_token: Type.Optional(Type.String({ maxLength: 512 })),
          },
          { additionalProperties: false },
        ),
        response: flatResponses({
          200: Type.Object(
            { processes: Type.Array(ProcessRef), next_page_token: Type.String() },
            { additionalProperties: false },
          ),
        }),
      },
    },
    async (request) => processes.list(credentialOf(request), request.params.id, request.query),
  );

  app.get(
    one,
    {
      config: FLAT,
      schema: {
        operationId: "GetSandboxProcess",
        tags: TAGS,
        summary: "One process: state, exit code, start and end",
        description:
          "Answers one process: its state (starting, running, exited, lost), exit code, end reason, and start and end times. Errors: not_found for an unknown process or another organization's sandbox.",
        params: ProcessParams,
        response: flatResponses({ 200: ProcessRef }),
      },
    },
    async (request) => processes.get(credentialOf(request), request.params.id, request.params.process_id),
  );

  app.post(
    verbPath(base, "process_id", "signal"),
    {
      config: FLAT,
      schema: {
        operationId: "SignalSandboxProcess",
        tags: TAGS,
        summary: "Send a signal to the process's group (a process that already ended is answered as it is)",
        description:
          "Sends one of the allowed signals to the process's group; a process that already ended is answered as it is. Errors: not_found, invalid_argument for a signal outside the list, sandbox_not_running.",
        params: ProcessParams,
        body: Type.Object(
          { signal: Type.Union(SIGNAL_NAMES.map((name) => Type.Literal(name))) },
          { additionalProperties: false },
        ),
        response: flatResponses({ 200: ProcessRef }),
      },
    },
    async (request) =>
      processes.signal(
        credentialOf(request),
        request.params.id,
        request.params.process_id,
        (request.body as { signal: string }).signal,
      ),
  );

  app.post(
    verbPath(base, "process_id", "kill"),
    {
      config: FLAT,
      schema: {
        operationId: "KillSandboxProcess",
        tags: TAGS,
        summary: "SIGKILL to the process's group",
        description:
          "Sends SIGKILL to the process's group and answers the process; its end is recorded as killed. Errors: not_found, sandbox_not_running.",
        params: ProcessParams,
        response: flatResponses({ 200: ProcessRef }),
      },
    },
    async (request) => processes.signal(credentialOf(request), request.params.id, request.params.process_id, "SIGKILL"),
  );

  app.post(
    verbPath(base, "process_id", "stdin"),
    {
      config: FLAT,
      schema: {
        operationId: "WriteSandboxProcessStdin",
        tags: TAGS,
        summary: `Write to the process's stdin (at most ${MAX_STDIN_BYTES} bytes a call), and/or close it`,
        description:
          "Writes text or base64 bytes (at most 64 KiB a call) to the stdin pipe or terminal of a process started with stdin, and/or closes it. Errors: not_found, failed_precondition when the process has no stdin, closed it or ended, operation_conflict while it has not read earlier input (retry), invalid_argument for both data forms at once.",
        params: ProcessParams,
        body: Type.Object(
          {
            data: Type.Optional(Type.String({ maxLength: MAX_STDIN_BYTES, description: "Text (UTF-8)" })),
            data_base64: Type.Optional(
              Type.String({ maxLength: Math.ceil(MAX_STDIN_BYTES / 3) * 4, description: "Bytes, base64" }),
            ),
            close: Type.Optional(Type.Boolean({ description: "Close stdin after the data (EOF)" })),
          },
          { additionalProperties: false },
        ),
        response: flatResponses({
          200: Type.Object({ written: Type.Integer(), closed: Type.Boolean() }, { additionalProperties: false }),
        }),
      },
    },
    async (request) => {
      const body = request.body as { data?: string; data_base64?: string; close?: boolean };
      return processes.stdin(credentialOf(request), request.params.id, request.params.process_id, body);
    },
  );

  app.post(
    verbPath(base, "process_id", "resize"),
    {
      config: FLAT,
      schema: {
        operationId: "ResizeSandboxProcess",
        tags: TAGS,
        summary: "Resize the process's terminal",
        description:
          "Sets the rows and columns of the terminal of a process started with a pty. Errors: not_found, failed_precondition for a process without a terminal, invalid_argument for sizes out of range.",
        params: ProcessParams,
        body: Pty,
        response: flatResponses({ 200: ProcessRef }),
      },
    },
    async (request) =>
      processes.resize(
        credentialOf(request),
        request.params.id,
        request.params.process_id,
        request.body as { rows: number; cols: number },
      ),
  );

  app.post(
    verbPath(base, "process_id", "wait"),
    {
      config: FLAT,
      schema: {
        operationId: "WaitSandboxProcess",
        tags: TAGS,
        summary: "The process once it ended, or as it is after timeout_seconds (a long poll)",
        description:
          "Long-polls until the process ends or timeout_seconds (1-60) pass, then answers it as it is (check its state). Errors: not_found.",
        params: ProcessParams,
        body: Type.Object(
          { timeout_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_WAIT_SECONDS, default: 30 })) },
          { additionalProperties: false },
        ),
        response: flatResponses({ 200: ProcessRef }),
      },
    },
    async (request) =>
      processes.wait(
        credentialOf(request),
        request.params.id,
        request.params.process_id,
        (request.body as { timeout_seconds?: number } | undefined)?.timeout_seconds ?? 30,
      ),
  );

  app.get(
    `${one}/output`,
    {
      config: FLAT,
      schema: {
        operationId: "ReadSandboxProcessOutput",
        tags: TAGS,
        summary: "One read of output from an offset (base64 chunks), as soon as there is some or wait_seconds passed",
        description:
          "`dropped_bytes` counts bytes before the first chunk that are no longer kept (a gap). Read on from `next_offset`.",
        params: ProcessParams,
        querystring: Type.Object(
          {
            offset: Type.Optional(Offset),
            max_bytes: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_READ_BYTES, default: 65536 })),
            wait_seconds: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_SECONDS, default: 0 })),
          },
          { additionalProperties: false },
        ),
        response: flatResponses({
          200: Type.Object(
            {
              offset: Type.Integer(),
              next_offset: Type.Integer(),
              dropped_bytes: Type.Integer(),
              chunks: Type.Array(
                Type.Object(
                  {
                    offset: Type.Integer(),
                    stream: Type.Union([Type.Literal("stdout"), Type.Literal("stderr")]),
                    data: Type.String({ description: "base64" }),
                  },
                  { additionalProperties: false },
                ),
              ),
              complete: Type.Boolean({ description: "The process ended and every byte up to next_offset was read" }),
              process: ProcessRef,
            },
            { additionalProperties: false },
          ),
        }),
      },
    },
    async (request) =>
      processes.read(credentialOf(request), request.params.id, request.params.process_id, {
        offset: request.query.offset ?? 0,
        maxBytes: request.query.max_bytes ?? 65536,
        waitSeconds: request.query.wait_seconds ?? 0,
      }),
  );

  app.get(
    `${one}/output::stream`,
    {
      config: FLAT,
      schema: {
        operationId: "StreamSandboxProcessOutput",
        tags: TAGS,
        summary: "The output from an offset as server-sent events, until the process ends (or the client leaves)",
        description:
          "Events: `stdout` / `stderr` (data: {offset, data: base64}), `gap` ({from, to}: bytes no longer kept), `end` ({offset, process}). Every event's id is the offset after it: reconnect with `Last-Event-ID` (or `offset`) to go on without a byte lost or repeated while the bytes are kept.",
        params: ProcessParams,
        querystring: Type.Object({ offset: Type.Optional(Offset) }, { additionalProperties: false }),
        response: {
          200: {
            description: "text/event-stream",
            content: { "text/event-stream": { schema: { type: "string" } } },
          },
          ...flatResponses({}),
        },
      } as Record<string, unknown>,
    },
    async (
      request: FastifyRequest<{ Params: { id: string; process_id: string }; Querystring: { offset?: number } }>,
      reply: FastifyReply,
    ) => {
      const lastEventId = request.headers["last-event-id"];
      let offset = request.query.offset ?? 0;
      if (typeof lastEventId === "string" && lastEventId !== "") {
        if (!/^[0-9]{1,16}$/.test(lastEventId) || Number(lastEventId) > Number.MAX_SAFE_INTEGER)
          throw new AppError("invalid_argument", "Last-Event-ID: an output offset");
        offset = Number(lastEventId);
      }
      const cred = credentialOf(request);
      const stream = await processes.output(cred, request.params.id, request.params.process_id, offset);
      const res = reply.raw;
      res.once("close", () => stream.close());
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
      }, HEARTBEAT_MS);
      try {
        for await (const event of stream.events) {
          if (event.kind === "output") {
            const next = event.offset + event.data.length;
            const data = JSON.stringify({ offset: event.offset, data: event.data.toString("base64") });
            await writeDrained(res, `event: ${event.stream}\nid: ${next}\ndata: ${data}\n\n`);
          } else if (event.kind === "gap") {
            await writeDrained(res, `event: gap\nid: ${event.to}\ndata: ${JSON.stringify(event)}\n\n`);
          } else {
            const process = await processes.get(cred, request.params.id, request.params.process_id);
            await writeDrained(
              res,
              `event: end\nid: ${event.offset}\ndata: ${JSON.stringify({ offset: event.offset, process })}\n\n`,
            );
          }
        }
        res.end();
      } catch (error) {
        if (!res.destroyed) {
          request.log.warn({ err: (error as Error).message }, "a process output stream was cut");
          res.write(
            `event: error\ndata: ${JSON.stringify({ message: "the stream broke; reconnect from the last id" })}\n\n`,
          );
          res.end();
        }
      } finally {
        clearInterval(heartbeat);
        stream.close();
      }
    },
  );
}
