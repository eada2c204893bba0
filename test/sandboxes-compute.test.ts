// Memory and CPU admitted against the host (issue 24 A9), as a hostile tenant meets it on real
// runc sandboxes: one sandbox asking for more than the whole host is 422
// `unsupported_capability`; one that would take the running sandboxes of every organization
// past the host's overcommit is 503 `unavailable` with Retry-After (a create and a wake alike),
// while a sandbox that fits is still admitted. The host's numbers never reach the tenant. And
// the CPU is shared between organizations, not between sandboxes (cpu-fairness.ts): one
// organization's many busy sandboxes leave another's one about half.
import assert from "node:assert/strict";
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { cpuUsageMicros, hostCgroupHierarchies } from "../src/drivers/runtime/local/cgroups.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { STORE_KINDS, type TestApp } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { eventually } from "./support/eventually.js";
import { startRuntimeApp } from "./support/runtime-app.js";

/**
 * Moves every cgroup to the first CPU of its parent's cpuset (v1 cpuset hierarchy); false
 * when the host has none to write (then the test is the 2-CPU case of the issue, unpinned).
 */
async function pinToOneCpu(cgroupPaths: string[]): Promise<boolean> {
  const cpuset = (await hostCgroupHierarchies()).find((h) => h.controllers.includes("cpuset"));
  const first = cgroupPaths[0];
  if (!cpuset || !first) return false;
  const parent = await readFile(path.join(cpuset.mountPoint, path.posix.dirname(first), "cpuset.cpus"), "utf8");
  const cpu = /^\d+/.exec(parent.trim())?.[0];
  if (cpu === undefined) return false;
  for (const cgroup of cgroupPaths) await writeFile(path.join(cpuset.mountPoint, cgroup, "cpuset.cpus"), cpu);
  return true;
}

