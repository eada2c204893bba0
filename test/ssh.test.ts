// The SSH gateway with the stock OpenSSH client (/usr/bin/ssh) against real sandboxes: a
// command (stdout, stderr, exit status), a PTY shell (prompt, echo, exit), a port forward
// (`ssh -L` to busybox httpd in the sandbox), refusals (no key, a wrong key, another
// organization's key, another sandbox's scoped key), the failure limit, session activity, and
// a hostile sandbox (its exec agent killed mid-session) or client (garbage on the port) that
// leaves the server serving. PGlite only: the store is not what is under test here.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { createLogger } from "../src/lib/logger.js";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import type { SshGatewayOptions } from "../src/modules/ssh/gateway.js";
import { SshGateway, startSshGateway } from "../src/modules/ssh/index.js";
import { startTestApp, type TestApp } from "./harness.js";
import { freePort } from "./support/ports.js";
import { stockSshArgs } from "./support/ssh-client.js";

const SSH = "/usr/bin/ssh";

interface SshResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

describe("ssh gateway with the OpenSSH client", { timeout: 300_000 }, () => {
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let gateway: SshGateway | null = null;
  let dir: string;
  let port: number;
  let id: string;
  let other: string;
  const owner = () => t.orgA.keys.owner;

  before(async () => {
    fixture = await startRuntimeFixture("ssh");
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-ssh-test-"));
    t = await startTestApp("pglite", {
      overrides: { runtime: fixture.driver },
      config: {
        // As main.ts would have it: the gateway on 127.0.0.1 (port 0: any), named in GetServiceConfig.
        sshHost: loadConfig({ WARREN_SSH_LISTEN: "127.0.0.1:0" }).sshHost,
        sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
      },
    });
    reconciler = new SandboxReconciler(t.c, fixture.driver, {
      pids: 128,
      retentionSeconds: 60,
      publicApiUrl: "http://127.0.0.1:1",
    });
    await reconciler.start();
    gateway = await startSshGateway({
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
    const askpass = path.join(dir, "askpass");
    await writeFile(askpass, '#!/bin/sh\nprintf "%s\\n" "$WARREN_SSH_TEST_SECRET"\n');
    await chmod(askpass, 0o700);
    id = await createRunning({ network_access: "public" });
    other = await createRunning({});
    const sandbox = await sandboxOf(id);
    assert.ok(sandbox.ssh, "a running sandbox carries ssh");
    port = sandbox.ssh.port;
  });

  after(async () => {
    for (const sandbox of [id, other]) {
      if (sandbox) await t?.request("DELETE", `/v1/sandboxes/${sandbox}`, { key: owner() }).catch(() => undefined);
    }
    await gateway?.close();
    await reconciler?.idle();
    await reconciler?.stop();
    await t?.close();
    await fixture?.cleanup();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function sandboxOf(sandboxId: string, waitState?: string): Promise<SandboxJson> {
    const res = await t.request("GET", `/v1/sandboxes/${sandboxId}`, {
      key: owner(),
      query: waitState ? { wait_state: waitState, wait_timeout_seconds: "25" } : {},
    });
    assert.equal(res.status, 200, res.raw);
    return res.body.sandbox as SandboxJson;
  }

  async function createRunning(body: Record<string, unknown>): Promise<string> {
    const res = await t.request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { network_access: "none", command: ["sleep", "3600"], ...body },
    });
    assert.equal(res.status, 200, res.raw);
    const sandboxId = res.body.id as string;
    assert.equal((await sandboxOf(sandboxId, "running")).state, "running");
    return sandboxId;
  }

  function sshArgs(user: string, extra: string[]): string[] {
    return stockSshArgs(port, `${user}@127.0.0.1`, extra);
  }

  function startSsh(user: string, secret: string, extra: string[], command: string[] = []): ChildProcess {
    return spawn(SSH, [...sshArgs(user, extra), ...command], {
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        SSH_ASKPASS: path.join(dir, "askpass"),
        SSH_ASKPASS_REQUIRE: "force",
        WARREN_SSH_TEST_SECRET: secret,
      },
      stdio: ["pipe", "pipe", "pipe"],
    });
  }

  function collect(child: ChildProcess, input?: string): Promise<SshResult> {
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    if (input !== undefined) child.stdin?.end(input);
    return new Promise((resolve) => child.on("close", (code) => resolve({ code, stdout, stderr })));
  }

  const ssh = (user: string, secret: string, command: string[], input = "") =>
    collect(startSsh(user, secret, [], command), input);

  it("names the gateway in the record of a running sandbox and in the service config", async () => {
    const sandbox = await sandboxOf(id);
    assert.deepEqual(sandbox.ssh, { host: "127.0.0.1", port, user: id });
    const stopped = await createRunning({});
    const stop = await t.request("PATCH", `/v1/sandboxes/${stopped}`, { key: owner(), body: { state: "stopped" } });
    assert.equal(stop.status, 200, stop.raw);
    const after = await sandboxOf(stopped, "stopped");
    assert.equal(after.state, "stopped");
    assert.equal(after.ssh, undefined, "no ssh while not running");
    const config = await t.request("GET", "/v1/service-config");
    assert.equal(config.body.ssh_host, "127.0.0.1");
    await t.request("DELETE", `/v1/sandboxes/${stopped}`, { key: owner() });
  });

  it("runs a command: stdout, stderr and the exit status come back; stdin goes in", async () => {
    const result = await ssh(id, owner(), ["read line; echo out:$line; echo err >&2; exit 3"], "typed\n");
    assert.equal(result.stdout, "out:typed\n");
    assert.match(result.stderr, /^err$/m);
    assert.equal(result.code, 3);
  });

  it("streams large output and input at the pace of the SSH channel, losing nothing", async () => {
    const out = await ssh(id, owner(), ["head -c 6000000 /dev/zero | tr '\\0' x"]);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(out.stdout.length, 6_000_000);
    assert.ok(/^x+$/.test(out.stdout));
    const input = "y".repeat(3_000_000);
    const counted = await ssh(id, owner(), ["wc -c"], input);
    assert.equal(counted.stdout.trim(), "3000000", counted.stderr);
  });

  it("holds the sandbox awake while a session is open (the reconciler's idle check)", async () => {
    assert.equal(t.c.sandboxes.hasExecInFlight(id), false);
    const child = startSsh(id, owner(), [], ["echo open; sleep 2"]);
    let seen = "";
    child.stdout?.on("data", (d: Buffer) => {
      seen += d.toString();
    });
    const done = collect(child);
    const deadline = Date.now() + 10_000;
    while (!seen.includes("open") && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(t.c.sandboxes.hasExecInFlight(id), true, "an open session counts");
    assert.equal(t.c.sandboxes.hasExecInFlight(other), false, "only in its own sandbox");
    assert.equal((await done).code, 0);
    assert.equal(t.c.sandboxes.hasExecInFlight(id), false, "not after it closed");
  });

  it("counts a session as activity of the sandbox", async () => {
    // An API exec first, so the source is `exec`; the session's touch may trail by up to
    // MIN_TOUCH_MS (5 s) when the sandbox's last session touch was that recent.
    const exec = await t.request("POST", `/v1/sandboxes/${id}:exec`, { key: owner(), body: { cmd: ["true"] } });
    assert.equal(exec.status, 200, exec.raw);
    assert.equal((await sandboxOf(id)).last_activity?.source, "exec");
    const result = await ssh(id, t.orgA.keys.member, ["true"]);
    assert.equal(result.code, 0, result.stderr);
    const deadline = Date.now() + 8000;
    let source: string | undefined;
    while (Date.now() < deadline && source !== "session") {
      source = (await sandboxOf(id)).last_activity?.source;
      if (source !== "session") await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.equal(source, "session");
  });

  it("runs a PTY shell: a prompt, the typed line echoed, its output, the exit status", async () => {
    const child = startSsh(id, owner(), ["-tt"]);
    let output = "";
    child.stdout?.on("data", (d: Buffer) => {
      output += d.toString();
    });
    const done = collect(child);
    const waitFor = async (pattern: RegExp) => {
      const deadline = Date.now() + 15_000;
      while (!pattern.test(output)) {
        if (Date.now() > deadline) throw new Error(`no ${pattern} in ${JSON.stringify(output)}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    await waitFor(/# /);
    child.stdin?.write("echo $((6 * 7)); tty\n");
    await waitFor(/42\r\n\/dev\/pts\/\d+\r\n/);
    assert.match(output, /echo \$\(\(6 \* 7\)\); tty\r\n/, "the terminal echoes the typed line");
    child.stdin?.write("exit 5\n");
    const result = await done;
    assert.equal(result.code, 5);
  });

  it("forwards a local port to the sandbox's own port (ssh -L to busybox httpd)", async () => {
    const started = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
      key: owner(),
      body: {
        cmd: [
          "sh",
          "-c",
          "mkdir -p /tmp/www && echo served-from-sandbox > /tmp/www/index.html && busybox httpd -p 8080 -h /tmp/www",
        ],
      },
    });
    assert.equal(started.status, 200, started.raw);
    const localPort = await freePort();
    const forward = startSsh(id, owner(), [
      "-N",
      "-o",
      "ExitOnForwardFailure=yes",
      "-L",
      `${localPort}:localhost:8080`,
    ]);
    const forwardDone = collect(forward);
    try {
      const deadline = Date.now() + 15_000;
      let body = "";
      while (Date.now() < deadline) {
        body = await httpGet(localPort).catch(() => "");
        if (body) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.equal(body, "served-from-sandbox\n");
      // Only the sandbox itself: a forward to another address is refused.
      const otherPort = await freePort();
      const refused = startSsh(id, owner(), ["-N", "-L", `${otherPort}:10.0.0.1:8080`]);
      const refusedDone = collect(refused);
      let error = "";
      for (let i = 0; i < 50 && !error; i++) {
        error = await httpGet(otherPort).then(
          () => "",
          (e: Error) => e.message,
        );
        if (/ECONNREFUSED/.test(error)) error = "";
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.match(error, /socket hang up|ECONNRESET/);
      refused.kill();
      await refusedDone;
    } finally {
      forward.kill();
      await forwardDone;
    }
  });

  it("refuses without a valid credential, with another organization's key and another sandbox's scoped key", async () => {
    const scoped = await t.issueKey(t.orgA, {
      sandbox: { sandboxId: other, lineagePath: other },
    });
    for (const [what, user, secret] of [
      ["an empty password", id, ""],
      ["a wrong key", id, "wk_not_a_key"],
      ["another organization's key", id, t.orgB.keys.owner],
      ["another sandbox's scoped key", id, scoped.key],
      ["no such sandbox", `sbx-${"0".repeat(40)}`, owner()],
      ["the key as the user name", owner(), owner()],
    ] as const) {
      const result = await ssh(user, secret, ["echo", "in"]);
      assert.equal(result.code, 255, `${what}: ${result.stdout} ${result.stderr}`);
      assert.equal(result.stdout, "", what);
      assert.match(result.stderr, /Permission denied/, what);
    }
    // The scoped key opens its own sandbox.
    const own = await ssh(other, scoped.key, ["echo own"]);
    assert.equal(own.stdout, "own\n", own.stderr);
    assert.ok(!t.logs().includes(owner()), "no key in the log, not even one sent as the user name");
    assert.ok(!t.logs().includes(t.orgB.keys.owner), "no key in the log");
    assert.ok(!t.logs().includes(scoped.key), "no key in the log");
  });

  it("logs in with a short-lived SSH token of that sandbox (IssueSshToken), and only that sandbox", async () => {
    const issued = await t.request("POST", `/v1/sandboxes/${id}:issueSshToken`, {
      key: owner(),
      body: { ttl_seconds: 120 },
    });
    assert.equal(issued.status, 200, issued.raw);
    assert.equal(issued.body.user, id);
    const token = issued.body.token as string;
    assert.match(token, /^wst1\./);
    const expires = Date.parse(issued.body.expires_at as string) - Date.now();
    assert.ok(expires > 100_000 && expires <= 121_000, `expires in ${expires} ms`);
    const ok = await ssh(id, token, ["echo with-token"]);
    assert.equal(ok.stdout, "with-token\n", ok.stderr);
    const elsewhere = await ssh(other, token, ["echo no"]);
    assert.equal(elsewhere.code, 255);
    assert.match(elsewhere.stderr, /Permission denied/);
    const tampered = await ssh(id, `${token.slice(0, -2)}AA`, ["echo no"]);
    assert.equal(tampered.code, 255);
    // Another organization cannot have one issued for this sandbox.
    const foreign = await t.request("POST", `/v1/sandboxes/${id}:issueSshToken`, { key: t.orgB.keys.owner, body: {} });
    assert.equal(foreign.status, 404, foreign.raw);
    assert.ok(!t.logs().includes(token), "no token in the log");
  });

  it("opens no new channel on a connection whose key was revoked after the login", async () => {
    const extra = await t.issueKey(t.orgA, {});
    const control = path.join(dir, "ctl");
    const master = startSsh(id, extra.key, ["-M", "-S", control, "-N"]);
    const masterDone = collect(master);
    try {
      const check = () => collect(spawn(SSH, ["-S", control, "-O", "check", `${id}@127.0.0.1`], { stdio: "pipe" }));
      const deadline = Date.now() + 15_000;
      while ((await check()).code !== 0) {
        if (Date.now() > deadline) throw new Error("the control master did not come up");
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const overMaster = (command: string) =>
        collect(spawn(SSH, ["-S", control, `${id}@127.0.0.1`, command], { stdio: "pipe" }), "");
      assert.equal((await overMaster("echo one")).stdout, "one\n");
      await t.c.identity.revokeKey(extra.keyId);
      const refused = await overMaster("echo two");
      assert.notEqual(refused.code, 0);
      assert.equal(refused.stdout, "");
    } finally {
      master.kill();
      await masterDone;
    }
  });

  it("survives a sandbox that kills its exec agent mid-session and a client sending garbage", async () => {
    // The command's parent is the agent (inside the sandbox): kill it under the session.
    const lost = await ssh(id, owner(), ["echo before; sleep 0.5; kill -9 $PPID; sleep 5; echo after"]);
    assert.equal(lost.code, 255);
    assert.match(lost.stdout, /before/);
    assert.doesNotMatch(lost.stdout, /after/);
    // Garbage where the SSH version exchange should be, and a huge packet length after it.
    for (const junk of [Buffer.alloc(70_000, 0x41), Buffer.from("SSH-2.0-x\r\n\xff\xff\xff\xff garbage", "latin1")]) {
      await new Promise<void>((resolve) => {
        const socket = net.connect(port, "127.0.0.1", () => socket.write(junk));
        socket.on("error", () => resolve());
        socket.on("close", () => resolve());
        socket.setTimeout(3000, () => {
          socket.destroy();
          resolve();
        });
      });
    }
    const again = await ssh(id, owner(), ["echo still-serving"]);
    assert.equal(again.stdout, "still-serving\n", again.stderr);
    assert.equal(again.code, 0);
  });

  /** A second gateway beside the fixture's, with these options (lower limits), not yet listening. */
  const gatewayWith = async (options: Pick<SshGatewayOptions, "limits" | "failureLimits">) =>
    new SshGateway({
      hostKey: await t.c.sshHostKey(),
      identity: t.c.identity,
      sandboxes: t.c.sandboxes,
      runtime: fixture.driver,
      log: createLogger("silent"),
      ...options,
    });

  it("bounds unauthenticated connections per address from TCP accept, and an authenticated one frees its place", async () => {
    const limited = await gatewayWith({ limits: { unauthenticated: { overall: 10, perAddress: 1 } } });
    const bound = await limited.listen("127.0.0.1", 0);
    const savedPort = port;
    port = bound.port;
    // A client that connects and never sends its version line holds the address's one place
    // (admitted once the gateway sends its own version line).
    const idle = net.connect(bound.port, "127.0.0.1");
    idle.on("error", () => undefined);
    const children: ChildProcess[] = [];
    try {
      await new Promise<void>((resolve, reject) => {
        idle.once("data", () => resolve());
        idle.once("close", () => reject(new Error("the idle connection was not admitted")));
      });
      const refused = await ssh(id, owner(), ["echo", "ok"]);
      assert.equal(refused.code, 255, "no place left for the address");
      assert.doesNotMatch(refused.stdout, /ok/);
      idle.destroy();
      // The gateway frees the place when it sees the close, which a loaded host may do after the
      // client's own close event: a login is retried until it gets in (or the deadline passes).
      // An authenticated session gives its place back: a second client gets in beside it.
      const deadline = Date.now() + 120_000;
      let open: ChildProcess | undefined;
      while (!open) {
        const attempt = startSsh(id, owner(), [], ["echo open; sleep 3"]);
        children.push(attempt);
        const opened = await new Promise<boolean>((resolve) => {
          let seen = "";
          attempt.stdout?.on("data", (d: Buffer) => {
            seen += d.toString();
            if (seen.includes("open")) resolve(true);
          });
          attempt.once("close", () => resolve(false));
        });
        if (opened) open = attempt;
        else assert.ok(Date.now() < deadline, "no login got in after the idle client left");
      }
      const beside = await ssh(id, owner(), ["echo", "beside"]);
      assert.equal(beside.stdout, "beside\n", beside.stderr);
      assert.equal((await collect(open, "")).code, 0);
    } finally {
      idle.destroy();
      for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
      port = savedPort;
      await limited.close();
    }
  });

  it("lets a login from a ninth address in while eight others hold every unauthenticated place", async () => {
    // No early drop here (it starts at the bound), so the eight addresses fill the budget exactly.
    const limited = await gatewayWith({
      limits: { unauthenticated: { overall: 32, perAddress: 4, earlyDropFrom: 32 } },
    });
    const bound = await limited.listen("127.0.0.1", 0);
    const savedPort = port;
    port = bound.port;
    const held: net.Socket[] = [];
    /** A connection from `localAddress` that never sends a byte: whether the gateway admitted it (sent its version line). */
    const idleFrom = (localAddress: string) =>
      new Promise<boolean>((resolve) => {
        const socket = net.connect({ host: "127.0.0.1", port: bound.port, localAddress });
        held.push(socket);
        socket.on("error", () => undefined);
        socket.once("data", () => resolve(true));
        socket.once("close", () => resolve(false));
      });
    try {
      const addresses = Array.from({ length: 8 }, (_, i) => `127.0.0.${i + 20}`);
      const admitted = await Promise.all(addresses.flatMap((address) => [1, 2, 3, 4].map(() => idleFrom(address))));
      assert.equal(admitted.filter(Boolean).length, 32, "the eight addresses hold all 32 places");
      const ninth = await collect(startSsh(id, owner(), ["-b", "127.0.0.9"], ["echo", "ninth-in"]), "");
      assert.equal(ninth.stdout, "ninth-in\n", ninth.stderr);
      assert.equal(ninth.code, 0);
      assert.ok(
        held.some((socket) => socket.destroyed),
        "one of the eight addresses' handshakes gave its place",
      );
    } finally {
      for (const socket of held) socket.destroy();
      port = savedPort;
      await limited.close();
    }
  });

  it("refuses every attempt from an address past its failure limit, even a right key", async () => {
    const limited = await gatewayWith({ failureLimits: { maxFailures: 2, windowMs: 60_000, maxAddresses: 10 } });
    const bound = await limited.listen("127.0.0.1", 0);
    const savedPort = port;
    port = bound.port;
    try {
      assert.equal((await ssh(id, owner(), ["echo", "ok"])).stdout, "ok\n");
      for (let i = 0; i < 2; i++) assert.equal((await ssh(id, "wrong", ["true"])).code, 255);
      const blocked = await ssh(id, owner(), ["echo", "ok"]);
      assert.equal(blocked.code, 255);
      assert.match(blocked.stderr, /Permission denied/);
    } finally {
      port = savedPort;
      await limited.close();
    }
  });
});

function httpGet(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: "/", timeout: 3000 }, (res) => {
      let body = "";
      res.on("data", (d: Buffer) => {
        body += d.toString();
      });
      res.on("end", () => resolve(body));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
  });
}
