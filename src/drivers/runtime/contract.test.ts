// The contract every RuntimeDriver passes (the Kubernetes driver will join `targets`). Each
// target supplies a driver, a sandbox spec on a busybox test image, a probe for host traces,
// a second driver instance on the same state (adoption after a restart), and a peer server
// reachable only through a `public` network.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type {
  ExecOutcome,
  ExecRequest,
  NetworkReceipt,
  RuntimeDriver,
  RuntimeError,
  SandboxMount,
  SandboxObservation,
  SandboxSpec,
} from "./interface.js";
import { LocalRuntimeDriver } from "./local/driver.js";
import {
  hostTraces,
  type RuntimeFixture,
  receiptLeftovers,
  startRuntimeFixture,
  startTestPeer,
  type TestPeer,
  testSubnetPool,
} from "./local/test-support.js";

interface ContractHarness {
  driver: RuntimeDriver;
  spec(overrides?: Partial<SandboxSpec>): SandboxSpec;
  /** What the driver left on its host for `id` (empty = nothing). */
  traces(id: string): Promise<string[]>;
  /** Which objects a network receipt names still exist (empty = none). */
  receiptLeftovers(receipt: NetworkReceipt): Promise<string[]>;
  /** Another driver over the same state, as a restarted server would make. */
  reopen(): Promise<RuntimeDriver>;
  peer: TestPeer;
  cleanup(): Promise<void>;
}

interface ContractTarget {
  name: string;
  setup(): Promise<ContractHarness>;
}

const targets: ContractTarget[] = [
  {
    name: "local (runc)",
    async setup() {
      const fixture: RuntimeFixture = await startRuntimeFixture("contract");
      let peer: TestPeer;
      try {
        peer = await startTestPeer();
      } catch (error) {
        await fixture.cleanup();
        throw error;
      }
      const reopened: RuntimeDriver[] = [];
      return {
        driver: fixture.driver,
        spec: fixture.spec,
        traces: (id) => hostTraces(fixture.driver.layout, id),
        receiptLeftovers: (receipt) => receiptLeftovers(fixture.driver.layout, receipt),
        reopen: async () => {
          const driver = await LocalRuntimeDriver.open({
            root: fixture.root,
            subnetPool: testSubnetPool(fixture.root),
          });
          reopened.push(driver);
          return driver;
        },
        peer,
        cleanup: async () => {
          for (const driver of reopened) await driver.close();
          await peer.stop();
          await fixture.cleanup();
        },
      };
    },
  },
];

const EXEC: Omit<ExecRequest, "argv"> = { timeoutSeconds: 30, maxOutputBytes: 1024 * 1024 };

function completed(outcome: ExecOutcome): Extract<ExecOutcome, { kind: "completed" }> {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  return outcome as Extract<ExecOutcome, { kind: "completed" }>;
}

/** The next exit of `id` the driver reports, or its observation when it has already stopped. */
async function exitOf(driver: RuntimeDriver, id: string, timeoutMs = 60_000): Promise<SandboxObservation> {
  let unsubscribe: () => void = () => undefined;
  const reported = new Promise<SandboxObservation>((resolve) => {
    unsubscribe = driver.onExit((exitedId, observation) => {
      if (exitedId === id) resolve(observation);
    });
  });
  try {
    const now = await driver.observe(id);
    if (now.status === "stopped") return now;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${id} did not exit within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([reported, timeout]);
    } finally {
      clearTimeout(timer);
    }
  } finally {
    unsubscribe();
  }
}

function ms(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e6;
}

