// A real Warren listening on a TCP port for the SDK, CLI and MCP tests: the in-process app
// (test/harness.ts) with, when asked, the local runc runtime and its reconciler over a
// throwaway registry, and a fs blob store whose presigned URLs point at this server.
import { randomBytes } from "node:crypto";
import http from "node:http";
import path from "node:path";
import { SandboxReconciler } from "../../src/controllers/sandbox-reconciler.js";
import { FsBlobStore } from "../../src/drivers/blobs/fs.js";
import { type RuntimeFixture, startRuntimeFixture } from "../../src/drivers/runtime/local/test-support.js";
import { type SshGateway, startSshGateway } from "../../src/modules/ssh/index.js";
import { type StoreKind, startTestApp, type TestApp } from "../harness.js";
import { freePort } from "./ports.js";

export interface ApiServer {
  t: TestApp;
  url: string;
  fixture: RuntimeFixture | null;
  close(): Promise<void>;
}

export async function startApiServer(
  store: StoreKind,
  options: { runtime?: string; ssh?: boolean } = {},
): Promise<ApiServer> {
  let port = 0;
  let url = "";
  let fixture: RuntimeFixture | null = null;
  let t: TestApp | undefined;
  let reconciler: SandboxReconciler | undefined;
  let ssh: SshGateway | null = null;
  const close = async () => {
    await ssh?.close();
    await reconciler?.stop();
    await t?.close();
    await fixture?.cleanup();
  };
  try {
    if (options.runtime) fixture = await startRuntimeFixture(options.runtime);
    const base = (await import("../../src/config.js")).loadConfig({});
    const blobRoot = fixture ? path.join(fixture.root, "blobs") : null;
    // The app needs its URL before it listens: a free port is picked, and picked again when
    // another process took it in between (the kernel hands the same range out to connections).
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      url = `http://127.0.0.1:${port}`;
      t = await startTestApp(store, {
        overrides: {
          ...(fixture ? { runtime: fixture.driver } : {}),
          ...(blobRoot
            ? { blobs: await FsBlobStore.open({ dir: blobRoot, signingKey: randomBytes(32), publicBaseUrl: url }) }
            : {}),
        },
        config: {
          publicApiUrl: url,
          ...(options.ssh ? { sshHost: "127.0.0.1" } : {}),
          ...(fixture
            ? {
                volumes: { ...base.volumes, cacheDir: path.join(fixture.root, "volume-cache") },
                sandbox: { ...base.sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
              }
            : {}),
        },
      });
      try {
        await t.app.listen({ host: "127.0.0.1", port });
        break;
      } catch (error) {
        await t.close();
        t = undefined;
        if ((error as NodeJS.ErrnoException).code !== "EADDRINUSE" || attempt >= 5) throw error;
      }
    }
    if (!t) throw new Error("the API server did not start");
    if (fixture) {
      reconciler = new SandboxReconciler(t.c, fixture.driver, {
        pids: 128,
        retentionSeconds: 3600,
        publicApiUrl: "http://127.0.0.1:1",
      });
      await reconciler.start();
      if (options.ssh) {
        ssh = await startSshGateway({
          listen: { host: "127.0.0.1", port: 0 },
          publicHost: "127.0.0.1",
          hostKey: await t.c.sshHostKey(),
          identity: t.c.identity,
          sandboxes: t.c.sandboxes,
          links: t.c.sandboxLinks,
          runtime: fixture.driver,
          tokens: t.c.sessions,
          log: t.c.log,
        });
      }
    }
    return { t, url, fixture, close };
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
}

/**
 * An HTTP proxy in front of `target` that misbehaves on demand: `dropNextAfterRequest`
 * lets the next matching request reach the server and then destroys the client's
 * connection once the answer is there, before passing it on (a lost response: the server
 * did the work); `refuseNext(status, retryAfter)` answers the next request itself.
 * `dropStreams()` cuts every open response (a dropped tail).
 */
export interface FaultyProxy {
  url: string;
  dropNextAfterRequest(matcher: string): void;
  refuseNext(status: number, retryAfterSeconds: number): void;
  dropStreams(): void;
  /** Requests that arrived (`METHOD path`), in order. */
  seen: string[];
  close(): Promise<void>;
}

export async function startFaultyProxy(target: string): Promise<FaultyProxy> {
  const { port: targetPort } = new URL(target);
  let drop: string | null = null;
  let refuse: { status: number; retryAfter: number } | null = null;
  const seen: string[] = [];
  const open = new Set<import("node:http").ServerResponse>();
  const server = http.createServer((req, res) => {
    const line = `${req.method} ${req.url}`;
    seen.push(line);
    if (refuse) {
      const { status, retryAfter } = refuse;
      refuse = null;
      req.resume();
      res.writeHead(status, { "content-type": "application/json", "retry-after": String(retryAfter) });
      res.end(JSON.stringify({ code: status === 429 ? "rate_limited" : "unavailable", message: "proxy says wait" }));
      return;
    }
    const dropThis = drop !== null && line.includes(drop);
    if (dropThis) drop = null;
    const upstream = http.request(
      { host: "127.0.0.1", port: Number(targetPort), method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        if (dropThis) {
          answer.resume();
          answer.once("end", () => req.socket.destroy());
          return;
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        open.add(res);
        res.once("close", () => {
          open.delete(res);
          answer.destroy();
        });
        answer.pipe(res);
      },
    );
    upstream.on("error", () => req.socket.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${address.port}`,
    seen,
    dropNextAfterRequest: (matcher) => {
      drop = matcher;
    },
    refuseNext: (status, retryAfterSeconds) => {
      refuse = { status, retryAfter: retryAfterSeconds };
    },
    dropStreams: () => {
      for (const res of open) res.socket?.destroy();
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
