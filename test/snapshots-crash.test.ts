// Crash safety of snapshots: the real server (the `make run` bundle) as a child process on
// PGlite is killed with SIGKILL while snapshots are being taken (one kill the instant a
// source sandbox is frozen, one a few ms after the requests, one the instant the host sealed
// one), while a snapshot replicates to the blob store, while a sandbox is restored from the
// blob store, and while the collector deletes unreferenced chunks and packs; then started
// again on the same data dir and runtime root. After each restart every snapshot is sealed
// (and its replication resumes) or recorded failed, no pack is half-written and no chunk row
// names a pack that is not stored (checked in the store while the server is dead), nothing unsealed is
// served, the source sandboxes run thawed, an interrupted restore ends running with its files
// intact or failed with a reason, and at the end nothing is left on the host.
//
// WARREN_SNAPSHOT_LOCAL_COPIES=drop: every replicated snapshot loses its host copy, so a
// restore rebuilds it from the blob store (the step the third kill interrupts).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdir, readFile, stat } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { childCgroups, freezerState } from "../src/drivers/runtime/local/cgroups.js";
import { Layout } from "../src/drivers/runtime/local/layout.js";
import { mountsUnder, readMounts } from "../src/drivers/runtime/local/mounts.js";
import { loopDevicesUnder } from "../src/drivers/runtime/local/storage/pool.js";
import { decompressChunk, digestOf } from "../src/modules/snapshots/replication/codec.js";
import { packEntries, packMatchesKey } from "../src/modules/snapshots/replication/pack.js";
import { openPglite } from "../src/store/pglite.js";
import {
  type CrashRig,
  eventually,
  type Json,
  type Reply,
  type ServerProcess,
  sleep,
  startCrashRig,
} from "./support/server-process.js";

interface SnapshotRequest {
  sandboxId: string;
  key: string;
  body: Json;
  /** The snapshot id once a request answered 200. */
  snapshotId?: string;
}

const MIB = 1024 * 1024;

