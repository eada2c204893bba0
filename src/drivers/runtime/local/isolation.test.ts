// Escape attempts from inside sandboxes of the local driver; each must fail, and the host
// (and the other sandbox) must be untouched afterwards.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { ExecOutcome, ExecRequest, SandboxSpec } from "../interface.js";
import { DOCKER_DEFAULT_CAPABILITIES, MASKED_PATHS } from "./oci-config.js";
import {
  countingServer,
  hostIPv4Addresses,
  type RuntimeFixture,
  startRuntimeFixture,
  startSandbox,
  startTestPeer,
  type TestPeer,
} from "./test-support.js";

function completed(outcome: ExecOutcome): Extract<ExecOutcome, { kind: "completed" }> {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  return outcome as Extract<ExecOutcome, { kind: "completed" }>;
}

describe("local driver isolation", () => {
  let f: RuntimeFixture;
  let peer: TestPeer;
  const made: string[] = [];
  const hostFile = path.join(os.tmpdir(), `warren-isolation-${randomBytes(4).toString("hex")}`);

  const sandbox = (overrides: Partial<SandboxSpec> = {}) => startSandbox(f, made, overrides);
  const exec = (id: string, script: string, extra: Partial<ExecRequest> = {}) =>
    f.driver.exec(id, { argv: ["sh", "-c", script], timeoutSeconds: 30, maxOutputBytes: 1 << 20, ...extra });

  before(async () => {
    f = await startRuntimeFixture("isolation");
    peer = await startTestPeer();
    writeFileSync(hostFile, "host\n");
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await peer?.stop();
    await f?.cleanup();
    rmSync(hostFile, { force: true });
  });

  it("sees only its own processes", async () => {
    const a = await sandbox({ command: ["sleep", "7771"] });
    await sandbox({ command: ["sleep", "7772"] });
    const ps = completed(await exec(a, "ps -o pid,args")).stdout;
    assert.match(ps, /^\s*1 \/dev\/init -g -- sleep 7771$/m);
    assert.match(ps, /sleep 7771/);
    assert.doesNotMatch(ps, /sleep 7772/);
    assert.doesNotMatch(ps, /node|runc|warren-shim/);
    const pids = completed(await exec(a, "ls /proc | grep -E '^[0-9]+$'"))
      .stdout.trim()
      .split("\n")
      .map(Number);
    assert.ok(pids.length <= 6, `pids visible: ${pids.join(" ")}`);
    assert.ok(!pids.includes(process.pid) || process.pid < 10);
  });

  it("runs with Docker's capabilities, no-new-privileges and seccomp", async () => {
    const id = await sandbox();
    const status = completed(await exec(id, "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status")).stdout;
    const bits = { CAP_CHOWN: 0, CAP_DAC_OVERRIDE: 1, CAP_FOWNER: 3, CAP_FSETID: 4, CAP_KILL: 5, CAP_SETGID: 6 };
    const expected = DOCKER_DEFAULT_CAPABILITIES.length;
    const effective = BigInt(`0x${/CapEff:\s+([0-9a-f]+)/.exec(status)?.[1]}`);
    let count = 0;
    for (let v = effective; v > 0n; v >>= 1n) count += Number(v & 1n);
    assert.equal(count, expected);
    for (const bit of Object.values(bits)) assert.ok(effective & (1n << BigInt(bit)));
    assert.equal(effective & (1n << 21n), 0n, "no CAP_SYS_ADMIN");
    assert.equal(effective & (1n << 16n), 0n, "no CAP_SYS_MODULE");
    assert.match(status, /NoNewPrivs:\s+1/);
    assert.match(status, /Seccomp:\s+2/);
    // Masked files read as empty (a /dev/null bind), masked dirs as empty dirs.
    const present = MASKED_PATHS.filter((file) => existsSync(file));
    assert.ok(present.length > 0);
    const script = present.map((file) => `cat ${file} 2>/dev/null | wc -c; ls ${file} 2>/dev/null | wc -l`).join("; ");
    const counts = completed(await exec(id, script))
      .stdout.trim()
      .split(/\s+/);
    for (let i = 0; i < present.length; i++) {
      const [bytes, entries] = [counts[2 * i], counts[2 * i + 1]];
      assert.ok(
        bytes === "0" && (entries === "0" || entries === "1"),
        `${present[i]}: ${bytes} bytes, ${entries} entries`,
      );
    }
  });

  it("cannot write outside its rootfs and workspace", async () => {
    const id = await sandbox();
    const out = completed(
      await exec(
        id,
        [
          `echo evil > ${hostFile} && echo wrote-own-tmp`,
          "echo evil > /proc/sys/kernel/hostname || echo proc-sys-ro",
          "echo b > /proc/sysrq-trigger || echo sysrq-ro",
          "echo 1 > /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo sys-ro",
          "echo x > /dev/init || echo init-ro",
          "ln -s / /tmp/host 2>/dev/null; cat /proc/1/root/etc/hostname",
        ].join("; "),
      ),
    ).stdout;
    assert.match(out, /wrote-own-tmp/);
    for (const marker of ["proc-sys-ro", "sysrq-ro", "sys-ro", "init-ro"]) assert.match(out, new RegExp(marker));
    assert.equal(readFileSync(hostFile, "utf8"), "host\n");
  });

  it("cannot mount, even from a new user namespace", async () => {
    const id = await sandbox();
    // Other tests may mount and unmount meanwhile: compare only mounts like the ones tried.
    const suspects = () =>
      readFileSync("/proc/self/mountinfo", "utf8")
        .split("\n")
        .filter((line) => / \S*\/mnt /.test(line) || line.includes(" - tmpfs none "));
    const before = suspects();
    const out = completed(
      await exec(
        id,
        [
          "busybox mount -t tmpfs none /mnt 2>&1 && echo MOUNTED",
          "busybox mount --bind /workspace /mnt 2>&1 && echo MOUNTED",
          "busybox unshare -r -m busybox mount -t tmpfs none /mnt 2>&1 && echo MOUNTED",
          "busybox unshare -m true 2>&1 || echo no-unshare",
          "grep -c ' /mnt ' /proc/self/mountinfo",
        ].join("; "),
      ),
    ).stdout;
    assert.doesNotMatch(out, /MOUNTED/);
    assert.match(out, /no-unshare/);
    assert.match(out, /^0$/m);
    assert.deepEqual(suspects(), before);
  });

  it("cannot load or unload a kernel module", async () => {
    const id = await sandbox();
    // A kernel built without modules has no /proc/modules; the attempt must fail all the same.
    const modules = existsSync("/proc/modules") ? readFileSync("/proc/modules", "utf8") : null;
    const out = completed(
      await exec(
        id,
        "head -c 4096 /dev/zero > /tmp/evil.ko; busybox insmod /tmp/evil.ko 2>&1; echo rc=$?; busybox rmmod loop 2>&1; echo rc=$?",
      ),
    ).stdout;
    assert.match(out, /not permitted/i);
    assert.doesNotMatch(out, /rc=0/);
    if (modules !== null) assert.equal(readFileSync("/proc/modules", "utf8"), modules);
  });

  it("cannot change the host's hostname", async () => {
    const hostname = os.hostname();
    const id = await sandbox();
    const out = completed(await exec(id, "hostname evil-host 2>&1; echo rc=$?; hostname")).stdout;
    assert.doesNotMatch(out, /rc=0/);
    assert.equal(os.hostname(), hostname);
    assert.ok(out.trim().endsWith(id.slice(0, 63)));
  });

  /** A shell line that connects to `target` until it answers (60 tries of 5 s at most), printing the answer once. */
  const untilAnswer = (target: string) =>
    `for i in $(seq 1 60); do out=$(nc -w 5 ${target} 2>/dev/null) && [ -n "$out" ] && { echo "$out"; exit 0; }; sleep 1; done; exit 1`;

  it("cannot reach the host's services or another sandbox, yet reaches a public peer", async () => {
    const loopback = await countingServer("127.0.0.1");
    const anyAddress = await countingServer("0.0.0.0");
    try {
      const target = await sandbox({
        network: "public",
        command: ["busybox", "nc", "-ll", "-p", "9000", "-e", "echo", "hello"],
      });
      const id = await sandbox({ network: "public" });
      const targetAddress = (await f.driver.addressesOf(target))?.sandbox;
      const gateway = (await f.driver.addressesOf(id))?.gateway;
      assert.ok(targetAddress && gateway);
      // The other sandbox's server works from inside it (retried: it may not listen yet on a slow host).
      assert.equal(
        completed(await exec(target, untilAnswer("127.0.0.1 9000"), { timeoutSeconds: 400 })).stdout,
        "hello\n",
      );

      const attempts = [
        `127.0.0.1 ${loopback.port}`,
        `${gateway} ${anyAddress.port}`,
        ...hostIPv4Addresses().map((address) => `${address} ${anyAddress.port}`),
        `${targetAddress} 9000`,
      ];
      const script = attempts.map((a) => `echo "== ${a}"; nc -w 2 ${a} 2>&1`).join("; ");
      const out = completed(await exec(id, script)).stdout;
      assert.doesNotMatch(out, /hello/, out);
      assert.equal(loopback.accepted(), 0);
      assert.equal(anyAddress.accepted(), 0);
      // Positive control: egress works for a public address.
      assert.equal(
        completed(await exec(id, untilAnswer(`${peer.address} ${peer.port}`), { timeoutSeconds: 400 })).stdout,
        "pong\n",
      );
    } finally {
      loopback.server.close();
      anyAddress.server.close();
    }
  });

  it("bounds a fork bomb by the pids limit and the host stays fine", async () => {
    const pidsLimit = 64;
    const id = await sandbox({ resources: { ...f.spec().resources, pids: pidsLimit } });
    const cgroup = `/sys/fs/cgroup/pids${f.driver.layout.cgroupPath(id)}`;
    assert.equal(readFileSync(`${cgroup}/pids.max`, "utf8").trim(), String(pidsLimit));
    // Each bomb process stays alive (sleep), so the sandbox sits at its limit.
    const bomb = exec(id, "bomb() { bomb | bomb & sleep 20; }; bomb", { timeoutSeconds: 120 });
    const refusedForks = () => Number(/max (\d+)/.exec(readFileSync(`${cgroup}/pids.events`, "utf8"))?.[1]);
    let peak = 0;
    // Until the bomb presses on the limit (a loaded host may take long to get it going).
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
      peak = Math.max(peak, Number(readFileSync(`${cgroup}/pids.current`, "utf8")));
      if (peak >= pidsLimit / 2 && refusedForks() > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.equal(spawnSync("/bin/true").status, 0, "the host can still start processes");
    assert.ok(peak <= pidsLimit, `peak ${peak}`);
    assert.ok(peak >= pidsLimit / 2, `the bomb should have pressed on the limit (peak ${peak})`);
    assert.ok(refusedForks() > 0, readFileSync(`${cgroup}/pids.events`, "utf8"));
    await f.driver.stop(id);
    const outcome = await bomb;
    assert.ok(outcome.kind === "timeout" || outcome.kind === "completed", JSON.stringify(outcome).slice(0, 300));
    assert.equal((await f.driver.observe(id)).status, "stopped");
  });

  it("OOM-kills inside the sandbox only, and reports it", async () => {
    const resources = { ...f.spec().resources, memoryMiB: 64 };
    const id = await sandbox({ resources });
    const memoryCgroup = `/sys/fs/cgroup/memory${f.driver.layout.cgroupPath(id)}`;
    assert.equal(readFileSync(`${memoryCgroup}/memory.limit_in_bytes`, "utf8").trim(), String(64 * 1024 * 1024));
    const hog = completed(await exec(id, "x=a; while :; do x=$x$x; done"));
    assert.equal(hog.exit, 137);
    assert.equal((await f.driver.observe(id)).status, "running", "an exec's OOM leaves the sandbox up");
    await f.driver.stop(id);
    const stopped = await f.driver.observe(id);
    assert.deepEqual([stopped.exitCode, stopped.oomKilled], [137, false], "a stop is not an OOM kill");

    const spec = f.spec({ resources, command: ["sh", "-c", "x=a; while :; do x=$x$x; done"] });
    made.push(spec.id);
    await f.driver.create(spec);
    const exited = new Promise((resolve) => {
      const off = f.driver.onExit((exitedId, observation) => {
        if (exitedId === spec.id) {
          off();
          resolve(observation);
        }
      });
    });
    await f.driver.start(spec.id);
    const observation = (await exited) as { status: string; exitCode?: number; oomKilled?: boolean };
    assert.equal(observation.status, "stopped");
    assert.equal(observation.exitCode, 137);
    assert.equal(observation.oomKilled, true);
    assert.ok(process.memoryUsage().rss > 0);
    assert.equal(spawnSync("/bin/true").status, 0);
  });

  it("cannot read another sandbox's workspace", async () => {
    const secret = `secret-${randomBytes(4).toString("hex")}`;
    const a = await sandbox();
    const b = await sandbox({ storageClass: "durable", workspaceCapacityGiB: 1 });
    completed(await exec(a, `echo classified > /workspace/${secret}`));
    const hostPath = path.join(f.driver.layout.sandbox(a).workspace, secret);
    assert.equal(readFileSync(hostPath, "utf8"), "classified\n");
    const out = completed(
      await exec(
        b,
        [
          `cat ${hostPath} 2>&1`,
          `ls /workspace`,
          `busybox find / -path /proc -prune -o -path /sys -prune -o -name ${secret} -print 2>/dev/null`,
          "echo done",
        ].join("; "),
      ),
    ).stdout;
    assert.doesNotMatch(out, /classified/);
    assert.equal(
      out.split("\n").filter((line) => line.includes(secret) && !line.includes("No such file")).length,
      0,
      out,
    );
  });
});
