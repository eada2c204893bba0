// What a hostile sandbox must not do to the host or learn of it (issue 24, A1, A9 and A10):
// its console and /etc files are its own storage, bounded; it weighs no more CPU than the
// host has; no other sandbox's id and no host path shows inside (nor in a volume mount, nor
// in a pooled sandbox's first run); AF_VSOCK is refused.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { eventually } from "../../../../test/support/eventually.js";
import { projectFile } from "../../../lib/paths.js";
import type { ExecOutcome } from "../interface.js";
import { cgroupDirs } from "./cgroups.js";
import { Layout } from "./layout.js";
import { PooledRuntime } from "./pool.js";
import { buildStaticBinary } from "./static-binary.js";
import { CONSOLE_LOG_CAP_BYTES } from "./supervisor.js";
import { type RuntimeFixture, startRuntimeFixture, startSandbox, TEST_RESOURCES, testId } from "./test-support.js";

function completed(outcome: ExecOutcome): Extract<ExecOutcome, { kind: "completed" }> {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  return outcome as Extract<ExecOutcome, { kind: "completed" }>;
}

/** Bytes `dir` holds on its own filesystem (`du -x`: mounts below it, the sandbox's images, are not counted). */
function hostBytesOf(dir: string): number {
  const du = spawnSync("du", ["-x", "-s", "-B1", dir], { encoding: "utf8" });
  assert.equal(du.status, 0, du.stderr);
  return Number(du.stdout.split(/\s/)[0]);
}

const TEST_CA_PEM = "-----BEGIN CERTIFICATE-----\nTUlJQg==\n-----END CERTIFICATE-----\n";

