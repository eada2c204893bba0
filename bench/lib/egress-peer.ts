// The two peers of bench/egress-inject.ts, each in a process of its own so neither shares
// the interceptor's event loop:
//   upstream <keyFile> <certFile>: an HTTPS server on 127.0.0.1 answering every request with
//     1 KB (keep-alive); prints its port.
//   client <json>: sequential requests, printing each one's latency in ms (JSON): `direct`
//     TLS to the upstream (trusting the test CA), `egress` CONNECT through the gateway and
//     TLS trusting the egress CA; `keepAlive` reuses one connection, else one per request.
import { readFileSync } from "node:fs";
import { connect as netConnect } from "node:net";
import { type TLSSocket, connect as tlsConnect } from "node:tls";
import { bodyFraming, copyBody, parseHead, readHead, StreamReader } from "../../src/modules/egress/http1.js";
import { openTunnel } from "../../test/support/egress.js";

const [mode, ...rest] = process.argv.slice(2);

if (mode === "upstream") {
  const { createServer } = await import("node:https");
  const body = Buffer.alloc(1024, 0x62);
  const server = createServer(
    { key: readFileSync(rest[0] ?? ""), cert: readFileSync(rest[1] ?? ""), keepAliveTimeout: 60_000 },
    (req, res) => {
      req.resume();
      req.on("end", () => {
        res.setHeader("content-length", body.length);
        res.end(body);
      });
    },
  );
  server.listen(0, "127.0.0.1", () => process.stdout.write(`${(server.address() as { port: number }).port}\n`));
} else if (mode === "client") {
  const o = JSON.parse(rest[0] ?? "{}") as {
    path: "direct" | "egress";
    host: string;
    upstreamPort: number;
    gatewayPort: number;
    ca: string;
    requests: number;
    warmup: number;
    keepAlive: boolean;
  };
  const payload = Buffer.alloc(1024, 0x61);
  const request = Buffer.concat([
    Buffer.from(
      `POST /bench HTTP/1.1\r\nHost: ${o.host}\r\nContent-Length: ${payload.length}\r\nContent-Type: application/octet-stream\r\n\r\n`,
    ),
    payload,
  ]);
  const open = async (): Promise<{ tls: TLSSocket; reader: StreamReader; close(): void }> => {
    if (o.path === "egress") {
      const tunnel = await openTunnel(o.gatewayPort, o.host, o.ca);
      return { tls: tunnel.tls, reader: new StreamReader(tunnel.tls), close: () => tunnel.close() };
    }
    const raw = netConnect(o.upstreamPort, "127.0.0.1");
    const tls = tlsConnect({ socket: raw, servername: o.host, ca: o.ca, ALPNProtocols: ["http/1.1"] });
    await new Promise<void>((resolve, reject) => {
      tls.once("secureConnect", resolve);
      tls.once("error", reject);
    });
    return { tls, reader: new StreamReader(tls), close: () => tls.destroy() };
  };
  const exchange = async (c: { tls: TLSSocket; reader: StreamReader }) => {
    c.tls.write(request);
    const head = await readHead(c.reader, "response");
    if (!head) throw new Error("closed");
    const parsed = parseHead(head);
    if (!parsed.startLine.startsWith("HTTP/1.1 200")) throw new Error(parsed.startLine);
    const n = await copyBody(c.reader, bodyFraming(parsed, false), async () => {}, { decode: true });
    if (n !== 1024) throw new Error(`body of ${n} bytes`);
  };
  const latencies: number[] = [];
  let conn = o.keepAlive ? await open() : null;
  for (let i = 0; i < o.warmup + o.requests; i++) {
    const started = process.hrtime.bigint();
    const c = conn ?? (await open());
    await exchange(c);
    if (!o.keepAlive) c.close();
    const took = Number(process.hrtime.bigint() - started) / 1e6;
    if (i >= o.warmup) latencies.push(took);
  }
  conn?.close();
  conn = null;
  process.stdout.write(`${JSON.stringify(latencies)}\n`);
  process.exit(0);
}
