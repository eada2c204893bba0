// `warren mcp`: a stdio Model Context Protocol server giving an agent sandboxes as tools
// (create, exec, background processes, read/write/list files, list, snapshot, restore, delete) and telemetry tools
// (annotate, sql). Each tool's input schema is built from the request schema of its API
// operation in docs/openapi.json (the schema the server validates with), converted by zod's
// fromJSONSchema, so a bad input is refused before any request. Failures are tool errors
// whose text is the contract's {code, message} (invalid input: invalid_argument).
import { readFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";
import { type ExecResult, SandboxStateError, type Warren, WarrenApiError, WarrenError } from "../../sdk/src/index.js";
import { KEEP_ALIVE_COMMAND } from "./context.js";

type JsonSchema = { type?: string; properties?: Record<string, unknown>; required?: string[]; [k: string]: unknown };

const OPENAPI = new URL("../../../docs/openapi.json", import.meta.url);

type OpenApiDocument = {
  paths: Record<string, Record<string, Record<string, unknown>>>;
  components?: { schemas?: Record<string, unknown> };
};
const REF = "#/components/schemas/";

/** `schema` with the document's named schemas (`$ref`) written out: a tool's schema stands alone. */
function inlined(doc: OpenApiDocument, schema: unknown, seen: string[] = []): unknown {
  if (Array.isArray(schema)) return schema.map((item) => inlined(doc, item, seen));
  if (typeof schema !== "object" || schema === null) return schema;
  const { $ref, ...rest } = schema as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  if (typeof $ref === "string" && $ref.startsWith(REF)) {
    const name = $ref.slice(REF.length);
    if (seen.includes(name)) throw new Error(`docs/openapi.json: schema ${name} refers to itself`);
    Object.assign(out, inlined(doc, doc.components?.schemas?.[name], [...seen, name]));
  }
  for (const [key, value] of Object.entries(rest)) out[key] = inlined(doc, value, seen);
  return out;
}

/** The JSON request body schema of `operationId`, its named schemas written out. */
function bodySchema(doc: OpenApiDocument, operationId: string): JsonSchema {
  for (const methods of Object.values(doc.paths)) {
    for (const op of Object.values(methods)) {
      if (op.operationId !== operationId) continue;
      const body = op.requestBody as { content: Record<string, { schema: JsonSchema }> } | undefined;
      const schema = body?.content["application/json"]?.schema;
      return schema ? (inlined(doc, schema) as JsonSchema) : { type: "object", properties: {} };
    }
  }
  throw new Error(`docs/openapi.json has no operation ${operationId}`);
}

/** An object schema: `extra` properties first, then the operation body's, minus `omit`. */
function toolSchema(base: JsonSchema, extra: Record<string, unknown>, extraRequired: string[], omit: string[] = []) {
  const properties: Record<string, unknown> = { ...extra };
  for (const [name, schema] of Object.entries(base.properties ?? {}))
    if (!omit.includes(name)) properties[name] = schema;
  const required = [...extraRequired, ...(base.required ?? []).filter((name) => !omit.includes(name))];
  return z.fromJSONSchema({ type: "object", additionalProperties: false, properties, required } as never);
}

const SANDBOX_ID = { sandbox_id: { type: "string", minLength: 1, maxLength: 128, description: "sandbox id or name" } };
const PATH = {
  path: { type: "string", minLength: 1, maxLength: 4096, description: "absolute path inside the sandbox" },
};

/** The MCP server's tools need a few sandbox fields only. */
function sandboxSummary(record: unknown) {
  const r = (record ?? {}) as Record<string, unknown>;
  return { id: r.id, name: r.name, state: r.state, image: r.image ?? r.workload_image, snapshot_id: r.snapshot_id };
}

function ok(value: unknown) {
  return {
    content: [{ type: "text" as const, text: JSON.stringify(value, null, 2) }],
    structuredContent: value as Record<string, unknown>,
  };
}

/** A tool error carrying the contract's code. */
function toolError(code: string, message: string, extra: Record<string, unknown> = {}) {
  return { isError: true, content: [{ type: "text" as const, text: JSON.stringify({ code, message, ...extra }) }] };
}

function fromError(error: unknown) {
  if (error instanceof WarrenApiError) {
    return toolError(error.code, error.message, error.requestId ? { request_id: error.requestId } : {});
  }
  if (error instanceof SandboxStateError) {
    return toolError(error.code, error.message, {
      sandbox_id: error.sandboxId,
      state: error.state,
      ...(error.reason ? { state_reason: error.reason } : {}),
    });
  }
  if (error instanceof WarrenError) return toolError("unavailable", error.message);
  return toolError("internal", (error as Error).message ?? String(error));
}

/**
 * The MCP SDK answers an input its schema refuses with a tool error of its own text; this
 * gives it the contract's shape and code (invalid_argument). createToolError is private in
 * the SDK's types, hence the cast; test/mcp.test.ts fails if the SDK stops calling it.
 */
function contractToolErrors(server: McpServer): void {
  (server as unknown as { createToolError: (message: string) => unknown }).createToolError = (message: string) => {
    const invalid = /Input validation error|Invalid arguments/.test(message);
    return toolError(invalid ? "invalid_argument" : "internal", message.replace(/^MCP error -?\d+: /, ""));
  };
}

function execText(result: ExecResult) {
  return {
    ...(result as Record<string, unknown>),
    ...(result.kind === "completed" ? {} : { note: `no exit code: ${result.kind}` }),
  };
}

/** A create's body with the keep-alive command when the agent gave none (docs/sdk-cli.md). */
function keptAlive(args: Record<string, unknown>): Record<string, unknown> {
  return args.command === undefined ? { ...args, command: [...KEEP_ALIVE_COMMAND] } : args;
}

export function createMcpServer(warren: Warren): McpServer {
  const doc = JSON.parse(readFileSync(OPENAPI, "utf8"));
  const server = new McpServer({ name: "warren", version: "0.1.0" });
  contractToolErrors(server);
  const handle = <A>(fn: (args: A) => Promise<unknown>) =>
    (async (args: A) => {
      try {
        return ok(await fn(args));
      } catch (error) {
        return fromError(error);
      }
    }) as never;
  const create = bodySchema(doc, "CreateSandbox");

  server.registerTool(
    "sandbox_create",
    {
      description:
        "Create a sandbox (an isolated Linux container) and wait until it is running. Returns its id. Without command it runs `sleep infinity` and stays running.",
      inputSchema: toolSchema(create, {}, [], ["snapshot_id", "image_override"]),
    },
    handle(async (args: Record<string, unknown>) => {
      const s = await warren.sandboxes.create(keptAlive(args) as never);
      return { ...sandboxSummary(s.record), run_id: s.runId };
    }),
  );
  server.registerTool(
    "sandbox_restore",
    {
      description:
        "Create a new sandbox from a snapshot (its files, not its processes) and wait until it is running. Without command it runs `sleep infinity`.",
      inputSchema: toolSchema(create, {}, ["snapshot_id"], ["image"]),
    },
    handle(async (args: Record<string, unknown>) => {
      const s = await warren.sandboxes.create(keptAlive(args) as never);
      return { ...sandboxSummary(s.record), run_id: s.runId };
    }),
  );
  server.registerTool(
    "sandbox_exec",
    {
      description:
        'Run a command (argv, not a shell line: use ["sh","-c","..."]) in a running sandbox. Returns kind (completed, timed_out, indeterminate), exit, stdout, stderr.',
      inputSchema: toolSchema(bodySchema(doc, "ExecSandbox"), SANDBOX_ID, ["sandbox_id"]),
    },
    handle(async (args: { sandbox_id: string; cmd: string[]; timeout_seconds?: number }) => {
      const s = await warren.sandboxes.get(args.sandbox_id);
      return execText(
        await s.exec(args.cmd, args.timeout_seconds !== undefined ? { timeoutSeconds: args.timeout_seconds } : {}),
      );
    }),
  );
  const PROCESS_ID = {
    process_id: { type: "string", minLength: 1, maxLength: 64, description: "process id (proc_...)" },
  };
  server.registerTool(
    "sandbox_process_start",
    {
      description:
        'Start a background process (argv, not a shell line: use ["sh","-c","..."]) in a running sandbox, e.g. a dev server. Returns its id at once; it keeps running after this call. Read its output with sandbox_process_output.',
      inputSchema: toolSchema(bodySchema(doc, "StartSandboxProcess"), SANDBOX_ID, ["sandbox_id"]),
    },
    handle(async (args: Record<string, unknown> & { sandbox_id: string; cmd: string[] }) => {
      const s = await warren.sandboxes.get(args.sandbox_id);
      const { sandbox_id: _, cmd, timeout_seconds, ...rest } = args;
      const proc = await s.processes.start(cmd, {
        ...(rest as object),
        ...(timeout_seconds !== undefined ? { timeoutSeconds: timeout_seconds as number } : {}),
      });
      return { id: proc.id, sandbox_id: s.id, state: proc.state, pid: proc.record?.pid ?? null };
    }),
  );
  server.registerTool(
    "sandbox_process_output",
    {
      description:
        "Read a background process's output from a byte offset (0: everything still kept). Returns output (stdout and stderr as they came), next_offset to read on from, dropped_bytes (output no longer kept), complete (it ended and all was read), state and exit_code. wait_seconds waits for new output.",
      inputSchema: toolSchema(
        {},
        {
          ...SANDBOX_ID,
          ...PROCESS_ID,
          offset: { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
          max_bytes: { type: "integer", minimum: 1, maximum: 1_048_576 },
          wait_seconds: { type: "integer", minimum: 0, maximum: 60 },
        },
        ["sandbox_id", "process_id"],
      ),
    },
    handle(
      async (args: {
        sandbox_id: string;
        process_id: string;
        offset?: number;
        max_bytes?: number;
        wait_seconds?: number;
      }) => {
        const s = await warren.sandboxes.get(args.sandbox_id);
        const proc = await s.processes.get(args.process_id);
        const read = await proc.read({
          offset: args.offset ?? 0,
          ...(args.max_bytes ? { maxBytes: args.max_bytes } : {}),
          ...(args.wait_seconds ? { waitSeconds: args.wait_seconds } : {}),
        });
        const text = (stream?: string) =>
          Buffer.concat(
            read.chunks.filter((c) => !stream || c.stream === stream).map((c) => Buffer.from(c.data, "base64")),
          ).toString("utf8");
        return {
          output: text(),
          stderr: text("stderr"),
          offset: read.offset,
          next_offset: read.next_offset,
          dropped_bytes: read.dropped_bytes,
          complete: read.complete,
          state: read.process.state,
          exit_code: read.process.exit_code,
        };
      },
    ),
  );
  server.registerTool(
    "sandbox_process_kill",
    {
      description: "Stop a background process (SIGTERM, or SIGKILL with force).",
      inputSchema: toolSchema({}, { ...SANDBOX_ID, ...PROCESS_ID, force: { type: "boolean" } }, [
        "sandbox_id",
        "process_id",
      ]),
    },
    handle(async (args: { sandbox_id: string; process_id: string; force?: boolean }) => {
      const s = await warren.sandboxes.get(args.sandbox_id);
      const proc = await s.processes.get(args.process_id);
      const record = await proc.signal(args.force ? "SIGKILL" : "SIGTERM");
      return { id: record.id, state: record.state, exit_code: record.exit_code };
    }),
  );
  server.registerTool(
    "sandbox_read_file",
    {
      description: "Read a text file from a sandbox (over exec; up to ~750 KiB).",
      inputSchema: toolSchema({}, { ...SANDBOX_ID, ...PATH }, ["sandbox_id", "path"]),
    },
    handle(async (args: { sandbox_id: string; path: string }) => {
      const s = await warren.sandboxes.get(args.sandbox_id);
      return { path: args.path, content: await s.files.readText(args.path) };
    }),
  );
  server.registerTool(
    "sandbox_write_file",
    {
      description: "Write a text file in a sandbox, replacing it (over exec).",
      inputSchema: toolSchema({}, { ...SANDBOX_ID, ...PATH, content: { type: "string", maxLength: 8_388_608 } }, [
        "sandbox_id",
        "path",
        "content",
      ]),
    },
    handle(async (args: { sandbox_id: string; path: string; content: string }) => {
      const s = await warren.sandboxes.get(args.sandbox_id);
      await s.files.write(args.path, args.content);
      return { path: args.path, bytes: Buffer.byteLength(args.content) };
    }),
  );
  server.registerTool(
    "sandbox_list_files",
    {
      description: "List a directory in a sandbox (over exec).",
      inputSchema: toolSchema({}, { ...SANDBOX_ID, ...PATH }, ["sandbox_id", "path"]),
    },
    handle(async (args: { sandbox_id: string; path: string }) => {
      const s = await warren.sandboxes.get(args.sandbox_id);
      return { entries: await s.files.list(args.path) };
    }),
  );
  server.registerTool(
    "sandbox_list",
    {
      description: "List sandboxes, newest first (at most `limit`, default 50).",
      inputSchema: toolSchema(
        {},
        {
          name: { type: "string", minLength: 1, maxLength: 63 },
          limit: { type: "integer", minimum: 1, maximum: 500 },
        },
        [],
      ),
    },
    handle(async (args: { name?: string; limit?: number }) => {
      const rows = [];
      for await (const s of warren.sandboxes.list(args.name ? { name: args.name } : {})) {
        rows.push(sandboxSummary(s.record));
        if (rows.length >= (args.limit ?? 50)) break;
      }
      return { sandboxes: rows };
    }),
  );
  server.registerTool(
    "sandbox_snapshot",
    {
      description: "Snapshot a sandbox's files (root layer and /workspace). Returns snapshot_id for sandbox_restore.",
      inputSchema: toolSchema(bodySchema(doc, "CreateSandboxSnapshot"), SANDBOX_ID, ["sandbox_id"]),
    },
    handle(
      async (args: { sandbox_id: string; name?: string; wait_remote?: boolean; wait_timeout_seconds?: number }) => {
        const s = await warren.sandboxes.get(args.sandbox_id);
        return s.snapshot({
          ...(args.name ? { name: args.name } : {}),
          ...(args.wait_remote !== undefined ? { waitRemote: args.wait_remote } : {}),
          ...(args.wait_timeout_seconds !== undefined ? { waitTimeoutSeconds: args.wait_timeout_seconds } : {}),
        });
      },
    ),
  );
  server.registerTool(
    "sandbox_delete",
    {
      description: "Delete a sandbox.",
      inputSchema: toolSchema({}, SANDBOX_ID, ["sandbox_id"]),
    },
    handle(async (args: { sandbox_id: string }) => {
      const s = await warren.sandboxes.get(args.sandbox_id);
      await s.delete();
      return { id: s.id, request_state: "requested" };
    }),
  );
  server.registerTool(
    "annotate",
    {
      description:
        "Write an annotation (a telemetry event validated against a registered schema) on a run or a project. payload_json is a JSON object as a string.",
      inputSchema: toolSchema(bodySchema(doc, "Annotate"), {}, []),
    },
    handle(async (args: Record<string, unknown>) => {
      const { payload_json, ...rest } = args as { payload_json: string };
      let payload: unknown;
      try {
        payload = JSON.parse(payload_json);
      } catch {
        throw new WarrenApiError({ code: "invalid_argument", message: "payload_json is not JSON", status: 400 });
      }
      return warren.annotations.annotate({ ...(rest as Record<string, unknown>), payload } as never);
    }),
  );
  server.registerTool(
    "sql",
    {
      description:
        "Run one read-only SELECT over the organization's telemetry (tables: events, runs, annotations, ...). Returns columns and rows.",
      inputSchema: toolSchema(bodySchema(doc, "RunTelemetrySql"), {}, []),
    },
    handle(async (args: { sql: string; limit?: number }) =>
      warren.sql(args.sql, args.limit !== undefined ? { limit: args.limit } : {}),
    ),
  );
  return server;
}

/** Serves the tools on stdin/stdout until stdin closes. */
export async function serveMcp(warren: Warren): Promise<void> {
  const server = createMcpServer(warren);
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
    process.stdin.once("end", () => resolve());
  });
  await server.connect(transport);
  await closed;
  await server.close();
}
