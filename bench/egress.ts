// Egress gateway overhead, side by side with the same request made directly:
//
//   http:    GET of a 1 KiB body from an upstream in a network namespace made for the run
//            (the test peer, 203.0.113.0/24), directly vs as an absolute-form request through
//            the gateway; a fresh connection each time on both paths (the gateway opens one
//            upstream per request).
//   connect: the same GET over a fresh TCP connection directly vs over a fresh CONNECT
//            tunnel through the gateway (tunnel set-up included).
//
// The two paths alternate request by request, so load from elsewhere falls on both alike.
// The gateway is the real one (policy, name mapping, forwarding); only the caller lookup is
// bound to a fixed public caller, since the client runs on the host, not in a sandbox.
//
//   node --import tsx bench/egress.ts [--requests 2000] [--output bench/results/egress.json]
import { execSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { startTestPeer } from "../src/drivers/runtime/local/test-support.js";
import { createLogger } from "../src/lib/logger.js";
import { EgressGateway } from "../src/modules/egress/gateway.js";
import { benchArgs } from "./lib/args.js";
import { textTable } from "./lib/table.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const requests = Number(args.get("requests") ?? 2000);
const output = args.get("output") ?? path.join(ROOT, "bench/results/egress.json");
const log = (line: string) => process.stderr.write(`[bench:egress] ${line}\n`);

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0;

/** One GET over a fresh connection; resolves with the body length. */
function get(options: http.RequestOptions): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({ ...options, agent: false }, (res) => {
      let length = 0;
      res.on("data", (chunk: Buffer) => {
        length += chunk.length;
      });
      res.on("end", () => (res.statusCode === 200 ? resolve(length) : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on("error", reject);
    req.end();
  });
}

/** A raw HTTP/1.0 GET over `socket` (already connected or tunnelled); resolves with the response size. */
function rawGet(socket: net.Socket, host: string, first: Buffer | null = null): Promise<number> {
  return new Promise((resolve, reject) => {
    let size = first?.length ?? 0;
    socket.on("data", (chunk: Buffer) => {
      size += chunk.length;
    });
    socket.on("end", () => resolve(size));
    socket.on("error", reject);
    socket.write(`GET /kib HTTP/1.0\r\nHost: ${host}\r\n\r\n`);
  });
}

function connectDirect(address: string, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: address, port }, () => resolve(socket));
    socket.on("error", reject);
  });
}

/** A CONNECT tunnel through the gateway; resolves once it answered 200. */
function connectTunnel(gatewayPort: number, authority: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port: gatewayPort });
    socket.on("error", reject);
    socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) return;
      socket.off("data", onData);
      if (!head.subarray(0, 12).toString().includes("200")) return reject(new Error(head.toString()));
      if (end + 4 < head.length) socket.unshift(head.subarray(end + 4));
      resolve(socket);
    };
    socket.on("data", onData);
  });
}

async function measure(
  name: string,
  direct: () => Promise<number>,
  proxied: () => Promise<number>,
): Promise<Record<string, unknown>> {
  for (let i = 0; i < 100; i++) {
    await direct();
    await proxied();
  }
  const times = { direct: [] as number[], proxied: [] as number[] };
  let bytes = 0;
  for (let i = 0; i < requests; i++) {
    for (const [kind, call] of [
      ["direct", direct],
      ["proxied", proxied],
    ] as const) {
      const started = process.hrtime.bigint();
      bytes = await call();
      times[kind].push(Number(process.hrtime.bigint() - started) / 1e6);
    }
  }
  const summary = (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return { p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99) };
  };
  const d = summary(times.direct);
  const p = summary(times.proxied);
  log(`${name}: direct p50 ${d.p50.toFixed(3)} ms, through the gateway p50 ${p.p50.toFixed(3)} ms`);
  return {
    name,
    requests,
    responseBytes: bytes,
    direct: d,
    gateway: p,
    addedP50: p.p50 - d.p50,
    addedP90: p.p90 - d.p90,
  };
}

async function main(): Promise<void> {
  const peer = await startTestPeer();
  const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
  const gateway = await EgressGateway.start({
    host: "127.0.0.1",
    port: 0,
    hosts: new Map([["upstream.test", peer.address]]),
    log: createLogger("error", silent),
  });
  gateway.bind({
    identify: async () => ({ sandboxId: "bench", orgId: "bench", projectId: "bench", runId: "bench", mode: "public" }),
    allowlist: async () => [],
    sandboxOfCredential: async () => null,
  });
  try {
    const results = [
      await measure(
        "http 1 KiB",
        () => get({ host: peer.address, port: peer.httpPort, path: "/kib", headers: { host: "upstream.test" } }),
        () =>
          get({
            host: "127.0.0.1",
            port: gateway.port,
            path: `http://upstream.test:${peer.httpPort}/kib`,
            headers: { host: `upstream.test:${peer.httpPort}` },
          }),
      ),
      await measure(
        "connect tunnel + 1 KiB",
        async () => rawGet(await connectDirect(peer.address, peer.httpPort), "upstream.test"),
        async () => rawGet(await connectTunnel(gateway.port, `upstream.test:${peer.httpPort}`), "upstream.test"),
      ),
    ];
    const uptime = execSync("uptime").toString().trim();
    const rows = results.map((r) => {
      const d = r.direct as { p50: number; p90: number };
      const g = r.gateway as { p50: number; p90: number };
      return [
        String(r.name),
        d.p50.toFixed(3),
        d.p90.toFixed(3),
        g.p50.toFixed(3),
        g.p90.toFixed(3),
        (r.addedP50 as number).toFixed(3),
        (r.addedP90 as number).toFixed(3),
      ];
    });
    process.stdout.write(
      `${textTable([["request", "direct p50 ms", "direct p90", "gateway p50", "gateway p90", "added p50", "added p90"], ...rows])}\n${uptime}\n`,
    );
    writeFileSync(
      output,
      `${JSON.stringify(
        {
          recordedAt: new Date().toISOString(),
          machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
          commit: execSync("git rev-parse HEAD", { cwd: ROOT }).toString().trim(),
          load: uptime,
          results,
        },
        null,
        2,
      )}\n`,
    );
  } finally {
    await gateway.close();
    await peer.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
