// Id mapping (issue 24 A2, id-mapping.ts): root inside a sandbox is the first uid of a host
// block of its own; the image's, the workspace's and a mount's files keep their owners on disk
// and show inside as they would without the mapping; root inside is no host root for any file.
import assert from "node:assert/strict";
import { chown, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { ExecOutcome } from "../interface.js";
import { run, TOOLS } from "./host.js";
import { MAPPED_IDS } from "./id-mapping.js";
import { readRuncState } from "./runc.js";
import { type RuntimeFixture, startRuntimeFixture, startSandbox } from "./test-support.js";
import { userNamespacePin } from "./user-namespace.js";

function completed(outcome: ExecOutcome): Extract<ExecOutcome, { kind: "completed" }> {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  return outcome as Extract<ExecOutcome, { kind: "completed" }>;
}

function stdoutOf(outcome: ExecOutcome): string {
  const done = completed(outcome);
  assert.equal(done.exit, 0, `exit ${done.exit}: ${done.stderr}`);
  return done.stdout;
}

describe("id mapping: sandbox root is an unprivileged host uid", () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  let hostDir = "";

  const exec = (id: string, script: string) =>
    f.driver.exec(id, { argv: ["sh", "-c", script], timeoutSeconds: 60, maxOutputBytes: 1 << 16 });

  before(async () => {
    f = await startRuntimeFixture("idmap", { idMapping: true });
    hostDir = await mkdtemp(path.join(os.tmpdir(), "warren-idmap-"));
    // A host dir to mount: a file of root's (0644), one only root may read (0600), and one of a
    // host uid beyond any sandbox's 65536 ids (0600).
    await writeFile(path.join(hostDir, "public"), "public\n", { mode: 0o644 });
    await writeFile(path.join(hostDir, "root-only"), "secret\n", { mode: 0o600 });
    await writeFile(path.join(hostDir, "foreign"), "foreign\n", { mode: 0o600 });
    await chown(path.join(hostDir, "foreign"), 3_000_000_000, 3_000_000_000);
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await f?.cleanup();
    if (hostDir) await rm(hostDir, { recursive: true, force: true });
  });

  it("root inside is uid 0 there and the first of a block of its own on the host", async () => {
    const a = await startSandbox(f, made);
    const b = await startSandbox(f, made);
    const roots: number[] = [];
    for (const id of [a, b]) {
      assert.equal(stdoutOf(await exec(id, "id -u; id -g")), "0\n0\n");
      const first = await f.driver.mappedRoot(id);
      assert.ok(first !== null && first > 65_535 && first % MAPPED_IDS === 0, `block ${first}`);
      roots.push(first);
      assert.match(stdoutOf(await exec(id, "cat /proc/self/uid_map")), new RegExp(`^\\s*0\\s+${first}\\s+65536\\s*$`));
      // The sandbox's first process runs as that host uid.
      const state = await readRuncState(f.driver.layout.runcRoot, id);
      assert.ok(state && state.initPid > 0);
      const status = await stat(`/proc/${state.initPid}`);
      assert.equal(status.uid, first);
      // The image's files are root's inside.
      assert.match(stdoutOf(await exec(id, "stat -c %u:%g /bin/busybox /etc/passwd")), /^0:0\n0:0\n$/);
    }
    assert.notEqual(roots[0], roots[1]);
  });

  it("what root writes inside is the block's root on the host and uid 0 on disk", async () => {
    const id = await startSandbox(f, made);
    const first = (await f.driver.mappedRoot(id)) as number;
    const paths = f.driver.layout.sandbox(id);
    stdoutOf(await exec(id, "echo x > /rootfile && echo y > /workspace/wsfile && chown 1000:1000 /workspace/wsfile"));
    // The host's view of the rootfs: the block's root.
    assert.equal((await stat(path.join(paths.rootfs, "rootfile"))).uid, first);
    // On disk (the upper dir on the root image, the workspace image): uid 0 and 1000, as
    // without the mapping, so snapshots and restores carry ids any sandbox maps the same.
    assert.equal((await stat(path.join(paths.upper, "rootfile"))).uid, 0);
    const ws = await stat(path.join(paths.workspace, "wsfile"));
    assert.deepEqual([ws.uid, ws.gid], [1000, 1000]);
    // The workspace's root belongs to the image's user, inside too.
    assert.match(stdoutOf(await exec(id, "stat -c %u /workspace")), /^0\n$/);
    // A file the host writes into the workspace is root's inside.
    await writeFile(path.join(paths.workspace, "from-host"), "h\n", { mode: 0o600 });
    assert.equal(stdoutOf(await exec(id, "stat -c %u /workspace/from-host; cat /workspace/from-host")), "0\nh\n");
    // A file of uid 1000 inside is the block's uid 1000 on the host, and 1000 on disk.
    stdoutOf(await exec(id, "mkdir -p /tmp/u && echo u > /tmp/u/mine && chown 1000:1000 /tmp/u/mine"));
    assert.equal((await stat(path.join(paths.rootfs, "tmp/u/mine"))).uid, first + 1000);
    assert.equal((await stat(path.join(paths.upper, "tmp/u/mine"))).uid, 1000);
  });

  it("the sandbox cannot read a host file root inside is not mapped to, through any mount", async () => {
    const id = await startSandbox(f, made, {
      mounts: [
        { source: hostDir, target: "/ro", readOnly: true },
        { source: hostDir, target: "/rw", readOnly: false },
      ],
    });
    for (const at of ["/ro", "/rw"]) {
      assert.equal(stdoutOf(await exec(id, `cat ${at}/public; stat -c %u ${at}/public`)), "public\n0\n");
      // A file of a host uid outside the block shows as nobody's and stays closed to root inside.
      const foreign = completed(await exec(id, `stat -c %u ${at}/foreign; cat ${at}/foreign`));
      assert.equal(foreign.stdout, "65534\n");
      assert.notEqual(foreign.exit, 0);
      assert.match(foreign.stderr, /Permission denied/);
    }
    // Host files outside the sandbox's idmapped mounts (tini, bound plain) show as nobody's.
    assert.equal(stdoutOf(await exec(id, "stat -c %u /dev/init")), "65534\n");
    // Nor can root inside write where it is not root on the host: /proc/sys is read-only,
    // and a sysfs file of host root's is not its own.
    const sys = completed(await exec(id, "stat -c %u /sys/kernel/mm; echo 1 > /sys/kernel/mm/ksm/run"));
    assert.equal(sys.stdout, "65534\n");
    assert.notEqual(sys.exit, 0);
  });

  it("starts again after a stop and leaves no mapped tree at destroy", async () => {
    const id = await startSandbox(f, made);
    const tree = f.driver.mappedPaths(id).tree;
    assert.ok((await stat(tree)).isDirectory());
    assert.equal((await stat(tree)).mode & 0o777, 0o711);
    await f.driver.stop(id);
    await f.driver.start(id);
    assert.equal(stdoutOf(await exec(id, "id -u; cat /etc/hostname >/dev/null && echo ok")), "0\nok\n");
    await f.driver.destroy(id);
    await assert.rejects(stat(tree));
  });

  it("after its namespaces are gone (a host reboot) starts with new ones, the same block and its files", async () => {
    const id = await startSandbox(f, made);
    const first = await f.driver.mappedRoot(id);
    stdoutOf(await exec(id, "echo kept > /kept && echo ws > /workspace/kept"));
    await f.driver.stop(id);
    const pin = userNamespacePin(f.driver.layout.sandbox(id));
    await run(TOOLS.umount, [pin]);
    await run(TOOLS.ip, ["netns", "delete", f.driver.layout.netnsName(id)]);
    await f.driver.start(id);
    assert.equal(await f.driver.mappedRoot(id), first);
    assert.match(stdoutOf(await exec(id, "cat /proc/self/uid_map")), new RegExp(`^\\s*0\\s+${first}\\s+65536\\s*$`));
    assert.equal(stdoutOf(await exec(id, "cat /kept /workspace/kept; stat -c %u /kept")), "kept\nws\n0\n");
  });
});
