// Storage admission as a tenant sees it, on real runc sandboxes over a small host filesystem
// of their own (a 5 GiB tmpfs, 1.5 GiB reserved, nothing overcommitted): a create the API's
// check admitted but the host refuses by the time the reconciler provisions it (another
// sandbox or file took the space meanwhile) ends failed with the verdict only. The host's
// numbers (its free space, what sandboxes may still write) stay in the log.
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { run } from "../src/drivers/runtime/local/host.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";

describe("sandbox storage admission through the API", () => {
  let fixture: RuntimeFixture;

  before(async () => {
    fixture = await startRuntimeFixture(
      "storage-api",
      { rootLayerGiB: 1, standardWorkspaceGiB: 1, storageReserveGiB: 1.5, storageOvercommit: 1 },
      { tmpfsMiB: 5 * 1024 },
    );
  });
  after(async () => {
    await fixture?.cleanup();
  });

  for (const store of STORE_KINDS) {
    it(`[${store}] a create refused on the host after the API admitted it fails without the host's numbers`, async () => {
      const t: TestApp = await startTestApp(store, {
        overrides: { runtime: fixture.driver },
        config: { sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128 } },
      });
      const reconciler = new SandboxReconciler(t.c, fixture.driver, { pids: 128, retentionSeconds: 60 });
      const filler = path.join(fixture.root, "filler");
      const key = t.orgA.keys.owner;
      let id = "";
      try {
        // Admitted by the API's check (2 GiB of a ~3.4 GiB the host can back)...
        const created = await t.request("POST", "/v1/sandboxes", {
          key,
          body: { command: ["sleep", "3600"], network_access: "none" },
        });
        assert.equal(created.status, 200, created.raw);
        id = created.body.id as string;
        // ...then the host's free space goes before the reconciler provisions it.
        await run("/usr/bin/fallocate", ["-l", "3G", filler]);
        await reconciler.start();
        const res = await t.request("GET", `/v1/sandboxes/${id}`, {
          key,
          query: { wait_state: "failed", wait_timeout_seconds: "25" },
        });
        const sandbox = res.body.sandbox as SandboxJson;
        assert.equal(sandbox.state, "failed", res.raw);
        assert.equal(sandbox.state_reason?.code, "storage_exhausted", res.raw);
        const message = sandbox.state_reason?.message ?? "";
        assert.match(message, /cannot back/, res.raw);
        assert.doesNotMatch(message, /GiB|\d/, `the host's numbers are not the tenant's: ${message}`);
        // The operator's log has them.
        assert.match(t.logs(), /may still write [\d.]+ GiB/);
      } finally {
        await rm(filler, { force: true });
        await reconciler.idle();
        await reconciler.stop();
        if (id) await fixture.driver.destroy(id).catch(() => undefined);
        await t.close();
      }
    });
  }
});
