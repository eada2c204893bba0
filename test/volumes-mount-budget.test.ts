// The host volume cache's budget per organization end to end (issue 24, A14), on real runc
// sandboxes: a sandbox whose volume (one repeated 1 MiB chunk, 12 MiB once materialized)
// would take its organization past the budget fails with `volume_cache_exhausted` and a
// message naming no host path; nothing of it is written and the cache stays within the
// budget; another organization's sandbox mounts its own volume meanwhile. A wake whose volume
// cannot be materialized again keeps the sandbox stopped, as every failed wake does.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { volumeKeys } from "../src/modules/volumes/blobs.js";
import type { TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";
import { startRuntimeApp } from "./support/runtime-app.js";
import { createVolume, digest, pushTree, treeOf } from "./support/volumes.js";

const MiB = 1_048_576;
const BUDGET = { bytes: 8 * MiB, inodes: 1000 };

describe("volume cache budget on real sandboxes [pglite]", () => {
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let cacheDir: string;

  before(async () => {
    fixture = await startRuntimeFixture("volbudget");
    const base = (await import("../src/config.js")).loadConfig({});
    cacheDir = path.join(fixture.root, "volume-cache");
    ({ t, reconciler } = await startRuntimeApp("pglite", fixture, {
      config: { volumes: { ...base.volumes, cacheDir, cacheBudget: BUDGET } },
    }));
  });

  after(async () => {
    await reconciler?.stop();
    await t?.close();
    await fixture?.cleanup();
  });

  const publish = async (key: string, name: string, files: Record<string, Buffer | string>) => {
    const volume = await createVolume(t, key, name);
    const pushed = await pushTree(t, key, volume.id, treeOf(files, MiB));
    assert.equal(pushed.publish.status, 200, pushed.publish.raw);
    return volume.id;
  };
  const create = async (key: string, volumeId: string) => {
    const res = await t.request("POST", "/v1/sandboxes", {
      key,
      body: {
        command: ["sleep", "3600"],
        network_access: "none",
        volumes: [{ volume_id: volumeId, target_path: "/data" }],
      },
    });
    assert.equal(res.status, 200, res.raw);
    return res.body.id as string;
  };
  /** The sandbox once it is running or can no longer get there (each wait returns at once then). */
  const settled = (key: string, id: string) =>
    eventually(
      `sandbox ${id} to settle`,
      async () => {
        const res = await t.request("GET", `/v1/sandboxes/${id}`, {
          key,
          query: { wait_state: "running", wait_timeout_seconds: "20" },
        });
        assert.equal(res.status, 200, res.raw);
        const sandbox = res.body.sandbox as { state: string; state_reason?: { code: string; message: string } };
        return ["running", "failed", "stopped", "terminated"].includes(sandbox.state) && sandbox;
      },
      120_000,
    );

  it("fails a mount past the organization's budget clearly, and another organization's still works", async () => {
    const a = t.orgA.keys.owner;
    const b = t.orgB.keys.owner;
    // 12 MiB on the host from one distinct 1 MiB blob (the quota counts the blob once).
    const big = await publish(a, "repeated", { "big.bin": Buffer.alloc(12 * MiB, 7) });
    const small = await publish(b, "small", {
      "hello.txt": "hello from org b\n",
      "data.bin": Buffer.alloc(3 * MiB, 1),
    });
    const refused = await settled(a, await create(a, big));
    assert.equal(refused.state, "failed", JSON.stringify(refused));
    assert.equal(refused.state_reason?.code, "volume_cache_exhausted", JSON.stringify(refused));
    const message = refused.state_reason?.message ?? "";
    assert.match(message, /12\.0 MiB/);
    assert.match(message, /8\.0 MiB/);
    assert.doesNotMatch(message, /\/|<host path>/, "no host path, not even a redacted one");
    assert.deepEqual(await readdir(path.join(cacheDir, t.orgA.id)).catch(() => []), [], "nothing of it was written");

    const id = await create(b, small);
    const running = await settled(b, id);
    assert.equal(running.state, "running", JSON.stringify(running));
    const out = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
      key: b,
      body: { cmd: ["sh", "-c", "cat /data/hello.txt; wc -c < /data/data.bin"] },
    });
    assert.equal(out.status, 200, out.raw);
    assert.equal(out.body.stdout, `hello from org b\n${3 * MiB}\n`);
    const du = spawnSync("du", ["-s", "-B1", cacheDir], { encoding: "utf8" });
    assert.ok(Number(du.stdout.split(/\s/)[0]) <= BUDGET.bytes + 64 * 1024, du.stdout);
  });

  it("keeps a sandbox stopped when a wake's volume cannot be materialized again", async () => {
    const b = t.orgB.keys.owner;
    const chunk = Buffer.alloc(MiB, 9);
    const volumeId = await publish(b, "wake", { "two.bin": Buffer.concat([chunk, chunk]) });
    const id = await create(b, volumeId);
    const running = (await settled(b, id)) as { state: string; volumes?: { version: string }[] };
    assert.equal(running.state, "running", JSON.stringify(running));
    const patch = (state: string) => t.request("PATCH", `/v1/sandboxes/${id}`, { key: b, body: { state } });
    assert.equal((await patch("stopped")).status, 200);
    const get = async () =>
      (await t.request("GET", `/v1/sandboxes/${id}`, { key: b })).body.sandbox as {
        state: string;
        state_reason?: { code: string; message: string };
      };
    await eventually("the sandbox to stop", async () => (await get()).state === "stopped", 120_000);
    // As after a reboot (the entry's boot is not this one, so it is written again at the
    // wake), with its blob gone from the store: the wake cannot mount it.
    const entry = path.join(cacheDir, t.orgB.id, (running.volumes?.[0]?.version ?? "").slice("blake3:".length));
    await writeFile(`${entry}.boot`, "an-earlier-boot\n");
    await t.c.blobs.delete(volumeKeys.blob(t.orgB.id, digest(chunk)));
    assert.equal((await patch("running")).status, 200);
    const refused = await eventually(
      "the wake to be refused",
      async () => {
        const sandbox = await get();
        return sandbox.state_reason || sandbox.state === "failed" ? sandbox : null;
      },
      120_000,
    );
    assert.equal(refused.state, "stopped", JSON.stringify(refused));
    assert.equal(refused.state_reason?.code, "runtime_error", JSON.stringify(refused));
    assert.ok((await fixture.driver.list()).includes(id), "its host state is kept");
  });
});
