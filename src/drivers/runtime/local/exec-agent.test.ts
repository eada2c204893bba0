// The exec agent: its frame protocol (pure), and through the local driver on real runc that
// it is used and reused, runs many commands at once, caps output, survives nothing it
// should not, and that the driver falls back to runc exec whenever there is no agent.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { chmod, copyFile, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { projectFile } from "../../../lib/paths.js";
import type { ExecOutcome, ExecRequest, SandboxSpec } from "../interface.js";
import { LocalRuntimeDriver } from "./driver.js";
import {
  AgentLostError,
  AgentUnavailableError,
  COMPILER,
  decodeRequest,
  ExecAgent,
  encodeFrame,
  encodeRequest,
  FrameDecoder,
  FrameError,
  MAX_AGENT_FRAME_PAYLOAD,
  MAX_REQUEST_PAYLOAD,
} from "./exec-agent.js";
import { run } from "./host.js";
import { buildBundleConfig, EXEC_AGENT_PATH } from "./oci-config.js";
import { type RuntimeFixture, startRuntimeFixture, startSandbox, testSubnetPool } from "./test-support.js";

function completed(outcome: ExecOutcome): Extract<ExecOutcome, { kind: "completed" }> {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  return outcome as Extract<ExecOutcome, { kind: "completed" }>;
}

async function processAlive(pid: number): Promise<boolean> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  return stat !== "" && !/\) [ZX] /.test(stat);
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 30_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return check();
}

describe("exec agent frames", () => {
  it("encodes a frame as u32 id, u8 type, u32 length, payload (little-endian)", () => {
    const frame = encodeFrame(0x01020304, "O", Buffer.from("hi"));
    assert.deepEqual([...frame], [4, 3, 2, 1, 0x4f, 2, 0, 0, 0, 0x68, 0x69]);
    assert.deepEqual([...encodeFrame(7, "K")], [7, 0, 0, 0, 0x4b, 0, 0, 0, 0]);
  });

  it("decodes frames split anywhere across chunks", () => {
    const stream = Buffer.concat([
      encodeFrame(1, "P", Buffer.from([5, 0, 0, 0])),
      // The largest frame the agent writes (one CHUNK of output), longer than most chunks here.
      encodeFrame(1, "O", Buffer.alloc(MAX_AGENT_FRAME_PAYLOAD, 0xff)),
      encodeFrame(2, "F", Buffer.from("exec: not found")),
      encodeFrame(1, "D"),
    ]);
    for (const size of [1, 4, 9, 10, 4096, stream.length]) {
      const decoder = new FrameDecoder();
      const frames = [];
      for (let at = 0; at < stream.length; at += size) frames.push(...decoder.push(stream.subarray(at, at + size)));
      assert.deepEqual(
        frames.map((f) => [f.execId, f.type, f.payload.length]),
        [
          [1, "P", 4],
          [1, "O", MAX_AGENT_FRAME_PAYLOAD],
          [2, "F", 15],
          [1, "D", 0],
        ],
        `chunks of ${size}`,
      );
      assert.equal(decoder.buffered, 0);
      assert.ok(frames[1]?.payload.every((byte) => byte === 0xff));
    }
  });

  it("encodes a request as counted, length-prefixed UTF-8 strings", () => {
    const request = { argv: ["sh", "-c", "echo é €"], env: ["PATH=/bin", "EMPTY="], cwd: "/workspace/ü" };
    const payload = encodeRequest(request);
    assert.equal(payload.readUInt32LE(0), 3);
    assert.equal(payload.readUInt32LE(4), 2);
    assert.equal(payload.subarray(8, 10).toString(), "sh");
    assert.deepEqual(decodeRequest(payload), request);
    assert.deepEqual(decodeRequest(encodeRequest({ argv: ["x"], env: [], cwd: "/" })), {
      argv: ["x"],
      env: [],
      cwd: "/",
    });
  });
});

/** A frame as hostile code would write it: any type, any payload, any announced length. */
function rawFrame(execId: number, type: string, payload: Buffer = Buffer.alloc(0), length = payload.length): Buffer {
  const header = Buffer.alloc(9);
  header.writeUInt32LE(execId >>> 0, 0);
  header.writeUInt8(type.charCodeAt(0), 4);
  header.writeUInt32LE(length >>> 0, 5);
  return Buffer.concat([header, payload]);
}

const i32 = (value: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32LE(value, 0);
  return b;
};

