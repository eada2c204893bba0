// The pool of started default-shape sandboxes (src/drivers/runtime/local/pool.ts) through
// the API, the reconciler and real runc, on both stores: a claimed sandbox runs its own
// command with its own id and credential, the pool refills, other shapes and programs runc
// would refuse take the normal path, a restart and close() leave nothing on the host.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { LocalRuntimeDriver } from "../src/drivers/runtime/local/driver.js";
import { PooledRuntime } from "../src/drivers/runtime/local/pool.js";
import { loadRecord } from "../src/drivers/runtime/local/records.js";
import {
  hostTraces,
  type RuntimeFixture,
  startRuntimeFixture,
  testSubnetPool,
} from "../src/drivers/runtime/local/test-support.js";
import { newSandboxId } from "../src/modules/sandboxes/service.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { eventually, sleep } from "./support/eventually.js";

type Json = Record<string, unknown>;

describe("sandbox pool", { concurrency: STORE_KINDS.length }, () => {
  for (const store of STORE_KINDS) {
    // One test at a time: each reads and changes the pool's contents.
    describe(`sandbox pool [${store}]`, { concurrency: 1 }, () => {
      let fixture: RuntimeFixture;
      let pool: PooledRuntime;
      let t: TestApp;
      let reconciler: SandboxReconciler;
      const everPooled = new Set<string>();
      const created: string[] = [];
      /** Reconcilers of the "previous process": stopping one stops the queue the service kicks, so last. */
      const retired: SandboxReconciler[] = [];
      const owner = () => t.orgA.keys.owner;

      const openPool = (driver: LocalRuntimeDriver) =>
        PooledRuntime.open(driver, {
          size: 1,
          image: fixture.busyboxRef,
          memoryMiB: 128,
          cpuMillis: 1000,
          pids: 128,
          newId: newSandboxId,
        });
      const startReconciler = async () => {
        reconciler = new SandboxReconciler(t.c, pool, { pids: 128, retentionSeconds: 60, publicApiUrl: "http://x" });
        await reconciler.start();
        pool.startFilling();
        await pool.settled();
        for (const id of pool.pooledIds()) everPooled.add(id);
      };

      before(async () => {
        fixture = await startRuntimeFixture(`pool-${store}`);
        pool = await openPool(fixture.driver);
        t = await startTestApp(store, {
          overrides: { runtime: pool },
          config: {
            sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
          },
        });
        await startReconciler();
      });

      after(async () => {
        for (const id of created) await t?.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
        await reconciler?.idle();
        await reconciler?.stop();
        for (const old of retired) await old.stop();
        await pool?.close();
        const left: string[] = [];
        for (const id of everPooled) {
          const traces = await hostTraces(fixture.driver.layout, id);
          if (traces.length > 0)
            left.push(`${id} (${created.includes(id) ? "created" : "pooled"}): ${traces.length} traces`);
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
        return { id, runId: res.body.run_id as string };
      };
      const waitFor = async (id: string, state: string) => {
        const res = await t.request("GET", `/v1/sandboxes/${id}`, {
          key: owner(),
          query: { wait_state: state, wait_timeout_seconds: "25" },
        });
        const sandbox = res.body.sandbox as Json;
        assert.equal(sandbox.state, state, res.raw);
        return sandbox;
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
      const COMMAND = ["sh", "-c", "env > /workspace/first.env; echo END >> /workspace/first.env; exec sleep 1000"];

      it("a default-shape create takes a pooled sandbox, which runs its own command with its own id and credential", async () => {
        const pooled = new Set(pool.pooledIds());
        assert.equal(pooled.size, 2, "one per network mode");
        for (const network of ["none", "public"]) {
          const { id, runId } = await create({ command: COMMAND, network_access: network });
          assert.ok(pooled.has(id), `${id} did not come from the pool`);
          await waitFor(id, "running");
          const env = await firstEnv(id);
          assert.match(env, new RegExp(`^WARREN_SANDBOX_ID=${id}$`, "m"));
          assert.match(env, new RegExp(`^WARREN_RUN_ID=${runId}$`, "m"));
          assert.match(env, /^HOSTNAME=sbx-/m);
          // Claimed, it weighs as its organization's (cpu-fairness.ts), not as the pool's.
          assert.equal((await loadRecord(fixture.driver.layout, id)).record.cpuGroup, t.orgA.id);
          const token = /^WARREN_SANDBOX_TOKEN=(.+)$/m.exec(env)?.[1];
          assert.ok(token, env);
          const whoami = await t.request("GET", "/v1/whoami", { key: token });
          assert.equal(whoami.status, 200, whoami.raw);
          const exec = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
            key: owner(),
            body: { cmd: ["sh", "-c", "hostname; echo $WARREN_SANDBOX_ID"] },
          });
          assert.equal(exec.status, 200, exec.raw);
          const [hostname, envId] = String(exec.body.stdout).split("\n");
          assert.equal(hostname, id);
          assert.equal(envId, id);
        }
      });

      it("refills in the background, with new ids", async () => {
        await eventually(
          "the pool refilled",
          async () => {
            await pool.settled();
            return pool.pooledIds().length === 2;
          },
          120_000,
        ).catch(() => undefined); // the assertion below shows what it holds
        const now = pool.pooledIds();
        assert.equal(now.length, 2);
        for (const id of now) assert.ok(!created.includes(id));
        for (const id of now) everPooled.add(id);
      });

      it("another shape goes the normal path", async () => {
        const pooled = new Set(pool.pooledIds());
        const { id } = await create({ command: COMMAND, network_access: "none", resources: { memory_mb: 256 } });
        assert.ok(!pooled.has(id));
        await waitFor(id, "running");
        assert.match(await firstEnv(id), new RegExp(`^WARREN_SANDBOX_ID=${id}$`, "m"));
        assert.deepEqual(new Set(pool.pooledIds()), pooled, "the pool was not touched");
      });

      it("a missing program ends as it does without the pool", async () => {
        const pooled = new Set(pool.pooledIds());
        const viaPool = await create({ command: ["/no/such/program"], network_access: "none" });
        assert.ok(pooled.has(viaPool.id));
        const normal = await create({
          command: ["/no/such/program"],
          network_access: "none",
          resources: { memory_mb: 256 },
        });
        assert.ok(!pooled.has(normal.id));
        const settle = async (id: string) => {
          for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
            const res = await t.request("GET", `/v1/sandboxes/${id}`, { key: owner() });
            const sandbox = res.body.sandbox as Json;
            if (sandbox.state !== "requested" && sandbox.state !== "materializing" && sandbox.state !== "ready")
              if (sandbox.state !== "running") return sandbox;
            await sleep(100);
          }
          throw new Error(`${id} did not settle`);
        };
        const [a, b] = [await settle(viaPool.id), await settle(normal.id)];
        assert.equal(a.state, b.state, `${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
        assert.deepEqual(a.state_reason, b.state_reason);
        await pool.settled();
        for (const pooledId of pool.pooledIds()) everPooled.add(pooledId);
      });

      it("a restart removes the previous process's pool and starts a claimed sandbox normally", async () => {
        // The server dies between the claim and the start: the sandbox's launcher still waits.
        const takenId = pool.take({
          image: fixture.busyboxRef,
          memoryMiB: 128,
          cpuMillis: 1000,
          storageClass: "standard",
          workspaceCapacityGiB: null,
          network: "none",
        });
        assert.ok(takenId);
        await reconciler.idle();
        retired.push(reconciler);
        // The previous process is dead: nothing of it reacts any more (its exit events included).
        t.c.reconcileQueue.setWorker(async () => undefined);
        await pool.settled();
        const previous = pool.pooledIds();
        for (const id of previous) everPooled.add(id);
        const image = await fixture.driver.prepareImage(fixture.busyboxRef);
        await pool.create({
          id: takenId,
          source: { kind: "image", image },
          command: COMMAND,
          env: { WARREN_SANDBOX_ID: takenId, WARREN_SANDBOX_TOKEN: "claimed" },
          resources: { memoryMiB: 128, cpuMillis: 1000, pids: 128 },
          storageClass: "standard",
          network: "none",
        });
        // A second driver on the same root is the restarted server; the store never knew these ids.
        const driver = await LocalRuntimeDriver.open({
          root: fixture.root,
          subnetPool: testSubnetPool(fixture.root),
        });
        pool = await openPool(driver);
        assert.equal((await driver.observe(takenId)).status, "stopped", "the waiting launcher was stopped");
        await driver.start(takenId);
        const env = await firstEnv(takenId);
        assert.match(env, /^WARREN_SANDBOX_TOKEN=claimed$/m);
        await driver.destroy(takenId);
        await startReconciler();
        for (const id of previous) assert.deepEqual(await hostTraces(driver.layout, id), [], `${id} was left`);
        assert.equal(pool.pooledIds().length, 2);
      });
    });
  }
});