describe("hostile sandbox: host storage and host information", () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  let probeDir = "";

  const exec = (id: string, script: string) =>
    f.driver.exec(id, { argv: ["sh", "-c", script], timeoutSeconds: 120, maxOutputBytes: 1 << 20 });

  before(async () => {
    // With a CA to trust, as every sandbox of a deployment with the egress gateway has (trust.ts).
    f = await startRuntimeFixture("hostiso", { trustedCaPem: TEST_CA_PEM });
    probeDir = await mkdtemp(path.join(os.tmpdir(), "warren-vsock-probe-"));
    const binary = await buildStaticBinary(
      projectFile("src", "drivers", "runtime", "local", "vsock-probe.c"),
      "vsock-probe",
    );
    spawnSync("cp", [binary, path.join(probeDir, "vsock-probe")]);
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await f?.cleanup();
    if (probeDir) await rm(probeDir, { recursive: true, force: true });
  });

  it("writes its console, /etc/hosts and /etc/hostname into its own storage, the console capped", async () => {
    const id = await startSandbox(f, made);
    const paths = new Layout(f.root).sandbox(id);
    const before = hostBytesOf(paths.dir);
    const out = completed(
      await exec(
        id,
        [
          "head -c 8388608 /dev/zero > /proc/1/fd/1",
          "head -c 4194304 /dev/zero >> /etc/hosts",
          "head -c 4194304 /dev/zero >> /etc/hostname",
          // Past the cap the console still takes output (drained, not EPIPE).
          "echo still-writes > /proc/1/fd/2 && echo done",
        ].join(" && "),
      ),
    );
    assert.match(out.stdout, /done/, out.stderr);
    const grown = hostBytesOf(paths.dir) - before;
    assert.ok(grown < 1 << 20, `the sandbox's writes grew its host dir by ${grown} bytes`);
    // They are on its root image instead: the console log at most its cap.
    assert.ok((await stat(paths.hosts)).size >= 4 << 20);
    assert.ok((await stat(paths.hostname)).size >= 4 << 20);
    const consoleBytes = (await stat(paths.consoleLog)).size;
    assert.ok(consoleBytes > 0 && consoleBytes <= CONSOLE_LOG_CAP_BYTES, `console log of ${consoleBytes} bytes`);
    // A restart keeps the edited files (they are the sandbox's) and starts a new console log.
    await f.driver.stop(id);
    await f.driver.start(id);
    assert.ok((await stat(paths.hosts)).size >= 4 << 20);
    assert.ok((await stat(`${paths.consoleLog}.1`)).size <= CONSOLE_LOG_CAP_BYTES);
    assert.match(completed(await exec(id, "cat /etc/hostname | head -c 64")).stdout, new RegExp(id));
  });

  it("sees no other sandbox's id and no host path", async () => {
    const [a, b] = [await startSandbox(f, made), await startSandbox(f, made)];
    const out = completed(
      await exec(
        a,
        [
          "for d in /sys/block /sys/class/block /sys/dev/block /sys/devices/virtual/block; do",
          "  for x in $d/*; do cat $x/loop/backing_file 2>/dev/null; done",
          "done",
          "cat /proc/self/mountinfo /proc/self/mounts /proc/1/mountinfo /proc/self/mountstats",
        ].join("\n"),
      ),
    );
    assert.ok(out.stdout.includes("/workspace") && out.stdout.includes("/etc/warren/ca.pem"), out.stdout);
    assert.ok(!out.stdout.includes(b), `another sandbox's id shows:\n${out.stdout}`);
    assert.ok(!out.stdout.includes(f.root), `the host's data dir shows:\n${out.stdout}`);
  });

  /** Everything a sandbox can read of its mounts (and of block devices' backing files). */
  const mountView = async (id: string) =>
    completed(
      await exec(
        id,
        [
          "for d in /sys/block /sys/class/block /sys/dev/block /sys/devices/virtual/block; do",
          "  for x in $d/*; do cat $x/loop/backing_file 2>/dev/null; done",
          "done",
          "cat /proc/self/mountinfo /proc/self/mounts /proc/1/mountinfo /proc/self/mountstats",
        ].join("\n"),
      ),
    ).stdout;

  it("shows no host path for a volume mount (a version in the host's volume cache)", async () => {
    // Where the server's volume cache keeps a version: under the data dir, named by org and digest.
    const entry = path.join(f.root, "volume-cache", "org_hostiso", "ab".repeat(32));
    await mkdir(entry, { recursive: true });
    await writeFile(path.join(entry, "hello.txt"), "from the cache\n", { mode: 0o444 });
    const id = await startSandbox(f, made, { mounts: [{ source: entry, target: "/data", readOnly: true }] });
    assert.equal(completed(await exec(id, "cat /data/hello.txt")).stdout, "from the cache\n");
    const write = completed(await exec(id, "echo x > /data/new 2>/dev/null; echo $?"));
    assert.notEqual(write.stdout.trim(), "0", "the volume is read-only");
    const view = await mountView(id);
    assert.match(view, / \/data /);
    assert.ok(!view.includes(f.root), `the host's data dir shows:\n${view}`);
    assert.ok(!view.includes("volume-cache") && !view.includes("ab".repeat(32)), `the cache entry shows:\n${view}`);
    // A restart binds it again, as hidden.
    await f.driver.stop(id);
    await f.driver.start(id);
    assert.equal(completed(await exec(id, "cat /data/hello.txt")).stdout, "from the cache\n");
    assert.ok(!(await mountView(id)).includes(f.root));
  });

  it("shows no host path during a pooled sandbox's first run (its launcher)", async () => {
    const other = await startSandbox(f, made);
    const pool = await PooledRuntime.open(f.driver, {
      size: 1,
      image: f.busyboxRef,
      memoryMiB: TEST_RESOURCES.memoryMiB,
      cpuMillis: TEST_RESOURCES.cpuMillis,
      pids: TEST_RESOURCES.pids,
      newId: () => {
        const id = testId("pooled");
        made.push(id);
        return id;
      },
    });
    pool.startFilling();
    await pool.settled();
    const [pooled] = pool.pooledIds();
    assert.ok(pooled, "the pool filled");
    // Its first run is the launcher, waiting for a claim: what the claiming sandbox's command
    // runs beside, with the same mounts.
    const view = await mountView(pooled);
    assert.match(view, /\.warren-launch/, "the launcher is mounted");
    assert.ok(!view.includes(f.root), `the host's data dir shows:\n${view}`);
    assert.ok(!view.includes(other), `another sandbox's id shows:\n${view}`);
  });

  it("counts no more CPU than the host has, in its quota and its weight", async () => {
    const hostCpus = os.availableParallelism();
    const greedy = await startSandbox(f, made, { resources: { memoryMiB: 128, cpuMillis: 128_000, pids: 64 } });
    const modest = await startSandbox(f, made, { resources: { memoryMiB: 128, cpuMillis: 1000, pids: 64 } });
    /** Quota (µs per period of 100 ms; -1: none) and weight (v1 shares, v2 weight) of the sandbox's cgroup. */
    const cpuOf = async (id: string) => {
      for (const dir of await cgroupDirs(new Layout(f.root).cgroupPath(id))) {
        const v2 = await readFile(path.join(dir, "cpu.max"), "utf8").catch(() => null);
        if (v2 !== null) {
          const [quota] = v2.trim().split(" ");
          const weight = Number(await readFile(path.join(dir, "cpu.weight"), "utf8"));
          return { quota: quota === "max" ? -1 : Number(quota), weight };
        }
        const v1 = await readFile(path.join(dir, "cpu.cfs_quota_us"), "utf8").catch(() => null);
        if (v1 !== null) {
          return { quota: Number(v1), weight: Number(await readFile(path.join(dir, "cpu.shares"), "utf8")) };
        }
      }
      throw new Error(`no cpu controller found for ${id}`);
    };
    const g = await cpuOf(greedy);
    assert.ok(g.quota > 0 && g.quota <= hostCpus * 100_000, `quota ${g.quota} on ${hostCpus} CPUs`);
    // Weights are rebalanced between organizations after a start (cpu-fairness.ts), not awaited
    // by it: wait for the settled pair, then hold it to the bound.
    let last = "";
    await eventually("the greedy sandbox's weight within the host's CPUs of the modest one's", async () => {
      const [gw, mw] = [(await cpuOf(greedy)).weight, (await cpuOf(modest)).weight];
      last = `weight ${gw} beside ${mw} on ${hostCpus} CPUs`;
      // Each weight is rounded to an integer (at most 0.5 off), so the exact bound of the ratio,
      // the host's CPUs, holds within (hostCpus + 1) / 2 of a weight unit (2000 m beside 1000 m
      // on 2 CPUs: 174763 beside 87381).
      return gw <= mw * hostCpus + (hostCpus + 1) / 2;
    }).catch((error: Error) => assert.fail(`${error.message}: ${last}`));
  });

  it("cannot open an AF_VSOCK socket", async () => {
    const id = await startSandbox(f, made, { mounts: [{ source: probeDir, target: "/opt/probe", readOnly: true }] });
    const out = completed(await exec(id, "/opt/probe/vsock-probe"));
    assert.equal(out.stdout.trim(), "vsock errno 97", out.stderr);
  });
});
