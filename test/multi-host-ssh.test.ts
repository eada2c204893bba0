// The SSH gateway of any server reaches the sandbox's owner (issue 25, docs/hosts.md "Routing"):
// two hosts (A, B) and an `api` replica (no runtime) over one PostgreSQL and one S3 bucket
// (test/support/multi-host.ts), driven with the stock /usr/bin/ssh. A owns a sandbox running
// test/support/http-echo.c; through B's gateway and the replica's, a session runs a command in
// it and `ssh -L` forwards a local port to its server (bytes both ways, through A's internal
// API); a forward to a port nothing listens on, and every forward once A is down, is refused
// cleanly (the local connection closes, the SSH connection stays).
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { eventually } from "./support/eventually.js";
import { pushHttpEchoImage } from "./support/http-echo.js";
import { HOST_SSH_PORT, type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";
import { freePort, waitForExit } from "./support/ports.js";
import { stockSshArgs } from "./support/ssh-client.js";

const SSH = "/usr/bin/ssh";
const SSH_HOST = "ssh.warren.test";

describe("SSH through any server reaches the owner: sessions and port forwards [postgres, s3]", () => {
  let cluster: MultiHost | undefined;
  let a: Host;
  let b: Host;
  let api: Host;
  let id = "";
  let dir = "";
  const children = new Set<ChildProcess>();

  before(async () => {
    cluster = await startMultiHost("ssh", { hosts: 2, env: { WARREN_SSH_HOST: SSH_HOST } });
    [a, b] = cluster.hosts as [Host, Host];
    api = await cluster.addApiReplica();
    await pushHttpEchoImage(cluster.registry);
    const echoImage = `${cluster.busyboxRef.split("/")[0]}/test/http-echo:latest`;
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-mh-ssh-"));
    const askpass = path.join(dir, "askpass");
    await writeFile(askpass, '#!/bin/sh\nprintf "%s\\n" "$WARREN_SSH_TEST_SECRET"\n');
    await chmod(askpass, 0o700);
    id = await a.createSandbox({ image: echoImage, command: undefined, ports: [8080], network_access: "public" });
    await a.waitFor(id, "running");
    const marker = await a.exec(id, ["sh", "-c", "echo only-in-this-sandbox > /tmp/marker"]);
    assert.equal(marker.status, 200, marker.raw);
  });

  after(async () => {
    for (const child of children) child.kill("SIGKILL");
    await cluster?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** The stock client against `edge`'s gateway, authenticated with the API key. */
  const ssh = (edge: Host, options: string[], command?: string): ChildProcess => {
    const child = spawn(
      SSH,
      [...stockSshArgs(HOST_SSH_PORT, `${id}@${edge.address}`, options), ...(command === undefined ? [] : [command])],
      {
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          SSH_ASKPASS: path.join(dir, "askpass"),
          SSH_ASKPASS_REQUIRE: "force",
          WARREN_SSH_TEST_SECRET: cluster?.apiKey ?? "",
        },
        stdio: ["pipe", "pipe", "pipe"],
      },
    );
    children.add(child);
    child.once("exit", () => children.delete(child));
    return child;
  };

  const run = async (edge: Host, command: string, stdin = "") => {
    const child = ssh(edge, [], command);
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.stdin?.end(stdin);
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    return { code, stdout, stderr };
  };

  /** `ssh -N -L` through `edge`: a local port forwarded to the sandbox's `port`, and the client. */
  const forward = async (edge: Host, port: number) => {
    const local = await freePort();
    const child = ssh(edge, ["-N", "-o", "ExitOnForwardFailure=yes", "-L", `127.0.0.1:${local}:localhost:${port}`]);
    let stderr = "";
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const stop = async () => {
      child.kill("SIGTERM");
      assert.ok(await waitForExit(child, 30_000), "the ssh client exits");
    };
    return { local, child, stderr: () => stderr, stop };
  };

  /** An HTTP request to the forwarded local port. */
  const viaForward = (local: number, method: string, urlPath: string, body: Buffer | null = null) =>
    new Promise<{ status: number; bytes: Buffer }>((resolve, reject) => {
      const req = http.request({
        host: "127.0.0.1",
        port: local,
        method,
        path: urlPath,
        agent: false,
        timeout: 60_000,
      });
      req.on("response", (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, bytes: Buffer.concat(chunks) }));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.on("timeout", () => req.destroy(new Error("no answer through the forward")));
      req.end(body ?? undefined);
    });

  /**
   * A connection to the forwarded local port that the SSH client accepted (it listens once
   * authenticated: a refused connect is retried) and then closed: what it received first.
   */
  const refusedThroughForward = (local: number) =>
    eventually(
      "the forwarded port to accept and close a connection",
      () =>
        new Promise<{ bytes: Buffer } | null>((resolve) => {
          const socket = net.connect({ host: "127.0.0.1", port: local });
          const chunks: Buffer[] = [];
          let connected = false;
          socket.on("connect", () => {
            connected = true;
            socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
          });
          socket.on("data", (chunk: Buffer) => chunks.push(chunk));
          socket.on("error", () => undefined);
          socket.setTimeout(60_000, () => socket.destroy());
          socket.on("close", () => resolve(connected ? { bytes: Buffer.concat(chunks) } : null));
        }),
      120_000,
    );

  it("a session through B's gateway and the api replica's runs a command in the sandbox on A", async () => {
    for (const edge of [b, api]) {
      const result = await run(edge, "cat /tmp/marker; read line; echo got $line; exit 7", `through-${edge.name}\n`);
      assert.equal(result.stdout, `only-in-this-sandbox\ngot through-${edge.name}\n`, `${edge.name}: ${result.stderr}`);
      assert.equal(result.code, 7, `${edge.name}: ${result.stderr}`);
    }
    assert.ok((await a.containers()).some((c) => c.id === id));
    assert.ok(!(await b.containers()).some((c) => c.id === id), "B's runtime never holds the sandbox");
  });

  it("ssh -L through B and through the api replica forwards to the server in the sandbox on A, bytes both ways", async () => {
    for (const edge of [b, api]) {
      const tunnel = await forward(edge, 8080);
      try {
        const hello = await eventually(
          `${edge.name}'s forward to answer`,
          async () => {
            const answer = await viaForward(tunnel.local, "GET", "/");
            return answer.status === 200 && answer;
          },
          120_000,
        );
        assert.equal(hello.bytes.toString(), "hello", `${edge.name}: ${tunnel.stderr()}`);
        // A body larger than every buffer on the way, streamed in and back out byte for byte.
        const payload = Buffer.alloc(4 * 1_048_576, edge.index + 3);
        const echoed = await viaForward(tunnel.local, "POST", "/echo", payload);
        assert.equal(echoed.status, 200, tunnel.stderr());
        assert.ok(echoed.bytes.equals(payload), `${edge.name}: the body came back byte for byte`);
        // A port nothing in the sandbox listens on: the channel is refused, the connection closes empty.
        const closed = await forward(edge, 9);
        try {
          const refused = await refusedThroughForward(closed.local);
          assert.equal(refused.bytes.length, 0, `${edge.name}: nothing came from a port nobody listens on`);
          assert.equal(closed.child.exitCode, null, "the SSH connection stays up after a refused channel");
        } finally {
          await closed.stop();
        }
        // The first forward still serves.
        assert.equal((await viaForward(tunnel.local, "GET", "/")).bytes.toString(), "hello");
      } finally {
        await tunnel.stop();
      }
    }
  });

  it("with the owner down, a forward and a session through B and the api replica are refused cleanly", async () => {
    await a.kill("SIGKILL");
    for (const edge of [b, api]) {
      const tunnel = await forward(edge, 8080);
      try {
        const refused = await refusedThroughForward(tunnel.local);
        assert.equal(refused.bytes.length, 0, `${edge.name}: nothing came through a forward to a lost owner`);
        assert.equal(tunnel.child.exitCode, null, `${edge.name}: the SSH connection stays up: ${tunnel.stderr()}`);
      } finally {
        await tunnel.stop();
      }
      const session = await run(edge, "echo unreachable");
      assert.equal(session.stdout, "", session.stderr);
      assert.equal(session.code, 255, session.stderr);
      assert.match(session.stderr, /host is not available|could not be opened/, session.stderr);
    }
  });
});