/** An ExecAgent on one end of a real Unix socket, before any hello; the test plays the agent on the other end. */
async function socketPair(): Promise<{ agent: ExecAgent; peer: net.Socket }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "warren-fake-agent-"));
  const file = path.join(dir, "agent.sock");
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(file, resolve));
  const accepted = new Promise<net.Socket>((resolve) => server.once("connection", resolve));
  const peer = net.connect(file);
  peer.on("error", () => undefined);
  const agent = new ExecAgent(await accepted);
  server.close();
  await rm(dir, { recursive: true, force: true });
  return { agent, peer };
}

/** socketPair after the hello, with the execs' request ids as they arrive. */
async function fakeAgent(): Promise<{ agent: ExecAgent; peer: net.Socket; requests: () => Promise<number> }> {
  const { agent, peer } = await socketPair();
  const decoder = new FrameDecoder(MAX_REQUEST_PAYLOAD);
  const ids: number[] = [];
  let waiting: ((id: number) => void) | null = null;
  peer.on("data", (chunk: Buffer) => {
    for (const frame of decoder.push(chunk)) {
      if (frame.type !== "R") continue;
      if (waiting) {
        waiting(frame.execId);
        waiting = null;
      } else ids.push(frame.execId);
    }
  });
  peer.write(rawFrame(0, "H", Buffer.from("warren-exec-agent 1")));
  await agent.hello;
  const requests = () => {
    const id = ids.shift();
    return id !== undefined ? Promise.resolve(id) : new Promise<number>((resolve) => (waiting = resolve));
  };
  return { agent, peer, requests };
}

const LIMITS = { timeoutSeconds: 30, maxOutputBytes: 1 << 20 };
const REQUEST = { argv: ["true"], env: [], cwd: "/" };

describe("exec agent client against a hostile agent", () => {
  it("refuses a frame announcing more than the cap as soon as its header is in, holding nothing", () => {
    const decoder = new FrameDecoder();
    assert.throws(() => decoder.push(rawFrame(1, "O", Buffer.alloc(1024), 0xffff_fff0)), FrameError);
    assert.equal(decoder.buffered, 0);
    const capped = new FrameDecoder();
    assert.throws(() => capped.push(rawFrame(1, "O", Buffer.alloc(0), MAX_AGENT_FRAME_PAYLOAD + 1)), FrameError);
    // Frames at the cap pass, and what is held back never exceeds one incomplete frame.
    const stream = Buffer.concat(
      Array.from({ length: 8 }, (_, i) => rawFrame(i, "O", Buffer.alloc(MAX_AGENT_FRAME_PAYLOAD, i))),
    );
    const ok = new FrameDecoder();
    let frames = 0;
    for (let at = 0; at < stream.length; at += 10_007) {
      frames += ok.push(stream.subarray(at, at + 10_007)).length;
      assert.ok(ok.buffered < 9 + MAX_AGENT_FRAME_PAYLOAD);
    }
    assert.equal(frames, 8);
  });

  // Each writes what a hostile process holding the agent's socket could write mid-exec.
  const malformed: [string, (id: number) => Buffer[], boolean][] = [
    ["an exit frame without its code (the crash)", (id) => [rawFrame(id, "P", i32(7)), rawFrame(id, "X")], true],
    ["an exit code out of range", (id) => [rawFrame(id, "P", i32(7)), rawFrame(id, "X", i32(-5))], true],
    ["an exit before the start", (id) => [rawFrame(id, "X", i32(0))], false],
    ["a start with a short payload", (id) => [rawFrame(id, "P", Buffer.from([1]))], false],
    ["a second start", (id) => [rawFrame(id, "P", i32(7)), rawFrame(id, "P", i32(8))], true],
    ["output before the start", (id) => [rawFrame(id, "O", Buffer.from("x"))], false],
    ["done before the exit", (id) => [rawFrame(id, "P", i32(7)), rawFrame(id, "D")], true],
    ["a failure after the start", (id) => [rawFrame(id, "P", i32(7)), rawFrame(id, "F", Buffer.from("no"))], true],
    ["an unknown frame type", (id) => [rawFrame(id, "Z", Buffer.from("?"))], false],
    ["a frame for an exec never asked for", (id) => [rawFrame(id + 1000, "P", i32(7))], false],
    ["a second hello", () => [rawFrame(0, "H", Buffer.from("warren-exec-agent 1"))], false],
    ["a header announcing 4 GiB", (id) => [rawFrame(id, "O", Buffer.alloc(0), 0xffff_fff0)], false],
  ];
  for (const [name, frames, started] of malformed) {
    it(`closes the agent, and only it, on ${name}; its exec ends as lost`, async () => {
      const hostile = await fakeAgent();
      const honest = await fakeAgent();
      const running = hostile.agent.run(REQUEST, LIMITS);
      const other = honest.agent.run(REQUEST, LIMITS);
      const id = await hostile.requests();
      for (const frame of frames(id)) hostile.peer.write(frame);
      const error = await running.then(
        () => null,
        (e: unknown) => e,
      );
      assert.ok(error instanceof AgentLostError, String(error));
      assert.equal(error.started, started);
      assert.match(error.message, /broke the protocol/);
      assert.equal(hostile.agent.alive, false);
      assert.equal(hostile.agent.inFlight, 0);
      await assert.rejects(hostile.agent.run(REQUEST, LIMITS), AgentUnavailableError);
      // The other agent's exec is untouched and completes.
      const otherId = await honest.requests();
      honest.peer.write(Buffer.concat([rawFrame(otherId, "P", i32(3)), rawFrame(otherId, "O", Buffer.from("hi"))]));
      honest.peer.write(Buffer.concat([rawFrame(otherId, "X", i32(0)), rawFrame(otherId, "D")]));
      assert.deepEqual(await other, { kind: "completed", exit: 0, stdout: "hi", stderr: "", truncated: false });
      assert.equal(honest.agent.alive, true);
      honest.agent.close();
      hostile.peer.destroy();
      honest.peer.destroy();
    });
  }

  it("closes an agent that says anything but hello first", async () => {
    const { agent, peer } = await socketPair();
    peer.write(rawFrame(0, "X"));
    await assert.rejects(agent.hello, AgentUnavailableError);
    assert.equal(agent.alive, false);
    await assert.rejects(agent.run(REQUEST, LIMITS), AgentUnavailableError);
    peer.destroy();
  });

  it("drops a flood behind an oversized header without buffering it", async () => {
    const { agent, peer, requests } = await fakeAgent();
    const running = agent.run(REQUEST, LIMITS).catch((e: unknown) => e);
    const id = await requests();
    const closed = new Promise<void>((resolve) => peer.once("close", () => resolve()));
    peer.write(rawFrame(id, "O", Buffer.alloc(0), 0xffff_fff0));
    // 64 MiB behind it: the server side must close, not hold it.
    const block = Buffer.alloc(1 << 20, 0x61);
    for (let i = 0; i < 64 && !peer.destroyed; i++) {
      if (!peer.write(block)) await new Promise((resolve) => setTimeout(resolve, 1));
    }
    await closed;
    assert.ok((await running) instanceof AgentLostError);
    assert.equal(agent.alive, false);
    assert.equal(agent.buffered, 0);
  });
});

