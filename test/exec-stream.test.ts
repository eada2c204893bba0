// The streaming exec (GET /v1/sandboxes/{id}/exec/stream) on real sandboxes, over a listening
// server: output before the end (the command waits on stdin the test writes after seeing it),
// stdin and its close, env and cwd, a terminal with resize, every byte value both ways, a
// missing binary, a timeout, a client that never reads while the sandbox prints at full speed,
// organizations and sandbox-scoped keys, malformed start messages and frames; and ExecSandbox's
// head-and-tail cut seen from a real command. PGlite only: the store is not what is under test.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import { Warren } from "../packages/sdk/src/index.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";
import { sandboxScopedKey } from "./support/fixtures.js";
import { type RuntimeApp, startRuntimeApp } from "./support/runtime-app.js";

interface RawStream {
  ws: WebSocket;
  texts: Record<string, unknown>[];
  stdout: Buffer[];
  stderr: Buffer[];
  closed: Promise<{ code: number }>;
  /** The HTTP status of a refused upgrade (with its JSON body), when refused. */
  refused: Promise<{ status: number; body: Record<string, unknown> } | null>;
}

const textOf = (chunks: Buffer[]) => Buffer.concat(chunks).toString("utf8");

describe("streaming exec", { timeout: 300_000 }, () => {
  let fixture: RuntimeFixture;
  let app: RuntimeApp;
  let t: TestApp;
  let base: string;
  let id: string;
  let other: string;
  const owner = () => t.orgA.keys.owner;
  const sdk = (key = owner()) => new Warren({ baseUrl: base, apiKey: key, maxRetries: 0 });

  before(async () => {
    fixture = await startRuntimeFixture("exec-stream");
    app = await startRuntimeApp("pglite", fixture);
    t = app.t;
    await t.app.listen({ host: "127.0.0.1", port: 0 });
    const address = t.app.server.address() as { port: number };
    base = `http://127.0.0.1:${address.port}`;
    id = await createRunning();
    other = await createRunning();
  });

  after(async () => {
    for (const sandbox of [id, other]) {
      if (sandbox) await t?.request("DELETE", `/v1/sandboxes/${sandbox}`, { key: owner() }).catch(() => undefined);
    }
    await app?.close();
    await fixture?.cleanup();
  });

  async function createRunning(): Promise<string> {
    const res = await t.request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { network_access: "none", command: ["sleep", "3600"] },
    });
    assert.equal(res.status, 200, res.raw);
    const sandboxId = res.body.id as string;
    const ready = await t.request("GET", `/v1/sandboxes/${sandboxId}`, {
      key: owner(),
      query: { wait_state: "running", wait_timeout_seconds: "25" },
    });
    assert.equal((ready.body.sandbox as { state: string }).state, "running", ready.raw);
    return sandboxId;
  }

  function openRaw(sandboxId: string, key: string | null, start?: unknown): RawStream {
    const url = `${base.replace(/^http/, "ws")}/v1/sandboxes/${sandboxId}/exec/stream`;
    const ws = new WebSocket(url, key ? { headers: { authorization: `Bearer ${key}` } } : {});
    const stream: RawStream = {
      ws,
      texts: [],
      stdout: [],
      stderr: [],
      closed: new Promise((resolve) => ws.on("close", (code) => resolve({ code }))),
      refused: new Promise((resolve) => {
        ws.on("open", () => resolve(null));
        ws.on("unexpected-response", (_req, res) => {
          const chunks: Buffer[] = [];
          res.on("data", (chunk: Buffer) => chunks.push(chunk));
          res.on("end", () =>
            resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString("utf8")) }),
          );
        });
      }),
    };
    ws.on("error", () => undefined);
    ws.on("message", (data: Buffer, isBinary: boolean) => {
      if (!isBinary) stream.texts.push(JSON.parse(data.toString("utf8")));
      else if (data[0] === 1) stream.stdout.push(data.subarray(1));
      else if (data[0] === 2) stream.stderr.push(data.subarray(1));
    });
    if (start !== undefined) ws.on("open", () => ws.send(typeof start === "string" ? start : JSON.stringify(start)));
    return stream;
  }

  async function errorOf(stream: RawStream): Promise<Record<string, unknown>> {
    await stream.closed;
    const error = stream.texts.find((m) => m.type === "error");
    assert.ok(error, `an error message: ${JSON.stringify(stream.texts)}`);
    return error.error as Record<string, unknown>;
  }

  it("streams output before the command ends, forwards stdin and its close, and reports the exit", async () => {
    const sandbox = await sdk().sandboxes.get(id);
    const stream = sandbox.execStream(["sh", "-c", 'echo first; read line; echo "got $line"; cat; exit 7']);
    const reader = stream.stdout[Symbol.asyncIterator]();
    const first = await reader.next();
    // The command is blocked on `read` until the write below: the output came before its end.
    assert.equal(first.value?.toString(), "first\n");
    await stream.write("x\n");
    await stream.write("rest of stdin");
    stream.closeStdin();
    let rest = "";
    for (let next = await reader.next(); !next.done; next = await reader.next()) rest += next.value.toString();
    assert.equal(rest, "got x\nrest of stdin");
    assert.deepEqual(await stream.wait(), { kind: "completed", exit: 7, truncated: false });
  });

  it("keeps stdout and stderr apart, with env and cwd per call", async () => {
    const stream = (await sdk().sandboxes.get(id)).execStream(["sh", "-c", 'echo "$GREETING"; pwd; echo oops >&2'], {
      env: { GREETING: "hello" },
      cwd: "/tmp",
    });
    const [out, err] = await Promise.all([collect(stream.stdout), collect(stream.stderr)]);
    assert.equal(out, "hello\n/tmp\n");
    assert.equal(err, "oops\n");
    assert.deepEqual(await stream.wait(), { kind: "completed", exit: 0, truncated: false });
  });

  it("runs on a terminal of the asked size and resizes it", async () => {
    const stream = (await sdk().sandboxes.get(id)).execStream(["sh", "-c", "stty size; read line; stty size"], {
      tty: { rows: 30, cols: 100 },
    });
    let seen = "";
    const reader = stream.stdout[Symbol.asyncIterator]();
    while (!seen.includes("30 100")) seen += (await reader.next()).value?.toString() ?? "";
    stream.resize(40, 120);
    await stream.write("\r");
    for (let next = await reader.next(); !next.done; next = await reader.next()) seen += next.value.toString();
    assert.match(seen, /40 120/);
    assert.deepEqual(await stream.wait(), { kind: "completed", exit: 0, truncated: false });
  });

  it("is binary safe both ways (every byte value)", async () => {
    const bytes = Buffer.alloc(256 * 64);
    for (let i = 0; i < bytes.length; i++) bytes[i] = i % 256;
    const stream = (await sdk().sandboxes.get(id)).execStream(["cat"], { stdin: bytes });
    const chunks: Buffer[] = [];
    for await (const chunk of stream.stdout) chunks.push(chunk);
    assert.ok(Buffer.concat(chunks).equals(bytes));
    assert.deepEqual(await stream.wait(), { kind: "completed", exit: 0, truncated: false });
  });

  it("answers spawn_failed for a missing binary and times out with the unary exec's outcome", async () => {
    const missing = (await sdk().sandboxes.get(id)).execStream(["/no/such/binary"]);
    await assert.rejects(missing.wait(), (error: Error & { code?: string }) => error.code === "spawn_failed");
    const slow = (await sdk().sandboxes.get(id)).execStream(["sleep", "60"], { timeoutSeconds: 1 });
    assert.deepEqual(await slow.wait(), { kind: "timed_out", truncated: false });
  });

  it("holds a sandbox printing at full speed to a client that never reads, without buffering it", async () => {
    const stream = openRaw(id, owner(), { cmd: ["cat", "/dev/zero"] });
    await eventually("the stream started", async () => stream.texts.some((m) => m.type === "started"));
    // The client stops reading; the server may hold its window and the socket's buffers, no more.
    stream.ws.pause();
    await eventually("the server's send buffer filled", async () => t.c.streamSockets.bufferedBytes() > 0);
    let most = 0;
    // Sampled over a while: an absence (no growth) is what this proves, so it waits a fixed time.
    const until = Date.now() + 3_000;
    while (Date.now() < until) {
      most = Math.max(most, t.c.streamSockets.bufferedBytes());
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.ok(most < 4 << 20, `the server buffered ${most} bytes for a client that does not read`);
    // The server and other sandboxes are not held up meanwhile.
    const quick = await t.request("POST", `/v1/sandboxes/${other}:exec`, {
      key: owner(),
      body: { cmd: ["echo", "hi"] },
    });
    assert.deepEqual(quick.body, { exit: 0, stdout: "hi\n", stderr: "", truncated: false });
    const received = Buffer.concat(stream.stdout).length;
    stream.ws.resume();
    await eventually(
      "output flows again once read",
      async () => Buffer.concat(stream.stdout).length > received + (1 << 20),
    );
    stream.ws.send(Buffer.of(5));
    await stream.closed;
    const exit = stream.texts.find((m) => m.type === "exit");
    assert.equal(exit?.exit, 137, "killed: 128 + SIGKILL");
  });

  it("stops reading a client's stdin that the command does not take", async () => {
    const stream = openRaw(id, owner(), { cmd: ["sleep", "60"] });
    await eventually("the stream started", async () => stream.texts.some((m) => m.type === "started"));
    const piece = Buffer.alloc(64 << 10, 0x61);
    piece[0] = 0;
    let sent = 0;
    // The server pushes back once the session's input queue is full: the client's own send
    // buffer then grows. Without that, 256 MiB would all be read and held by the server.
    while (stream.ws.bufferedAmount < 8 << 20 && sent < 256 << 20) {
      stream.ws.send(piece);
      sent += piece.length;
      if (sent % (4 << 20) === 0) await new Promise((resolve) => setImmediate(resolve));
    }
    assert.ok(sent < 256 << 20, `the server took ${sent} bytes of stdin the command does not read`);
    // A client gone while the server is paused on it is noticed (the keepalive's ping fails).
    stream.ws.terminate();
    await stream.closed;
    await eventually("the server let the vanished client go", async () => t.c.streamSockets.open.size === 0);
  });

  it("refuses another organization, a sibling's scoped key and a missing key before the upgrade", async () => {
    const foreign = await openRaw(id, t.orgB.keys.owner, { cmd: ["true"] }).refused;
    assert.equal(foreign?.status, 404);
    assert.equal(foreign?.body.code, "not_found");
    const sibling = await openRaw(id, await sandboxScopedKey(t, t.orgA, other), { cmd: ["true"] }).refused;
    assert.equal(sibling?.status, 404);
    const none = await openRaw(id, null, { cmd: ["true"] }).refused;
    assert.equal(none?.status, 401);
    // A browser cannot set Authorization on a WebSocket: the key as a subprotocol, warren.v1 answered.
    const url = `${base.replace(/^http/, "ws")}/v1/sandboxes/${id}/exec/stream`;
    const browser = new WebSocket(url, ["warren.v1", `warren.bearer.${owner()}`]);
    const browserOut: Buffer[] = [];
    browser.on("open", () => browser.send(JSON.stringify({ cmd: ["echo", "from a browser"] })));
    browser.on("message", (data: Buffer, isBinary: boolean) => isBinary && browserOut.push(data.subarray(1)));
    await new Promise((resolve) => browser.on("close", resolve));
    assert.equal(browser.protocol, "warren.v1");
    assert.equal(textOf(browserOut), "from a browser\n");
    const wrongKey = new WebSocket(url, ["warren.v1", "warren.bearer.wrn_not_a_key"]);
    const refusedBrowser = await new Promise<number>((resolve) =>
      wrongKey.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0)),
    );
    assert.equal(refusedBrowser, 401);
    const own = (await sdk(await sandboxScopedKey(t, t.orgA, id)).sandboxes.get(id)).execStream(["echo", "mine"]);
    assert.equal(await collect(own.stdout), "mine\n");
    const plain = await t.request("GET", `/v1/sandboxes/${id}/exec/stream`, { key: owner() });
    assert.equal(plain.status, 400, plain.raw);
    assert.equal(plain.body.code, "failed_precondition");
  });

  it("answers bad start messages and frames with invalid_argument, ending only that stream", async () => {
    const cases: [string, unknown][] = [
      ["not json", "{nope"],
      ["no cmd", { env: {} }],
      ["an empty executable", { cmd: [""] }],
      ["argv over 256 entries", { cmd: Array.from({ length: 257 }, () => "x") }],
      ["an argv entry over 4096 characters", { cmd: ["echo", "x".repeat(4097)] }],
      [
        "env over 256 entries",
        { cmd: ["true"], env: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`V${i}`, ""])) },
      ],
      ["an env value over 4096 characters", { cmd: ["true"], env: { V: "x".repeat(4097) } }],
      ["a bad env name", { cmd: ["true"], env: { "A=B": "x" } }],
      ["a relative cwd", { cmd: ["true"], cwd: "tmp" }],
      ["a terminal of 0 rows", { cmd: ["true"], tty: { rows: 0, cols: 80 } }],
      ["a timeout over 3600", { cmd: ["true"], timeout_seconds: 3601 }],
    ];
    for (const [what, start] of cases) {
      const error = await errorOf(openRaw(id, owner(), start));
      assert.equal(error.code, "invalid_argument", `${what}: ${JSON.stringify(error)}`);
    }
    // Just inside the limits: 256 entries of 4096 characters.
    const inside = openRaw(id, owner(), { cmd: ["true", ...Array.from({ length: 255 }, () => "x".repeat(4096))] });
    await inside.closed;
    assert.equal(inside.texts.at(-1)?.exit, 0, JSON.stringify(inside.texts));

    const bad = openRaw(id, owner(), { cmd: ["sleep", "60"] });
    await eventually("started", async () => bad.texts.some((m) => m.type === "started"));
    bad.ws.send(Buffer.of(99, 1, 2));
    assert.equal((await errorOf(bad)).code, "invalid_argument");
    const after = (await sdk().sandboxes.get(id)).execStream(["echo", "still serving"]);
    assert.equal(await collect(after.stdout), "still serving\n");
  });

  it("bounds the streams an organization holds open, and a closed one frees its place", async () => {
    t.c.streamSockets.limitPerOrg = 2;
    try {
      const held = [openRaw(id, owner(), { cmd: ["sleep", "60"] }), openRaw(id, owner(), { cmd: ["sleep", "60"] })];
      for (const stream of held) await eventually("held", async () => stream.texts.some((m) => m.type === "started"));
      const third = await openRaw(id, owner(), { cmd: ["true"] }).refused;
      assert.equal(third?.status, 429);
      assert.equal(third?.body.code, "rate_limited");
      const otherOrg = await openRaw(id, t.orgB.keys.owner, { cmd: ["true"] }).refused;
      assert.equal(otherOrg?.status, 404, "another organization's places are its own (and the sandbox is not)");
      held[0]?.ws.close();
      await held[0]?.closed;
      const freed = openRaw(id, owner(), { cmd: ["echo", "freed"] });
      await freed.closed;
      assert.equal(textOf(freed.stdout), "freed\n");
      held[1]?.ws.terminate();
    } finally {
      t.c.streamSockets.limitPerOrg = 64;
    }
  });

  it("ends only its own stream when the sandbox kills its exec agent mid-stream", async () => {
    // The command's parent is the agent (inside the sandbox): it kills it once the test writes.
    const stream = (await sdk().sandboxes.get(id)).execStream([
      "sh",
      "-c",
      "echo before; read x; kill -9 $PPID; sleep 5; echo after",
    ]);
    const reader = stream.stdout[Symbol.asyncIterator]();
    assert.equal((await reader.next()).value?.toString(), "before\n");
    await stream.write("\n");
    let rest = "";
    for (let next = await reader.next(); !next.done; next = await reader.next()) rest += next.value.toString();
    assert.doesNotMatch(rest, /after/);
    assert.deepEqual(await stream.wait(), { kind: "indeterminate", truncated: false });
    const elsewhere = (await sdk().sandboxes.get(other)).execStream(["echo", "unaffected"]);
    assert.equal(await collect(elsewhere.stdout), "unaffected\n");
    const again = (await sdk().sandboxes.get(id)).execStream(["echo", "still serving"]);
    assert.equal(await collect(again.stdout), "still serving\n");
  });

  it("serves a request that asks for another protocol (curl --http2's h2c) as HTTP/1.1, body and all", async () => {
    const upgradeRequest = (headers: Record<string, string>, body: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = http.request(`${base}/v1/sandboxes/${id}:exec`, {
          method: "POST",
          headers: { authorization: `Bearer ${owner()}`, connection: "Upgrade", upgrade: "h2c", ...headers },
        });
        req.on("response", (res) => {
          let text = "";
          res.on("data", (chunk: Buffer) => {
            text += chunk.toString();
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
        });
        req.on("error", reject);
        req.end(body);
      });
    const body = JSON.stringify({ cmd: ["echo", "over http/1.1"] });
    const served = await upgradeRequest(
      { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) },
      body,
    );
    assert.equal(served.status, 200, served.body);
    assert.deepEqual(JSON.parse(served.body), { exit: 0, stdout: "over http/1.1\n", stderr: "", truncated: false });
    const chunked = await upgradeRequest({ "content-type": "application/json", "transfer-encoding": "chunked" }, body);
    assert.equal(chunked.status, 200, chunked.body);
  });

  it("refuses a sandbox that is not running with sandbox_not_running", async () => {
    const stopped = await createRunning();
    const stop = await t.request("PATCH", `/v1/sandboxes/${stopped}`, { key: owner(), body: { state: "stopped" } });
    assert.ok(stop.status < 300, stop.raw);
    const refused = await openRaw(stopped, owner(), { cmd: ["true"] }).refused;
    assert.equal(refused?.status, 409);
    assert.equal(refused?.body.code, "sandbox_not_running");
    await t.request("DELETE", `/v1/sandboxes/${stopped}`, { key: owner() });
  });

  it("ExecSandbox keeps the tail: stderr written after 2 MiB of stdout survives the cut", async () => {
    const res = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
      key: owner(),
      body: { cmd: ["sh", "-c", "head -c 2097152 /dev/zero | busybox tr '\\0' o; echo 'Traceback: boom' >&2; exit 1"] },
    });
    assert.equal(res.body.exit, 1);
    assert.equal(res.body.truncated, true);
    assert.equal(res.body.stderr, "Traceback: boom\n");
    assert.equal(Buffer.byteLength(res.body.stdout as string) + 16, 1_048_576);
  });
});

async function collect(stream: AsyncIterable<Buffer>): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return textOf(chunks);
}
