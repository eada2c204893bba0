// Snapshots replicated to the S3 blob store (an s3rver the test starts): a snapshot reaches
// `replicated` there (its chunks in packs), a restore with no host copy rebuilds it from S3
// alone (range GETs of packs), and the collector deletes the packs of a deleted snapshot
// from the bucket. PGlite only: the
// store is not what this file tests.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ListObjectsV2Command } from "@aws-sdk/client-s3";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { SnapshotReplicator } from "../src/controllers/snapshot-replicator.js";
import type { S3BlobStore } from "../src/drivers/blobs/s3.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { startTestApp, type TestApp } from "./harness.js";
import { openS3BlobStore, type S3rverHandle, startS3rver } from "./support/s3rver.js";

describe("snapshots on the S3 blob store [pglite]", () => {
  let fixture: RuntimeFixture;
  let s3: S3rverHandle;
  let blobs: S3BlobStore;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let replicator: SnapshotReplicator;
  const owner = () => t.orgA.keys.owner;

  before(async () => {
    fixture = await startRuntimeFixture("snap-s3");
    s3 = await startS3rver();
    blobs = await openS3BlobStore(s3);
    const base = (await import("../src/config.js")).loadConfig({});
    t = await startTestApp("pglite", {
      overrides: { runtime: fixture.driver, blobs },
      config: {
        sandbox: { ...base.sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
      },
    });
    reconciler = new SandboxReconciler(t.c, fixture.driver, {
      pids: 128,
      retentionSeconds: 3600,
      publicApiUrl: "http://127.0.0.1:1",
    });
    await reconciler.start();
    replicator = new SnapshotReplicator(t.c, fixture.driver, { gcIntervalSeconds: 3600, gcGraceSeconds: 0 });
    await replicator.start();
  });

  after(async () => {
    await replicator?.stop();
    await reconciler?.stop();
    await t?.close();
    await s3?.stop();
    await fixture?.cleanup();
  });

  const request = (method: string, url: string, body?: Record<string, unknown>) =>
    t.request(method, url, { key: owner(), ...(body ? { body } : {}) });
  const waitFor = async (id: string, state: string) => {
    const res = await t.request("GET", `/v1/sandboxes/${id}`, {
      key: owner(),
      query: { wait_state: state, wait_timeout_seconds: "25" },
    });
    assert.equal((res.body.sandbox as { state: string }).state, state, res.raw);
  };
  const exec = async (id: string, script: string) => {
    const res = await request("POST", `/v1/sandboxes/${id}:exec`, { cmd: ["sh", "-c", script] });
    assert.equal(res.status, 200, res.raw);
    return res.body as { exit: number; stdout: string };
  };
  const bucketKeys = async (prefix: string) => {
    const listed = await blobs.client.send(new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: `warren/${prefix}` }));
    return (listed.Contents ?? []).map((object) => object.Key as string);
  };

  it("replicates to S3 in packs, restores from S3 alone, and collects a deleted snapshot's packs there", async () => {
    const created = await request("POST", "/v1/sandboxes", {
      command: ["sleep", "3600"],
      network_access: "none",
      storage_class: "durable",
      workspace_capacity_gib: 1,
    });
    const id = created.body.id as string;
    await waitFor(id, "running");
    await exec(id, "head -c 2000000 /dev/urandom > /workspace/data; md5sum /workspace/data > /workspace/sum");
    const made = await request("POST", `/v1/sandboxes/${id}:snapshot`, { wait_remote: true });
    assert.equal(made.status, 200, made.raw);
    assert.equal(made.body.durability, "replicated");
    const snapId = made.body.snapshot_id as string;
    const packs = await bucketKeys(`orgs/${t.orgA.id}/packs/`);
    assert.ok(packs.length > 0, "packs are in the bucket");
    assert.deepEqual(await bucketKeys(`orgs/${t.orgA.id}/chunks/`), [], "no chunk is an object of its own");
    assert.ok((await bucketKeys(`orgs/${t.orgA.id}/snapshots/${snapId}/`)).length > 0, "the manifest is in the bucket");

    await fixture.driver.dropLocalSnapshot(snapId);
    const child = await request("POST", "/v1/sandboxes", {
      snapshot_id: snapId,
      command: ["sleep", "3600"],
      network_access: "none",
    });
    await waitFor(child.body.id as string, "running");
    assert.equal((await exec(child.body.id as string, "md5sum -c /workspace/sum")).exit, 0);

    // A second snapshot adds packs of its own; deleting it and collecting removes exactly those.
    await exec(id, "head -c 1000000 /dev/urandom > /workspace/more");
    const second = await request("POST", `/v1/sandboxes/${id}:snapshot`, { wait_remote: true });
    assert.equal(second.body.durability, "replicated", second.raw);
    const withSecond = await bucketKeys(`orgs/${t.orgA.id}/packs/`);
    assert.ok(withSecond.length > packs.length);
    assert.equal((await request("DELETE", `/v1/snapshots/${second.body.snapshot_id}`)).status, 200);
    assert.ok((await replicator.collectGarbage()) > 0);
    assert.deepEqual((await bucketKeys(`orgs/${t.orgA.id}/packs/`)).sort(), [...packs].sort());
    assert.deepEqual(await bucketKeys(`orgs/${t.orgA.id}/snapshots/${second.body.snapshot_id}/`), []);
  });
});
