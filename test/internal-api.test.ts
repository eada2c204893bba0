// The node internal API (docs/hosts.md "Routing") on its real listener: a request passes only
// with a grant signed under the deployment's key for this host at its current epoch, this
// operation, this sandbox and this body, not expired and not seen before; a host that cannot
// act answers host_unavailable; bodies are bounded. A routed session streams both ways
// through NodeClient with every output chunk acknowledged. The operations behind the API are
// recording stand-ins here (the real ones run in hosts-two-servers and multi-host-routing).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import net from "node:net";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import type { SandboxSession, SessionHandlers } from "../src/drivers/runtime/interface.js";
import { type InternalApiServer, startInternalApi } from "../src/http/internal/server.js";
import { AppError } from "../src/lib/errors.js";
import { createLogger } from "../src/lib/logger.js";
import { connectTcp } from "../src/lib/tcp-connect.js";
import { GrantReplayGuard, GrantSigner, type RoutedOperation } from "../src/modules/hosts/grants.js";
import { NodeApi, type NodeOperations } from "../src/modules/hosts/node-api.js";
import { NodeClient } from "../src/modules/hosts/node-client.js";
import { GRANT_SCHEME } from "../src/modules/hosts/node-wire.js";
import { eventually } from "./support/eventually.js";

const HOST = "h_0123456789abcdef01234567";
const SANDBOX = "sbx-1111111111111111111111111111111111111111";
const ORG = "org_routed";

