// `warren mcp` as an agent sees it: the MCP SDK's own Client over a stdio transport spawning
// the CLI process, against a real server with runc sandboxes. Tools are listed with their
// input schemas, drive a sandbox end to end (create, exec, files, snapshot, restore, list,
// delete), write an annotation and run SQL; a bad input and an API error come back as tool
// errors carrying the contract's code.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Warren } from "../packages/sdk/src/index.js";
import { ensureCliBuilt, WARREN_BIN } from "./support/cli.js";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";

// The compiled CLI, as users run it (built when stale).
before(() => ensureCliBuilt());

type ToolResult = { isError?: boolean; content: { type: string; text: string }[] };

describe("warren mcp [pglite, local runtime]", () => {
  let api: ApiServer;
  let home: string;
  let client: Client;
  let transport: StdioClientTransport;

  const call = async (name: string, args: Record<string, unknown>) =>
    (await client.callTool({ name, arguments: args })) as ToolResult;
  const value = async <T = Record<string, unknown>>(name: string, args: Record<string, unknown>) => {
    const result = await call(name, args);
    assert.ok(!result.isError, `${name}: ${result.content[0]?.text}`);
    return JSON.parse(result.content[0]?.text ?? "{}") as T;
  };
  const failure = async (name: string, args: Record<string, unknown>) => {
    const result = await call(name, args);
    assert.equal(result.isError, true, `${name} should fail: ${result.content[0]?.text}`);
    return JSON.parse(result.content[0]?.text ?? "{}") as { code: string; message: string };
  };

  before(async () => {
    api = await startApiServer("pglite", { runtime: "mcp" });
    home = await mkdtemp(path.join(os.tmpdir(), "warren-mcp-home-"));
    transport = new StdioClientTransport({
      command: process.execPath,
      args: [WARREN_BIN, "mcp"],
      env: { PATH: process.env.PATH ?? "", HOME: home, WARREN_API_URL: api.url, WARREN_API_KEY: api.t.orgA.keys.owner },
      stderr: "pipe",
    });
    client = new Client({ name: "warren-test", version: "1.0.0" });
    await client.connect(transport);
  });
  after(async () => {
    await client?.close();
    await api?.close();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it("lists the sandbox and telemetry tools with the API's input schemas", async () => {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name).sort();
    assert.deepEqual(names, [
      "annotate",
      "sandbox_create",
      "sandbox_delete",
      "sandbox_exec",
      "sandbox_list",
      "sandbox_list_files",
      "sandbox_process_kill",
      "sandbox_process_output",
      "sandbox_process_start",
      "sandbox_read_file",
      "sandbox_restore",
      "sandbox_snapshot",
      "sandbox_write_file",
      "sql",
    ]);
    const exec = tools.find((tool) => tool.name === "sandbox_exec");
    assert.ok(exec, "sandbox_exec is listed");
    const cmd = (exec.inputSchema.properties as Record<string, { maxItems?: number }>).cmd;
    assert.equal(cmd?.maxItems, 256, "the exec body's own limits");
    assert.deepEqual(exec?.inputSchema.required, ["sandbox_id", "cmd"]);
  });

  it("refuses a bad input as a tool error with invalid_argument", async () => {
    const error = await failure("sandbox_exec", { sandbox_id: "x", cmd: [], timeout_seconds: 0 });
    assert.equal(error.code, "invalid_argument");
    const unknown = await failure("sandbox_create", { image: "x", bogus: true });
    assert.equal(unknown.code, "invalid_argument");
  });

  it("drives a sandbox: create, exec, write/read/list files, snapshot, restore, list, delete", async () => {
    const created = await value<{ id: string; state: string }>("sandbox_create", {
      name: "mcp-main",
      command: ["sleep", "3600"],
      network_access: "none",
    });
    assert.equal(created.state, "running");
    const exec = await value<{ kind: string; exit: number; stdout: string }>("sandbox_exec", {
      sandbox_id: "mcp-main",
      cmd: ["sh", "-c", "echo from-agent; exit 5"],
    });
    assert.deepEqual([exec.kind, exec.exit, exec.stdout], ["completed", 5, "from-agent\n"]);
    await value("sandbox_write_file", {
      sandbox_id: created.id,
      path: "/workspace/plan.md",
      content: "# plan\nship it\n",
    });
    const read = await value<{ content: string }>("sandbox_read_file", {
      sandbox_id: created.id,
      path: "/workspace/plan.md",
    });
    assert.equal(read.content, "# plan\nship it\n");
    const files = await value<{ entries: { name: string }[] }>("sandbox_list_files", {
      sandbox_id: created.id,
      path: "/workspace",
    });
    assert.ok(files.entries.some((entry) => entry.name === "plan.md"));
    const snap = await value<{ snapshot_id: string }>("sandbox_snapshot", { sandbox_id: created.id, name: "mcp-snap" });
    const restored = await value<{ id: string; state: string }>("sandbox_restore", {
      snapshot_id: snap.snapshot_id,
      command: ["sleep", "3600"],
    });
    assert.equal(restored.state, "running");
    const again = await value<{ content: string }>("sandbox_read_file", {
      sandbox_id: restored.id,
      path: "/workspace/plan.md",
    });
    assert.equal(again.content, "# plan\nship it\n");
    const listed = await value<{ sandboxes: { id: string }[] }>("sandbox_list", {});
    assert.ok(listed.sandboxes.some((s) => s.id === restored.id) && listed.sandboxes.some((s) => s.id === created.id));
    await value("sandbox_delete", { sandbox_id: restored.id });
    await value("sandbox_delete", { sandbox_id: created.id });
    const gone = await failure("sandbox_delete", { sandbox_id: created.id });
    assert.equal(gone.code, "not_found");
  });

  it("a create without a command stays running (the image's CMD would exit at once)", async () => {
    const created = await value<{ id: string; state: string }>("sandbox_create", { network_access: "none" });
    assert.equal(created.state, "running");
    // Every process's argv (NUL-separated); this exec's own does not hold "sleep\0infinity".
    const argvs = await value<{ kind: string; exit: number; stdout: string }>("sandbox_exec", {
      sandbox_id: created.id,
      cmd: ["sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null; true"],
    });
    assert.equal(argvs.exit, 0);
    assert.match(argvs.stdout, /sleep\0infinity/);
    const again = await value<{ kind: string; exit: number }>("sandbox_exec", {
      sandbox_id: created.id,
      cmd: ["true"],
    });
    assert.equal(again.exit, 0);
    await value("sandbox_delete", { sandbox_id: created.id });
  });

  it("starts a background process and reads its output from an offset", async () => {
    const created = await value<{ id: string }>("sandbox_create", {
      name: "mcp-procs",
      command: ["sleep", "3600"],
      network_access: "none",
    });
    const started = await value<{ id: string; state: string }>("sandbox_process_start", {
      sandbox_id: "mcp-procs",
      cmd: ["sh", "-c", "echo serving; sleep 0.2; echo warn >&2; sleep 600"],
    });
    assert.equal(started.state, "running");
    let read = { output: "", next_offset: 0, complete: false, dropped_bytes: 0, state: "", stderr: "" };
    let text = "";
    while (!text.includes("warn")) {
      read = await value("sandbox_process_output", {
        sandbox_id: created.id,
        process_id: started.id,
        offset: read.next_offset,
        wait_seconds: 10,
      });
      text += read.output;
    }
    assert.equal(text, "serving\nwarn\n");
    assert.equal(read.dropped_bytes, 0);
    assert.equal(read.state, "running");
    const later = await value<{ output: string }>("sandbox_process_output", {
      sandbox_id: created.id,
      process_id: started.id,
      offset: 8,
    });
    assert.equal(later.output, "warn\n");
    const killed = await value<{ id: string }>("sandbox_process_kill", {
      sandbox_id: created.id,
      process_id: started.id,
      force: true,
    });
    assert.equal(killed.id, started.id);
    const missing = await failure("sandbox_process_output", { sandbox_id: created.id, process_id: "proc_nope" });
    assert.equal(missing.code, "not_found");
    await value("sandbox_delete", { sandbox_id: created.id });
  });

  it("another organization's sandbox is not_found", async () => {
    const theirs = await new Warren({ apiKey: api.t.orgB.keys.owner, baseUrl: api.url }).sandboxes.create(
      { command: ["sleep", "3600"], network_access: "none" },
      { wait: false },
    );
    try {
      const error = await failure("sandbox_exec", { sandbox_id: theirs.id, cmd: ["true"] });
      assert.equal(error.code, "not_found");
    } finally {
      await theirs.delete();
    }
  });

  it("writes an annotation and reads it back with SQL", async () => {
    const warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url });
    const run = await warren.runs.start({ project_id: api.t.orgA.defaultProjectId, label: "mcp-run" });
    await warren.schemas.register({ name: "mcp_verdict", json_schema: JSON.stringify({ type: "object" }) } as never);
    const annotated = await value<{ event_id: string }>("annotate", {
      schema_name: "mcp_verdict",
      run_id: run.id,
      payload_json: JSON.stringify({ ok: true }),
    });
    assert.equal(annotated.event_id.length, 26);
    const rows = await value<{ rows: unknown[][] }>("sql", {
      sql: `SELECT schema_name, payload_json FROM annotations WHERE event_id = '${annotated.event_id}'`,
    });
    assert.deepEqual(rows.rows, [["mcp_verdict", '{"ok":true}']]);
    const refused = await failure("sql", { sql: "DROP TABLE runs" });
    assert.equal(refused.code, "invalid_argument");
  });
});
