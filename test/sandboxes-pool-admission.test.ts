// Warm-pool refills are admitted against the host as creates are (host-admission.ts's
// admitPoolMember; docs/api-decisions.md "Host admission is a reservation"): a pool member
// is made only when the host can back it beside every live row's reservation, requested
// sandboxes that have nothing on the host yet included. On a 7 GiB tmpfs host (1.5 GiB
// reserved, nothing overcommitted: ~5.4 GiB to back, 2 GiB per sandbox) two requested
// sandboxes leave no room for a pool member; once they are deleted, the pool fills.
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { PooledRuntime } from "../src/drivers/runtime/local/pool.js";
import {
  closeFixtureLeavingNothing,
  type RuntimeFixture,
  startRuntimeFixture,
} from "../src/drivers/runtime/local/test-support.js";
import { createLogger } from "../src/lib/logger.js";
import { newSandboxId } from "../src/modules/sandboxes/service.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";

describe("warm-pool refills under the host's admission", { concurrency: 1 }, () => {
  for (const store of STORE_KINDS) {
    describe(`[${store}]`, () => {
      let fixture: RuntimeFixture;
      let pool: PooledRuntime;
      let t: TestApp;
      let reconciler: SandboxReconciler | undefined;
      const warnings: string[] = [];

      before(async () => {
        fixture = await startRuntimeFixture(
          `pool-admit-${store}`,
          { rootLayerGiB: 1, standardWorkspaceGiB: 1, storageReserveGiB: 1.5, storageOvercommit: 1 },
          { tmpfsMiB: 7 * 1024 },
        );
        const sink = new Writable({
          write(chunk: Buffer, _encoding, done) {
            warnings.push(chunk.toString());
            done();
          },
        });
        pool = await PooledRuntime.open(fixture.driver, {
          size: 1,
          image: fixture.busyboxRef,
          memoryMiB: 128,
          cpuMillis: 1000,
          pids: 128,
          newId: newSandboxId,
          log: createLogger("warn", sink),
        });
        t = await startTestApp(store, {
          overrides: { runtime: pool },
          config: {
            sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
          },
        });
      });
      after(async () => {
        await reconciler?.stop();
        await pool?.close();
        await t?.close();
        if (fixture) await closeFixtureLeavingNothing(fixture, []);
      });

      it("makes no pool member the store's requested sandboxes leave no room for, and fills once they are gone", async () => {
        // No reconciler runs: both stay `requested`, holding their 2 GiB each in the store only.
        const ids: string[] = [];
        for (let i = 0; i < 2; i++) {
          const res = await t.request("POST", "/v1/sandboxes", {
            key: t.orgA.keys.owner,
            body: { image: fixture.busyboxRef, resources: { memory_mb: 256 } },
          });
          assert.equal(res.status, 200, res.raw);
          ids.push(res.body.id as string);
        }
        assert.deepEqual(await fixture.driver.list(), [], "nothing of them is on the host");
        pool.startFilling();
        await eventually(
          "the refill is refused",
          async () =>
            warnings.some((line) => line.includes("filling the sandbox pool") && line.includes("cannot back")),
          120_000,
        );
        assert.deepEqual(pool.pooledIds(), [], "no member beside the requested sandboxes");
        assert.deepEqual(await fixture.driver.list(), []);

        for (const id of ids) {
          const res = await t.request("DELETE", `/v1/sandboxes/${id}`, { key: t.orgA.keys.owner });
          assert.equal(res.status, 202, res.raw);
        }
        // The reconciler finishes the deleted rows; the refill retries (backing off from 5 s)
        // and a member fits once they are terminated.
        reconciler = new SandboxReconciler(t.c, pool, { pids: 128, retentionSeconds: 60, publicApiUrl: "http://x" });
        await reconciler.start();
        await eventually("the pool fills once the host has room", async () => pool.pooledIds().length > 0, 180_000);
      });
    });
  }
});
