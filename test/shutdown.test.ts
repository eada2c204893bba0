// Shutdown and the log of the real server (the bundle `make run` runs, as a child process):
// SIGTERM ends open run tails within a bounded time, and a log reader that stops reading
// (stdout on a socket nobody drains) never blocks the API, the shutdown or a fatal exit.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { sweepRoot } from "../src/drivers/runtime/local/sweep.js";
import { ServerProcess } from "./support/server-process.js";
import { openSse } from "./support/sse.js";

const TEXT_SCHEMA = JSON.stringify({ type: "object", properties: { text: { type: "string" } } });

describe("server shutdown and its log", () => {
  const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;
  let root = "";
  let dataDir = "";
  let server: ServerProcess | null = null;

  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), "warren-runtime-shutdown-"));
    await writeFile(path.join(root, "owner.pid"), String(process.pid));
    dataDir = await mkdtemp(path.join(os.tmpdir(), "warren-shutdown-data-"));
    server = new ServerProcess({
      dataDir,
      runtimeRoot: root,
      apiKey,
      env: {
        WARREN_SANDBOX_POOL_SIZE: "0",
        WARREN_LOG_LEVEL: "info",
        WARREN_TAIL_HEARTBEAT_MS: "200",
        WARREN_LOG_QUEUE_BYTES: "65536",
      },
    });
    await server.build("warren-shutdown-test");
    // The first start initializes the data dir (initdb, migrations): minutes on a loaded host.
    await server.start({}, 900_000);
    assert.equal(await server.stop("SIGTERM"), 0);
  });

  after(async () => {
    await server?.dispose();
    if (root) await sweepRoot(root).catch(() => undefined);
    for (const dir of [root, dataDir]) if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("ends open run tails (read or not) on SIGTERM, within a bounded time", async () => {
    const s = server as ServerProcess;
    await s.start();
    const run = await s.api("POST", "/v1/runs", { label: "shutdown" });
    assert.equal(run.status, 200, run.raw);
    const runId = (run.body.run as { id: string }).id;
    // More than the sockets' buffers hold, so a client that does not read leaves its stream full.
    const schema = `shut${randomBytes(3).toString("hex")}`;
    const created = await s.api("POST", "/v1/annotation-schemas", { name: schema, json_schema: TEXT_SCHEMA });
    assert.equal(created.status, 200, created.raw);
    const text = "x".repeat(200 * 1024);
    for (let n = 0; n < 60; n++) {
      const res = await s.api("POST", "/v1/annotations", {
        schema_name: schema,
        run_id: runId,
        payload_json: JSON.stringify({ text }),
      });
      assert.equal(res.status, 200, res.raw);
    }
    const headers = { authorization: `Bearer ${apiKey}` };
    const readers = [];
    for (let i = 0; i < 2; i++) {
      const stream = await openSse(`http://127.0.0.1:${s.port}/v1/runs/${runId}/tail`, headers);
      assert.equal(stream.status, 200, stream.body);
      assert.equal((await stream.next(30_000))?.data.name, "run.started");
      readers.push(stream);
    }
    // A client that sends its request and never reads a byte of the answer.
    const silent = net.connect(s.port, "127.0.0.1");
    silent.on("error", () => undefined);
    silent.write(`GET /v1/runs/${runId}/tail HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${apiKey}\r\n\r\n`);
    const answered = new Promise((resolve) => silent.once("data", resolve));
    await answered;
    silent.pause();
    try {
      s.signal("SIGTERM");
      const stopping = Date.now();
      const code = await s.exitWithin(20_000);
      assert.equal(code, 0, `the server still ran 20 s after SIGTERM with open tails:\n${s.log}`);
      process.stderr.write(`shutdown with open tails took ${Date.now() - stopping} ms\n`);
    } finally {
      for (const stream of readers) stream.close();
      silent.destroy();
      await s.stop("SIGKILL");
    }
  });

  it("keeps answering, counts the lines it drops and stops on SIGTERM while nobody reads its stdout", async () => {
    const s = server as ServerProcess;
    await s.stop("SIGKILL");
    await s.start();
    s.stallStdout();
    // Each request writes an info line; far more than the socket's buffers hold.
    const started = Date.now();
    for (let batch = 0; batch < 60; batch++) {
      const answers = await Promise.all(
        Array.from({ length: 50 }, () => s.api("GET", "/v1/whoami", undefined, {}, 30_000)),
      );
      for (const answer of answers) assert.equal(answer.status, 200, answer.raw);
    }
    const metrics = await s.api("GET", "/metrics", undefined, {}, 30_000);
    assert.equal(metrics.status, 200, metrics.raw);
    const dropped = /^warren_log_lines_dropped_total (\d+)/m.exec(metrics.raw);
    const stopping = Date.now();
    s.signal("SIGTERM");
    const code = await s.exitWithin(20_000);
    assert.equal(code, 0, "the server ended on SIGTERM although its stdout is full");
    assert.ok(
      dropped,
      `the dropped-lines counter is served (${Date.now() - started} ms in all, ${Date.now() - stopping} ms to stop)`,
    );
    assert.ok(Number(dropped[1]) > 0, "lines were dropped");
  });

  it("ends at once on a second SIGTERM, whatever its stdout is", async () => {
    const s = server as ServerProcess;
    await s.stop("SIGKILL");
    await s.start();
    s.stallStdout();
    for (let i = 0; i < 200; i++) assert.equal((await s.api("GET", "/v1/whoami", undefined, {}, 30_000)).status, 200);
    // A second SIGTERM while the first shutdown runs ends the process at once.
    s.signal("SIGTERM");
    s.signal("SIGTERM");
    const code = await s.exitWithin(20_000);
    assert.notEqual(code, "running", "the server ended");
  });
});