for (const store of STORE_KINDS) {
  describe(`hostile sandbox: compute beyond the host [${store}]`, () => {
    let fixture: RuntimeFixture;
    let t: TestApp;
    let reconciler: SandboxReconciler;

    before(async () => {
      fixture = await startRuntimeFixture(`compute-${store}`);
      ({ t, reconciler } = await startRuntimeApp(store, fixture, {
        sandbox: { memoryOvercommit: 1, cpuOvercommit: 8 },
        reconciler: { publicApiUrl: undefined },
      }));
    });
    after(async () => {
      await reconciler?.stop();
      for (const id of (await fixture?.driver.list()) ?? []) await fixture.driver.destroy(id).catch(() => undefined);
      await t?.close();
      await fixture?.cleanup();
    });

    const create = (key: string, resources: Record<string, number> = {}) =>
      t.request("POST", "/v1/sandboxes", {
        key,
        body: { command: ["sleep", "3600"], network_access: "none", resources },
      });
    const waitFor = async (key: string, id: string, state: string) => {
      const res = await t.request("GET", `/v1/sandboxes/${id}`, {
        key,
        query: { wait_state: state, wait_timeout_seconds: "25" },
      });
      assert.equal((res.body.sandbox as { state: string }).state, state, res.raw);
    };
    const host = () => {
      const compute = fixture.driver.hostCompute();
      assert.ok(compute.memoryMiB > 1024 && compute.cpuMillis >= 1000, JSON.stringify(compute));
      return compute;
    };

    it("refuses one sandbox with more memory or CPUs than the whole host (422)", async () => {
      const { memoryMiB, cpuMillis } = host();
      const key = t.orgA.keys.owner;
      const memory = await create(key, { memory_mb: 1_048_576 });
      if (memoryMiB < 1_048_576) {
        assertError(memory, 422, "unsupported_capability");
        assert.doesNotMatch(String(memory.body.message), /\d{3,}/, "no host numbers");
      }
      if (cpuMillis < 128_000) assertError(await create(key, { cpu_millis: 128_000 }), 422, "unsupported_capability");
      assertError(await create(key, { memory_mb: memoryMiB + 1 }), 422, "unsupported_capability");
      assertError(await create(key, { cpu_millis: cpuMillis + 1 }), 422, "unsupported_capability");
      // The whole host for one sandbox is still a shape the host has.
      const whole = await create(key, { cpu_millis: cpuMillis });
      assert.equal(whole.status, 200, whole.raw);
      await t.request("DELETE", `/v1/sandboxes/${whole.body.id}`, { key });
    });

    it("refuses a create or a wake past the host's overcommit (503, Retry-After), not one that fits", async () => {
      const big = Math.floor(host().memoryMiB * 0.6);
      const [a, b] = [t.orgA.keys.owner, t.orgB.keys.owner];
      const first = await create(a, { memory_mb: big });
      assert.equal(first.status, 200, first.raw);
      const firstId = first.body.id as string;
      // Another organization's sandbox of that size would take the host past its memory.
      const second = await create(b, { memory_mb: big });
      assertError(second, 503, "unavailable");
      assert.equal(second.headers["retry-after"], "30");
      assert.doesNotMatch(String(second.body.message), /\d{3,}/, "no host numbers");
      // A small one still fits.
      const small = await create(b);
      assert.equal(small.status, 200, small.raw);
      // Once the first is stopped its memory is free again, and its wake is what no longer fits.
      await waitFor(a, firstId, "running");
      const stop = await t.request("PATCH", `/v1/sandboxes/${firstId}`, { key: a, body: { state: "stopped" } });
      assert.equal(stop.status, 200, stop.raw);
      await waitFor(a, firstId, "stopped");
      const third = await create(b, { memory_mb: big });
      assert.equal(third.status, 200, third.raw);
      const wake = await t.request("PATCH", `/v1/sandboxes/${firstId}`, { key: a, body: { state: "running" } });
      assertError(wake, 503, "unavailable");
      for (const [key, id] of [
        [a, firstId],
        [b, small.body.id],
        [b, third.body.id],
      ] as const) {
        await t.request("DELETE", `/v1/sandboxes/${id}`, { key });
      }
    });

    it("shares the CPU fairly between organizations, not between sandboxes", async (ctx) => {
      const [a, b] = [t.orgA.keys.owner, t.orgB.keys.owner];
      // A sandbox of one CPU running one busy loop.
      const busy = async (key: string) => {
        const res = await t.request("POST", "/v1/sandboxes", {
          key,
          body: {
            command: ["sh", "-c", "while :; do :; done"],
            network_access: "none",
            resources: { cpu_millis: 1000 },
          },
        });
        assert.equal(res.status, 200, res.raw);
        return res.body.id as string;
      };
      // Four of organization A against one of B, all on one CPU (so the weights alone decide,
      // not how the kernel spreads tasks over CPUs beside whatever else the machine runs). Per
      // sandbox B would get a fifth; per organization, half.
      const ofA: string[] = [];
      for (let i = 0; i < 4; i++) ofA.push(await busy(a));
      const ofB = await busy(b);
      try {
        for (const id of ofA) await waitFor(a, id, "running");
        await waitFor(b, ofB, "running");
        const all = [...ofA, ofB];
        const pinned = await pinToOneCpu(all.map((id) => fixture.driver.layout.cgroupPath(id)));
        const usage = async () => {
          const micros = new Map<string, number>();
          for (const id of all) micros.set(id, (await cpuUsageMicros(fixture.driver.layout.cgroupPath(id))) ?? 0);
          return micros;
        };
        // Every loop has run (weights are set after the start), then a window of CPU time used by
        // the sandboxes: B's part of what they used, whatever else the machine runs meanwhile.
        const base = await eventually(
          "every sandbox to use CPU",
          async () => {
            const now = await usage();
            return [...now.values()].every((micros) => micros > 50_000) ? now : null;
          },
          120_000,
        );
        const window = 2_000_000;
        const used = await eventually(
          "the sandboxes to use a window of CPU time",
          async () => {
            const now = await usage();
            const delta = new Map(all.map((id) => [id, (now.get(id) ?? 0) - (base.get(id) ?? 0)]));
            return [...delta.values()].reduce((n, d) => n + d, 0) >= window ? delta : null;
          },
          300_000,
        );
        const total = [...used.values()].reduce((n, d) => n + d, 0);
        const shareOfB = (used.get(ofB) ?? 0) / total;
        // Fair: about half of what the sandboxes used; per sandbox it would be a fifth.
        ctx.diagnostic(
          `organization B used ${shareOfB.toFixed(3)} of ${total} us of the sandboxes' CPU time (${pinned ? "on one CPU" : "not pinned"})`,
        );
        assert.ok(shareOfB >= 0.35, `organization B's share ${shareOfB.toFixed(3)} of ${total} us`);
      } finally {
        for (const id of ofA) await t.request("DELETE", `/v1/sandboxes/${id}`, { key: a });
        await t.request("DELETE", `/v1/sandboxes/${ofB}`, { key: b });
      }
    });
  });
}
