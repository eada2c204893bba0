// Storage admission as a tenant sees it, on real runc sandboxes over a small host filesystem
// of their own (a 5 GiB tmpfs, 1.5 GiB reserved, nothing overcommitted): a create the API's
// check admitted but the host refuses by the time the reconciler provisions it (another
// sandbox or file took the space meanwhile) ends failed with the verdict only. The host's
// numbers (its free space, what sandboxes may still write) stay in the log. A wake of a sandbox
// of the old layout (legacy.ts) the host cannot back leaves it stopped with its state kept.
import assert from "node:assert/strict";
import { rename, rm } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { run } from "../src/drivers/runtime/local/host.js";
import {
  makeLegacyLayout,
  type RuntimeFixture,
  startRuntimeFixture,
} from "../src/drivers/runtime/local/test-support.js";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import { STORE_KINDS, type StoreKind, startTestApp, type TestApp } from "./harness.js";

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

  /** An app over the fixture's driver, with a reconciler that `work` starts when it is ready. */
  async function withApp(
    store: StoreKind,
    work: (t: TestApp, reconciler: SandboxReconciler) => Promise<void>,
  ): Promise<void> {
    const t = await startTestApp(store, {
      overrides: { runtime: fixture.driver },
      config: { sandbox: { ...loadConfig({}).sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128 } },
    });
    const reconciler = new SandboxReconciler(t.c, fixture.driver, { pids: 128, retentionSeconds: 60 });
    try {
      await work(t, reconciler);
    } finally {
      await rm(filler(), { force: true });
      await reconciler.idle();
      await reconciler.stop();
      for (const id of await fixture.driver.list()) await fixture.driver.destroy(id).catch(() => undefined);
      await t.close();
    }
  }
  const filler = () => path.join(fixture.root, "filler");
  const waitFor = async (t: TestApp, id: string, state: string) => {
    const res = await t.request("GET", `/v1/sandboxes/${id}`, {
      key: t.orgA.keys.owner,
      query: { wait_state: state, wait_timeout_seconds: "25" },
    });
    const sandbox = res.body.sandbox as SandboxJson;
    assert.equal(sandbox.state, state, res.raw);
    return sandbox;
  };

  /** A durable sandbox (1 GiB) that ran `script` and is stopped now, and a PATCH of its state. */
  const stoppedDurable = async (t: TestApp, script: string) => {
    const key = t.orgA.keys.owner;
    const created = await t.request("POST", "/v1/sandboxes", {
      key,
      body: { command: ["sleep", "3600"], network_access: "none", storage_class: "durable", workspace_capacity_gib: 1 },
    });
    assert.equal(created.status, 200, created.raw);
    const id = created.body.id as string;
    await waitFor(t, id, "running");
    const wrote = await t.request("POST", `/v1/sandboxes/${id}:exec`, { key, body: { cmd: ["sh", "-c", script] } });
    assert.equal(wrote.body.exit, 0, wrote.raw);
    const patch = (state: string) => t.request("PATCH", `/v1/sandboxes/${id}`, { key, body: { state } });
    assert.equal((await patch("stopped")).status, 200);
    await waitFor(t, id, "stopped");
    return { id, key, patch };
  };

  for (const store of STORE_KINDS) {
    it(`[${store}] a create refused on the host after the API admitted it fails without the host's numbers`, () =>
      withApp(store, async (t, reconciler) => {
        // Admitted by the API's check (2 GiB of a ~3.4 GiB the host can back)...
        const created = await t.request("POST", "/v1/sandboxes", {
          key: t.orgA.keys.owner,
          body: { command: ["sleep", "3600"], network_access: "none" },
        });
        assert.equal(created.status, 200, created.raw);
        // ...then the host's free space goes before the reconciler provisions it.
        await run("/usr/bin/fallocate", ["-l", "3G", filler()]);
        await reconciler.start();
        const sandbox = await waitFor(t, created.body.id as string, "failed");
        assert.equal(sandbox.state_reason?.code, "storage_exhausted");
        const message = sandbox.state_reason?.message ?? "";
        assert.match(message, /cannot back/);
        assert.doesNotMatch(message, /GiB|\d/, `the host's numbers are not the tenant's: ${message}`);
        // The operator's log has them.
        assert.match(t.logs(), /may still write [\d.]+ GiB/);
      }));

    it(`[${store}] a wake of an old-layout sandbox the host cannot back leaves it stopped with its data, and a later wake migrates it`, () =>
      withApp(store, async (t, reconciler) => {
        await reconciler.start();
        const { id, key, patch } = await stoppedDurable(t, "echo precious > /workspace/data");
        await makeLegacyLayout(fixture.driver.layout, id, "durable");

        // The host is full: the copy into new images is refused.
        await run("/usr/bin/fallocate", ["-l", "3G", filler()]);
        assert.equal((await patch("running")).status, 200);
        // It stays stopped: the reason is what shows the wake was tried and refused.
        let refused = await waitFor(t, id, "stopped");
        for (let tries = 0; !refused.state_reason && tries < 250; tries++) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          refused = await waitFor(t, id, "stopped");
        }
        assert.equal(refused.state_reason?.code, "storage_exhausted", JSON.stringify(refused));
        assert.doesNotMatch(refused.state_reason?.message ?? "", /\d/);
        assert.ok((await fixture.driver.list()).includes(id), "its host state is kept");

        // Space again: the next wake migrates it, data included.
        await rm(filler());
        assert.equal((await patch("running")).status, 200);
        const woke = await waitFor(t, id, "running");
        assert.equal(woke.state_reason, undefined, JSON.stringify(woke));
        const read = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
          key,
          body: { cmd: ["cat", "/workspace/data"] },
        });
        assert.equal(read.body.stdout, "precious\n", read.raw);
      }));

    it(`[${store}] a wake the host fails keeps a stopped sandbox and its workspace; the next wake runs it`, () =>
      withApp(store, async (t, reconciler) => {
        await reconciler.start();
        const { id, key, patch } = await stoppedDurable(
          t,
          "echo precious > /workspace/data; echo root > /root-layer-file",
        );
        // A transient host failure: the overlay cannot be mounted at the wake (its work dir is gone).
        const paths = fixture.driver.layout.sandbox(id);
        await run("/usr/bin/umount", [paths.rootfs]).catch(() => undefined);
        await rename(paths.work, `${paths.work}.away`);
        assert.equal((await patch("running")).status, 200);
        let failed = await waitFor(t, id, "stopped");
        for (let tries = 0; !failed.state_reason && tries < 250; tries++) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          failed = await waitFor(t, id, "stopped");
        }
        assert.ok(failed.state_reason?.code, `the wake's failure shows: ${JSON.stringify(failed)}`);
        assert.ok((await fixture.driver.list()).includes(id), "its host state is kept");
        await rename(`${paths.work}.away`, paths.work);
        assert.equal((await patch("running")).status, 200);
        const woke = await waitFor(t, id, "running");
        assert.equal(woke.state_reason, undefined, JSON.stringify(woke));
        const read = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
          key,
          body: { cmd: ["cat", "/workspace/data", "/root-layer-file"] },
        });
        assert.equal(read.body.stdout, "precious\nroot\n", read.raw);
      }));
  }
});
