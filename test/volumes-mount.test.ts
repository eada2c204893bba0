// Volumes end to end on real runc sandboxes, with the push helper over HTTP: push a
// directory, re-push (nothing uploaded), change one byte of a large file (one blob), mount
// the version read-only in two sandboxes from one cached copy, delete the volume under a
// running sandbox, snapshot and restore (the restore pins the same version).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { pushDirectory } from "../scripts/volume-push.js";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { FsBlobStore } from "../src/drivers/blobs/fs.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { volumeKeys } from "../src/modules/volumes/blobs.js";
import { startTestApp, type TestApp } from "./harness.js";
import { freePort } from "./support/ports.js";
import { createVolume, digest } from "./support/volumes.js";

describe("volume mounts [pglite]", () => {
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let tree: string;
  let cacheDir: string;
  let apiUrl: string;
  let store: FsBlobStore;
  const owner = () => t.orgA.keys.owner;

  before(async () => {
    fixture = await startRuntimeFixture("vol");
    const base = (await import("../src/config.js")).loadConfig({});
    const port = await freePort();
    apiUrl = `http://127.0.0.1:${port}`;
    cacheDir = path.join(fixture.root, "volume-cache");
    store = await FsBlobStore.open({
      dir: path.join(fixture.root, "blobs"),
      signingKey: randomBytes(32),
      publicBaseUrl: apiUrl,
    });
    t = await startTestApp("pglite", {
      overrides: {
        runtime: fixture.driver,
        // Its presigned URLs point at this server, which listens below.
        blobs: store,
      },
      config: {
        publicApiUrl: apiUrl,
        volumes: {
          pushTtlSeconds: 3600,
          maxManifestBytes: 1_048_576,
          cacheDir,
          gcIntervalSeconds: 600,
          gcGraceSeconds: 3600,
          maxFiles: 100_000,
          cacheBudget: { bytes: 2 ** 40, inodes: 10_000_000 },
        },
        sandbox: { ...base.sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
      },
    });
    await t.app.listen({ host: "127.0.0.1", port });
    reconciler = new SandboxReconciler(t.c, fixture.driver, {
      pids: 128,
      retentionSeconds: 3600,
      publicApiUrl: "http://127.0.0.1:1",
    });
    await reconciler.start();
    tree = await mkdtemp(path.join(os.tmpdir(), "warren-vol-tree-"));
  });

  after(async () => {
    await reconciler?.stop();
    await t?.close();
    await fixture?.cleanup();
    if (tree) await rm(tree, { recursive: true, force: true });
  });

  const request = (method: string, url: string, body?: Record<string, unknown>) =>
    t.request(method, url, { key: owner(), ...(body ? { body } : {}) });
  const waitFor = async (id: string, state: string) => {
    const res = await t.request("GET", `/v1/sandboxes/${id}`, {
      key: owner(),
      query: { wait_state: state, wait_timeout_seconds: "25" },
    });
    assert.equal((res.body.sandbox as { state: string }).state, state, res.raw);
    return res.body.sandbox as Record<string, unknown>;
  };
  const exec = async (id: string, script: string) => {
    const res = await request("POST", `/v1/sandboxes/${id}:exec`, { cmd: ["sh", "-c", script] });
    assert.equal(res.status, 200, res.raw);
    return res.body as { exit: number; stdout: string; stderr: string };
  };
  const createRunning = async (body: Record<string, unknown>) => {
    const res = await request("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none", ...body });
    assert.equal(res.status, 200, res.raw);
    const id = res.body.id as string;
    return { id, sandbox: await waitFor(id, "running") };
  };
  const push = () => pushDirectory({ apiUrl, apiKey: owner(), volumeId, dir: tree });
  let volumeId = "";

  it("pushes a directory with the helper, re-pushes nothing, and uploads one chunk for a one-byte change", async () => {
    volumeId = (await createVolume(t, owner(), "tree")).id;
    await mkdir(path.join(tree, "bin"), { recursive: true });
    await writeFile(path.join(tree, "hello.txt"), "hello from a volume\n");
    await writeFile(path.join(tree, "bin", "run.sh"), "#!/bin/sh\necho ran\n", { mode: 0o755 });
    const large = Buffer.alloc(36 * 1_048_576);
    for (let i = 0; i < large.length; i += 4096) large.writeUInt32LE(i, i);
    await writeFile(path.join(tree, "large.bin"), large);
    const first = await push();
    assert.equal(first.files, 3);
    assert.equal(first.uploadedBlobs, first.blobs);
    assert.equal(first.blobs, 2 + 3); // two small files, the large one in 16 + 16 + 4 MiB chunks
    const again = await push();
    assert.equal(again.uploadedBlobs, 0);
    assert.equal(again.version.version_digest, first.version.version_digest);
    const handle = await open(path.join(tree, "large.bin"), "r+");
    await handle.write(Buffer.from([0xff]), 0, 1, 20 * 1_048_576);
    await handle.close();
    const changed = await push();
    assert.equal(changed.uploadedBlobs, 1);
    assert.equal(changed.uploadedBytes, 16 * 1_048_576);
    assert.equal(changed.version.parent_version_digest, first.version.version_digest);
  });

  let firstSandbox = "";
  let pinned: unknown;

  it("mounts the current version read-only in two sandboxes from one cached copy", async () => {
    const volumes = [{ volume_id: volumeId, target_path: "/data" }];
    const a = await createRunning({ volumes, storage_class: "durable", workspace_capacity_gib: 1 });
    firstSandbox = a.id;
    pinned = a.sandbox.volumes;
    const current = (await request("GET", `/v1/volumes/${volumeId}`)).body.volume as Record<string, string>;
    assert.deepEqual(pinned, [
      { volume_id: volumeId, version: current.current_version_digest, target_path: "/data", name: "tree" },
    ]);
    assert.equal((await exec(a.id, "cat /data/hello.txt")).stdout, "hello from a volume\n");
    assert.equal((await exec(a.id, "/data/bin/run.sh")).stdout, "ran\n");
    assert.equal((await exec(a.id, "wc -c < /data/large.bin")).stdout.trim(), String(36 * 1_048_576));
    const write = await exec(
      a.id,
      "echo x > /data/hello.txt; echo $?; echo x >> /data/hello.txt; echo $?; touch /data/new 2>&1; echo $?",
    );
    assert.doesNotMatch(write.stdout, /^0$/m, write.stdout);
    // hello.txt is a hard link to its blob in the store: the store's bytes are as pushed.
    const blob = store.fileOf(volumeKeys.blob(t.orgA.id, digest(Buffer.from("hello from a volume\n"))));
    assert.equal(await readFile(blob, "utf8"), "hello from a volume\n");
    assert.equal((await stat(blob)).nlink, 2, "the store's name and the cache's");
    const b = await createRunning({ volumes: [{ volume_id: volumeId, target_path: "/mnt/shared" }] });
    assert.equal((await exec(b.id, "cat /mnt/shared/hello.txt")).stdout, "hello from a volume\n");
    const cached = (await readdir(path.join(cacheDir, t.orgA.id))).filter((name) => /^[0-9a-f]{64}$/.test(name));
    assert.equal(cached.length, 1);
  });

  it("keeps a running sandbox's files when the volume is deleted, and a restore pins the same version", async () => {
    const deleted = await request("DELETE", `/v1/volumes/${volumeId}`);
    assert.equal(deleted.status, 200, deleted.raw);
    assert.equal((await exec(firstSandbox, "cat /data/hello.txt")).stdout, "hello from a volume\n");
    const snap = await request("POST", `/v1/sandboxes/${firstSandbox}:snapshot`, {});
    assert.equal(snap.status, 200, snap.raw);
    const child = await createRunning({ snapshot_id: snap.body.snapshot_id });
    assert.deepEqual(child.sandbox.volumes, pinned);
    assert.equal((await exec(child.id, "cat /data/hello.txt")).stdout, "hello from a volume\n");
  });
});
