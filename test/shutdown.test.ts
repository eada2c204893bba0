// Shutdown and the log of the real server (the bundle `make run` runs, as a child process):
// SIGTERM ends open run tails within a bounded time, and a log reader that stops reading
// (stdout on a socket nobody drains) never blocks the API, the shutdown or a fatal exit (the
// shutdown deadline giving up on a step that hangs).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { sweepRoot } from "../src/drivers/runtime/local/sweep.js";
import { eventually, ServerProcess } from "./support/server-process.js";
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

  it("gives up at its shutdown deadline and exits 1 promptly, its stdout full and unread", async () => {
    const s = server as ServerProcess;
    await s.stop("SIGKILL");
    // A registry that accepts and never answers: the sandbox's pull hangs, and with it the
    // reconciler's stop at shutdown (it waits for the step in flight).
    const sockets = new Set<net.Socket>();
    const hung = net.createServer((socket) => {
      sockets.add(socket);
      socket.on("error", () => undefined);
    });
    await new Promise<void>((resolve) => hung.listen(0, "127.0.0.1", resolve));
    const port = (hung.address() as net.AddressInfo).port;
    try {
      const shutdownTimeoutMs = 3_000;
      await s.start({ WARREN_SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) });
      const created = await s.api("POST", "/v1/sandboxes", {
        image: `127.0.0.1:${port}/stuck/image:latest`,
        command: ["true"],
        network_access: "none",
      });
      assert.equal(created.status, 200, created.raw);
      await eventually("the pull to reach the registry", async () => sockets.size > 0, 120_000);
      s.stallStdout();
      // Far more info lines than the socket's buffers hold: stdout is full when the deadline's
      // error line and the exit's flush come.
      for (let batch = 0; batch < 60; batch++) {
        const answers = await Promise.all(
          Array.from({ length: 50 }, () => s.api("GET", "/v1/whoami", undefined, {}, 30_000)),
        );
        for (const answer of answers) assert.equal(answer.status, 200, answer.raw);
      }
      s.signal("SIGTERM");
      // Exit 1 is the give-up at the deadline (a clean shutdown exits 0); a hang is "running".
      const code = await s.exitWithin(shutdownTimeoutMs + 30_000);
      assert.equal(code, 1, "the server gave up at its shutdown deadline and ended");
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => hung.close(resolve));
    }
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