describe("snapshot crash safety [pglite]", () => {
  let root = "";
  let dataDir = "";
  let server: ServerProcess;
  let layout: Layout;
  const apiKey = `wrn_${randomBytes(32).toString("base64url")}`;
  const sources: string[] = [];
  const restores: string[] = [];
  const requests: SnapshotRequest[] = [];
  /** sha256 of /workspace/data and /data-root per sandbox, written before any kill. */
  const checksums = new Map<string, string>();

  const api = (method: string, url: string, body?: unknown, headers: Record<string, string> = {}) =>
    server.api(method, url, body, headers);
  const sandboxOf = (id: string, query = "") => server.sandbox(id, query);
  const waitFor = (id: string, state: string) => server.waitFor(id, state);
  const exec = (id: string, script: string, timeoutSeconds = 60) =>
    api("POST", `/v1/sandboxes/${id}:exec`, { cmd: ["sh", "-c", script], timeout_seconds: timeoutSeconds });
  const stdoutOf = (res: Reply) => {
    assert.equal(res.status, 200, res.raw);
    assert.equal(res.body.exit, 0, res.raw);
    return res.body.stdout as string;
  };
  const checksumOf = async (id: string) =>
    stdoutOf(await exec(id, "sha256sum /workspace/data /data-root | cut -d' ' -f1 | tr '\\n' ' '"));
  const snapshot = (request: SnapshotRequest, extra: Json = {}) =>
    api(
      "POST",
      `/v1/sandboxes/${request.sandboxId}:snapshot`,
      { ...request.body, ...extra },
      {
        "idempotency-key": request.key,
      },
    );

  const blobDir = () => path.join(dataDir, "blobs");
  const poolSub = (name: "sandboxes" | "snapshots" | "staging") => path.join(layout.poolDir, name);
  const entries = (dir: string) => readdir(dir).catch(() => [] as string[]);
  /** Every file under the blob store's objects dir, relative to it. */
  const objectFiles = async () =>
    (await readdir(path.join(blobDir(), "objects"), { recursive: true, withFileTypes: true }).catch(() => []))
      .filter((entry) => entry.isFile())
      .map((entry) => path.relative(path.join(blobDir(), "objects"), path.join(entry.parentPath, entry.name)));
  /** Chunks stored one object each (before packs: none are written now). */
  const chunkFiles = async () => (await objectFiles()).filter((file) => file.split(path.sep).includes("chunks"));
  const packFiles = async () => (await objectFiles()).filter((file) => file.split(path.sep).includes("packs"));
  const manifestFiles = async (snapshotId = "") =>
    (await objectFiles()).filter((file) => file.includes(`${path.sep}snapshots${path.sep}${snapshotId}`));

  /**
   * With the server dead: every chunk row that names a pack names one that is stored whole
   * (a row is written only after its pack's put). Returns how many packs rows name.
   */
  const checkPackRows = async () => {
    const db = await openPglite(path.join(dataDir, "pglite"));
    try {
      const { rows } = await db.query<{ pack_key: string; stored: boolean }>(
        "SELECT pack_key, bool_and(stored_bytes > 0) AS stored FROM blob_chunks WHERE pack_key IS NOT NULL GROUP BY pack_key",
      );
      const packs = new Set((await packFiles()).map((file) => file.slice(0, -1).split(path.sep).join("/")));
      for (const row of rows) assert.ok(packs.has(row.pack_key), `chunk rows name ${row.pack_key}: it is stored`);
      return rows.length;
    } finally {
      await db.close();
    }
  };

  const createDurable = async (name: string, body: Json = {}) => {
    const res = await api("POST", "/v1/sandboxes", {
      command: ["sleep", "3600"],
      network_access: "none",
      storage_class: "durable",
      workspace_capacity_gib: 1,
      name,
      ...body,
    });
    assert.equal(res.status, 200, res.raw);
    return res.body.id as string;
  };
  /** Writes `mib` MiB of random bytes to /workspace/data (and 4 MiB to the root layer); records their checksums. */
  const fill = async (id: string, mib: number, sync = true) => {
    stdoutOf(
      await exec(
        id,
        `head -c ${mib}m /dev/urandom > /workspace/data && head -c 4m /dev/urandom > /data-root${sync ? " && sync" : ""}`,
        120,
      ),
    );
    checksums.set(id, await checksumOf(id));
  };

  /** Notes the snapshots answered before a kill: the same must be answered after it. */
  const recordAnswers = (round: SnapshotRequest[], replies: (Reply | Error)[]) => {
    round.forEach((request, i) => {
      const reply = replies[i];
      if (reply instanceof Error || reply === undefined) return;
      assert.equal(reply.status, 200, reply.raw);
      request.snapshotId = reply.body.snapshot_id as string;
    });
  };

  /** Kills the server with SIGKILL the moment `probe` answers true (polled without pause). */
  const killWhen = async (what: string, probe: () => Promise<boolean>, timeoutMs = 20_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await probe().catch(() => false)) break;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} to kill the server`);
      await new Promise((resolve) => setImmediate(resolve));
    }
    assert.equal(await server.stop("SIGKILL"), null, "killed, not exited");
  };

  let rig: CrashRig | undefined;
  before(async () => {
    rig = await startCrashRig("snapcrash", apiKey, (busyboxRef) => ({
      WARREN_DEFAULT_IMAGE: busyboxRef,
      WARREN_SANDBOX_MEMORY_MB: "256",
      WARREN_SANDBOX_PIDS: "128",
      // No pre-started sandboxes: this host's two cores go to the snapshots.
      WARREN_SANDBOX_POOL_SIZE: "0",
      WARREN_SNAPSHOT_LOCAL_COPIES: "drop",
    }));
    ({ root, dataDir, server } = rig);
    layout = new Layout(root);
  });

  after(async () => {
    await rig?.cleanup();
  });

  /**
   * What must hold after every restart: each keyed request answers its snapshot (200, and
   * replicated under wait_remote) or its failure (503 unavailable), never a 500 or a hang;
   * the listed snapshots are exactly those; the sources run thawed with their files; no
   * temp file of a dead writer, no staging dir, only sealed host copies of known snapshots,
   * and every chunk in the store holds what its name says.
   */
  const checkAfterRestart = async (t: { diagnostic(message: string): void }, killedPid: number) => {
    const outcomes: string[] = [];
    for (const request of requests) {
      const res = await snapshot(request);
      if (res.status === 200) {
        assert.match(String(res.body.snapshot_id), /^snp-[0-9a-f]{40}$/, res.raw);
        if (request.snapshotId) assert.equal(res.body.snapshot_id, request.snapshotId, "the same snapshot");
        request.snapshotId = res.body.snapshot_id as string;
        outcomes.push(`${request.key}: ${res.body.durability}`);
      } else {
        assert.equal(res.status, 503, `a sealed snapshot or a failed one, nothing else: ${res.raw}`);
        assert.equal(res.body.code, "unavailable", res.raw);
        assert.match(String(res.body.message), /the snapshot failed/, res.raw);
        assert.equal(request.snapshotId, undefined, "a snapshot answered before never fails afterwards");
        outcomes.push(`${request.key}: failed`);
      }
    }
    t.diagnostic(`after the restart: ${outcomes.join(", ")}`);
    // Replication resumes: each sealed snapshot reaches `replicated` (wait_remote waits up to 25 s a call).
    for (const request of requests.filter((r) => r.snapshotId)) {
      const deadline = Date.now() + 90_000;
      for (;;) {
        const res = await snapshot(request, { wait_remote: true, wait_timeout_seconds: 25 });
        assert.equal(res.status, 200, res.raw);
        if (res.body.durability === "replicated") break;
        assert.ok(Date.now() < deadline, `snapshot ${request.snapshotId} never replicated after the restart`);
      }
    }
    // Nothing unsealed is served: a source's list holds exactly the snapshots that answered.
    for (const sandboxId of sources) {
      const res = await api("GET", `/v1/snapshots?sandbox_id=${sandboxId}&page_size=200`);
      assert.equal(res.status, 200, res.raw);
      const listed = (res.body.snapshots as { id: string; durability: string }[]).map((s) => s.id).sort();
      const answered = requests
        .filter((r) => r.sandboxId === sandboxId && r.snapshotId)
        .map((r) => r.snapshotId as string)
        .sort();
      assert.deepEqual(listed, answered, `snapshots listed for ${sandboxId}`);
    }
    for (const id of sources) {
      const sandbox = await sandboxOf(id);
      assert.equal(sandbox.state, "running", `source ${id} runs again: ${JSON.stringify(sandbox)}`);
      assert.equal(await freezerState(layout.cgroupPath(id)), "THAWED", `the cgroup of ${id} is thawed`);
      // Both XFS images take writes (a frozen one would block this until the exec's timeout).
      const probe = await exec(id, "echo probe > /workspace/probe && echo probe > /probe-root && sync && echo ok", 15);
      assert.equal(stdoutOf(probe), "ok\n", `writes complete in ${id}`);
      assert.equal(await checksumOf(id), checksums.get(id), `the files of ${id} are as before`);
    }
    const deadTemps = (await entries(path.join(blobDir(), "tmp"))).filter((name) => name.startsWith(`${killedPid}-`));
    assert.deepEqual(deadTemps, [], "the killed server's temp files are gone once the store reopened");
    await eventually(
      "no staging dir in the pool",
      async () => (await entries(poolSub("staging"))).length === 0,
      15_000,
    );
    const known = new Set(requests.map((r) => r.snapshotId).filter(Boolean));
    for (const name of await entries(poolSub("snapshots"))) {
      assert.ok(known.has(name), `host copy ${name} belongs to a snapshot that answered`);
      await stat(path.join(poolSub("snapshots"), name, "snapshot.json")); // sealed
    }
    await checkChunks();
  };

  /**
   * Every pack is whole (its bytes are the BLAKE3 its name says) and every chunk in it
   * decompresses to bytes whose BLAKE3 it is listed under; so does every per-chunk file;
   * every manifest's chunk is there.
   */
  const checkChunks = async () => {
    const stored = new Set<string>();
    assert.deepEqual(await chunkFiles(), [], "no chunk is stored as an object of its own any more");
    for (const file of await packFiles()) {
      const name = path.basename(file);
      assert.match(name, /^[0-9a-f]{64}@$/, `pack file name ${file}`);
      const data = await readFile(path.join(blobDir(), "objects", file));
      assert.ok(packMatchesKey(file.slice(0, -1), data), `pack ${file} holds what its name says (never half a pack)`);
      for (const entry of packEntries(data)) {
        const plain = await decompressChunk(data.subarray(entry.offset, entry.offset + entry.length), 4 << 20);
        assert.equal(digestOf(plain), entry.digest, `a chunk of ${file} holds what its index says`);
        stored.add(entry.digest);
      }
    }
    for (const file of await manifestFiles()) {
      const manifest = JSON.parse(await readFile(path.join(blobDir(), "objects", file), "utf8")) as {
        images: Record<string, { chunks: { digest: string }[] }>;
      };
      for (const image of Object.values(manifest.images)) {
        for (const chunk of image.chunks) assert.ok(stored.has(chunk.digest), `${file} names ${chunk.digest}: stored`);
      }
    }
    return stored.size;
  };

  it("setup: durable sandboxes with data in both filesystems", async () => {
    await server.start();
    for (const name of ["small-a", "small-b", "busy", "large"]) sources.push(await createDurable(name));
    for (const id of sources) await waitFor(id, "running");
    const [a, b, busy, large] = sources as [string, string, string, string];
    await fill(a, 8);
    await fill(b, 8);
    await fill(busy, 32);
    await fill(large, 256);
  });

  it("kill -9 the instant a source sandbox is frozen for its snapshot", async (t) => {
    const [a, b, busy] = sources as [string, string, string];
    // Dirty data not yet flushed: the snapshot of `busy` first flushes it, then freezes.
    stdoutOf(await exec(busy, "head -c 48m /dev/urandom > /workspace/dirty && echo done", 60));
    const round = [a, b, busy].map((sandboxId, i) => ({
      sandboxId,
      key: `frozen-${i}`,
      body: { name: `frozen-${i}` },
    }));
    requests.push(...round);
    const answers = round.map((request) => snapshot(request).catch((error: Error) => error));
    const pid = server.pid as number;
    let frozen = "";
    await killWhen("a source to be frozen", async () => {
      for (const id of [a, b, busy]) {
        if ((await freezerState(layout.cgroupPath(id))) !== "THAWED") {
          frozen = id;
          return true;
        }
      }
      return false;
    });
    const replies = await Promise.all(answers);
    t.diagnostic(
      `killed while ${frozen} was frozen; answers: ${replies.map((r) => (r instanceof Error ? "none" : r.status)).join(", ")}`,
    );
    recordAnswers(round, replies);
    assert.notEqual(await freezerState(layout.cgroupPath(frozen)), "THAWED", "the kill left it frozen");
    await server.start();
    await checkAfterRestart(t, pid);
  });

  it("kill -9 a few ms into snapshot requests at three sandboxes", async (t) => {
    const [a, b, busy] = sources as [string, string, string];
    stdoutOf(await exec(busy, "head -c 48m /dev/urandom > /workspace/dirty && echo done", 60));
    const round = [a, b, busy].map((sandboxId, i) => ({ sandboxId, key: `early-${i}`, body: { name: `early-${i}` } }));
    requests.push(...round);
    const answers: Promise<Reply | Error>[] = [];
    for (const request of round) {
      answers.push(snapshot(request).catch((error: Error) => error));
      await sleep(4);
    }
    const pid = server.pid as number;
    await sleep(6);
    assert.equal(await server.stop("SIGKILL"), null, "killed, not exited");
    const replies = await Promise.all(answers);
    t.diagnostic(`answers before the kill: ${replies.map((r) => (r instanceof Error ? "none" : r.status)).join(", ")}`);
    recordAnswers(round, replies);
    await server.start();
    await checkAfterRestart(t, pid);
  });

  it("kill -9 the instant a snapshot is sealed on the host, before the store records it", async (t) => {
    const [a, b] = sources as [string, string];
    const round = [a, b].map((sandboxId, i) => ({ sandboxId, key: `sealed-${i}`, body: { name: `sealed-${i}` } }));
    requests.push(...round);
    const before = new Set(await entries(poolSub("snapshots")));
    const answers = round.map((request) => snapshot(request).catch((error: Error) => error));
    const pid = server.pid as number;
    let sealed = "";
    await killWhen("a snapshot to be sealed on the host", async () => {
      sealed = (await entries(poolSub("snapshots"))).find((name) => !before.has(name)) ?? "";
      return sealed !== "";
    });
    const replies = await Promise.all(answers);
    t.diagnostic(`answers before the kill: ${replies.map((r) => (r instanceof Error ? "none" : r.status)).join(", ")}`);
    recordAnswers(round, replies);
    const record = JSON.parse(await readFile(path.join(poolSub("snapshots"), sealed, "snapshot.json"), "utf8")) as {
      sandboxId: string;
    };
    const request = round.find((r) => r.sandboxId === record.sandboxId) as SnapshotRequest;
    assert.ok(request, `the sealed copy is of a source: ${JSON.stringify(record)}`);
    // A snapshot the host sealed is sealed after the restart, whatever the store had recorded.
    if (request.snapshotId) assert.equal(request.snapshotId, sealed);
    request.snapshotId = sealed;
    await server.start();
    await checkAfterRestart(t, pid);
  });

  it("kill -9 while a snapshot replicates to the blob store", async (t) => {
    const large = sources[3] as string;
    const request: SnapshotRequest = { sandboxId: large, key: "replicating", body: { name: "replicating" } };
    requests.push(request);
    const packsBefore = (await packFiles()).length;
    const res = await snapshot(request);
    assert.equal(res.status, 200, res.raw);
    assert.equal(res.body.durability, "local", "sealed on the host; replication follows");
    request.snapshotId = res.body.snapshot_id as string;
    const pid = server.pid as number;
    // 256 MiB of random data make ~16 packs: killed with some stored, others being written.
    await killWhen("packs of the snapshot to appear", async () => (await packFiles()).length >= packsBefore + 3);
    assert.deepEqual(await manifestFiles(request.snapshotId), [], "killed before the manifest was written");
    t.diagnostic(
      `killed with ${(await packFiles()).length - packsBefore} new packs, temp files: ${(await entries(path.join(blobDir(), "tmp"))).length}`,
    );
    t.diagnostic(`chunk rows name ${await checkPackRows()} packs, each stored`);
    await checkChunks();
    await server.start();
    await checkAfterRestart(t, pid);
  });

  it("kill -9 while a sandbox is restored from the blob store", async (t) => {
    const large = sources[3] as string;
    const from = requests.find((r) => r.key === "replicating")?.snapshotId as string;
    await eventually("the local copy to be dropped", async () => !(await entries(poolSub("snapshots"))).includes(from));
    const res = await api("POST", "/v1/sandboxes", {
      command: ["sleep", "3600"],
      network_access: "none",
      snapshot_id: from,
      name: "restored",
    });
    assert.equal(res.status, 200, res.raw);
    const restored = res.body.id as string;
    restores.push(restored);
    const pid = server.pid as number;
    // The rebuild writes the workspace image under a temporary name in a staging dir.
    await killWhen("the workspace image to be half rebuilt", async () => {
      for (const dir of await entries(poolSub("staging"))) {
        if (!dir.startsWith(`${from}.`)) continue;
        for (const name of await entries(path.join(poolSub("staging"), dir))) {
          if (!name.startsWith(".workspace.img.rebuild-")) continue;
          const info = await stat(path.join(poolSub("staging"), dir, name));
          if (info.blocks * 512 > 32 * MIB) return true;
        }
      }
      return false;
    });
    await server.start();
    const settled = await eventually(
      "the restore to settle",
      async () => {
        const sandbox = await sandboxOf(restored);
        return sandbox.state === "running" || sandbox.state === "failed" ? sandbox : null;
      },
      120_000,
    );
    t.diagnostic(`the interrupted restore ended ${settled.state}`);
    if (settled.state === "failed") {
      assert.ok(settled.state_reason?.code && settled.state_reason.message, JSON.stringify(settled));
    } else {
      assert.equal(await checksumOf(restored), checksums.get(large), "the restored files are the snapshot's");
    }
    await checkAfterRestart(t, pid);
  });

  it("kill -9 while unreferenced chunks are collected; a later snapshot of the same data is whole", async (t) => {
    const large = sources[3] as string;
    const index = requests.findIndex((r) => r.key === "replicating");
    const deleted = requests[index] as SnapshotRequest;
    // Its chunks become garbage; the server started next collects them at once (no grace).
    const gone = await api("DELETE", `/v1/snapshots/${deleted.snapshotId}`);
    assert.equal(gone.status, 200, gone.raw);
    requests.splice(index, 1);
    const before = (await packFiles()).length;
    assert.equal(await server.stop("SIGTERM"), 0, "a clean shutdown");
    await server.start({ WARREN_BLOB_GC_INTERVAL_SECONDS: "1", WARREN_BLOB_GC_GRACE_SECONDS: "0" });
    const pid = server.pid as number;
    await killWhen("the collector to delete packs", async () => (await packFiles()).length < before - 2);
    t.diagnostic(`killed with ${before - (await packFiles()).length} of ${before} pack files deleted`);
    t.diagnostic(`chunk rows name ${await checkPackRows()} packs, each stored`);
    // Started again without collecting: the same bytes snapshotted again must all be stored.
    await server.start();
    const again: SnapshotRequest = { sandboxId: large, key: "after-gc", body: { name: "after-gc" } };
    requests.push(again);
    await checkAfterRestart(t, pid);
    const res = await api("POST", "/v1/sandboxes", {
      command: ["sleep", "3600"],
      network_access: "none",
      snapshot_id: again.snapshotId,
      name: "restored-after-gc",
    });
    assert.equal(res.status, 200, res.raw);
    restores.push(res.body.id as string);
    const restored = await sandboxOf(res.body.id as string, "?wait_state=running&wait_timeout_seconds=25");
    assert.equal(restored.state, "running", JSON.stringify(restored));
    assert.equal(await checksumOf(restored.id), checksums.get(large), "restored whole from the blob store");
  });

  it("leaves nothing on the host once every sandbox and snapshot is deleted", async () => {
    const sandboxes = [...sources, ...restores];
    for (const id of sandboxes) {
      const res = await api("DELETE", `/v1/sandboxes/${id}`);
      assert.equal(res.status, 202, res.raw);
    }
    for (const id of sandboxes) await waitFor(id, "terminated");
    for (const request of requests.filter((r) => r.snapshotId)) {
      const res = await api("DELETE", `/v1/snapshots/${request.snapshotId}`);
      assert.equal(res.status, 200, res.raw);
    }
    assert.equal(await server.stop("SIGTERM"), 0, "a clean shutdown");
    const pool = layout.poolDir;
    assert.deepEqual(
      mountsUnder(await readMounts(), root).filter((point) => point !== pool),
      [],
      "mounts under the root other than the pool",
    );
    assert.deepEqual(
      (await loopDevicesUnder(root)).filter((loop) => loop.backingFile !== layout.poolImage),
      [],
      "loop devices of images under the root",
    );
    for (const sub of ["sandboxes", "snapshots", "staging"] as const) {
      assert.deepEqual(await entries(poolSub(sub)), [], `the pool's ${sub} dir`);
    }
    assert.deepEqual(await childCgroups(layout.cgroupParent), [], "cgroups of the root");
    assert.deepEqual(await manifestFiles(), [], "manifests of deleted snapshots");
    assert.deepEqual(await entries(path.join(blobDir(), "tmp")), [], "temp files of the blob store");
    assert.ok(!/warren failed to start|reconcile failed/.test(server.log), server.log);
  });
});
