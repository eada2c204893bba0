// Memory and CPU admitted against the host (issue 24 A9), as a hostile tenant meets it on real
// runc sandboxes: one sandbox asking for more than the whole host is 422
// `unsupported_capability`; one that would take the running sandboxes of every organization
// past the host's overcommit is 503 `unavailable` with Retry-After (a create and a wake alike),
// while a sandbox that fits is still admitted. The host's numbers never reach the tenant.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { assertError } from "./support/assertions.js";

for (const store of STORE_KINDS) {
  describe(`hostile sandbox: compute beyond the host [${store}]`, () => {
    let fixture: RuntimeFixture;
    let t: TestApp;
    let reconciler: SandboxReconciler;

    before(async () => {
      fixture = await startRuntimeFixture(`compute-${store}`);
      t = await startTestApp(store, {
        overrides: { runtime: fixture.driver },
        config: {
          sandbox: {
            ...loadConfig({}).sandbox,
            defaultImage: fixture.busyboxRef,
            memoryMiB: 128,
            pids: 128,
            memoryOvercommit: 1,
            cpuOvercommit: 8,
          },
        },
      });
      reconciler = new SandboxReconciler(t.c, fixture.driver, { pids: 128, retentionSeconds: 3600 });
      await reconciler.start();
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
  });
}