for (const target of targets) {
  describe(`RuntimeDriver contract: ${target.name}`, () => {
    let h: ContractHarness;
    const made: string[] = [];
    const create = async (overrides: Partial<SandboxSpec> = {}) => {
      const spec = h.spec(overrides);
      made.push(spec.id);
      await h.driver.create(spec);
      return spec;
    };
    const running = async (overrides: Partial<SandboxSpec> = {}) => {
      const spec = await create(overrides);
      await h.driver.start(spec.id);
      return spec.id;
    };
    const exec = (id: string, argv: string[], extra: Partial<ExecRequest> = {}) =>
      h.driver.exec(id, { ...EXEC, argv, ...extra });

    before(async () => {
      h = await target.setup();
    });
    after(async () => {
      for (const id of made) await h?.driver.destroy(id).catch(() => undefined);
      await h?.cleanup();
    });

    it("creates without starting, starts, and runs a command", async () => {
      const spec = await create();
      assert.equal((await h.driver.observe(spec.id)).status, "created");
      await h.driver.start(spec.id);
      const observed = await h.driver.observe(spec.id);
      assert.equal(observed.status, "running");
      assert.ok(observed.pid && observed.pid > 0);
      const outcome = completed(await exec(spec.id, ["echo", "hi"]));
      assert.deepEqual(outcome, { kind: "completed", exit: 0, stdout: "hi\n", stderr: "", truncated: false });
      await h.driver.start(spec.id); // a no-op while running
      assert.equal((await h.driver.observe(spec.id)).pid, observed.pid);
    });

    it("opens an interactive session: input in, output streamed out, the exit status", async () => {
      const id = await running();
      let out = "";
      let ended!: (end: { exit: number | null; lost?: string }) => void;
      const end = new Promise<{ exit: number | null; lost?: string }>((resolve) => {
        ended = resolve;
      });
      const session = await h.driver.openSession(
        id,
        { argv: ["sh", "-c", "read line; echo got:$line; exit 4"], pty: null },
        {
          onStdout: (data, done) => {
            out += data.toString();
            done();
          },
          onStderr: (_data, done) => done(),
          onEnd: ended,
        },
      );
      session.write(Buffer.from("ping\n"));
      assert.deepEqual(await end, { exit: 4 });
      assert.equal(out, "got:ping\n");
    });

    it("keeps stdout and stderr apart and propagates exit codes", async () => {
      const id = await running();
      const outcome = completed(await exec(id, ["sh", "-c", "echo out; echo err >&2; exit 3"]));
      assert.equal(outcome.exit, 3);
      assert.equal(outcome.stdout, "out\n");
      assert.equal(outcome.stderr, "err\n");
      assert.equal(completed(await exec(id, ["false"])).exit, 1);
    });

    it("gives the image's environment and working dir, plus the sandbox's and the exec's env", async () => {
      const id = await running({ env: { SANDBOX_VAR: "s", GREETING: "overridden" } });
      const outcome = completed(
        await exec(id, ["sh", "-c", 'echo "$GREETING $SANDBOX_VAR $EXEC_VAR $PATH"; pwd; hostname'], {
          env: { EXEC_VAR: "e" },
        }),
      );
      const [vars, cwd, hostname] = outcome.stdout.trim().split("\n");
      assert.equal(vars, "overridden s e /bin");
      assert.equal(cwd, "/tmp");
      assert.ok(hostname && id.startsWith(hostname));
      assert.equal(completed(await exec(id, ["pwd"], { cwd: "/workspace" })).stdout, "/workspace\n");
    });

    it("caps the combined output, keeping the head", async () => {
      const id = await running();
      const outcome = completed(
        await exec(id, ["sh", "-c", "echo HEAD; head -c 2097152 /dev/zero | busybox tr '\\0' a; echo tail >&2"], {
          maxOutputBytes: 1024 * 1024,
        }),
      );
      assert.equal(outcome.exit, 0);
      assert.equal(outcome.truncated, true);
      assert.ok(outcome.stdout.startsWith("HEAD\naaaa"));
      assert.equal(outcome.stdout.length + outcome.stderr.length, 1024 * 1024);
    });

    it("times out, kills the command's process group, and returns the output so far", async () => {
      const id = await running();
      const started = Date.now();
      const outcome = await exec(id, ["sh", "-c", "echo started; sleep 300 & sleep 301; echo never"], {
        timeoutSeconds: 1,
      });
      assert.equal(outcome.kind, "timeout");
      assert.ok(Date.now() - started < 10_000);
      if (outcome.kind === "timeout") {
        assert.equal(outcome.stdout, "started\n");
        assert.equal(outcome.truncated, false);
      }
      const ps = completed(await exec(id, ["ps", "-o", "args"])).stdout;
      assert.ok(!ps.includes("sleep 300") && !ps.includes("sleep 301"), ps);
    });

    it("reports a missing executable as spawn_failed (not exit 127)", async () => {
      const id = await running();
      const outcome = await exec(id, ["/no/such/binary"]);
      assert.equal(outcome.kind, "spawn_failed");
      assert.equal((await exec(id, ["no-such-command"])).kind, "spawn_failed");
    });

    it("stops (idempotently), keeps rootfs and workspace files, and wakes with them", async () => {
      const id = await running();
      completed(await exec(id, ["sh", "-c", "echo kept > /workspace/file; echo root > /etc/changed"]));
      await h.driver.stop(id);
      await h.driver.stop(id);
      assert.equal((await h.driver.observe(id)).status, "stopped");
      assert.deepEqual(await exec(id, ["true"]), { kind: "sandbox_stopped" });
      await h.driver.start(id);
      assert.equal((await h.driver.observe(id)).status, "running");
      assert.equal(completed(await exec(id, ["cat", "/workspace/file", "/etc/changed"])).stdout, "kept\nroot\n");
    });

    it("lives as long as its first process, and reports its exit code", async () => {
      const spec = await create({ command: ["sh", "-c", "sleep 0.2; exit 7"] });
      await h.driver.start(spec.id);
      const exited = await exitOf(h.driver, spec.id);
      assert.equal(exited.status, "stopped");
      assert.equal(exited.exitCode, 7);
      const observed = await h.driver.observe(spec.id);
      assert.equal(observed.status, "stopped");
      assert.equal(observed.exitCode, 7);
      assert.equal(observed.oomKilled, false);
    });

    it("runs the image's ENTRYPOINT + CMD when no command is given", async () => {
      const spec = await create({ command: undefined });
      await h.driver.start(spec.id);
      const exited = await exitOf(h.driver, spec.id);
      assert.equal(exited.exitCode, 0);
    });

    it("lists sandboxes, and a second driver on the same state adopts a running one", async () => {
      const id = await running();
      const stoppedSpec = await create();
      assert.ok((await h.driver.list()).includes(id));
      const second = await h.reopen();
      const ids = await second.list();
      assert.ok(ids.includes(id) && ids.includes(stoppedSpec.id));
      assert.equal((await second.observe(id)).status, "running");
      assert.equal((await second.observe(stoppedSpec.id)).status, "created");
      assert.equal(completed(await second.exec(id, { ...EXEC, argv: ["echo", "adopted"] })).stdout, "adopted\n");
      const exited = exitOf(second, id);
      await second.stop(id);
      assert.equal((await exited).status, "stopped");
      assert.equal((await h.driver.observe(id)).status, "stopped");
    });

    it("destroys everything, idempotently", async () => {
      const id = await running({ network: "public", storageClass: "durable", workspaceCapacityGiB: 1 });
      completed(await exec(id, ["sh", "-c", "echo x > /workspace/x"]));
      const receipt = await h.driver.setNetwork(id, "public");
      assert.notDeepEqual(await h.traces(id), []);
      assert.equal((await h.receiptLeftovers(receipt)).length, 2 + receipt.rules.length);
      await h.driver.destroy(id);
      assert.deepEqual(await h.traces(id), []);
      assert.deepEqual(await h.receiptLeftovers(receipt), []);
      assert.deepEqual(await h.driver.observe(id), { status: "absent" });
      assert.ok(!(await h.driver.list()).includes(id));
      await h.driver.destroy(id);
      await assert.rejects(h.driver.start(id), (error: unknown) => (error as RuntimeError).code === "not_found");
      assert.deepEqual(await exec(id, ["true"]).catch((e: RuntimeError) => e.code), "not_found");
    });

    it("refuses a second create of one id and a spec without a command", async () => {
      const spec = await create();
      await assert.rejects(
        h.driver.create(spec),
        (error: unknown) => (error as RuntimeError).code === "already_exists",
      );
      const bare = h.spec({ command: undefined });
      const image = bare.source.image;
      bare.source = { kind: "image", image: { ...image, config: { ...image.config, entrypoint: null, cmd: null } } };
      await assert.rejects(h.driver.create(bare), (error: unknown) => (error as RuntimeError).code === "invalid_spec");
      assert.equal((await h.driver.observe(bare.id)).status, "absent");
    });

    it("binds host directories in, read-only or writable, for every run", async () => {
      const shared = await mkdtemp(path.join(os.tmpdir(), "warren-mount-"));
      try {
        await writeFile(path.join(shared, "hello"), "from the host\n");
        await mkdir(path.join(shared, "rw"));
        await chmod(path.join(shared, "rw"), 0o777);
        const id = await running({
          mounts: [
            { source: shared, target: "/mnt/ro", readOnly: true },
            { source: path.join(shared, "rw"), target: "/data/rw", readOnly: false },
          ],
        });
        const read = completed(await exec(id, ["cat", "/mnt/ro/hello"]));
        assert.equal(read.stdout, "from the host\n");
        const denied = completed(await exec(id, ["sh", "-c", "touch /mnt/ro/x 2>/dev/null; echo $?"]));
        assert.notEqual(denied.stdout.trim(), "0", "a read-only mount refuses writes");
        completed(await exec(id, ["sh", "-c", "echo written > /data/rw/out"]));
        assert.equal(await readFile(path.join(shared, "rw", "out"), "utf8"), "written\n");
        await h.driver.stop(id);
        await h.driver.start(id);
        assert.equal(completed(await exec(id, ["cat", "/data/rw/out"])).stdout, "written\n", "kept across runs");
        await h.driver.destroy(id);
        assert.equal(
          await readFile(path.join(shared, "hello"), "utf8"),
          "from the host\n",
          "destroy leaves the source",
        );
        assert.deepEqual(await h.traces(id), []);
      } finally {
        await rm(shared, { recursive: true, force: true });
      }
    });

    it("snapshots a running sandbox, restores it, and refuses a snapshot source it has no copy of", async () => {
      const id = await running({ storageClass: "durable", workspaceCapacityGiB: 1 });
      completed(await exec(id, ["sh", "-c", "echo ws > /workspace/file; echo root > /etc/file"]));
      const snapshotId = `snp-${id}`;
      const snapshot = await h.driver.snapshot(id, snapshotId);
      assert.equal(snapshot.snapshotId, snapshotId);
      assert.equal(snapshot.workspaceCapacityGiB, 1);
      assert.ok(snapshot.sizeBytes > 0 && snapshot.frozenMs > 0, JSON.stringify(snapshot));
      assert.deepEqual(await h.driver.snapshot(id, snapshotId), snapshot, "idempotent for a sealed id");
      assert.equal((await h.driver.observe(id)).status, "running", "thawed");
      assert.equal(completed(await exec(id, ["echo", "alive"])).stdout, "alive\n");
      assert.ok((await h.driver.listLocalSnapshots()).includes(snapshotId));
      assert.ok(await h.driver.localSnapshot(snapshotId));

      const restored = h.spec({ storageClass: "durable", workspaceCapacityGiB: 1 });
      restored.source = { kind: "snapshot", image: restored.source.image, snapshotId };
      made.push(restored.id);
      await h.driver.create(restored);
      await h.driver.start(restored.id);
      assert.equal(completed(await exec(restored.id, ["cat", "/workspace/file", "/etc/file"])).stdout, "ws\nroot\n");

      await h.driver.dropLocalSnapshot(snapshotId);
      assert.equal(await h.driver.localSnapshot(snapshotId), null);
      const missing = h.spec();
      missing.source = { kind: "snapshot", image: missing.source.image, snapshotId };
      await assert.rejects(h.driver.create(missing), (error: unknown) => (error as RuntimeError).code === "not_found");
      assert.deepEqual(await h.traces(missing.id), []);
      assert.equal(
        completed(await exec(restored.id, ["cat", "/workspace/file"])).stdout,
        "ws\n",
        "a restore keeps its clone",
      );
    });

    it("refuses bad mounts, leaving nothing", async () => {
      const bad: SandboxMount[][] = [
        [{ source: "/tmp", target: "/proc/x", readOnly: true }],
        [{ source: "/tmp", target: "/workspace", readOnly: true }],
        [{ source: "/tmp", target: "relative", readOnly: true }],
        [{ source: "/tmp", target: "/a/../etc", readOnly: true }],
        [{ source: "/tmp", target: "/dev/.warren-exec", readOnly: true }],
        [
          { source: "/tmp", target: "/m", readOnly: true },
          { source: "/tmp", target: "/m", readOnly: false },
        ],
        [{ source: "/no/such/dir", target: "/m", readOnly: true }],
      ];
      for (const mounts of bad) {
        const spec = h.spec({ mounts });
        await assert.rejects(
          h.driver.create(spec),
          (error: unknown) => (error as RuntimeError).code === "invalid_spec",
          JSON.stringify(mounts),
        );
        assert.deepEqual(await h.traces(spec.id), [], JSON.stringify(mounts));
      }
    });

    it("gives durable storage a capacity that grows and never shrinks", async () => {
      const id = await running({ storageClass: "durable", workspaceCapacityGiB: 1 });
      const size = async () => {
        const df =
          completed(await exec(id, ["df", "-k", "/workspace"]))
            .stdout.trim()
            .split("\n")
            .pop() ?? "";
        return Number(df.split(/\s+/)[1]) / (1024 * 1024);
      };
      assert.ok((await size()) > 0.9 && (await size()) <= 1);
      completed(await exec(id, ["sh", "-c", "echo data > /workspace/data"]));
      const full = completed(
        await exec(id, ["sh", "-c", "busybox dd if=/dev/zero of=/workspace/big bs=1M count=1100 2>&1; echo rc=$?"]),
      );
      assert.match(full.stdout, /No space left|rc=1/);
      completed(await exec(id, ["rm", "/workspace/big"]));
      await assert.rejects(
        h.driver.growWorkspace(id, 0),
        (error: unknown) => (error as RuntimeError).code === "invalid_spec",
      );
      await h.driver.growWorkspace(id, 2);
      assert.ok((await size()) > 1.9, "grown while running");
      await h.driver.stop(id);
      await h.driver.growWorkspace(id, 2);
      await h.driver.growWorkspace(id, 2);
      await assert.rejects(
        h.driver.growWorkspace(id, 1),
        (error: unknown) => (error as RuntimeError).code === "workspace_shrink_unsupported",
      );
      await h.driver.start(id);
      assert.ok((await size()) > 1.9);
      assert.equal(completed(await exec(id, ["cat", "/workspace/data"])).stdout, "data\n");
      const standard = await running();
      await assert.rejects(
        h.driver.growWorkspace(standard, 2),
        (error: unknown) => (error as RuntimeError).code === "not_durable",
      );
    });

    it("switches the network live: none reaches nothing, public reaches a public peer, gateway_only does not", async () => {
      const id = await running();
      const probe = ["nc", "-w", "2", h.peer.address, String(h.peer.port)];
      const before = completed(await exec(id, probe));
      assert.notEqual(before.stdout, "pong\n");
      assert.equal((await h.driver.observe(id)).network, "none");

      const receipt = await h.driver.setNetwork(id, "public");
      assert.equal(receipt.mode, "public");
      assert.ok(receipt.namespace.name && receipt.namespace.path && receipt.namespace.inode > 0);
      assert.ok(receipt.link?.sandboxAddress && receipt.rules.length > 0);
      for (const rule of receipt.rules) assert.ok(rule.handle > 0 && rule.table && rule.chain);
      assert.equal(completed(await exec(id, probe)).stdout, "pong\n");
      assert.equal((await h.driver.observe(id)).network, "public");

      const again = await h.driver.setNetwork(id, "public");
      assert.deepEqual(again, receipt, "public again changes nothing");

      // gateway_only: the same link and address, but nothing outside (only a gateway, if any).
      const confined = await h.driver.setNetwork(id, "gateway_only");
      assert.equal(confined.mode, "gateway_only");
      assert.equal(confined.link?.sandboxAddress, receipt.link?.sandboxAddress);
      assert.ok(confined.rules.length > 0 && confined.rules.length < receipt.rules.length);
      assert.notEqual(completed(await exec(id, probe)).stdout, "pong\n");
      assert.equal((await h.driver.observe(id)).network, "gateway_only");
      const reopened = await h.driver.setNetwork(id, "public");
      assert.equal(completed(await exec(id, probe)).stdout, "pong\n");
      assert.equal(reopened.rules.length, receipt.rules.length);

      const none = await h.driver.setNetwork(id, "none");
      assert.deepEqual(none.rules, []);
      assert.equal(none.namespace.inode, receipt.namespace.inode);
      assert.notEqual(completed(await exec(id, probe)).stdout, "pong\n");
      const links = completed(await exec(id, ["ls", "/sys/class/net"]))
        .stdout.trim()
        .split(/\s+/);
      assert.deepEqual(links, ["lo"]);
    });

    it("gives the address and the listening ports a host connection reaches", async () => {
      const id = await running();
      assert.equal(await h.driver.portAddress(id), null, "none has no link");
      assert.deepEqual(await h.driver.listeningPorts(id), []);
      const listen = completed(
        await exec(id, [
          "sh",
          "-c",
          "nc -ll -p 8080 -e cat </dev/null >/dev/null 2>&1 & nc -ll -s 127.0.0.1 -p 8081 -e cat </dev/null >/dev/null 2>&1 &",
        ]),
      );
      assert.equal(listen.exit, 0);
      let ports: number[] = [];
      for (const deadline = Date.now() + 30_000; !ports.includes(8080) && Date.now() < deadline; ) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        ports = await h.driver.listeningPorts(id);
      }
      // 8081 listens on loopback only: nothing from the host reaches it.
      assert.deepEqual(ports, [8080]);
      const receipt = await h.driver.setNetwork(id, "public");
      const address = await h.driver.portAddress(id);
      assert.equal(address, receipt.link?.sandboxAddress);
      const echoed = await new Promise<string>((resolve, reject) => {
        const socket = net.connect({ host: address as string, port: 8080 }, () => socket.write("over the veth"));
        socket.setTimeout(5000, () => reject(new Error("no echo")));
        socket.on("data", (chunk: Buffer) => {
          socket.destroy();
          resolve(chunk.toString());
        });
        socket.on("error", reject);
      });
      assert.equal(echoed, "over the veth");
      await h.driver.stop(id);
      assert.deepEqual(await h.driver.listeningPorts(id), []);
      assert.equal(await h.driver.portAddress(id), address, "the link outlives a stop");
      const unknown = `sbx-${"f".repeat(40)}`;
      assert.equal(await h.driver.portAddress(unknown), null);
      assert.deepEqual(await h.driver.listeningPorts(unknown), []);
    });

    it("measures create->running and exec latency (printed, not asserted)", async () => {
      const samples: number[] = [];
      let id = "";
      for (let i = 0; i < 5; i++) {
        const spec = h.spec();
        made.push(spec.id);
        const start = process.hrtime.bigint();
        await h.driver.create(spec);
        await h.driver.start(spec.id);
        samples.push(ms(start));
        id = spec.id;
      }
      const execs: number[] = [];
      for (let i = 0; i < 20; i++) {
        const start = process.hrtime.bigint();
        completed(await exec(id, ["true"]));
        execs.push(ms(start));
      }
      const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
      const line = `[${target.name}] create->running median ${median(samples).toFixed(1)} ms (${samples.map((s) => s.toFixed(0)).join(", ")}); exec true median ${median(execs).toFixed(1)} ms over ${execs.length}`;
      console.log(line);
    });
  });
}