describe("exec agent mount", () => {
  it("binds the agent read-only beside tini when there is one, and not otherwise", () => {
    const input = {
      hostname: "h",
      rootfs: "/r",
      args: ["sleep", "1"],
      identity: { env: [], cwd: "/", uid: 0, gid: 0, additionalGids: [], maxOpenFiles: 1024 },
      resources: { memoryMiB: 64, cpuMillis: 100, pids: 64 },
      netnsPath: "/run/netns/x",
      cgroupsPath: "/warren/x",
      workspaceSource: "/w",
      hostsFile: "/hosts",
      hostnameFile: "/hostname",
      tiniPath: "/usr/bin/tini-static",
      swapAccounting: false,
      arch: "x64",
    };
    const mount = buildBundleConfig({ ...input, execAgentPath: "/cache/exec-agent-abc" }).mounts.find(
      (m) => m.destination === EXEC_AGENT_PATH,
    );
    assert.deepEqual(mount, {
      destination: "/dev/.warren-exec",
      type: "bind",
      source: "/cache/exec-agent-abc",
      options: ["rbind", "rprivate", "nosuid", "nodev", "ro"],
    });
    assert.equal(buildBundleConfig(input).mounts.filter((m) => m.destination === EXEC_AGENT_PATH).length, 0);
  });
});

