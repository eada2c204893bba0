// A sandbox whose image is being pulled shows how far the pull has come (issue 24): its
// record carries `progress` (bytes of the layer blobs) while it is materializing, and not
// after. The registry holds back the second half of the image's big layer until the test has
// seen the progress, so nothing here depends on speed. The SDK's waitUntil reports it to
// onProgress, `warren sandbox get` prints it, and `warren sandbox create` on a terminal draws
// it as its progress line (run under script(1) for a pseudo-terminal).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { type SandboxRecord, Warren } from "../packages/sdk/src/index.js";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { encodeTar } from "../src/drivers/runtime/image/tar.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { ensureCliBuilt, runCli, WARREN_BIN } from "./support/cli.js";
import { eventually } from "./support/eventually.js";
import { freePort } from "./support/ports.js";
import { busyboxLayer, pushImage } from "./support/registry.js";

// The compiled CLI, as users run it (built when stale).
before(() => ensureCliBuilt());

/** A layer of `files` random 64 KiB files (big enough that half of it is a visible step). */
const bigLayer = (files: number) =>
  encodeTar(
    Array.from({ length: files }, (_, i) => ({
      name: `data/f${i}`,
      type: "file" as const,
      data: randomBytes(64 * 1024),
    })),
  );
const megabytes = (bytes: number) => (bytes / 1e6).toFixed(1);

for (const store of STORE_KINDS) {
  describe(`sandbox pull progress [${store}]`, () => {
    let fixture: RuntimeFixture;
    let t: TestApp;
    let reconciler: SandboxReconciler;
    let held: { digest: string; size: number } | null = null;
    let release: () => void = () => undefined;
    let released: Promise<void> = Promise.resolve();
    /** Holds the second half of `layer` back until release() (one layer at a time). */
    const hold = (layer: { digest: string; size: number }) => {
      released = new Promise<void>((resolve) => {
        release = resolve;
      });
      held = layer;
    };
    let url = "";
    const fetchImpl: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      const url = new URL(input instanceof Request ? input.url : String(input));
      const layer = held;
      if (!layer || !url.pathname.endsWith(`/blobs/${layer.digest}`) || !response.body) return response;
      const reader = response.body.getReader();
      const waitFor = released;
      let sent = 0;
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (sent >= layer.size / 2) await waitFor;
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
      const port = await freePort();
      url = `http://127.0.0.1:${port}`;
      await t.app.listen({ host: "127.0.0.1", port });
    });

    after(async () => {
      release();
      await reconciler?.idle();
      await reconciler?.stop();
      await t?.close();
      await fixture?.cleanup();
    });

    it("shows the bytes of the image's layers while materializing, and no progress once running", async () => {
      const pushed = await pushImage(fixture.registry.url, "test/progress", "latest", {
        layers: [busyboxLayer(), bigLayer(32)],
      });
      hold(pushed.layers[1] as { digest: string; size: number });
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

    it("reaches the SDK's onProgress, `warren sandbox get` and `warren sandbox create`'s line on a terminal", async () => {
      const pushed = await pushImage(fixture.registry.url, "test/progress-cli", "latest", {
        layers: [busyboxLayer(), bigLayer(40)],
      });
      hold(pushed.layers[1] as { digest: string; size: number });
      const total = pushed.layers.reduce((sum, l) => sum + l.size, 0);
      const shownTotal = megabytes(total).replace(".", "\\.");
      const key = t.orgA.keys.owner;
      const image = `${fixture.registry.host}/test/progress-cli:latest`;
      const home = await mkdtemp(path.join(os.tmpdir(), "warren-progress-cli-"));
      const env = { WARREN_API_URL: url, WARREN_API_KEY: key };
      // script(1) gives the CLI a pseudo-terminal (its progress line is drawn only on one);
      // what the CLI writes to stdout and stderr arrives merged on script's stdout.
      const cli = spawn(
        "script",
        [
          "-qfec",
          `${process.execPath} ${WARREN_BIN} sandbox create --image ${image} --network none -- sleep 1000000`,
          "/dev/null",
        ],
        { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home, ...env }, stdio: ["pipe", "pipe", "pipe"] },
      );
      let terminal = "";
      cli.stdout.on("data", (chunk) => {
        terminal += chunk;
      });
      const exited = new Promise<number>((resolve) => cli.once("close", (code) => resolve(code ?? 1)));
      const ids: string[] = [];
      try {
        const id = await eventually(
          "the CLI's sandbox",
          async () => {
            const res = await t.request("GET", "/v1/sandboxes", { key });
            const rows = (res.body.sandboxes ?? []) as SandboxJson[];
            return rows.find((row) => "image" in row && row.image === image)?.id;
          },
          120_000,
        );
        ids.push(id);
        const warren = new Warren({ apiKey: key, baseUrl: url });
        const sandbox = await warren.sandboxes.get(id);
        const reported: NonNullable<SandboxRecord["progress"]>[] = [];
        const waiting = sandbox.waitUntil("running", {
          timeoutSeconds: 600,
          onProgress: (progress) => reported.push(progress),
        });
        const first = await eventually("a call of onProgress", async () => reported[0], 120_000);
        assert.equal(first.phase, "pulling_image");
        assert.equal(first.bytes_total, total);
        assert.ok(first.bytes_done > 0 && first.bytes_done < total, JSON.stringify(first));

        const got = await runCli(["sandbox", "get", id], { home, env });
        assert.equal(got.code, 0, `stdout: ${got.stdout}\nstderr: ${got.stderr}`);
        assert.match(got.stdout, new RegExp(`image \\d+\\.\\d of ${shownTotal} MB`), got.stdout);

        await eventually("the CLI's progress line", async () => terminal.includes("materializing, image "), 120_000);
        assert.match(terminal, new RegExp(`waiting for running: materializing, image \\d+\\.\\d of ${shownTotal} MB`));

        release();
        const record = await waiting;
        assert.equal(record.state, "running");
        assert.equal(record.progress, undefined);
        assert.equal(await exited, 0, terminal);
        assert.ok(terminal.includes(id), terminal);
      } finally {
        release();
        cli.kill("SIGKILL");
        for (const id of ids) await t.request("DELETE", `/v1/sandboxes/${id}`, { key });
        await rm(home, { recursive: true, force: true });
      }
    });
  });
}