describe("the node internal API", () => {
  const key = randomBytes(32);
  const signer = new GrantSigner(key);
  const gate = { id: HOST, epoch: 7, acting: true };
  const calls: { operation: string; orgId: string; input: unknown }[] = [];
  let server: InternalApiServer;
  // The "sandbox's port" of routed forwards: echoes every byte back; counts its open connections.
  let echo: net.Server;
  let echoPort = 0;
  let echoOpen = 0;
  const log = createLogger("fatal", new Writable({ write: (_c, _e, cb) => cb() }));

  const operations: NodeOperations = {
    exec: async (claims, request) => {
      calls.push({ operation: "exec", orgId: claims.orgId, input: request });
      return { exit: 0, stdout: `ran ${request.cmd.join(" ")}`, stderr: "", truncated: false };
    },
    snapshot: async (claims, snapshotId) => {
      calls.push({ operation: "snapshot", orgId: claims.orgId, input: snapshotId });
    },
    grow: async (claims, capacity) => {
      calls.push({ operation: "grow", orgId: claims.orgId, input: capacity });
    },
    network: async (claims, mode) => {
      calls.push({ operation: "network", orgId: claims.orgId, input: mode });
      return { mode, namespace: { name: "n", inode: 1 }, links: [], rules: [] } as never;
    },
    openSession: async (claims, request, handlers: SessionHandlers): Promise<SandboxSession> => {
      calls.push({ operation: "session", orgId: claims.orgId, input: request });
      // Echoes stdin back as stdout, one chunk each; ends (exit 3) once stdin ends and all was acknowledged.
      let unacked = 0;
      let stdinEnded = false;
      const maybeEnd = () => {
        if (stdinEnded && unacked === 0) handlers.onEnd({ exit: 3 });
      };
      return {
        write: (data) => {
          unacked++;
          handlers.onStdout(Buffer.from(data.toString("utf8").toUpperCase()), () => {
            unacked--;
            maybeEnd();
          });
          return true;
        },
        end: () => {
          stdinEnded = true;
          maybeEnd();
        },
        resize: () => undefined,
        kill: () => handlers.onEnd({ exit: 137 }),
      };
    },
    poolTake: async (claims, request) => {
      calls.push({ operation: "pool-take", orgId: claims.orgId, input: request });
      return request.image === "warm" ? "sbx-3333333333333333333333333333333333333333" : null;
    },
    poolRelease: (claims) => {
      calls.push({ operation: "pool-release", orgId: claims.orgId, input: claims.sandboxId });
    },
    openForward: async (claims, port) => {
      calls.push({ operation: "forward", orgId: claims.orgId, input: port });
      if (port !== 80) throw new AppError("sandbox_not_running", "the sandbox is not running");
      return connectTcp("127.0.0.1", echoPort, 5_000);
    },
  };

  before(async () => {
    echo = net.createServer((socket) => {
      echoOpen++;
      socket.once("close", () => echoOpen--);
      socket.on("error", () => undefined);
      socket.pipe(socket);
    });
    await new Promise<void>((resolve) => echo.listen(0, "127.0.0.1", resolve));
    echoPort = (echo.address() as net.AddressInfo).port;
    const api = new NodeApi(
      { id: HOST, owner: () => ({ hostId: gate.id, epoch: gate.epoch }), canAct: () => gate.acting },
      signer,
      operations,
      new GrantReplayGuard(),
    );
    server = await startInternalApi({ host: "127.0.0.1", port: 0, api, bodyLimitBytes: 4096, log });
  });
  after(async () => {
    await server?.close();
    await new Promise((resolve) => echo?.close(resolve));
  });

  const post = async (operation: string, body: string, grant: string | null, sandbox = SANDBOX) => {
    const res = await fetch(`${server.boundUrl}/internal/v1/sandboxes/${sandbox}/${operation}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(grant ? { authorization: `${GRANT_SCHEME} ${grant}` } : {}) },
      body,
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const grant = (
    overrides: Partial<{ operation: RoutedOperation; hostId: string; epoch: number; sandboxId: string }> = {},
    body = "{}",
    now?: number,
    with_ = signer,
  ) =>
    with_.sign(
      {
        operation: overrides.operation ?? "exec",
        orgId: ORG,
        sandboxId: overrides.sandboxId ?? SANDBOX,
        hostId: overrides.hostId ?? HOST,
        epoch: overrides.epoch ?? gate.epoch,
        body,
      },
      now,
    );
  const execBody = JSON.stringify({ cmd: ["echo", "hi"], env: {}, request_hash: "" });
  const refusedWith = (res: { status: number; body: Record<string, unknown> }, code: string) => {
    assert.equal((res.body.error as { code: string } | undefined)?.code, code, JSON.stringify(res.body));
  };

  it("a grant for this host, epoch, operation, sandbox and body runs the operation once", async () => {
    const before = calls.length;
    const res = await post("exec", execBody, grant({}, execBody));
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body.result, { exit: 0, stdout: "ran echo hi", stderr: "", truncated: false });
    assert.equal(calls.length, before + 1);
    assert.equal(calls.at(-1)?.orgId, ORG);
  });

  it("refuses a missing, forged, expired, other-host, other-epoch, other-operation, other-sandbox or other-body grant", async () => {
    const before = calls.length;
    const cases: [string, string | null, string?][] = [
      ["missing", null],
      ["forged", grant({}, execBody, undefined, new GrantSigner(randomBytes(32)))],
      ["garbled", `${grant({}, execBody).slice(0, -3)}AAA`],
      ["expired", grant({}, execBody, Date.now() - 120_000)],
      ["another host", grant({ hostId: "h_ffffffffffffffffffffffff" }, execBody)],
      ["another epoch", grant({ epoch: gate.epoch - 1 }, execBody)],
      ["another operation", grant({ operation: "grow" }, execBody)],
      ["another sandbox", grant({ sandboxId: "sbx-2222222222222222222222222222222222222222" }, execBody)],
      ["another body", grant({}, JSON.stringify({ cmd: ["true"], env: {}, request_hash: "" }))],
    ];
    for (const [what, signed] of cases) {
      const res = await post("exec", execBody, signed);
      assert.equal(res.status, 401, `${what}: ${JSON.stringify(res.body)}`);
      refusedWith(res, "unauthenticated");
    }
    assert.equal(calls.length, before, "no refused grant ran anything");
  });

  it("refuses a grant it accepted before (a replay), as a replay and never as an answer of the operation", async () => {
    const signed = grant({}, execBody);
    assert.equal((await post("exec", execBody, signed)).status, 200);
    const before = calls.length;
    const replayed = await post("exec", execBody, signed);
    assert.equal(replayed.status, 409, JSON.stringify(replayed.body));
    assert.ok(replayed.body.replayed, JSON.stringify(replayed.body));
    assert.equal(replayed.body.error, undefined, "not an error a caller would pass on");
    assert.equal(calls.length, before);
  });

  // A TCP relay between NodeClient and the listener that resets the client's connection (RST,
  // as an owner's closing keep-alive socket or a middlebox does) on cue: `beforeForwarding`
  // drops the next request's bytes unsent; `afterRun` lets the request reach the owner and
  // resets once the operation has started, so its answer is lost.
  it("a keep-alive connection reset as a request goes out is retried once under the same grant, never run twice", async () => {
    let cue: "beforeForwarding" | "afterRun" | null = null;
    const clientSockets = new Set<net.Socket>();
    const relay = net.createServer((inbound) => {
      clientSockets.add(inbound);
      inbound.once("close", () => clientSockets.delete(inbound));
      inbound.on("error", () => undefined);
      const { port } = new URL(server.boundUrl);
      const outbound = net.connect(Number(port), "127.0.0.1");
      outbound.on("error", () => inbound.destroy());
      inbound.on("data", (data: Buffer) => {
        if (cue === "beforeForwarding") {
          cue = null;
          inbound.resetAndDestroy();
          outbound.destroy();
          return;
        }
        outbound.write(data);
      });
      outbound.on("data", (data: Buffer) => inbound.write(data));
      outbound.on("close", () => inbound.destroy());
      inbound.on("close", () => outbound.destroy());
    });
    await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
    const realExec = operations.exec;
    operations.exec = async (claims, request) => {
      if (cue === "afterRun") {
        cue = null;
        calls.push({ operation: "exec", orgId: claims.orgId, input: request });
        for (const socket of clientSockets) socket.resetAndDestroy();
        return new Promise(() => undefined);
      }
      return realExec(claims, request);
    };
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const client = new NodeClient({
        baseUrl: `http://127.0.0.1:${(relay.address() as net.AddressInfo).port}`,
        hostId: HOST,
        epoch: gate.epoch,
        orgId: ORG,
        sandboxId: SANDBOX,
        grants: signer,
        agent,
        log,
      });
      const request = { cmd: ["echo", "once"], env: {}, request_hash: "" };
      // A first exec opens the keep-alive connection the next ones reuse.
      assert.deepEqual(await client.exec(request, 10_000), {
        exit: 0,
        stdout: "ran echo once",
        stderr: "",
        truncated: false,
      });

      // Reset before the request reached the owner: the retry runs it, once.
      let before = calls.length;
      cue = "beforeForwarding";
      assert.equal(((await client.exec(request, 10_000)) as { stdout: string }).stdout, "ran echo once");
      assert.equal(cue, null, "the relay reset the request's connection");
      assert.equal(calls.length, before + 1, "the owner ran the retried copy, once");

      // Reset after the owner began running it: the retry is refused as a replay and the
      // caller learns that the answer was lost after the request went out (not "ran nothing").
      before = calls.length;
      cue = "afterRun";
      await assert.rejects(client.exec(request, 10_000), (error: Error & { sent?: boolean }) => {
        assert.equal(error.name, "NodeUnreachable", error.message);
        assert.equal(error.sent, true, "a request that may have run is never reported as unsent");
        return true;
      });
      assert.equal(cue, null);
      assert.equal(calls.length, before + 1, "the owner ran it once: the retried copy was refused as a replay");
    } finally {
      operations.exec = realExec;
      agent.destroy();
      await new Promise((resolve) => relay.close(resolve));
    }
  });

  it("pool-take hands out a warm member's id for a shape, refuses a malformed shape, and pool-release names the member", async () => {
    const agent = new http.Agent({ keepAlive: true });
    const client = (sandboxId: string) =>
      new NodeClient({
        baseUrl: server.boundUrl,
        hostId: HOST,
        epoch: gate.epoch,
        orgId: ORG,
        sandboxId,
        grants: signer,
        agent,
        log,
      });
    try {
      const shape = {
        memoryMiB: 128,
        cpuMillis: 250,
        storageClass: "standard",
        workspaceCapacityGiB: null,
        network: "none",
      };
      const taker = client("pool");
      assert.equal(await taker.poolTake({ image: "warm", ...shape }), "sbx-3333333333333333333333333333333333333333");
      assert.equal(await taker.poolTake({ image: "cold", ...shape }), null);
      const before = calls.length;
      const body = JSON.stringify({ image: "warm", memoryMiB: "128" });
      const malformed = await post(
        "pool-take",
        body,
        grant({ operation: "pool-take", sandboxId: "pool" }, body),
        "pool",
      );
      assert.equal(malformed.status, 409, JSON.stringify(malformed.body));
      refusedWith(malformed, "invalid_argument");
      assert.equal(calls.length, before, "a malformed shape takes nothing");
      await client("sbx-3333333333333333333333333333333333333333").poolRelease();
      assert.deepEqual(calls.at(-1), {
        operation: "pool-release",
        orgId: ORG,
        input: "sbx-3333333333333333333333333333333333333333",
      });
    } finally {
      agent.destroy();
    }
  });

  it("a host that cannot act answers host_unavailable; bodies and routes are bounded", async () => {
    gate.acting = false;
    try {
      const res = await post("exec", execBody, grant({}, execBody));
      refusedWith(res, "host_unavailable");
      assert.equal(res.body.error && (res.body.error as { retry_after_seconds: number }).retry_after_seconds, 2);
    } finally {
      gate.acting = true;
    }
    const big = JSON.stringify({ cmd: ["x".repeat(8192)], env: {}, request_hash: "" });
    const tooBig = await post("exec", big, grant({}, big));
    assert.equal(tooBig.status, 413);
    const unknown = await fetch(`${server.boundUrl}/internal/v1/sandboxes/${SANDBOX}/destroy`, { method: "POST" });
    assert.equal(unknown.status, 404);
  });

  it("a routed session streams stdin in and output out, and refuses a bad grant before upgrading", async () => {
    const agent = new http.Agent({ keepAlive: true });
    const client = (grants: GrantSigner) =>
      new NodeClient({
        baseUrl: server.boundUrl,
        hostId: HOST,
        epoch: gate.epoch,
        orgId: ORG,
        sandboxId: SANDBOX,
        grants,
        agent,
        log,
      });
    const output: string[] = [];
    const ended = new Promise<{ exit: number | null }>((resolve) => {
      void client(signer)
        .openSession(
          SANDBOX,
          { argv: ["cat"], pty: null },
          {
            onStdout: (data, done) => {
              output.push(data.toString("utf8"));
              done();
            },
            onStderr: (_data, done) => done(),
            onEnd: resolve,
          },
        )
        .then((session) => {
          session.write(Buffer.from("hello "));
          session.write(Buffer.from("owner"));
          session.end();
        });
    });
    assert.deepEqual(await ended, { exit: 3 });
    assert.equal(output.join(""), "HELLO OWNER");
    await assert.rejects(
      client(new GrantSigner(randomBytes(32))).openSession(
        SANDBOX,
        { argv: ["cat"], pty: null },
        {
          onStdout: (_d, done) => done(),
          onStderr: (_d, done) => done(),
          onEnd: () => undefined,
        },
      ),
      (error: Error & { code?: string }) => error.code === "unauthenticated" || error.code === "host_unavailable",
    );
    // Through the client, the other operations reach their handlers with their inputs.
    const routed = client(signer);
    await routed.growWorkspace(SANDBOX, 5);
    assert.deepEqual(calls.at(-1), { operation: "grow", orgId: ORG, input: 5 });
    await routed.takeSnapshot("snp-1");
    assert.deepEqual(calls.at(-1), { operation: "snapshot", orgId: ORG, input: "snp-1" });
    agent.destroy();
  });

  it("a routed forward carries bytes both ways, closes both ends together, and refuses before upgrading", async () => {
    const agent = new http.Agent();
    const client = (grants: GrantSigner) =>
      new NodeClient({
        baseUrl: server.boundUrl,
        hostId: HOST,
        epoch: gate.epoch,
        orgId: ORG,
        sandboxId: SANDBOX,
        grants,
        agent,
        log,
      });
    const stream = await client(signer).openForward(80);
    assert.deepEqual(calls.at(-1), { operation: "forward", orgId: ORG, input: 80 });
    // More than any socket buffer: it comes back whole only if both directions keep flowing.
    const payload = randomBytes(4 << 20);
    const received: Buffer[] = [];
    let size = 0;
    const back = new Promise<void>((resolve) => {
      stream.on("data", (chunk: Buffer) => {
        received.push(chunk);
        size += chunk.length;
        if (size >= payload.length) resolve();
      });
    });
    stream.write(payload);
    await back;
    assert.ok(Buffer.concat(received).equals(payload), "the bytes came back in order");
    assert.equal(echoOpen, 1);
    stream.destroy();
    await eventually("the owner to close the sandbox's end", async () => echoOpen === 0);
    // The owner's refusal crosses with its code; a grant it refuses reads as host_unavailable.
    await assert.rejects(client(signer).openForward(81), (error: Error & { code?: string }) => {
      return error.code === "sandbox_not_running";
    });
    await assert.rejects(
      client(new GrantSigner(randomBytes(32))).openForward(80),
      (error: Error & { code?: string }) => error.code === "host_unavailable",
    );
    assert.equal(echoOpen, 0, "a refused forward connected nothing");
    // A forward is an Upgrade only: the POST form is no route.
    const posted = await fetch(`${server.boundUrl}/internal/v1/sandboxes/${SANDBOX}/forward`, { method: "POST" });
    assert.equal(posted.status, 404);
    agent.destroy();
  });
});
