// The warm pool's recent images (src/drivers/runtime/local/pool.ts, pool-plan.ts) through the
// API, the reconciler and real runc, on both stores: an image other than the default becomes
// warm after a create uses it and its next create is served from the pool (its image, command
// and environment); the least recently used image is evicted (its members leave nothing on the
// host); a member of a re-pushed tag's old digest is never served for the new one.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { PooledRuntime } from "../src/drivers/runtime/local/pool.js";
import { hostTraces, type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { newSandboxId } from "../src/modules/sandboxes/service.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { eventually, sleep } from "./support/eventually.js";
import { pushMarkedImage } from "./support/registry.js";

type Json = Record<string, unknown>;
const COMMAND = ["sh", "-c", "env > /workspace/first.env; echo END >> /workspace/first.env; exec sleep 1000"];

describe("sandbox pool: recent images", { concurrency: STORE_KINDS.length }, () => {
  for (const store of STORE_KINDS) {
    describe(`sandbox pool: recent images [${store}]`, { concurrency: 1 }, () => {
      let fixture: RuntimeFixture;
      let pool: PooledRuntime;
      let t: TestApp;
      let reconciler: SandboxReconciler;
      let second: string;
      let third: string;
      const everPooled = new Set<string>();
      const created: string[] = [];
      const runIds = new Map<string, string>();
      const owner = () => t.orgA.keys.owner;
      const note = () => {
        for (const id of pool.pooledIds()) everPooled.add(id);
      };

      before(async () => {
        // Tags resolved at every prepare: a re-pushed tag is seen by the next create.
        fixture = await startRuntimeFixture(`poolrecent-${store}`, { imageTagTtlMs: 0 });
        second = `${fixture.registry.host}/test/second:latest`;
        third = `${fixture.registry.host}/test/third:latest`;
        await pushMarkedImage(fixture.registry, "test/second", "second");
        await pushMarkedImage(fixture.registry, "test/third", "third-v1");
        pool = await PooledRuntime.open(fixture.driver, {
          size: 1,
          image: fixture.busyboxRef,
          recentImages: 1,
          recentSize: 1,
          maxMembers: 3,
          memoryMiB: 128,
          cpuMillis: 1000,
          pids: 128,
          newId: newSandboxId,
        });
        t = await startTestApp(store, {
          overrides: { runtime: pool },
          config: {
            sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
          },
        });
        reconciler = new SandboxReconciler(t.c, pool, { pids: 128, retentionSeconds: 60, publicApiUrl: "http://x" });
        await reconciler.start();
        pool.startFilling();
        await pool.settled();
        note();
      });

      after(async () => {
        for (const id of created) await t?.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
        await reconciler?.idle();
        await reconciler?.stop();
        await pool?.close();
        const left: string[] = [];
        for (const id of everPooled) {
          const traces = await hostTraces(fixture.driver.layout, id);
          if (traces.length > 0) left.push(`${id}: ${traces.join(", ")}`);
        }
        await t?.close();
        await fixture?.cleanup();
        assert.deepEqual(left, [], "a pooled sandbox left traces on the host");
      });

      const create = async (body: Json) => {
        const res = await t.request("POST", "/v1/sandboxes", { key: owner(), body });
        assert.equal(res.status, 200, res.raw);
        const id = res.body.id as string;
        created.push(id);
        runIds.set(id, res.body.run_id as string);
        return id;
      };
      const waitRunning = async (id: string) => {
        const res = await t.request("GET", `/v1/sandboxes/${id}`, {
          key: owner(),
          query: { wait_state: "running", wait_timeout_seconds: "25" },
        });
        assert.equal((res.body.sandbox as Json).state, "running", res.raw);
      };
      const firstEnv = async (id: string) => {
        const file = path.join(fixture.driver.layout.sandbox(id).workspace, "first.env");
        for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
          const text = await readFile(file, "utf8").catch(() => "");
          if (text.endsWith("END\n")) return text;
          await sleep(50);
        }
        throw new Error(`the first process of ${id} wrote no environment`);
      };
      const imageFile = async (id: string) => {
        const exec = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
          key: owner(),
          body: { cmd: ["cat", "/etc/image"] },
        });
        assert.equal(exec.status, 200, exec.raw);
        return String(exec.body.stdout).trim();
      };
      const membersOf = (image: string) => pool.pooledShapes().filter((member) => member.image === image);
      const warmMember = (image: string) =>
        eventually(
          `a warm member of ${image}`,
          async () => {
            await pool.settled();
            note();
            return membersOf(image).length === 1;
          },
          180_000,
        );

      it("an image becomes warm once a create used it, and its next create is served by its member", async () => {
        assert.deepEqual(membersOf(second), [], "nothing of the second image before it is used");
        const first = await create({ image: second, command: COMMAND, network_access: "none" });
        await waitRunning(first);
        assert.equal(pool.counters.served, 0, "the first create of an image takes the normal path");
        await warmMember(second);
        const [member] = membersOf(second);
        assert.equal(member?.mode, "none");
        assert.ok(pool.cacheHints().warmImages.includes(second), "placement's hint names the warm image");
        assert.equal(pool.cacheHints().warmImages[0], fixture.busyboxRef, "the default image first");

        const served = pool.counters.served;
        const id = await create({ image: second, command: COMMAND, network_access: "none" });
        assert.equal(id, member?.id, "the create took the warm member's id");
        await waitRunning(id);
        assert.equal(pool.counters.served, served + 1, "served from the pool");
        const env = await firstEnv(id);
        assert.match(env, new RegExp(`^WARREN_SANDBOX_ID=${id}$`, "m"));
        assert.match(env, new RegExp(`^WARREN_RUN_ID=${runIds.get(id)}$`, "m"), "the create's own environment");
        assert.match(env, /^WARREN_SANDBOX_TOKEN=./m);
        assert.match(env, /^IMAGE_MARKER=second$/m, "the image's environment");
        assert.equal(await imageFile(id), "second", "the second image's files");
        // Claimed, the member is replaced.
        await warmMember(second);
      });

      it("the least recently used image is evicted: its members go and leave nothing on the host", async () => {
        const evicted = membersOf(second).map((member) => member.id);
        assert.equal(evicted.length, 1);
        const evictions = pool.counters.evicted;
        const id = await create({ image: third, command: COMMAND, network_access: "none" });
        await waitRunning(id);
        assert.equal(await imageFile(id), "third-v1");
        await warmMember(third);
        assert.deepEqual(membersOf(second), [], "the second image is no longer recent");
        assert.ok(pool.counters.evicted > evictions);
        for (const gone of evicted) {
          await eventually(
            `${gone} left nothing`,
            async () => (await hostTraces(fixture.driver.layout, gone)).length === 0,
            60_000,
          );
        }
        assert.ok(!pool.cacheHints().warmImages.includes(second), "no longer published as warm");
        assert.equal(pool.pooledShapes().length, 3, "the budget: one default member per mode and the recent image's");
      });

      it("a member of a re-pushed tag's old digest is not served for the new digest", async () => {
        const [old] = membersOf(third);
        assert.ok(old);
        const pushed = await pushMarkedImage(fixture.registry, "test/third", "third-v2");
        assert.notEqual(pushed.digest, old.digest);
        const served = pool.counters.served;
        const id = await create({ image: third, command: COMMAND, network_access: "none" });
        await waitRunning(id);
        assert.equal(pool.counters.served, served, "the old digest's member served nothing");
        assert.equal(await imageFile(id), "third-v2", "the sandbox runs the new digest");
        assert.match(await firstEnv(id), /^IMAGE_MARKER=third-v2$/m);
        await eventually(
          "the pool holds the new digest only",
          async () => {
            await pool.settled();
            note();
            const members = membersOf(third);
            return members.length === 1 && members[0]?.digest === pushed.digest;
          },
          180_000,
        );
        const served2 = pool.counters.served;
        const next = await create({ image: third, command: COMMAND, network_access: "none" });
        await waitRunning(next);
        assert.equal(pool.counters.served, served2 + 1, "the new digest's member is served");
        assert.equal(await imageFile(next), "third-v2");
      });
    });
  }
});
