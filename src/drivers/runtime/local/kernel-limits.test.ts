// One sandbox takes all it can of a kernel limit that the host shares out per user or in
// total (inotify, epoll, open files, pids); the server (this process) and other sandboxes
// must keep working while it holds them.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { watch } from "node:fs";
import { chmod, copyFile, mkdtemp, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { createConnection, createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { projectFile } from "../../../lib/paths.js";
import type { ExecOutcome } from "../interface.js";
import { run, TOOLS } from "./host.js";
import { MEMCG_ACCOUNTED_LIMITS, PID_MAX_FILE, PID_MAX_LIMIT } from "./kernel-limits.js";
import { readRuncState } from "./runc.js";
import { buildStaticBinary } from "./static-binary.js";
import { type RuntimeFixture, startRuntimeFixture, startSandbox } from "./test-support.js";
import { pinsNamespace, userNamespacePin } from "./user-namespace.js";

const DEADLINE_MS = 180_000;

function stdoutOf(outcome: ExecOutcome): string {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  const done = outcome as Extract<ExecOutcome, { kind: "completed" }>;
  assert.equal(done.exit, 0, `exit ${done.exit}: ${done.stderr}`);
  return done.stdout;
}

describe("kernel limits one sandbox may exhaust", () => {
  let f: RuntimeFixture;
  let hog: string;
  const made: string[] = [];
  let scratch: string;

  const sandbox = async () => {
    const id = await startSandbox(f, made);
    const target = path.join(f.driver.layout.sandbox(id).workspace, "hog");
    await copyFile(hog, target);
    await chmod(target, 0o755);
    return id;
  };
  const exec = (id: string, script: string) =>
    f.driver.exec(id, { argv: ["sh", "-c", script], timeoutSeconds: 120, maxOutputBytes: 1 << 16 });

  /**
   * Starts the hog in `id` in the background; resolves with its `MODE COUNT ERRNO` line once
   * it holds (read from the host: a sandbox out of pids runs no exec).
   */
  const hold = async (id: string, args: string): Promise<{ count: number; error: string }> => {
    const name = `hog-${args.split(" ")[0]}.out`;
    stdoutOf(await exec(id, `setsid /workspace/hog ${args} > /workspace/${name} 2>&1 < /dev/null &`));
    const deadline = Date.now() + DEADLINE_MS;
    for (;;) {
      const text = await readFile(path.join(f.driver.layout.sandbox(id).workspace, name), "utf8").catch(() => "");
      const match = /^\S+ (\d+) (\S+)$/m.exec(text);
      if (match) return { count: Number(match[1]), error: match[2] as string };
      assert.ok(Date.now() < deadline, `the hog (${args}) did not report: ${JSON.stringify(text)}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  };

  /** What the server and another sandbox must still do while a limit is held. */
  const othersStillWork = async (other: string) => {
    // The server: an inotify watch, epoll registrations (a listener and a connection), files.
    const watcher = watch(scratch);
    watcher.close();
    const server = createServer((socket) => socket.end("ok"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as { port: number }).port;
    const reply = await new Promise<string>((resolve, reject) => {
      let data = "";
      const client = createConnection(port, "127.0.0.1");
      client.on("data", (chunk: Buffer) => {
        data += chunk.toString();
      });
      client.on("end", () => resolve(data));
      client.on("error", reject);
    });
    server.close();
    assert.equal(reply, "ok");
    await writeFile(path.join(scratch, "file"), "x");
    // Another sandbox: execs, and its own inotify watches.
    assert.equal(stdoutOf(await exec(other, "echo alive")), "alive\n");
    // A new sandbox: create, start, exec.
    const fresh = await startSandbox(f, made);
    assert.equal(stdoutOf(await exec(fresh, "echo fresh")), "fresh\n");
    await f.driver.destroy(fresh);
  };

  before(async () => {
    f = await startRuntimeFixture("limits", { idMapping: false });
    hog = await buildStaticBinary(projectFile("test", "support", "limit-hog.c"), "limit-hog");
    scratch = await mkdtemp(path.join(os.tmpdir(), "warren-limits-"));
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await f?.cleanup();
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  it("runs every sandbox in a user namespace of its own, owned by an unprivileged host uid", async () => {
    const owners: number[] = [];
    for (const id of [await sandbox(), await sandbox()]) {
      const state = await readRuncState(f.driver.layout.runcRoot, id);
      assert.ok(state && state.initPid > 0);
      const nsFile = `/proc/${state.initPid}/ns/user`;
      assert.notEqual(await readlink(nsFile), await readlink("/proc/self/ns/user"));
      const owner = spawnSync(hog, ["owner", nsFile], { encoding: "utf8" });
      assert.equal(owner.status, 0, owner.stderr);
      owners.push(Number(owner.stdout.trim()));
      // Ids map one to one: the image's files keep their owners.
      assert.match(stdoutOf(await exec(id, "cat /proc/self/uid_map")), /^\s*0\s+0\s+4294967295\s*$/);
      assert.match(stdoutOf(await exec(id, "stat -c %u:%g /bin/busybox")), /^0:0$/m);
    }
    assert.ok(
      owners.every((uid) => uid > 65_535),
      `owners: ${owners.join(", ")}`,
    );
    assert.notEqual(owners[0], owners[1]);
  });

  it("a sandbox whose namespaces are gone (a host reboot) starts in a new one with the same owner", async () => {
    const id = await sandbox();
    const ownerOf = async () => {
      const state = await readRuncState(f.driver.layout.runcRoot, id);
      assert.ok(state && state.initPid > 0);
      const owner = spawnSync(hog, ["owner", `/proc/${state.initPid}/ns/user`], { encoding: "utf8" });
      assert.equal(owner.status, 0, owner.stderr);
      return { owner: Number(owner.stdout.trim()) };
    };
    const before = await ownerOf();
    await f.driver.stop(id);
    const pin = userNamespacePin(f.driver.layout.sandbox(id));
    assert.ok(await pinsNamespace(pin));
    await run(TOOLS.umount, [pin]);
    await run(TOOLS.ip, ["netns", "delete", f.driver.layout.netnsName(id)]);
    await f.driver.start(id);
    assert.equal(stdoutOf(await exec(id, "echo back")), "back\n");
    // Only the network namespace gone: both are made again (the host's could not be joined).
    await f.driver.stop(id);
    await run(TOOLS.ip, ["netns", "delete", f.driver.layout.netnsName(id)]);
    await f.driver.start(id);
    assert.equal(stdoutOf(await exec(id, "echo again")), "again\n");
    // (A namespace's inode number may be reused, so the new one is told by its pin.)
    assert.ok(await pinsNamespace(pin));
    assert.equal((await ownerOf()).owner, before.owner);
  });

  it("a sandbox that takes every inotify watch it may takes none of the server's or another sandbox's", async () => {
    const maxWatches = Number((await readFile("/proc/sys/fs/inotify/max_user_watches", "utf8")).trim());
    const a = await sandbox();
    const b = await sandbox();
    const first = await hold(a, "inotify /tmp");
    assert.ok(first.error === "ENOSPC" || first.error === "EMFILE", `stopped by ${first.error}`);
    await othersStillWork(b);
    // The other sandbox gets its own whole budget, as the first did.
    const second = await hold(b, "inotify /tmp");
    assert.equal(second.count, first.count);
    assert.ok(first.count <= maxWatches);
    await othersStillWork(a);
  });

  it("no sandbox can reach a host-wide epoll or open-file count before its own memory limit", async () => {
    // Each epoll watch (an epitem, >= 128 bytes) and open file (a struct file, >= 184 bytes)
    // is charged to the sandbox's memory cgroup: a limit the whole host's memory cannot fill
    // at 64 bytes an entry is one no sandbox reaches.
    for (const file of MEMCG_ACCOUNTED_LIMITS) {
      const limit = BigInt((await readFile(file, "utf8")).trim().split(/\s+/)[0] ?? "0");
      assert.ok(limit * 64n > BigInt(os.totalmem()), `${file} is ${limit}: a sandbox could take all of it`);
    }
    const a = await sandbox();
    const b = await sandbox();
    const held = await hold(a, "epoll 300000");
    assert.deepEqual(held, { count: 300_000, error: "-" });
    await othersStillWork(b);
  });

  it("leaves the host's shared task count out of reach: kernel.pid_max at the kernel's most", async () => {
    // The driver raised it when it opened; every sandbox stays bounded by its own pids cgroup.
    assert.ok(Number((await readFile(PID_MAX_FILE, "utf8")).trim()) >= PID_MAX_LIMIT);
  });

  it("a sandbox out of file descriptors and pids leaves the server and other sandboxes working", async () => {
    const a = await sandbox();
    const b = await sandbox();
    const fds = await hold(a, "fds");
    assert.equal(fds.error, "EMFILE");
    await othersStillWork(b);
    const pids = await hold(a, "pids");
    assert.equal(pids.error, "EAGAIN");
    assert.ok(pids.count > 100, `forked ${pids.count}`);
    await othersStillWork(b);
  });
});

describe("kernel limits with id mapping: each sandbox's root counts as a host uid of its own", () => {
  let f: RuntimeFixture;
  let hog: string;
  const made: string[] = [];
  const WATCHES_FILE = "/proc/sys/fs/epoll/max_user_watches";

  const sandbox = async () => {
    const id = await startSandbox(f, made);
    const target = path.join(f.driver.layout.sandbox(id).workspace, "hog");
    await copyFile(hog, target);
    await chmod(target, 0o755);
    return id;
  };
  const exec = (id: string, script: string) =>
    f.driver.exec(id, { argv: ["sh", "-c", script], timeoutSeconds: 120, maxOutputBytes: 1 << 16 });
  const hold = async (id: string, args: string): Promise<{ count: number; error: string }> => {
    const name = `hog-${args.split(" ")[0]}.out`;
    stdoutOf(await exec(id, `setsid /workspace/hog ${args} > /workspace/${name} 2>&1 < /dev/null &`));
    const deadline = Date.now() + DEADLINE_MS;
    for (;;) {
      const text = await readFile(path.join(f.driver.layout.sandbox(id).workspace, name), "utf8").catch(() => "");
      const match = /^\S+ (\d+) (\S+)$/m.exec(text);
      if (match) return { count: Number(match[1]), error: match[2] as string };
      assert.ok(Date.now() < deadline, `the hog (${args}) did not report: ${JSON.stringify(text)}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  };

  before(async () => {
    f = await startRuntimeFixture("limits-mapped", { idMapping: true });
    hog = await buildStaticBinary(projectFile("test", "support", "limit-hog.c"), "limit-hog");
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await f?.cleanup();
  });

  it("a sandbox that exhausts its epoll watches leaves the server's and another sandbox's", async () => {
    const b = await sandbox();
    // A per-user budget a sandbox can fill: the host's, lowered for the moment (well above
    // what host root holds, so nothing else on the machine is refused) and put back after.
    const limit = 100_000;
    const saved = (await readFile(WATCHES_FILE, "utf8")).trim();
    try {
      // Every driver that opens on this machine (other test files run beside this one) raises
      // the file again (raiseMemcgAccountedLimits). A hog that was not refused while the file
      // no longer reads the lowered budget ran under another one: that try does not count, and
      // the next one gets a fresh sandbox. A refusal missing under the lowered budget fails.
      let held: { count: number; error: string } | undefined;
      for (let attempt = 1; attempt <= 5 && !held; attempt++) {
        const a = await sandbox();
        await writeFile(WATCHES_FILE, `${limit}\n`);
        const outcome = await hold(a, `epoll ${limit + 50_000}`);
        const now = (await readFile(WATCHES_FILE, "utf8")).trim();
        if (outcome.error === "ENOSPC" || now === String(limit)) held = outcome;
        else await f.driver.destroy(a);
      }
      assert.ok(held, "another driver raised the budget during every try");
      assert.equal(held.error, "ENOSPC", `the hog held ${held.count}`);
      assert.ok(held.count > limit - 1000 && held.count <= limit, `held ${held.count}`);
      // The server (this process, host root): a listener, a connection, an inotify watch.
      const server = createServer((socket) => socket.end("ok"));
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      const port = (server.address() as { port: number }).port;
      const reply = await new Promise<string>((resolve, reject) => {
        let data = "";
        const client = createConnection(port, "127.0.0.1");
        client.on("data", (chunk: Buffer) => {
          data += chunk.toString();
        });
        client.on("end", () => resolve(data));
        client.on("error", reject);
      });
      server.close();
      assert.equal(reply, "ok");
      watch(f.root).close();
      // Another sandbox: a budget of its own, whole (its exec agent's few watches aside).
      const other = await hold(b, `epoll ${limit - 1000}`);
      assert.deepEqual(other, { count: limit - 1000, error: "-" });
      assert.equal(stdoutOf(await exec(b, "echo alive")), "alive\n");
    } finally {
      await writeFile(WATCHES_FILE, `${saved}\n`);
    }
  });
});
