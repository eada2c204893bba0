// Behaviour of the local driver beyond the shared contract: what it puts on the host, how it
// recovers from crashes (its own and the shim's), and how it pulls images.
import assert from "node:assert/strict";
import { readFileSync, statSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { eventually } from "../../../../test/support/eventually.js";
import { busyboxLayer, pushImage } from "../../../../test/support/registry.js";
import { LayerCache } from "../image/layer-cache.js";
import { RegistryClient } from "../image/registry-client.js";
import type { ExecOutcome, PreparedImage, SandboxSpec } from "../interface.js";
import { LocalRuntimeDriver } from "./driver.js";
import { run, TOOLS } from "./host.js";
import {
  hostTraces,
  type RuntimeFixture,
  startRuntimeFixture,
  startSandbox,
  testId,
  testSubnetPool,
} from "./test-support.js";

function completed(outcome: ExecOutcome): Extract<ExecOutcome, { kind: "completed" }> {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  return outcome as Extract<ExecOutcome, { kind: "completed" }>;
}

describe("local driver on the host", () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  const sandbox = (overrides: Partial<SandboxSpec> = {}) => startSandbox(f, made, overrides);
  const sh = (id: string, script: string) =>
    f.driver.exec(id, { argv: ["sh", "-c", script], timeoutSeconds: 30, maxOutputBytes: 1 << 20 });

  before(async () => {
    f = await startRuntimeFixture("driver");
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await f?.cleanup();
  });

  it("pulls an image once for concurrent prepares and creates", async () => {
    const requests = new Map<string, number>();
    const countingFetch: typeof fetch = (input, init) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      requests.set(url.pathname, (requests.get(url.pathname) ?? 0) + 1);
      return fetch(input, init);
    };
    const root = path.join(f.root, "second-root");
    const cache = new LayerCache({
      root: path.join(root, "images"),
      client: new RegistryClient({ fetch: countingFetch }),
    });
    const driver = await LocalRuntimeDriver.open({ root, layerCache: cache, subnetPool: testSubnetPool(root) });
    try {
      const images = await Promise.all([1, 2, 3].map(() => driver.prepareImage(f.busyboxRef)));
      assert.ok(images.every((image) => image.digest === f.image.digest));
      const specs = [1, 2, 3].map(() => f.spec({ source: { kind: "image", image: images[0] as PreparedImage } }));
      await Promise.all(specs.map((spec) => driver.create(spec)));
      const manifests = [...requests].filter(([p]) => p.includes("/manifests/"));
      const blobs = [...requests].filter(([p]) => p.includes("/blobs/"));
      assert.deepEqual(
        manifests.map(([, n]) => n),
        [1],
      );
      assert.ok(blobs.length >= 3 && blobs.every(([, n]) => n === 1), JSON.stringify(blobs));
      for (const spec of specs) await driver.destroy(spec.id);
    } finally {
      await driver.close();
      const { sweepRoot } = await import("./sweep.js");
      await sweepRoot(root);
    }
  });

  it("writes the ResourceSpec into the sandbox's cgroups", async () => {
    const id = await sandbox({ resources: { memoryMiB: 96, cpuMillis: 250, pids: 77 } });
    const cgroup = (controller: string, file: string) =>
      readFileSync(`/sys/fs/cgroup/${controller}${f.driver.layout.cgroupPath(id)}/${file}`, "utf8").trim();
    assert.equal(cgroup("memory", "memory.limit_in_bytes"), String(96 * 1024 * 1024));
    assert.equal(cgroup("cpu", "cpu.cfs_quota_us"), "25000");
    assert.equal(cgroup("cpu", "cpu.cfs_period_us"), "100000");
    assert.equal(cgroup("pids", "pids.max"), "77");
    // The sandbox sees its own cgroup as the root (cgroup namespace).
    assert.equal(completed(await sh(id, "cat /sys/fs/cgroup/pids/pids.max")).stdout, "77\n");
  });

  it("runs tini as PID 1, which reaps orphans", async () => {
    const id = await sandbox();
    completed(await sh(id, "(sleep 0.1 &) ; (true &) ; exit 0"));
    const ps = async () =>
      completed(
        await f.driver.exec(id, { argv: ["ps", "-o", "pid,stat,args"], timeoutSeconds: 30, maxOutputBytes: 1 << 16 }),
      ).stdout;
    // Once the orphan has ended (however late on a loaded host), no zombie of it stays.
    const listing = await eventually(
      "the orphans ended and reaped",
      async () => {
        const text = await ps();
        return !/sleep 0\.1/.test(text) && !/\sZ\s/.test(text) && text;
      },
      60_000,
    ).catch(async () => ps());
    assert.match(listing, /^\s*1 \S+\s+\/dev\/init -g -- sleep 1000000$/m);
    assert.doesNotMatch(listing, /\sZ\s/);
  });

  it("execs in the current run even when another driver on the same root stopped or restarted it", async () => {
    // exec reuses what it saw of a run while that run's init lives; a run ended or started
    // behind its back (another process on the same root) must not be taken for the old one.
    const id = await sandbox();
    const initOf = async () => completed(await sh(id, "cut -d' ' -f22 /proc/1/stat")).stdout;
    const firstInit = await initOf();
    const other = await LocalRuntimeDriver.open({ root: f.root, subnetPool: testSubnetPool(f.root) });
    try {
      await other.stop(id);
      assert.deepEqual(await sh(id, "true"), { kind: "sandbox_stopped" });
      await other.start(id);
      const secondInit = await initOf();
      assert.notEqual(secondInit, firstInit, "a new run");
      await other.stop(id);
      assert.deepEqual(await sh(id, "true"), { kind: "sandbox_stopped" });
      await other.start(id);
      assert.notEqual(await initOf(), secondInit);
    } finally {
      await other.close();
    }
  });

  it("runs as the image's user, with a workspace it owns", async () => {
    const pushed = await pushImage(f.registry.url, "test/nobody", "latest", {
      layers: [busyboxLayer()],
      config: { Cmd: ["sleep", "1000000"], Env: ["PATH=/bin"], User: "nobody" },
    });
    const image = await f.driver.prepareImage(`${f.registry.host}/test/nobody:latest`);
    assert.equal(image.digest, pushed.digest);
    assert.equal(image.config.user, "nobody");
    for (const storageClass of ["standard", "durable"] as const) {
      const id = await sandbox({
        source: { kind: "image", image },
        command: undefined,
        storageClass,
        workspaceCapacityGiB: 1,
      });
      const out = completed(
        await sh(id, "id -u; id -g; echo $HOME; touch /workspace/mine && echo ok; touch /etc/x 2>&1"),
      );
      const [uid, gid, home, ok] = out.stdout.split("\n");
      assert.deepEqual([uid, gid, home, ok], ["65534", "65534", "/", "ok"]);
      assert.match(out.stdout, /Permission denied/);
    }
  });

  it("reports the network it applied, exactly", async () => {
    const id = await sandbox({ network: "public" });
    const receipt = await f.driver.setNetwork(id, "public");
    assert.equal(receipt.namespace.name, f.driver.layout.netnsName(id));
    assert.equal(receipt.namespace.inode, statSync(receipt.namespace.path).ino);
    const link = receipt.link;
    assert.ok(link);
    assert.equal(readFileSync(`/sys/class/net/${link.hostInterface}/operstate`, "utf8").trim(), "up");
    const table = await run(TOOLS.nft, ["-a", "list", "table", "inet", f.driver.layout.nftTable]);
    for (const rule of receipt.rules) {
      assert.equal(rule.table, f.driver.layout.nftTable);
      assert.ok(table.includes(`# handle ${rule.handle}`), `handle ${rule.handle}`);
      assert.ok(table.includes(`comment "warren:${id}" # handle ${rule.handle}`));
    }
    const inside = completed(await sh(id, "busybox ip -4 addr show eth0; busybox ip route")).stdout;
    assert.ok(inside.includes(`inet ${link.sandboxAddress}/30`), inside);
    assert.ok(inside.includes(`default via ${link.gatewayAddress}`), inside);
    const none = await f.driver.setNetwork(id, "none");
    assert.equal(none.link, undefined);
    assert.throws(() => statSync(`/sys/class/net/${link.hostInterface}`));
    const after = await run(TOOLS.nft, ["-a", "list", "table", "inet", f.driver.layout.nftTable]);
    assert.ok(!after.includes(`warren:${id}`));
  });

  it("cleans up a half-created sandbox and lets its id be created again", async () => {
    const spec = f.spec({ network: "public", storageClass: "durable", workspaceCapacityGiB: 1 });
    made.push(spec.id);
    await f.driver.create(spec);
    // A crash before the record was written leaves everything else behind.
    await rm(f.driver.layout.sandbox(spec.id).record);
    assert.deepEqual(await f.driver.observe(spec.id), { status: "absent" });
    assert.ok((await f.driver.list()).includes(spec.id));
    assert.notDeepEqual(await hostTraces(f.driver.layout, spec.id), []);
    await f.driver.create(spec);
    await f.driver.start(spec.id);
    assert.equal((await f.driver.observe(spec.id)).status, "running");
    await rm(f.driver.layout.sandbox(spec.id).record);
    await f.driver.destroy(spec.id);
    assert.deepEqual(await hostTraces(f.driver.layout, spec.id), []);
    assert.ok(!(await f.driver.list()).includes(spec.id));
  });

  it("stops a sandbox whose shim died, and destroys it without a trace", async () => {
    const id = await sandbox();
    const paths = f.driver.layout.sandbox(id);
    const shim = Number(await readFile(path.join(paths.runDir, "shim.pid"), "utf8"));
    // Kill the shim and its runc: the container runs on, unsupervised.
    const children = (await run("/usr/bin/pgrep", ["-P", String(shim)]).catch(() => "")).trim().split("\n");
    process.kill(shim, "SIGKILL");
    for (const child of children.filter(Boolean)) process.kill(Number(child), "SIGKILL");
    const second = await LocalRuntimeDriver.open({ root: f.root, subnetPool: testSubnetPool(f.root) });
    try {
      assert.equal((await second.observe(id)).status, "running");
      await second.stop(id);
      const observed = await second.observe(id);
      assert.equal(observed.status, "stopped");
      assert.equal(observed.exitCode, undefined);
      await second.start(id);
      assert.equal(completed(await sh(id, "echo again")).stdout, "again\n");
      await second.destroy(id);
      assert.deepEqual(await hostTraces(f.driver.layout, id), []);
    } finally {
      await second.close();
    }
  });

  it("refuses bad specs before touching the host", async () => {
    const code = async (spec: SandboxSpec) =>
      f.driver.create(spec).then(
        () => "created",
        (error: { code?: string }) => error.code,
      );
    assert.equal(await code(f.spec({ id: "Bad/Id" })), "invalid_spec");
    assert.equal(await code(f.spec({ storageClass: "durable" })), "invalid_spec");
    assert.equal(await code(f.spec({ resources: { memoryMiB: 0, cpuMillis: 100, pids: 10 } })), "invalid_spec");
    assert.equal(await code(f.spec({ network: "bridge" as "none" })), "invalid_spec");
    const id = testId();
    assert.equal(await code(f.spec({ id, env: { "": "x" } })), "invalid_spec");
    assert.deepEqual(await hostTraces(f.driver.layout, id), []);
  });
});
