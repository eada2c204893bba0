// Snapshots end to end on real runc sandboxes: the API, the reconciler, the replicator and
// the fs blob store. Snapshot, restore (with and without the local copy, with an image
// override), lineage, fencing, delete-in-use, capacity, corrupt and missing chunks, GC.
import assert from "node:assert/strict";
import { readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { SnapshotReplicator } from "../src/controllers/snapshot-replicator.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import * as sandboxRepo from "../src/modules/sandboxes/repo.js";
import { newSandboxId } from "../src/modules/sandboxes/service.js";
import { STORE_KINDS, startTestApp, type TestApp } from "./harness.js";
import { openTestBlobStore } from "./support/blob-store.js";

interface Snap {
  id: string;
  durability: string;
  image: string;
  lineage_path: string;
  source_sandbox_id: string;
  name?: string;
  parent_snapshot_id?: string;
}

for (const store of STORE_KINDS) {
  describe(`snapshots [${store}]`, () => {
    let fixture: RuntimeFixture;
    let t: TestApp;
    let reconciler: SandboxReconciler;
    let replicator: SnapshotReplicator;
    let blobDir: string;
    const owner = () => t.orgA.keys.owner;

    before(async () => {
      fixture = await startRuntimeFixture(`snap-${store}`);
      const base = (await import("../src/config.js")).loadConfig({});
      blobDir = path.join(fixture.root, "blobs");
      t = await startTestApp(store, {
        overrides: { runtime: fixture.driver, blobs: await openTestBlobStore(blobDir) },
        config: {
          quotaDefaults: {
            ...base.quotaDefaults,
            "sandboxes.running": 100,
            "sandboxes.total": 200,
            "sandboxes.workspace_capacity_gib": 1000,
          },
          sandbox: {
            ...base.sandbox,
            defaultImage: fixture.busyboxRef,
            memoryMiB: 128,
            pids: 128,
            workspaceCapacityGiB: 1,
          },
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
      if (process.env.SNAP_DEBUG) (await import("node:fs")).writeFileSync(`/tmp/snap-${store}.log`, t.logs());
      await replicator?.stop();
      await reconciler?.stop();
      await t?.close();
      await fixture?.cleanup();
    });

    const request = (method: string, url: string, body?: Record<string, unknown>, key = owner(), headers = {}) =>
      t.request(method, url, { key, ...(body ? { body } : {}), headers });
    const waitFor = async (id: string, state: string, key = owner()) => {
      const res = await t.request("GET", `/v1/sandboxes/${id}`, {
        key,
        query: { wait_state: state, wait_timeout_seconds: "25" },
      });
      assert.equal(res.status, 200, res.raw);
      const sandbox = res.body.sandbox as Record<string, unknown>;
      assert.equal(sandbox.state, state, res.raw);
      return sandbox;
    };
    const exec = async (id: string, script: string) => {
      const res = await request("POST", `/v1/sandboxes/${id}:exec`, { cmd: ["sh", "-c", script] });
      assert.equal(res.status, 200, res.raw);
      return res.body as { exit: number; stdout: string; stderr: string };
    };
    const createRunning = async (body: Record<string, unknown>) => {
      const res = await request("POST", "/v1/sandboxes", {
        command: ["sleep", "3600"],
        network_access: "none",
        ...body,
      });
      assert.equal(res.status, 200, res.raw);
      const id = res.body.id as string;
      return { id, sandbox: await waitFor(id, "running"), runId: res.body.run_id as string };
    };
    const snapshot = (id: string, body: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
      request("POST", `/v1/sandboxes/${id}:snapshot`, body, owner(), headers);
    const listSnaps = async (query: Record<string, string> = {}) => {
      const res = await t.request("GET", "/v1/snapshots", { key: owner(), query });
      assert.equal(res.status, 200, res.raw);
      return res.body as {
        snapshots: Snap[];
        edges: { snapshot_id: string; parent_snapshot_id: string }[];
        next_page_token: string;
      };
    };
    const packFiles = async () =>
      (await readdir(blobDir, { recursive: true, withFileTypes: true }))
        .filter((entry) => entry.isFile() && entry.parentPath.includes(`${path.sep}packs`))
        .map((entry) => path.join(entry.parentPath, entry.name));

    it("snapshots a running sandbox, restores two children (one on another image), and a grandchild", async () => {
      const root = await createRunning({ storage_class: "durable", workspace_capacity_gib: 1 });
      await exec(
        root.id,
        "echo ws > /workspace/a; mkdir -p /workspace/d; echo deep > /workspace/d/b; echo rootfs > /etc/marker",
      );
      const made = await snapshot(root.id, { name: "first", wait_remote: true, wait_timeout_seconds: 25 });
      assert.equal(made.status, 200, made.raw);
      assert.deepEqual(Object.keys(made.body).sort(), ["durability", "snapshot_id"]);
      assert.match(String(made.body.snapshot_id), /^snp-[0-9a-f]{40}$/);
      assert.equal(made.body.durability, "replicated");
      const snapId = made.body.snapshot_id as string;
      // Still running after the freeze.
      assert.equal((await exec(root.id, "echo alive")).stdout, "alive\n");

      const listed = await listSnaps({ sandbox_id: root.id });
      assert.equal(listed.snapshots.length, 1);
      assert.deepEqual(listed.snapshots[0], {
        id: snapId,
        created_at: (listed.snapshots[0] as Snap & { created_at: string }).created_at,
        durability: "replicated",
        image: fixture.busyboxRef,
        lineage_path: root.id,
        source_sandbox_id: root.id,
        name: "first",
      });
      assert.deepEqual(listed.edges, []);

      const child = await request("POST", "/v1/sandboxes", {
        snapshot_id: snapId,
        command: ["sleep", "3600"],
        network_access: "none",
      });
      assert.equal(child.status, 200, child.raw);
      const childId = child.body.id as string;
      const childView = await waitFor(childId, "running");
      assert.equal(childView.snapshot_id, snapId);
      assert.equal(childView.image, undefined, "a child carries snapshot_id, not image");
      assert.equal(childView.workload_image, fixture.busyboxRef);
      assert.equal(childView.lineage_path, `${root.id}.${childId}`);
      assert.equal(childView.storage_class, "durable", "a restore is durable by default");
      assert.equal(childView.workspace_capacity_gib, 1, "capacity inherited");
      assert.deepEqual(await exec(childId, "cat /workspace/a /workspace/d/b /etc/marker"), {
        exit: 0,
        stdout: "ws\ndeep\nrootfs\n",
        stderr: "",
        truncated: false,
      });

      const multi = fixture.busyboxRef.replace("test/busybox:latest", "test/multi:latest");
      const other = await request("POST", "/v1/sandboxes", {
        snapshot_id: snapId,
        image_override: multi,
        command: ["sleep", "3600"],
        network_access: "none",
      });
      assert.equal(other.status, 200, other.raw);
      const otherView = await waitFor(other.body.id as string, "running");
      assert.equal(otherView.workload_image, multi);
      assert.equal((await exec(other.body.id as string, "cat /etc/arch /workspace/a")).stdout, "amd64\nws\n");

      // The source can go; its snapshot and children stay.
      assert.equal((await request("DELETE", `/v1/sandboxes/${root.id}`)).status, 202);
      await waitFor(root.id, "terminated");

      // Grow the running child's workspace online, then snapshot it and restore a grandchild.
      const grow = await request("PATCH", `/v1/sandboxes/${childId}`, { workspace_capacity_gib: 2 });
      assert.equal(grow.status, 200, grow.raw);
      const df = await exec(childId, "df -k /workspace | tail -1");
      const sizeKiB = Number(df.stdout.trim().split(/\s+/)[1]);
      assert.ok(sizeKiB > 1.5 * 1024 * 1024, `df shows the grown size: ${df.stdout}`);
      await exec(childId, "echo second > /workspace/c");
      const second = await snapshot(childId, { wait_remote: true });
      assert.equal(second.status, 200, second.raw);
      const secondId = second.body.snapshot_id as string;
      const edges = await listSnaps();
      assert.ok(
        edges.edges.some((e) => e.snapshot_id === secondId && e.parent_snapshot_id === snapId),
        JSON.stringify(edges),
      );
      const secondSnap = edges.snapshots.find((s) => s.id === secondId) as Snap;
      assert.equal(secondSnap.parent_snapshot_id, snapId);
      assert.equal(secondSnap.lineage_path, `${root.id}.${childId}`);
      const grand = await request("POST", "/v1/sandboxes", {
        snapshot_id: secondId,
        command: ["sleep", "3600"],
        network_access: "none",
      });
      const grandView = await waitFor(grand.body.id as string, "running");
      assert.equal(grandView.lineage_path, `${root.id}.${childId}.${grand.body.id}`);
      assert.equal(grandView.workspace_capacity_gib, 2);
      assert.equal((await exec(grand.body.id as string, "cat /workspace/a /workspace/c")).stdout, "ws\nsecond\n");

      // Events went to the sandboxes' ambient runs.
      const { rows } = await t.c.db.query<{ name: string; run_id: string }>(
        "SELECT name, run_id FROM events WHERE payload->>'snapshot_id' = $1 ORDER BY ts_wall_ns",
        [snapId],
      );
      assert.deepEqual(
        rows.map((row) => [row.name, row.run_id]),
        [
          ["sandbox.snapshot_created", root.runId],
          ["sandbox.snapshot_replicated", root.runId],
          ["sandbox.restored", child.body.run_id],
          ["sandbox.restored", other.body.run_id],
        ],
      );
    });

    it("restores from the blob store when the local copy is gone, and refuses corrupt or missing chunks", async () => {
      const root = await createRunning({ storage_class: "durable", workspace_capacity_gib: 1 });
      await exec(root.id, "head -c 3000000 /dev/urandom > /workspace/blob; md5sum /workspace/blob > /workspace/sum");
      const made = await snapshot(root.id, { wait_remote: true });
      assert.equal(made.body.durability, "replicated", made.raw);
      const snapId = made.body.snapshot_id as string;
      await fixture.driver.dropLocalSnapshot(snapId);
      assert.equal(await fixture.driver.localSnapshot(snapId), null);
      const child = await request("POST", "/v1/sandboxes", {
        snapshot_id: snapId,
        command: ["sleep", "3600"],
        network_access: "none",
      });
      assert.equal(child.status, 200, child.raw);
      await waitFor(child.body.id as string, "running");
      assert.equal((await exec(child.body.id as string, "md5sum -c /workspace/sum")).exit, 0);

      // Corrupt one chunk in a pack of a second snapshot (whose chunks are its own), drop the local copy: the restore fails.
      await exec(root.id, "head -c 2000000 /dev/urandom > /workspace/other");
      const before = new Set(await packFiles());
      const second = await snapshot(root.id, { wait_remote: true });
      const secondId = second.body.snapshot_id as string;
      const fresh = (await packFiles()).filter((file) => !before.has(file));
      assert.ok(fresh.length > 0, "the second snapshot stored new packs");
      await fixture.driver.dropLocalSnapshot(secondId);
      // The largest new pack holds the new workspace data; its first chunk starts at 0.
      const sizes = await Promise.all(fresh.map(async (file) => ({ file, size: (await stat(file)).size })));
      const victim = sizes.sort((a, b) => b.size - a.size)[0]?.file as string;
      const bytes = await readFile(victim);
      const inFirstChunk = 1000;
      bytes[inFirstChunk] = (bytes[inFirstChunk] ?? 0) ^ 0xff;
      await writeFile(victim, bytes);
      const bad = await request("POST", "/v1/sandboxes", {
        snapshot_id: secondId,
        command: ["sleep", "3600"],
        network_access: "none",
      });
      assert.equal(bad.status, 200, bad.raw);
      const failed = await waitFor(bad.body.id as string, "failed");
      assert.equal((failed.state_reason as { code: string }).code, "snapshot_not_restorable");
      assert.match((failed.state_reason as { message: string }).message, /corrupt|chunk/);
      assert.equal(await fixture.driver.localSnapshot(secondId), null, "no partial copy is kept");

      await rm(victim);
      const missing = await request("POST", "/v1/sandboxes", {
        snapshot_id: secondId,
        command: ["sleep", "3600"],
        network_access: "none",
      });
      const failedMissing = await waitFor(missing.body.id as string, "failed");
      assert.equal((failedMissing.state_reason as { code: string }).code, "snapshot_not_restorable");
      assert.match((failedMissing.state_reason as { message: string }).message, /missing/);
    });

    it("answers bad requests with the contract's codes and changes nothing", async () => {
      const sb = await createRunning({});
      const cases: [Record<string, unknown>, number, string][] = [
        [{ name: "" }, 400, "invalid_argument"],
        [{ name: "x".repeat(129) }, 400, "invalid_argument"],
        [{ wait_timeout_seconds: 0 }, 400, "invalid_argument"],
        [{ wait_timeout_seconds: 26 }, 400, "invalid_argument"],
        [{ extra: 1 }, 400, "invalid_argument"],
      ];
      for (const [body, status, code] of cases) {
        const res = await snapshot(sb.id, body);
        assert.equal(res.status, status, `${JSON.stringify(body)}: ${res.raw}`);
        assert.equal(res.body.code, code);
        assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"]);
      }
      assert.equal((await listSnaps({ sandbox_id: sb.id })).snapshots.length, 0);
      // Just inside the limits: a 128-character name, a 25 s wait.
      const longest = await snapshot(sb.id, { name: "n".repeat(128), wait_remote: true, wait_timeout_seconds: 25 });
      assert.equal(longest.status, 200, longest.raw);
      assert.equal((await listSnaps({ name: "n".repeat(128) })).snapshots[0]?.id, longest.body.snapshot_id);
      // Another organization's sandbox and snapshot are not found.
      const foreign = await request("POST", `/v1/sandboxes/${sb.id}:snapshot`, {}, t.orgB.keys.owner);
      assert.equal(foreign.status, 404);
      const mine = await snapshot(sb.id, { name: "mine" });
      assert.equal(mine.status, 200, mine.raw);
      const mineId = mine.body.snapshot_id as string;
      assert.equal((await request("DELETE", `/v1/snapshots/${mineId}`, undefined, t.orgB.keys.owner)).status, 404);
      const foreignRestore = await request("POST", "/v1/sandboxes", { snapshot_id: mineId }, t.orgB.keys.owner);
      assert.equal(foreignRestore.status, 404, foreignRestore.raw);
      assert.equal((await request("DELETE", "/v1/snapshots/snp-nope")).status, 404);
      // A restore may not shrink the workspace; image and snapshot_id exclude each other.
      const durable = await createRunning({ storage_class: "durable", workspace_capacity_gib: 2 });
      const big = await snapshot(durable.id, { wait_remote: true });
      const shrink = await request("POST", "/v1/sandboxes", {
        snapshot_id: big.body.snapshot_id,
        workspace_capacity_gib: 1,
      });
      assert.equal(shrink.status, 409, shrink.raw);
      assert.equal(shrink.body.code, "workspace_shrink_unsupported");
      const both = await request("POST", "/v1/sandboxes", { snapshot_id: mineId, image: fixture.busyboxRef });
      assert.equal(both.status, 400);
      // Idempotency: the same key answers the same snapshot; another body with it conflicts.
      const keyed = await snapshot(sb.id, { name: "k" }, { "idempotency-key": "snap-k" });
      const again = await snapshot(sb.id, { name: "k" }, { "idempotency-key": "snap-k" });
      assert.equal(again.status, 200, again.raw);
      assert.equal(again.body.snapshot_id, keyed.body.snapshot_id);
      const conflict = await snapshot(sb.id, { name: "other" }, { "idempotency-key": "snap-k" });
      assert.equal(conflict.status, 409);
      assert.equal(conflict.body.code, "idempotency_conflict");
      // A terminated sandbox is not ready; a quarantined one is quarantined.
      await t.c.sandboxes.setQuarantine(sb.id, true, "test");
      const quarantined = await snapshot(sb.id);
      assert.equal(quarantined.body.code, "quarantined");
      await t.c.sandboxes.setQuarantine(sb.id, false, "");
      assert.equal((await request("DELETE", `/v1/sandboxes/${sb.id}`)).status, 202);
      const gone = await snapshot(sb.id);
      assert.equal(gone.status, 409, gone.raw);
      assert.equal(gone.body.code, "sandbox_not_ready");
    });

    it("refuses a concurrent snapshot, fences growth and deletion until a snapshot resolves, and refuses deleting one a restore reads", async () => {
      const sb = await createRunning({ storage_class: "durable", workspace_capacity_gib: 1 });
      const made = await snapshot(sb.id, { wait_remote: true });
      const snapId = made.body.snapshot_id as string;
      // A snapshot still being taken: the next one, growth and deletion wait for it.
      await t.c.db.query(
        `INSERT INTO sandbox_snapshots (id, org_id, project_id, source_sandbox_id, run_id, image, lineage_path,
           storage_class, state, request_hash, created_at)
         SELECT 'snp-' || repeat('0', 40), org_id, project_id, id, run_id, image, lineage_path, storage_class,
           'pending', 'x', now() FROM sandboxes WHERE id = $1`,
        [sb.id],
      );
      const concurrent = await snapshot(sb.id);
      assert.equal(concurrent.status, 409, concurrent.raw);
      assert.equal(concurrent.body.code, "snapshot_in_progress");
      assert.match(String(concurrent.headers["retry-after"]), /^\d+$/);
      const fenced = await request("PATCH", `/v1/sandboxes/${sb.id}`, { workspace_capacity_gib: 2 });
      assert.equal(fenced.status, 409, fenced.raw);
      assert.equal(fenced.body.code, "operation_conflict");
      const undurable = await request("DELETE", `/v1/snapshots/snp-${"0".repeat(40)}`);
      assert.equal(undurable.status, 409);
      assert.equal(undurable.body.code, "snapshot_in_progress");
      await t.c.db.query("DELETE FROM sandbox_snapshots WHERE id = $1", [`snp-${"0".repeat(40)}`]);
      assert.equal((await request("PATCH", `/v1/sandboxes/${sb.id}`, { workspace_capacity_gib: 2 })).status, 200);

      // A restore still reading the snapshot (materializing) keeps it.
      const readerId = newSandboxId();
      const source = (await sandboxRepo.getSandbox(t.c.db, sb.id)) as sandboxRepo.SandboxRow;
      await sandboxRepo.insertSandbox(t.c.db, {
        ...source,
        id: readerId,
        name: null,
        state: "materializing",
        snapshot_id: snapId,
        lineage_path: `${source.lineage_path}.${readerId}`,
      });
      const inUse = await request("DELETE", `/v1/snapshots/${snapId}`);
      assert.equal(inUse.status, 409, inUse.raw);
      assert.equal(inUse.body.code, "snapshot_in_use");
      await t.c.db.query("DELETE FROM sandboxes WHERE id = $1", [readerId]);

      const deleted = await request("DELETE", `/v1/snapshots/${snapId}`);
      assert.equal(deleted.status, 200, deleted.raw);
      assert.deepEqual(deleted.body, {});
      assert.equal((await request("DELETE", `/v1/snapshots/${snapId}`)).status, 404);
      assert.equal(await fixture.driver.localSnapshot(snapId), null);
      const manifests = async (prefix: string) => {
        const keys: string[] = [];
        for await (const blob of t.c.blobs.list(prefix)) keys.push(blob.key);
        return keys;
      };
      assert.deepEqual(await manifests(`orgs/${t.orgA.id}/snapshots/${snapId}/`), [], "its manifests are gone");
      // A deletion cut short (a crash after the record went) is finished by the collector.
      const stray = `orgs/${t.orgA.id}/snapshots/snp-${"9".repeat(40)}/`;
      await t.c.blobs.putIfAbsent(`${stray}manifest-1.json`, Buffer.from("{}"));
      await t.c.db.query("INSERT INTO blob_deletions (prefix, org_id, requested_at) VALUES ($1, $2, now())", [
        stray,
        t.orgA.id,
      ]);
      await replicator.collectGarbage();
      assert.deepEqual(await manifests(stray), []);
      const { rows: queued } = await t.c.db.query("SELECT prefix FROM blob_deletions");
      assert.deepEqual(queued, []);
      assert.ok(!(await listSnaps()).snapshots.some((s) => s.id === snapId));
      const restore = await request("POST", "/v1/sandboxes", { snapshot_id: snapId });
      assert.equal(restore.status, 404);
    });

    it("stores a second snapshot's unchanged chunks once, and collects chunks no snapshot references", async () => {
      const sb = await createRunning({ storage_class: "durable", workspace_capacity_gib: 1 });
      await exec(sb.id, "head -c 8000000 /dev/urandom > /workspace/big; sync");
      const first = await snapshot(sb.id, { wait_remote: true });
      await exec(sb.id, "head -c 1000000 /dev/urandom > /workspace/small; sync");
      const packsOfFirst = new Set(await packFiles());
      const second = await snapshot(sb.id, { wait_remote: true });
      assert.equal(second.body.durability, "replicated", second.raw);
      // Its new chunks (both images') went into one small pack.
      const newPacks = (await packFiles()).filter((file) => !packsOfFirst.has(file));
      assert.equal(newPacks.length, 1, `new packs: ${newPacks.join(", ")}`);
      assert.ok((await stat(newPacks[0] as string)).size < 4_000_000);
      const { rows } = await t.c.db.query<{ id: string; uploaded_bytes: string; plain_bytes: string }>(
        "SELECT id, uploaded_bytes::text, plain_bytes::text FROM sandbox_snapshots WHERE id = ANY($1)",
        [[first.body.snapshot_id, second.body.snapshot_id]],
      );
      const secondStats = rows.find((row) => row.id === second.body.snapshot_id) as { uploaded_bytes: string };
      const firstStats = rows.find((row) => row.id === first.body.snapshot_id) as { uploaded_bytes: string };
      assert.ok(Number(firstStats.uploaded_bytes) >= 8_000_000, JSON.stringify(rows));
      assert.ok(
        Number(secondStats.uploaded_bytes) < 4_000_000,
        `the second snapshot uploads about the 1 MB changed: ${JSON.stringify(rows)}`,
      );

      // The second snapshot stored its chunks in packs of its own: collected with them.
      const { rows: ownPacks } = await t.c.db.query<{ key: string }>(
        `SELECT DISTINCT c.pack_key AS key FROM blob_chunks c JOIN snapshot_chunks s
            ON s.org_id = c.org_id AND s.digest = c.digest AND s.snapshot_id = $1
          WHERE NOT EXISTS (SELECT 1 FROM snapshot_chunks o WHERE o.snapshot_id <> $1 AND o.org_id = c.org_id
                              AND o.digest = c.digest)`,
        [second.body.snapshot_id],
      );
      assert.ok(ownPacks.length > 0);
      const packsBefore = (await packFiles()).length;
      assert.equal((await request("DELETE", `/v1/snapshots/${second.body.snapshot_id}`)).status, 200);
      const collected = await replicator.collectGarbage();
      assert.ok(collected > 0, "the second snapshot's own chunks are collected");
      for (const { key } of ownPacks) assert.equal(await t.c.blobs.head(key), null, `${key} is deleted`);
      assert.ok((await packFiles()).length <= packsBefore - ownPacks.length);
      // The first snapshot still restores from the blob store alone.
      await fixture.driver.dropLocalSnapshot(first.body.snapshot_id as string);
      const child = await request("POST", "/v1/sandboxes", {
        snapshot_id: first.body.snapshot_id,
        command: ["sleep", "3600"],
        network_access: "none",
      });
      await waitFor(child.body.id as string, "running");
      assert.equal(
        (await exec(child.body.id as string, "test -f /workspace/big && test ! -e /workspace/small")).exit,
        0,
      );
    });

    it("lets a sandbox-scoped key snapshot only its own sandbox and read only its lineage", async () => {
      const a = await createRunning({});
      const b = await createRunning({});
      const lineage = String(a.sandbox.lineage_path);
      const scoped = await t.issueKey(t.orgA, { sandbox: { sandboxId: a.id, lineagePath: lineage } });
      const own = await request("POST", `/v1/sandboxes/${a.id}:snapshot`, {}, scoped.key);
      assert.equal(own.status, 200, own.raw);
      const other = await request("POST", `/v1/sandboxes/${b.id}:snapshot`, {}, scoped.key);
      assert.equal(other.status, 404);
      assert.equal((await snapshot(b.id)).status, 200);
      const seen = await t.request("GET", "/v1/snapshots", { key: scoped.key });
      assert.equal(seen.status, 200, seen.raw);
      const ids = (seen.body.snapshots as Snap[]).map((s) => s.source_sandbox_id);
      assert.deepEqual([...new Set(ids)], [a.id]);
      const del = await request("DELETE", `/v1/snapshots/${own.body.snapshot_id}`, undefined, scoped.key);
      assert.ok(del.status === 403 || del.status === 404, del.raw);
    });
  });
}