describe("exec agent in sandboxes", () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  const drivers: LocalRuntimeDriver[] = [];
  const sandbox = (driver: LocalRuntimeDriver = f.driver, overrides: Partial<SandboxSpec> = {}) =>
    startSandbox(f, made, overrides, driver);
  const exec = (id: string, argv: string[], extra: Partial<ExecRequest> = {}, driver = f.driver) =>
    driver.exec(id, { argv, timeoutSeconds: 30, maxOutputBytes: 1 << 20, ...extra });
  const sh = (id: string, script: string, extra: Partial<ExecRequest> = {}, driver = f.driver) =>
    exec(id, ["sh", "-c", script], extra, driver);
  const open = async (options: { execAgent?: boolean } = {}) => {
    const driver = await LocalRuntimeDriver.open({ root: f.root, subnetPool: testSubnetPool(f.root), ...options });
    drivers.push(driver);
    return driver;
  };
  /** Until a running `sh` has touched /tmp/begun (its earlier output is then written). */
  const begun = async (id: string) =>
    assert.ok(
      await waitFor(async () => {
        const probe = await exec(id, ["test", "-e", "/tmp/begun"]);
        return probe.kind === "completed" && probe.exit === 0;
      }, 60_000),
      "the command began",
    );

  before(async () => {
    f = await startRuntimeFixture("agent");
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    for (const driver of drivers) await driver.close();
    await f?.cleanup();
  });

  it("runs execs through one resident agent per sandbox run, reused across execs", async () => {
    const id = await sandbox();
    assert.equal(completed(await exec(id, ["echo", "one"])).stdout, "one\n");
    const pid = await f.driver.execAgentPid(id);
    assert.ok(pid !== null && pid > 0);
    assert.match(await readFile(`/proc/${pid}/cmdline`, "utf8"), /^\/dev\/\.warren-exec\0/);
    const ps = completed(await exec(id, ["ps", "-o", "pid,args"])).stdout;
    assert.match(ps, /\/dev\/\.warren-exec/);
    assert.equal(completed(await exec(id, ["echo", "two"])).stdout, "two\n");
    assert.equal(await f.driver.execAgentPid(id), pid);
    // The command is a child of the agent, in its own session and process group.
    const stat = completed(await exec(id, ["sh", "-c", "cat /proc/$$/stat"])).stdout;
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const [ppid, pgrp, session] = [fields[1], fields[2], fields[3]];
    assert.equal(pgrp, session);
    assert.notEqual(ppid, "1");
  });

  it("uses the agent for a real sandbox id under a deep root (a Unix socket path has ~100 bytes)", async () => {
    const id = `sbx-${randomBytes(20).toString("hex")}`;
    assert.ok(Buffer.byteLength(path.join(f.driver.layout.sandbox(id).dir, "exec", "agent-000000000000.sock")) > 100);
    await sandbox(f.driver, { id });
    assert.equal(completed(await exec(id, ["echo", "long"])).stdout, "long\n");
    assert.ok((await f.driver.execAgentPid(id)) !== null, "the exec went through the agent, not runc exec");
  });

  it("gives commands what runc exec gives them: identity, caps, seccomp, limits, env, stdin", async () => {
    const id = await sandbox();
    const fallback = await open({ execAgent: false });
    const probe =
      "id; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Groups):' /proc/self/status; " +
      "ulimit -n; cat /proc/self/cgroup | sort; readlink /proc/self/ns/pid /proc/self/ns/mnt /proc/self/ns/net; " +
      "env | sort; pwd; cat; echo stdin-done";
    const viaAgent = completed(await sh(id, probe, { env: { EXTRA: "1" }, cwd: "/workspace" }));
    assert.notEqual(await f.driver.execAgentPid(id), null);
    const viaRunc = completed(await sh(id, probe, { env: { EXTRA: "1" }, cwd: "/workspace" }, fallback));
    assert.equal(await fallback.execAgentPid(id), null);
    assert.equal(viaAgent.stdout, viaRunc.stdout);
    assert.match(viaAgent.stdout, /NoNewPrivs:\s+1/);
    assert.match(viaAgent.stdout, /Seccomp:\s+2/);
    assert.match(viaAgent.stdout, /EXTRA=1/);
    assert.match(viaAgent.stdout, /\/workspace\nstdin-done\n$/);
  });

  it("runs 20 execs at once on one agent, each with its own output and exit code", async () => {
    const id = await sandbox();
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        sh(
          id,
          `i=${i}; n=0; while [ $n -lt 200 ]; do echo "exec-$i line $n"; n=$((n+1)); done; echo "err-$i" >&2; exit $((i % 7))`,
        ),
      ),
    );
    const pid = await f.driver.execAgentPid(id);
    outcomes.forEach((outcome, i) => {
      const done = completed(outcome);
      assert.equal(done.exit, i % 7);
      const lines = done.stdout.trimEnd().split("\n");
      assert.equal(lines.length, 200);
      assert.ok(lines.every((line, n) => line === `exec-${i} line ${n}`));
      assert.equal(done.stderr, `err-${i}\n`);
    });
    assert.equal(await f.driver.execAgentPid(id), pid);
  });

  it("caps output over 1 MiB, keeping the head and the tail, and passes bytes that are not UTF-8 as runc exec did", async () => {
    const id = await sandbox();
    const big = completed(
      await sh(id, "echo HEAD; head -c 3145728 /dev/zero | busybox tr '\\0' b; echo tail", {
        maxOutputBytes: 1 << 20,
      }),
    );
    assert.equal(big.truncated, true);
    assert.equal(big.exit, 0);
    assert.ok(big.stdout.startsWith("HEAD\nbbbb"));
    assert.ok(big.stdout.endsWith("bbbbtail\n"), "the tail of the output is kept");
    assert.equal(big.stdout.length, 1 << 20);
    const bytes = completed(await sh(id, "printf 'a\\377\\376b\\000c\\303'; printf '\\342\\202' >&2"));
    assert.equal(bytes.stdout, Buffer.from([0x61, 0xff, 0xfe, 0x62, 0x00, 0x63, 0xc3]).toString("utf8"));
    assert.equal(bytes.stderr, Buffer.from([0xe2, 0x82]).toString("utf8"));
    assert.equal(bytes.truncated, false);
  });

  it("reports spawn failures (missing executable, missing cwd, not executable) as spawn_failed", async () => {
    const id = await sandbox();
    const missing = await exec(id, ["no-such-command"]);
    assert.equal(missing.kind, "spawn_failed");
    if (missing.kind === "spawn_failed") assert.match(missing.message, /not found/);
    assert.equal((await exec(id, ["/no/such/binary"])).kind, "spawn_failed");
    assert.equal((await exec(id, ["true"], { cwd: "/no/such/dir" })).kind, "spawn_failed");
    assert.equal((await exec(id, ["/etc/passwd"])).kind, "spawn_failed");
    // A command found in the request's own PATH.
    completed(
      await sh(id, "mkdir -p /tmp/bin && printf '#!/bin/sh\\necho mine\\n' > /tmp/bin/mine && chmod +x /tmp/bin/mine"),
    );
    assert.equal(completed(await exec(id, ["mine"], { env: { PATH: "/tmp/bin:/bin" } })).stdout, "mine\n");
    assert.equal((await exec(id, ["mine"])).kind, "spawn_failed");
  });

  it("reports an exec whose agent is killed mid-run as indeterminate, and the next exec gets a new agent", async () => {
    const id = await sandbox();
    completed(await exec(id, ["true"]));
    const pid = await f.driver.execAgentPid(id);
    assert.ok(pid);
    const running = sh(id, "echo before; touch /tmp/begun; sleep 30");
    await begun(id);
    process.kill(pid, "SIGKILL");
    const outcome = await running;
    assert.equal(outcome.kind, "indeterminate", JSON.stringify(outcome));
    if (outcome.kind === "indeterminate") {
      assert.equal(outcome.stdout, "before\n");
      assert.match(outcome.message, /agent/);
    }
    assert.equal(completed(await exec(id, ["echo", "again"])).stdout, "again\n");
    const next = await f.driver.execAgentPid(id);
    assert.ok(next && next !== pid);
  });

  it("keeps the agent's channel out of the sandbox's reach: no pidfd_getfd, ptrace, process_vm_*, /proc fd", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-probe-"));
    try {
      const probe = path.join(dir, "probe");
      await run(COMPILER, [
        "-static",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-o",
        probe,
        projectFile("src/drivers/runtime/local/exec-agent-probe.c"),
      ]);
      const id = await sandbox();
      const other = await sandbox();
      completed(await exec(id, ["true"]));
      completed(await exec(other, ["true"]));
      const pid = await f.driver.execAgentPid(id);
      const inside = path.join(f.driver.layout.sandbox(id).workspace, "probe");
      await copyFile(probe, inside);
      await chmod(inside, 0o755);
      const report = completed(await exec(id, ["/workspace/probe"]));
      const results = Object.fromEntries(
        report.stdout
          .trim()
          .split("\n")
          .map((line) => line.split(" ")[0]?.split("=") as [string, string]),
      );
      assert.notEqual(results.agent, "0", report.stdout);
      assert.equal(results.pidfd_open, "ok", report.stdout);
      assert.equal(results.pidfd_getfd, "EPERM", report.stdout);
      for (const attempt of ["proc_fd_open", "ptrace_attach", "process_vm_readv", "process_vm_writev", "kcmp"]) {
        assert.ok(results[attempt] && results[attempt] !== "ok", `${attempt}: ${report.stdout}`);
      }
      assert.equal(results.write_frame, undefined, report.stdout);
      // The same agent keeps serving this sandbox, and the other sandbox is served too.
      assert.equal(completed(await exec(id, ["echo", "still"])).stdout, "still\n");
      assert.equal(await f.driver.execAgentPid(id), pid);
      assert.equal(completed(await exec(other, ["echo", "other"])).stdout, "other\n");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("times out through the agent, killing the command's process group", async () => {
    const id = await sandbox();
    const outcome = await sh(id, "echo started; sleep 300 & sleep 301", { timeoutSeconds: 1 });
    assert.equal(outcome.kind, "timeout");
    if (outcome.kind === "timeout") assert.equal(outcome.stdout, "started\n");
    const ps = completed(await exec(id, ["ps", "-o", "args"])).stdout;
    assert.ok(!ps.includes("sleep 30"), ps);
  });

  it("falls back to runc exec without an agent: disabled, or a sandbox run without its mount", async () => {
    const plain = await open({ execAgent: false });
    const id = await sandbox(plain);
    assert.equal(completed(await exec(id, ["echo", "plain"], {}, plain)).stdout, "plain\n");
    assert.equal(await plain.execAgentPid(id), null);
    // A run started without the agent's mount (as before the agent existed) uses runc exec.
    assert.equal(completed(await exec(id, ["echo", "old run"])).stdout, "old run\n");
    assert.equal(await f.driver.execAgentPid(id), null);
    assert.equal(completed(await exec(id, ["ls", "/dev/.warren-exec"])).kind, "completed");
    assert.notEqual(completed(await exec(id, ["ls", "/dev/.warren-exec"])).exit, 0);
    // Its next run has the mount and the agent.
    await f.driver.stop(id);
    await f.driver.start(id);
    assert.equal(completed(await exec(id, ["echo", "new run"])).stdout, "new run\n");
    assert.notEqual(await f.driver.execAgentPid(id), null);
  });

  it("reports a command killed by a stop of its sandbox as exit 137, as runc exec does", async () => {
    const id = await sandbox();
    completed(await exec(id, ["true"]));
    const running = sh(id, "echo before; touch /tmp/begun; sleep 30");
    await begun(id);
    await f.driver.stop(id);
    const outcome = completed(await running);
    assert.equal(outcome.exit, 137);
    assert.equal(outcome.stdout, "before\n");
  });

  it("leaves no agent behind when the sandbox stops, and starts a new one for the next run", async () => {
    const id = await sandbox();
    completed(await exec(id, ["true"]));
    const pid = await f.driver.execAgentPid(id);
    assert.ok(pid);
    await f.driver.stop(id);
    assert.ok(await waitFor(async () => !(await processAlive(pid))), "the agent outlived its sandbox");
    // Nor its host-side reaper (the agent binary's --reap mode running runc exec).
    const reapers = async () => {
      const found: string[] = [];
      for (const entry of await readdir("/proc")) {
        const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
        if (cmdline.includes("--reap\0") && cmdline.includes(`\0${id}\0`)) found.push(entry);
      }
      return found;
    };
    assert.ok(await waitFor(async () => (await reapers()).length === 0), "the agent's reaper outlived it");
    assert.deepEqual(await exec(id, ["true"]), { kind: "sandbox_stopped" });
    await f.driver.start(id);
    completed(await exec(id, ["true"]));
    const next = await f.driver.execAgentPid(id);
    assert.ok(next && next !== pid);
  });

  it("lets a restarted server reattach to the run's agent through its keeper; without processes it exits on EOF", async () => {
    const id = await sandbox();
    completed(await exec(id, ["true"]));
    const first = await f.driver.execAgentPid(id);
    const second = await open();
    assert.equal(completed(await exec(id, ["echo", "adopted"], {}, second)).stdout, "adopted\n");
    const other = await second.execAgentPid(id);
    // The same agent, handed the new server's connection by its keeper (exec-processes.ts).
    assert.ok(first && other && first === other);
    await second.close();
    assert.ok(await waitFor(async () => !(await processAlive(other))), "an agent that keeps no process kept running");
    // The first driver starts (or reattaches to) an agent again.
    completed(await exec(id, ["true"]));
  });
});
