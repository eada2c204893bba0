// Secret egress test pieces: a test CA and leaf certificates made with openssl, an HTTPS
// upstream that records what it receives (and can echo the injected header back), and a
// loopback CONNECT proxy that plays the egress gateway: it hands a CONNECT the interceptor
// wants to the interceptor and tunnels any other one straight to the upstream.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { readdir, readFile, stat } from "node:fs/promises";
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import { createServer, connect as netConnect, type Server, type Socket } from "node:net";
import os from "node:os";
import path from "node:path";
import { gzipSync } from "node:zlib";
import type { EgressCaller, EgressInterceptor } from "../../src/modules/egress/types.js";
import { ensureDebianPackage } from "./registry.js";

export interface TestPki {
  dir: string;
  caPem: string;
  caFile: string;
  /** A key and certificate for `names`, signed by the test CA (or self-signed when `selfSigned`). */
  leaf(names: string[], options?: { selfSigned?: boolean }): { key: string; cert: string };
  remove(): void;
}

export function makeTestPki(): TestPki {
  ensureDebianPackage("/usr/bin/openssl", "openssl");
  const dir = mkdtempSync(path.join(os.tmpdir(), "warren-egress-pki-"));
  const ossl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  ossl(
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "2",
    "-subj",
    "/CN=Warren test upstream CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  );
  let n = 0;
  return {
    dir,
    caPem: readFileSync(path.join(dir, "ca.pem"), "utf8"),
    caFile: path.join(dir, "ca.pem"),
    leaf(names, options = {}) {
      n += 1;
      const san = names.map((name) => `DNS:${name}`).join(",");
      if (options.selfSigned) {
        ossl(
          "req",
          "-x509",
          "-newkey",
          "ec",
          "-pkeyopt",
          "ec_paramgen_curve:P-256",
          "-nodes",
          "-keyout",
          `l${n}.key`,
          "-out",
          `l${n}.pem`,
          "-days",
          "2",
          "-subj",
          `/CN=${names[0]}`,
          "-addext",
          `subjectAltName=${san}`,
        );
      } else {
        ossl(
          "req",
          "-newkey",
          "ec",
          "-pkeyopt",
          "ec_paramgen_curve:P-256",
          "-nodes",
          "-keyout",
          `l${n}.key`,
          "-out",
          `l${n}.csr`,
          "-subj",
          `/CN=${names[0]}`,
        );
        writeFileSync(path.join(dir, `l${n}.ext`), `subjectAltName=${san}\nextendedKeyUsage=serverAuth\n`);
        ossl(
          "x509",
          "-req",
          "-in",
          `l${n}.csr`,
          "-CA",
          "ca.pem",
          "-CAkey",
          "ca.key",
          "-CAcreateserial",
          "-out",
          `l${n}.pem`,
          "-days",
          "1",
          "-extfile",
          `l${n}.ext`,
        );
      }
      return {
        key: readFileSync(path.join(dir, `l${n}.key`), "utf8"),
        cert: readFileSync(path.join(dir, `l${n}.pem`), "utf8"),
      };
    },
    remove() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface Received {
  method: string;
  url: string;
  host: string | undefined;
  authorization: string | undefined;
  body: Buffer;
  /** Which TLS connection of the upstream it came on (numbered from 1 in accept order). */
  connection: number;
}

export interface TestUpstream {
  port: number;
  received: Received[];
  /** Connections that have closed (for instance at the keep-alive timeout). */
  closedConnections(): number;
  close(): Promise<void>;
}

/**
 * An HTTPS server on 127.0.0.1: `/echo` answers the Authorization it got in a header and
 * in the body, `/echo-chunked` sends it split across chunks of `?split=<n>` bytes, `/bytes?n=`
 * answers n bytes, anything else answers "ok" with the request body's length.
 */
export async function startUpstream(
  tlsOptions: { key: string; cert: string },
  keepAliveTimeoutMs = 30_000,
): Promise<TestUpstream> {
  const received: Received[] = [];
  const connections = new WeakMap<object, number>();
  const server: HttpsServer = createHttpsServer({ ...tlsOptions, keepAliveTimeout: keepAliveTimeoutMs }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const auth = req.headers.authorization;
      received.push({
        method: req.method ?? "",
        url: req.url ?? "",
        host: req.headers.host,
        authorization: auth,
        body,
        connection: connections.get(req.socket) ?? 0,
      });
      const url = new URL(req.url ?? "/", "https://upstream");
      if (url.pathname === "/echo") {
        res.setHeader("x-echo", auth ?? "");
        res.end(`you sent ${auth ?? ""} and that is all`);
      } else if (url.pathname === "/echo-chunked") {
        const split = Number(url.searchParams.get("split") ?? "3");
        const text = Buffer.from(`before ${auth ?? ""} after`);
        res.setHeader("content-type", "text/plain");
        for (let at = 0; at < text.length; at += split) res.write(text.subarray(at, at + split));
        res.end();
      } else if (url.pathname === "/echo-json") {
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ headers: { Authorization: auth ?? "" } }).replaceAll("/", "\\/"));
      } else if (url.pathname === "/echo-json-plain") {
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ headers: { Authorization: auth ?? "" } }));
      } else if (url.pathname === "/echo-url") {
        res.statusCode = 302;
        res.setHeader("location", `/login?next=${encodeURIComponent(auth ?? "")}`);
        res.end(`see /login?next=${encodeURIComponent(auth ?? "").toLowerCase()}`);
      } else if (url.pathname === "/echo-gzip") {
        // Compressed whatever Accept-Encoding said.
        res.setHeader("content-encoding", "gzip");
        res.end(gzipSync(Buffer.from(`you sent ${auth ?? ""} and that is all`)));
      } else if (url.pathname === "/bytes") {
        res.end(Buffer.alloc(Number(url.searchParams.get("n") ?? "1024"), 0x61));
      } else {
        res.end(`ok ${body.length}`);
      }
    });
  });
  let accepted = 0;
  let closed = 0;
  server.on("secureConnection", (socket) => {
    connections.set(socket, ++accepted);
    socket.once("close", () => closed++);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no upstream address");
  return {
    port: address.port,
    received,
    closedConnections: () => closed,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface TestGateway {
  port: number;
  close(): Promise<void>;
}

/**
 * Plays the egress gateway for `caller` on 127.0.0.1: a CONNECT host:443 goes to the
 * interceptor when it wants it, else is tunnelled; both reach `upstreams[host]` on loopback.
 */
export async function startTestGateway(
  interceptor: EgressInterceptor,
  caller: EgressCaller,
  upstreams: Record<string, number>,
): Promise<TestGateway> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end === -1) return;
      socket.off("data", onData);
      socket.pause();
      const rest = head.subarray(end + 4);
      const match = /^CONNECT ([a-z0-9.-]+):(\d+) HTTP\/1\.1\r\n/i.exec(head.toString("latin1"));
      const host = match?.[1]?.toLowerCase() ?? "";
      const port = Number(match?.[2] ?? 0);
      const upstreamPort = upstreams[host];
      if (!match || upstreamPort === undefined) {
        socket.end("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
        return;
      }
      void interceptor.wants(caller, host, port).then((wanted) => {
        socket.write("HTTP/1.1 200 Connection established\r\n\r\n");
        if (rest.length) socket.unshift(rest);
        if (wanted) {
          interceptor.intercept(socket, { host, port: upstreamPort, address: "127.0.0.1" }, caller);
          socket.resume();
          return;
        }
        const upstream = netConnect(upstreamPort, "127.0.0.1");
        sockets.add(upstream);
        upstream.on("close", () => sockets.delete(upstream));
        upstream.on("error", () => socket.destroy());
        socket.pipe(upstream).pipe(socket);
        socket.resume();
      });
    };
    socket.on("data", onData);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no gateway address");
  return {
    port: address.port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface RawResponse {
  status: number;
  head: string;
  body: Buffer;
}

/** A sandbox-side HTTPS connection through the gateway (CONNECT, then TLS trusting `caPem`), one request at a time. */
export async function openTunnel(gatewayPort: number, host: string, caPem: string, options: { sni?: boolean } = {}) {
  const { connect: tlsConnect, checkServerIdentity } = await import("node:tls");
  const { StreamReader, readHead, parseHead, bodyFraming, copyBody } = await import(
    "../../src/modules/egress/http1.js"
  );
  const raw = netConnect(gatewayPort, "127.0.0.1");
  await new Promise<void>((resolve, reject) => {
    raw.once("connect", resolve);
    raw.once("error", reject);
  });
  raw.write(`CONNECT ${host}:443 HTTP/1.1\r\nHost: ${host}:443\r\n\r\n`);
  const answer = await new Promise<string>((resolve, reject) => {
    let got = "";
    const onData = (chunk: Buffer) => {
      got += chunk.toString("latin1");
      if (got.includes("\r\n\r\n")) {
        raw.off("data", onData);
        raw.pause();
        resolve(got);
      }
    };
    raw.on("data", onData);
    raw.once("error", reject);
  });
  if (!answer.startsWith("HTTP/1.1 200")) throw new Error(`CONNECT refused: ${answer}`);
  const tls = tlsConnect({
    socket: raw,
    // An empty servername sends no SNI; the certificate is still checked against `host`.
    servername: options.sni === false ? "" : host,
    checkServerIdentity: (_name, cert) => checkServerIdentity(host, cert),
    ca: caPem,
    ALPNProtocols: ["http/1.1"],
  });
  await new Promise<void>((resolve, reject) => {
    tls.once("secureConnect", resolve);
    tls.once("error", reject);
  });
  const reader = new StreamReader(tls);
  return {
    tls,
    /** Sends raw request bytes and reads one response (the body decoded). */
    async send(request: string | Buffer, method = "GET"): Promise<RawResponse> {
      tls.write(request);
      for (;;) {
        const rawHead = await readHead(reader, "response");
        if (!rawHead) throw new Error("connection closed before a response");
        const head = parseHead(rawHead);
        const status = Number(head.startLine.split(" ")[1]);
        if (status === 100) continue;
        const chunks: Buffer[] = [];
        const framing = method === "HEAD" ? { kind: "none" as const } : bodyFraming(head, false);
        await copyBody(
          reader,
          framing,
          async (b) => {
            chunks.push(Buffer.from(b));
          },
          { decode: true },
        );
        return { status, head: rawHead.toString("latin1"), body: Buffer.concat(chunks) };
      }
    },
    close() {
      tls.destroy();
      raw.destroy();
    },
  };
}

/**
 * A layer with the host's curl (Debian's /usr/bin/curl and every shared library `ldd` lists,
 * at the same paths) and the host's CA bundle at /etc/ssl/certs/ca-certificates.crt: busybox
 * has no TLS client, so this is how a test sandbox makes an HTTPS request. Stack it on the
 * busybox layer.
 */
export async function curlLayer(): Promise<Buffer> {
  const { encodeTar } = await import("../../src/drivers/runtime/image/tar.js");
  const { realpathSync } = await import("node:fs");
  ensureDebianPackage("/usr/bin/curl", "curl");
  ensureDebianPackage("/etc/ssl/certs/ca-certificates.crt", "ca-certificates");
  const files = new Map<string, Buffer>();
  files.set("usr/bin/curl", readFileSync("/usr/bin/curl"));
  const ldd = execFileSync("ldd", ["/usr/bin/curl"], { encoding: "utf8" });
  for (const line of ldd.split("\n")) {
    const match = /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(line);
    if (match?.[1]) files.set(match[1].slice(1), readFileSync(realpathSync(match[1])));
  }
  files.set("etc/ssl/certs/ca-certificates.crt", readFileSync("/etc/ssl/certs/ca-certificates.crt"));
  const dirs = new Set<string>();
  for (const name of files.keys()) {
    const parts = name.split("/");
    for (let i = 1; i < parts.length; i++) dirs.add(parts.slice(0, i).join("/"));
  }
  return encodeTar([
    ...[...dirs].sort().map((name) => ({ name, type: "dir" as const })),
    ...[...files].map(([name, data]) => ({ name, type: "file" as const, mode: 0o755, data })),
  ]);
}

/** Files under `dir` (recursively, each under 16 MiB) whose bytes contain `needle`. */
export async function filesContaining(dir: string, needle: Buffer, found: string[] = []): Promise<string[]> {
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) await filesContaining(full, needle, found);
    else if (entry.isFile() && (await stat(full)).size < 16 * 1024 * 1024) {
      if ((await readFile(full)).includes(needle)) found.push(full);
    }
  }
  return found;
}
