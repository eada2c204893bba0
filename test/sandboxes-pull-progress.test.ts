// A sandbox whose image is being pulled shows how far the pull has come (issue 24): its
// record carries `progress` (bytes of the layer blobs) while it is materializing, and not
// after. The registry holds back the second half of the image's big layer until the test has
// seen the progress, so nothing here depends on speed.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { encodeTar } from "../src/drivers/runtime/image/tar.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { busyboxLayer, pushImage } from "./support/registry.js";

for (const store of STORE_KINDS) {
  describe(`sandbox pull progress [${store}]`, () => {
    let fixture: RuntimeFixture;
    let t: TestApp;
    let reconciler: SandboxReconciler;
    let held: { digest: string; size: number } | null = null;
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const fetchImpl: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      const url = new URL(input instanceof Request ? input.url : String(input));
      const layer = held;
      if (!layer || !url.pathname.endsWith(`/blobs/${layer.digest}`) || !response.body) return response;
      const reader = response.body.getReader();
      let sent = 0;
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (sent >= layer.size / 2) await released;
          const next = await reader.read();
          if (next.done) controller.close();
          else {
            sent += next.value.length;
            controller.enqueue(next.value);
          }
        },
      });
      return new Response(body, { status: response.status, headers: response.headers });
    };

    before(async () => {
      fixture = await startRuntimeFixture(`progress-${store}`, { registry: { fetch: fetchImpl } });
      t = await startTestApp(store, {
        overrides: { runtime: fixture.driver },
        config: {
          sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
        },
      });
      reconciler = new SandboxReconciler(t.c, fixture.driver, {
        pids: 128,
        retentionSeconds: 3600,
        publicApiUrl: "http://127.0.0.1:1",
      });
      await reconciler.start();
    });

    after(async () => {
      release();
      await reconciler?.idle();
      await reconciler?.stop();
      await t?.close();
      await fixture?.cleanup();
    });

    it("shows the bytes of the image's layers while materializing, and no progress once running", async () => {
      const big = encodeTar(
        Array.from({ length: 32 }, (_, i) => ({
          name: `data/f${i}`,
          type: "file" as const,
          data: randomBytes(64 * 1024),
        })),
      );
      const pushed = await pushImage(fixture.registry.url, "test/progress", "latest", {
        layers: [busyboxLayer(), big],
      });
      const layer = pushed.layers[1] as { digest: string; size: number };
      held = layer;
      const total = pushed.layers.reduce((sum, l) => sum + l.size, 0);
      const key = t.orgA.keys.owner;
      const created = await t.request("POST", "/v1/sandboxes", {
        key,
        body: {
          image: `${fixture.registry.host}/test/progress:latest`,
          network_access: "none",
          command: ["sleep", "1000000"],
        },
      });
      assert.equal(created.status, 200, created.raw);
      const id = created.body.id as string;
      try {
        let seen: SandboxJson | undefined;
        const deadline = Date.now() + 120_000;
        for (;;) {
          const res = await t.request("GET", `/v1/sandboxes/${id}`, { key });
          assert.equal(res.status, 200, res.raw);
          const sandbox = res.body.sandbox as SandboxJson;
          if (sandbox.progress && sandbox.progress.bytes_done > 0) {
            seen = sandbox;
            break;
          }
          assert.ok(Date.now() < deadline, `no progress shown: ${res.raw}`);
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        assert.equal(seen.state, "materializing");
        assert.equal(seen.progress?.phase, "pulling_image");
        assert.equal(seen.progress?.bytes_total, total);
        assert.ok((seen.progress?.bytes_done ?? 0) < total, JSON.stringify(seen.progress));
        release();
        let running: SandboxJson | undefined;
        const runDeadline = Date.now() + 180_000;
        while (running?.state !== "running") {
          assert.ok(Date.now() < runDeadline, `not running: ${JSON.stringify(running)}`);
          const res = await t.request("GET", `/v1/sandboxes/${id}`, {
            key,
            query: { wait_state: "running", wait_timeout_seconds: "25" },
          });
          assert.equal(res.status, 200, res.raw);
          running = res.body.sandbox as SandboxJson;
          assert.ok(!["failed", "attention"].includes(running.state), res.raw);
        }
        assert.equal(running.progress, undefined);
      } finally {
        release();
        await t.request("DELETE", `/v1/sandboxes/${id}`, { key });
      }
    });
  });
}
