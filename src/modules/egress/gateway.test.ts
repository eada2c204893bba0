// The gateway's own bounds and answers, on the host (no sandbox): the caller lookup is bound
// to fixed answers; test/egress.test.ts covers it from inside real sandboxes.
import assert from "node:assert/strict";
import { createServer as createHttpServer, type Server } from "node:http";
import { connect, createServer, type Socket } from "node:net";
import { networkInterfaces } from "node:os";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { eventually } from "../../../test/support/eventually.js";
import { createLogger } from "../../lib/logger.js";
import { EgressGateway, endToEndHeaders, parseAuthority } from "./gateway.js";
import type { EgressCaller } from "./types.js";

/** Sends `data` raw and resolves with everything the gateway answers until it closes. */
function raw(port: number, data: string | Buffer, timeoutMs = 3000): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    let answer = "";
    socket.on("data", (chunk) => {
      answer += chunk.toString();
    });
    const done = () => resolve(answer);
    socket.on("close", done);
    socket.on("error", done);
    setTimeout(() => socket.destroy(), timeoutMs);
    socket.write(data);
  });
}

/** Whether the server closes `socket` within `ms`. */
function closedWithin(socket: Socket, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    if (socket.destroyed) return resolve(true);
    const timer = setTimeout(() => resolve(false), ms);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/**
 * A client that starts a request head and then sends one more header byte every 100 ms,
 * never ending it: whether the server closed the connection within `ms`.
 */
async function trickleUntilClosed(port: number, ms: number): Promise<boolean> {
  const socket = connect({ host: "127.0.0.1", port });
  socket.on("error", () => undefined);
  socket.write("GET http://up.test/ HTTP/1.1\r\nX-Slow: ");
  const drip = setInterval(() => socket.writable && socket.write("a"), 100);
  try {
    return await closedWithin(socket, ms);
  } finally {
    clearInterval(drip);
    socket.destroy();
  }
}

describe("egress gateway bounds", () => {
  let gateway: EgressGateway;
  let upstream: Server;
  let upstreamPort = 0;
  let closedPort = 0;
  let badStatus: ReturnType<typeof createServer>;
  let badStatusPort = 0;
  let identity: EgressCaller | null = null;
  let orgAllowlist = ["up.test", "closed.test"];

  before(async () => {
    upstream = createHttpServer((req, res) => {
      req.resume();
      res.end(`up ${req.url} ${req.headers["proxy-authorization"] ?? "-"} ${req.headers["x-drop"] ?? "-"}\n`);
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    upstreamPort = (upstream.address() as { port: number }).port;
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    closedPort = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    // An upstream answering a status Node's client parses but no response may carry.
    badStatus = createServer((socket) => {
      socket.on("error", () => undefined);
      socket.once("data", () => socket.end("HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nhi"));
    });
    await new Promise<void>((resolve) => badStatus.listen(0, "127.0.0.1", resolve));
    badStatusPort = (badStatus.address() as { port: number }).port;
    const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
    gateway = await EgressGateway.start({
      host: "127.0.0.1",
      port: 0,
      // Mapped names are trusted as given, so a loopback upstream stands in for the internet.
      hosts: new Map([
        ["up.test", "127.0.0.1"],
        ["closed.test", "127.0.0.1"],
        ["odd.test", "127.0.0.1"],
      ]),
      log: createLogger("error", silent),
      maxHeaderBytes: 2048,
      maxConnectionsPerSource: 3,
    });
    gateway.bind({
      identify: async () => identity,
      allowlist: async () => orgAllowlist,
      sandboxOfCredential: async (secret) => (secret === "own-token" ? "sbx-own" : null),
    });
  });
  after(async () => {
    await gateway?.close();
    upstream?.close();
    badStatus?.close();
  });

  const caller = (mode: EgressCaller["mode"]): EgressCaller => ({
    sandboxId: "sbx-own",
    orgId: "org",
    projectId: "prj",
    runId: "run",
    mode,
  });

  it("passes only end-to-end headers and parses CONNECT authorities strictly", () => {
    assert.deepEqual(
      endToEndHeaders({
        connection: "close, x-drop",
        "x-drop": "1",
        "proxy-authorization": "Basic x",
        "keep-alive": "timeout=5",
        "transfer-encoding": "chunked",
        host: "a.test",
        "x-keep": "2",
      }),
      { host: "a.test", "x-keep": "2" },
    );
    assert.deepEqual(parseAuthority("a.test:443"), { host: "a.test", port: 443 });
    for (const bad of ["a.test", "a.test:0", "a.test:65536", "[::1]:443", "user@a.test:443", "a.test:443/x", ":443"]) {
      assert.equal(parseAuthority(bad), null, bad);
    }
  });

  it("refuses a source that is not a sandbox, on both request forms", async () => {
    identity = null;
    const plain = await raw(gateway.port, `GET http://up.test:${upstreamPort}/ HTTP/1.0\r\n\r\n`);
    assert.match(plain, /^HTTP\/1\.1 403 /);
    assert.match(plain, /x-warren-egress: unknown_source/i);
    const tunnel = await raw(gateway.port, `CONNECT up.test:${upstreamPort} HTTP/1.1\r\n\r\n`);
    assert.match(tunnel, /^HTTP\/1\.1 403 Forbidden/);
  });

  it("forwards without hop-by-hop headers, answers 400 for what it does not proxy and 502 for a dead upstream", async () => {
    identity = caller("gateway_only");
    const ok = await raw(
      gateway.port,
      `GET http://up.test:${upstreamPort}/p?q=1 HTTP/1.0\r\nProxy-Authorization: Basic eA==\r\nConnection: x-drop\r\nX-Drop: 1\r\n\r\n`,
    );
    assert.match(ok, /^HTTP\/1\.1 200 /);
    assert.match(ok, /up \/p\?q=1 - -\n$/);
    assert.match(await raw(gateway.port, "GET https://up.test/ HTTP/1.0\r\n\r\n"), /^HTTP\/1\.1 400 /);
    assert.match(await raw(gateway.port, "CONNECT up.test HTTP/1.1\r\n\r\n"), /^HTTP\/1\.1 400 /);
    assert.match(await raw(gateway.port, "GET http://[::1]/ HTTP/1.0\r\n\r\n"), /^HTTP\/1\.1 (400|403) /);
    const dead = await raw(gateway.port, `GET http://closed.test:${closedPort}/ HTTP/1.0\r\n\r\n`);
    assert.match(dead, /^HTTP\/1\.1 502 /);
    assert.match(dead, /upstream_failed/);
    // gateway_only: not on the allowlist.
    const refused = await raw(
      gateway.port,
      `GET http://closed.test:${closedPort}/ HTTP/1.0\r\n\r\n`.replace("closed", "other"),
    );
    assert.match(refused, /^HTTP\/1\.1 403 [\s\S]*not_allowlisted/);
  });

  it("bounds request heads: 431 for an oversized one, and the gateway keeps serving", async () => {
    identity = caller("public");
    const big = await raw(
      gateway.port,
      `GET http://up.test:${upstreamPort}/ HTTP/1.1\r\nX-Big: ${"a".repeat(4096)}\r\n\r\n`,
    );
    assert.match(big, /^HTTP\/1\.1 431 /);
    assert.match(await raw(gateway.port, "NOT HTTP AT ALL\r\n\r\n"), /^HTTP\/1\.1 400 /);
    assert.match(await raw(gateway.port, `GET http://up.test:${upstreamPort}/again HTTP/1.0\r\n\r\n`), /up \/again/);
  });

  it("caps the connections one source holds", async () => {
    identity = caller("public");
    const held: Socket[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const socket = connect({ host: "127.0.0.1", port: gateway.port });
        await new Promise((resolve) => socket.once("connect", resolve));
        held.push(socket);
      }
      // Connections are accepted in the listen backlog's order and counted at once, so the
      // three are counted before the fourth.
      const fourth = await raw(gateway.port, `GET http://up.test:${upstreamPort}/ HTTP/1.0\r\n\r\n`, 1000);
      assert.equal(fourth, "", "closed without an answer");
    } finally {
      for (const socket of held) socket.destroy();
    }
    // The gateway hears of the closes when its loop gets to them.
    await eventually("a place freed by the closed connections", async () =>
      /up \/freed/.test(await raw(gateway.port, `GET http://up.test:${upstreamPort}/freed HTTP/1.0\r\n\r\n`)),
    );
  });

  it("destroys connections whose head misses its deadline, however they trickle bytes", async () => {
    identity = caller("public");
    const slow = await EgressGateway.start({
      host: "127.0.0.1",
      port: 0,
      log: createLogger("error", new Writable({ write: (_chunk, _encoding, callback) => callback() })),
      connectTimeoutMs: 1_000,
      maxConnectionsPerSource: 100,
    });
    slow.bind({ identify: async () => identity, allowlist: async () => [], sandboxOfCredential: async () => null });
    try {
      // 20 clients each sending one more header byte every 100 ms, never the end of the head.
      const closed = await Promise.all(Array.from({ length: 20 }, () => trickleUntilClosed(slow.port, 30_000)));
      assert.deepEqual(
        closed.filter((ok) => !ok),
        [],
        "every trickling connection was closed by the gateway",
      );
    } finally {
      await slow.close();
    }
  });

  it("caps the connections of every source together", async () => {
    identity = caller("public");
    const capped = await EgressGateway.start({
      host: "127.0.0.1",
      port: 0,
      log: createLogger("error", new Writable({ write: (_chunk, _encoding, callback) => callback() })),
      maxConnectionsPerSource: 3,
      maxConnections: 4,
    });
    capped.bind({ identify: async () => identity, allowlist: async () => [], sandboxOfCredential: async () => null });
    const held: Socket[] = [];
    try {
      for (const localAddress of ["127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2"]) {
        const socket = connect({ host: "127.0.0.1", port: capped.port, localAddress });
        socket.on("error", () => undefined);
        await new Promise((resolve) => socket.once("connect", resolve));
        held.push(socket);
      }
      const fifth = connect({ host: "127.0.0.1", port: capped.port, localAddress: "127.0.0.3" });
      fifth.on("error", () => undefined);
      assert.equal(await closedWithin(fifth, 10_000), true, "a fifth connection, from a third source, is closed");
      for (const socket of held) assert.equal(socket.destroyed, false, "the four held ones stay open");
    } finally {
      for (const socket of held) socket.destroy();
      await capped.close();
    }
  });

  it("relays the API only with the caller's own credential, and says so when the API is not up yet", async () => {
    identity = caller("public");
    const none = await raw(gateway.port, "GET /v1/whoami HTTP/1.0\r\n\r\n");
    assert.match(none, /^HTTP\/1\.1 403 [\s\S]*"code":"permission_denied"/);
    const other = await raw(gateway.port, "GET /v1/whoami HTTP/1.0\r\nAuthorization: Bearer someone-else\r\n\r\n");
    assert.match(other, /^HTTP\/1\.1 403 /);
    const own = await raw(gateway.port, "GET /v1/whoami HTTP/1.0\r\nAuthorization: Bearer own-token\r\n\r\n");
    assert.match(own, /^HTTP\/1\.1 503 /);
    gateway.setApiTarget({ host: "127.0.0.1", port: upstreamPort });
    const relayed = await raw(gateway.port, "GET /v1/whoami HTTP/1.0\r\nAuthorization: Bearer own-token\r\n\r\n");
    assert.match(relayed, /^HTTP\/1\.1 200 [\s\S]*up \/v1\/whoami/);
  });

  it("never connects to the host's own addresses, public ones included (a sandbox would reach host services)", async () => {
    identity = caller("public");
    // A host service on every address: the input chain keeps sandboxes off it, the gateway must too.
    let accepted = 0;
    const service = createServer((socket) => {
      accepted++;
      socket.end("host service\n");
    });
    await new Promise<void>((resolve) => service.listen(0, "0.0.0.0", resolve));
    const port = (service.address() as { port: number }).port;
    try {
      const own = Object.values(networkInterfaces())
        .flat()
        .filter((a) => a && a.family === "IPv4" && !a.internal)
        .map((a) => (a as { address: string }).address);
      for (const address of own) {
        const tunnel = await raw(gateway.port, `CONNECT ${address}:${port} HTTP/1.1\r\n\r\n`);
        assert.match(tunnel, /^HTTP\/1\.1 403 [\s\S]*blocked_address/, `${address}: ${tunnel}`);
        const plain = await raw(gateway.port, `GET http://${address}:${port}/ HTTP/1.0\r\n\r\n`);
        assert.match(plain, /^HTTP\/1\.1 403 /, `${address}: ${plain}`);
      }
      assert.equal(accepted, 0);
    } finally {
      service.close();
    }
  });

  /** A CONNECT tunnel through the gateway to `host` (answered 200), with what it received and whether it closes. */
  async function openTunnelTo(host: string) {
    const socket = connect({ host: "127.0.0.1", port: gateway.port });
    let text = "";
    socket.on("data", (chunk) => {
      text += chunk.toString();
    });
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    socket.on("error", () => undefined);
    /** What arrived once it includes `marker` (or after 30 s). */
    const received = async (marker: string) => {
      await eventually(`${JSON.stringify(marker)} through the tunnel`, async () => text.includes(marker)).catch(
        () => undefined, // the caller's assertion on the text says what is missing
      );
      return text;
    };
    socket.write(`CONNECT ${host}:${upstreamPort} HTTP/1.1\r\n\r\n`);
    assert.match(await received("\r\n\r\n"), /^HTTP\/1\.1 200 /);
    const closedWithin = (ms: number) =>
      Promise.race([closed.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms))]);
    return { socket, received, closedWithin };
  }

  it("closes a caller's open tunnels once its network mode changes (gateway_only cuts what public opened)", async () => {
    identity = caller("public");
    const tunnel = await openTunnelTo("up.test");
    const { socket } = tunnel;
    try {
      socket.write("GET /through HTTP/1.1\r\nHost: up.test\r\n\r\n");
      assert.match(await tunnel.received("up /through"), /up \/through/);
      // A live switch to gateway_only keeps the veth (nftables lets the tunnel's flow to the
      // gateway go on): the tunnel opened under public, to anywhere, must not outlive it.
      identity = caller("gateway_only");
      assert.equal(await tunnel.closedWithin(3_500), true);
    } finally {
      socket.destroy();
    }
  });

  it("closes a gateway_only tunnel once its host leaves the organization's allowlist", async () => {
    identity = caller("gateway_only");
    const tunnel = await openTunnelTo("up.test");
    const { socket } = tunnel;
    try {
      orgAllowlist = ["closed.test"];
      assert.equal(await tunnel.closedWithin(3_500), true);
    } finally {
      orgAllowlist = ["up.test", "closed.test"];
      socket.destroy();
    }
  });

  it("answers 502 for an upstream status below 100, and keeps serving", async () => {
    identity = caller("public");
    const odd = await raw(gateway.port, `GET http://odd.test:${badStatusPort}/ HTTP/1.0\r\n\r\n`);
    assert.match(odd, /^HTTP\/1\.1 502 [\s\S]*upstream_failed/, odd);
    assert.match(await raw(gateway.port, `GET http://up.test:${upstreamPort}/after HTTP/1.0\r\n\r\n`), /up \/after/);
  });

  it("frames a chunked body again, so no request can be smuggled past the API relay's credential check", async () => {
    identity = caller("public");
    // A raw upstream that keeps every byte (a server reading pipelined requests would run the smuggled one).
    let received = "";
    const recorder = createServer((socket) => {
      socket.on("error", () => undefined);
      socket.on("data", (chunk) => {
        received += chunk.toString("latin1");
        if (received.includes("\r\n\r\n")) socket.end("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
      });
    });
    await new Promise<void>((resolve) => recorder.listen(0, "127.0.0.1", resolve));
    const recorderPort = (recorder.address() as { port: number }).port;
    const smuggled = "GET /smuggled HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer someone-else\r\n\r\n";
    const body = `${smuggled.length.toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`;
    try {
      gateway.setApiTarget({ host: "127.0.0.1", port: recorderPort });
      const relayed = await raw(
        gateway.port,
        `GET /v1/whoami HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer own-token\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${body}`,
      );
      assert.match(relayed, /^HTTP\/1\.1 200 /);
      // The recorder answers at the head: wait for the whole body before looking for what it carried.
      await eventually("the relayed body's last chunk", async () => received.endsWith("0\r\n\r\n"));
      assert.match(received, /^GET \/v1\/whoami HTTP\/1\.1\r\n/);
      assert.match(received.split("\r\n\r\n")[0] as string, /\r\ntransfer-encoding: chunked/i, received);
      assert.ok(!received.includes("\r\n\r\nGET /smuggled"), received);
      // The forward proxy the same.
      received = "";
      await raw(
        gateway.port,
        `GET http://up.test:${recorderPort}/first HTTP/1.1\r\nHost: up.test\r\nTransfer-Encoding: chunked\r\n\r\n${body}`,
      );
      await eventually("the forwarded body's last chunk", async () => received.endsWith("0\r\n\r\n"));
      assert.match(received.split("\r\n\r\n")[0] as string, /\r\ntransfer-encoding: chunked/i, received);
      assert.ok(!received.includes("\r\n\r\nGET /smuggled"), received);
    } finally {
      gateway.setApiTarget({ host: "127.0.0.1", port: upstreamPort });
      recorder.close();
    }
  });
});
