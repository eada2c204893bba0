// Two Warren servers as two hosts of one deployment (test/support/multi-host.ts): each in its
// own network namespace with its own address, data dir and runtime root, over one PostgreSQL
// database and one S3 bucket. What must hold beside each other today: each host creates and
// runs sandboxes through its own API, with host-global names (cgroups, namespaces, user
// namespace owners) that never collide. What a non-owner does to another host's sandboxes is
// test/multi-host-ownership.test.ts.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readdir } from "node:fs/promises";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { PROJECT_DIR } from "../scripts/server-bundle.js";
import { linkNames } from "../src/drivers/runtime/local/network.js";
import { exists } from "../src/lib/fs.js";
import { eventually } from "./support/eventually.js";
import { type Host, type MultiHost, startMultiHost, sweepMultiHostLeftovers } from "./support/multi-host.js";

describe("two hosts on one store [postgres, s3]", () => {
  let cluster: MultiHost | undefined;

  before(async () => {
    cluster = await startMultiHost("smoke", { hosts: 2 });
  });

  after(async () => {
    await cluster?.cleanup();
  });

  it("each host creates and execs in its own sandbox through its own API", async () => {
    const [a, b] = (cluster as MultiHost).hosts as [Host, Host];
    // Public networks: each host's veths, routes and nftables table are in its own namespace.
    const ids = await Promise.all([
      a.createSandbox({ network_access: "public" }),
      b.createSandbox({ network_access: "public" }),
    ]);
    const [onA, onB] = ids as [string, string];
    await Promise.all([a.waitFor(onA, "running"), b.waitFor(onB, "running")]);
    for (const [host, id] of [
      [a, onA],
      [b, onB],
    ] as const) {
      const res = await host.exec(id, ["sh", "-c", "echo hello from $(hostname)"]);
      assert.equal(res.status, 200, res.raw);
      assert.equal(res.body.exit, 0, res.raw);
      assert.equal(res.body.stdout, `hello from ${id}\n`);
      // The container is the host's own: in its runtime root, not the other's.
      assert.ok(
        (await host.containers()).some((c) => c.id === id && c.status === "running"),
        `${id} on ${host.name}`,
      );
    }
    assert.ok(!(await a.containers()).some((c) => c.id === onB), "B's sandbox is not in A's runtime");
    assert.ok(!(await b.containers()).some((c) => c.id === onA), "A's sandbox is not in B's runtime");
    // Delete both through their own hosts: gone from the store and from each runtime.
    for (const [host, id] of [
      [a, onA],
      [b, onB],
    ] as const) {
      const res = await host.api("DELETE", `/v1/sandboxes/${id}`);
      assert.ok(res.status === 200 || res.status === 202, res.raw);
    }
    for (const [host, id] of [
      [a, onA],
      [b, onB],
    ] as const) {
      await eventually(`${id} gone from ${host.name}`, async () => {
        const res = await host.api("GET", `/v1/sandboxes/${id}`);
        return (res.status === 404 || (res.body.sandbox as { state?: string })?.state === "terminated") && res;
      });
      await eventually(`${id}'s container and veth gone from ${host.name}`, async () => {
        const links = await host.links();
        return !(await host.containers()).some((c) => c.id === id) && !links.some((l) => l.startsWith("wr")) && true;
      });
    }
  });

  it("a network switch on a host acts on the links of the host's own namespace", async () => {
    const [a] = (cluster as MultiHost).hosts as [Host];
    const id = await a.createSandbox({ network_access: "public" });
    await a.waitFor(id, "running");
    const veths = async () => (await a.links()).filter((link) => link.startsWith("wr"));
    assert.equal((await veths()).length, 1, "the public sandbox's veth is in A's namespace");
    const none = await a.api("PATCH", `/v1/sandboxes/${id}`, { network_access: "none" });
    assert.equal(none.status, 200, none.raw);
    await eventually("the veth to go with the switch to none", async () => (await veths()).length === 0, 60_000);
    const back = await a.api("PATCH", `/v1/sandboxes/${id}`, { network_access: "gateway_only" });
    assert.equal(back.status, 200, back.raw);
    await eventually("a veth again for gateway_only", async () => (await veths()).length === 1, 60_000);
    const res = await a.api("DELETE", `/v1/sandboxes/${id}`);
    assert.ok([200, 202].includes(res.status), res.raw);
    await eventually("no veth once deleted", async () => (await veths()).length === 0, 60_000);
  });

  it("partition() cuts a host off the bridge and heal() brings it back", async () => {
    const [, b] = (cluster as MultiHost).hosts as [Host, Host];
    await b.partition();
    try {
      const cut = await fetch(`${b.url}/readyz`, { signal: AbortSignal.timeout(2000) }).then(
        (res) => `answered ${res.status}`,
        () => "unreachable",
      );
      assert.equal(cut, "unreachable");
    } finally {
      await b.heal();
    }
    await eventually("B to answer again", async () => (await fetch(`${b.url}/readyz`)).status === 200, 60_000);
    const res = await b.api("GET", "/v1/sandboxes");
    assert.equal(res.status, 200, res.raw);
  });

  it("a start sweeps what a run killed without its after hooks left: its servers, namespaces, links and dirs", async () => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", path.join("test", "support", "multi-host-crash-child.ts")],
      {
        cwd: PROJECT_DIR,
        detached: true,
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    const group = child.pid as number;
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout as NodeJS.ReadableStream }).once("line", resolve);
        child.once("exit", (code) => reject(new Error(`the crash child exited (${code}) before starting`)));
      });
      const made = JSON.parse(line) as {
        pid: number;
        serverPid: number;
        netns: string;
        veth: string;
        runtimeRoot: string;
      };
      process.kill(made.pid, "SIGKILL");
      await eventually("the child to die", async () => !(await exists(`/proc/${made.pid}/cmdline`)) || null);
      assert.ok(await exists(`/proc/${made.serverPid}`), "its server outlives it");
      await sweepMultiHostLeftovers();
      await eventually(
        "its server to be killed",
        async () => !(await exists(`/proc/${made.serverPid}/cmdline`)),
        30_000,
      );
      assert.ok(!(await exists(path.join("/run/netns", made.netns))), "its namespace is gone");
      assert.ok(!(await linkNames()).includes(made.veth), "its veth is gone");
      assert.ok(!(await exists(made.runtimeRoot)), "its runtime root is gone");
      const bundles = (await readdir(path.join(PROJECT_DIR, "build"))).filter((name) => name.includes(`-${made.pid}.`));
      assert.deepEqual(bundles, [], "its server bundle is gone");
    } finally {
      // Its registry and s3rver (not the harness's to sweep) go with its process group.
      try {
        process.kill(-group, "SIGKILL");
      } catch {
        // already gone
      }
    }
  });
});
