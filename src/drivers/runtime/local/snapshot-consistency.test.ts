// Snapshots taken without freezing the filesystems (clone-helper.c `sync-clone`) under load:
// sandboxes doing metadata-heavy work (creates, renames, hard links, unlinks, mkdir/rmdir,
// fallocate, fsync storms, appends) in the root layer (the overlay's upper dir on root.img)
// and in /workspace at once. Every sealed image must mount (replaying its log), check clean
// with `xfs_repair -n`, and hold exactly the state of a moment: each step the storm finished
// before that moment, through restores, snapshots of a restore, growth after the replay and a
// stopped sandbox.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { open, readdir, stat } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { openTestBlobStore } from "../../../../test/support/blob-store.js";
import { eventually } from "../../../../test/support/eventually.js";
import { listExtents } from "../../../modules/snapshots/replication/extents.js";
import { blobPackStore } from "../../../modules/snapshots/replication/packing.js";
import { rebuildImage } from "../../../modules/snapshots/replication/rebuild.js";
import { replicateImage, WindowPool } from "../../../modules/snapshots/replication/replicate.js";
import type { ImageManifest } from "../../../modules/snapshots/replication/types.js";
import type { ExecOutcome, SandboxSpec, SnapshotImages } from "../interface.js";
import {
  checkImageCopy,
  closeFixtureLeavingNothing,
  type RuntimeFixture,
  startRuntimeFixture,
  startSandbox,
  testId,
} from "./test-support.js";

/**
 * One iteration i of the storm in the current dir, resumed after the last finished one (a
 * restore runs it again on the restored files): a file written and renamed into place, hard
 * linked, a dir made, 64 KiB fallocated, the names of two iterations before removed, then
 * `done` replaced by i (written and renamed). A second process appends numbered lines to
 * `log`; a third rewrites eight small files with fsync, one after another.
 */
const STORM = [
  'mkdir -p "$1"; cd "$1" || exit 1',
  "i=$(cat done 2>/dev/null || echo -1); i=$((i+1))",
  "l=$(wc -l < log 2>/dev/null || echo 0)",
  "(while true; do echo $l >> log; l=$((l+1)); done) &",
  "(j=0; while true; do dd if=/dev/zero of=sync.$((j%8)) bs=4k count=4 conv=fsync 2>/dev/null; j=$((j+1)); done) &",
  "while true; do",
  "  echo $i > tmp.$i; mv tmp.$i f.$i; ln -f f.$i h.$i; mkdir -p d.$i; fallocate -l 65536 a.$i",
  "  rm -f f.$((i-2)) a.$((i-4)); rmdir d.$((i-2)) 2>/dev/null",
  "  echo $i > done.tmp; mv done.tmp done",
  "  i=$((i+1))",
  "done",
].join("\n");

/**
 * Checks the storm's dir `$1` against its rules and prints `n=<last finished> bad=<count>`
 * and each broken rule. The iteration after `n` may have got as far as its removals (seen by
 * its a.<n+1>), which may have taken f.<n-1>, d.<n-1> and a.<n-3>. Runs on the host (coreutils)
 * and in a sandbox (busybox).
 */
const CHECK = [
  'cd "$1" || exit 9',
  "n=$(cat done) || exit 8",
  "bad=0",
  'fail() { echo "$1"; bad=$((bad+1)); }',
  "next=0; [ -e a.$((n+1)) ] && next=1",
  "k=0",
  "while [ $k -le $n ]; do",
  "  v=; read v < h.$k 2>/dev/null",
  '  [ "$v" = "$k" ] || fail "h.$k"',
  "  if [ $k -ge $((n-1)) ]; then",
  '    if [ -e f.$k ]; then [ "$(cat f.$k)" = "$k" ] || fail "f.$k content"; links=2',
  '    elif [ $k -eq $((n-1)) ] && [ $next = 1 ]; then links=1; else fail "f.$k missing"; links=1; fi',
  '    [ -d d.$k ] || { [ $k -eq $((n-1)) ] && [ $next = 1 ]; } || fail "d.$k missing"',
  "  else",
  '    [ -e f.$k ] && fail "f.$k left"',
  '    [ -e d.$k ] && fail "d.$k left"',
  "    links=1",
  "  fi",
  "  # Link counts of the last few (fork-free checks for the rest; xfs_repair checks every count).",
  '  [ $k -lt $((n-5)) ] || [ "$(stat -c %h h.$k 2>/dev/null)" = "$links" ] || fail "h.$k links"',
  "  if [ $k -ge $((n-3)) ]; then",
  '    if [ -e a.$k ]; then [ "$(stat -c %s a.$k)" = 65536 ] || fail "a.$k size";',
  '    elif [ $k -ne $((n-3)) ] || [ $next = 0 ]; then fail "a.$k missing"; fi',
  '  elif [ -e a.$k ]; then fail "a.$k left"; fi',
  "  k=$((k+1))",
  "done",
  "lines=$(wc -l < log)",
  "torn=$(awk 'NR - 1 != $0 { t++ } END { print t + 0 }' log)",
  '[ "$torn" = 0 ] || fail "log: $torn lines out of sequence"',
  'echo "n=$n lines=$lines bad=$bad"',
].join("\n");

function completed(outcome: ExecOutcome): Extract<ExecOutcome, { kind: "completed" }> {
  assert.equal(outcome.kind, "completed", `expected completed, got ${JSON.stringify(outcome).slice(0, 500)}`);
  return outcome as Extract<ExecOutcome, { kind: "completed" }>;
}

/**
 * Whether two sparse files hold the same bytes: the same size, and the same bytes wherever
 * either has data (elsewhere both read zeros), compared 4 MiB at a time.
 */
async function sameBytes(a: string, b: string): Promise<boolean> {
  if ((await stat(a)).size !== (await stat(b)).size) return false;
  const extents = [...(await listExtents(a)), ...(await listExtents(b))].sort((x, y) => x.offset - y.offset);
  const [fa, fb] = [await open(a, "r"), await open(b, "r")];
  try {
    const [ba, bb] = [Buffer.alloc(4 << 20), Buffer.alloc(4 << 20)];
    let covered = 0;
    for (const { offset, length } of extents) {
      for (let at = Math.max(offset, covered); at < offset + length; at += ba.length) {
        const size = Math.min(ba.length, offset + length - at);
        const [ra, rb] = [await fa.read(ba, 0, size, at), await fb.read(bb, 0, size, at)];
        if (ra.bytesRead !== rb.bytesRead || !ba.subarray(0, ra.bytesRead).equals(bb.subarray(0, rb.bytesRead)))
          return false;
      }
      covered = Math.max(covered, offset + length);
    }
    return true;
  } finally {
    await Promise.all([fa.close(), fb.close()]);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `n=... lines=... bad=...` of a CHECK output, every broken rule listed in the assertion's message. */
function parseCheck(output: string, where: string): { n: number; lines: number } {
  const match = /n=(\d+) lines=(\d+) bad=(\d+)\s*$/.exec(output);
  assert.ok(match, `${where}: ${output.slice(-2000)}`);
  assert.equal(Number(match[3]), 0, `${where}: ${output.slice(-2000)}`);
  return { n: Number(match[1]), lines: Number(match[2]) };
}

describe("snapshot consistency under metadata-heavy load", () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  const sandbox = (overrides: Partial<SandboxSpec> = {}) => startSandbox(f, made, overrides);
  const sh = async (id: string, script: string) =>
    completed(await f.driver.exec(id, { argv: ["sh", "-c", script], timeoutSeconds: 120, maxOutputBytes: 1 << 20 }));
  const storm = ["sh", "-c", `sh -c '${STORM}' s /data & sh -c '${STORM}' s /workspace/data; wait`];
  const restore = async (snapshotId: string, overrides: Partial<SandboxSpec> = {}) => {
    const spec = f.spec({ ...overrides, source: { kind: "snapshot", image: f.image, snapshotId } });
    made.push(spec.id);
    await f.driver.create(spec);
    await f.driver.start(spec.id);
    return spec.id;
  };

  /** The storm's dir in a replayed copy of the sealed image checked, and the copy by `xfs_repair -n`. */
  const checkImage = async (image: string, dir: string, where: string) => {
    const output = await checkImageCopy(
      image,
      f.driver.layout.poolDir,
      CHECK.replace('cd "$1"', `cd "$1/${dir}"`),
    ).catch((error: Error) => assert.fail(`${where}: ${error.message}`));
    return parseCheck(output, `${where} (${dir} on the host)`);
  };
  const checkSnapshot = async (snapshotId: string, where: string) => {
    const images = (await f.driver.localSnapshot(snapshotId)) as SnapshotImages;
    assert.ok(images, `${snapshotId} is sealed`);
    return {
      root: await checkImage(images.root, "upper/data", `${where} root layer`),
      workspace: await checkImage(images.workspace, "data", `${where} workspace`),
    };
  };
  /** The storm's progress in both dirs of a running sandbox. */
  const progress = async (id: string) =>
    (await sh(id, "cat /data/done /workspace/data/done 2>/dev/null")).stdout.trim().split("\n").map(Number);

  /** The root layer's step once past `step` (the storm goes on: thawed, or resumed after a restore). */
  const progressBeyond = async (id: string, step: number) => {
    for (let waited = 0; ; waited += 200) {
      const [root] = await progress(id);
      if ((root as number) > step) return root as number;
      assert.ok(waited < 30_000, `the storm of ${id} is still at step ${root}, not past ${step}`);
      await sleep(200);
    }
  };

  /** Waits (up to a minute: a loaded host starts the storm late) until both dirs are past `step`. */
  const stormPast = async (id: string, step: number) => {
    for (let waited = 0; ; waited += 200) {
      const [root, workspace] = await progress(id);
      if ((root as number) > step && (workspace as number) > step) return;
      assert.ok(waited < 60_000, `the storm of ${id} is at ${root} / ${workspace}, not past ${step}`);
      await sleep(200);
    }
  };

  before(async () => {
    f = await startRuntimeFixture("snapcons", { rootLayerGiB: 1, standardWorkspaceGiB: 1 });
  });
  after(() => closeFixtureLeavingNothing(f, made));

  it("snapshots taken mid-storm hold one moment of both filesystems: each image replays and checks clean, restores continue from it", async () => {
    const id = await sandbox({ storageClass: "durable", workspaceCapacityGiB: 1, command: storm });
    await stormPast(id, 10);
    const [rootBefore, workspaceBefore] = await progress(id);
    assert.ok((rootBefore as number) > 10 && (workspaceBefore as number) > 10, `the storm runs: ${rootBefore}`);
    // A writer the cgroup freezer does not stop (a host process): extended attributes, small
    // and large enough for blocks of their own, set and removed on the workspace's files
    // through the snapshots; the clone must be consistent even with it writing.
    const xattrs = spawn(
      "/bin/sh",
      [
        "-c",
        'mkdir -p "$1/xattr" && cd "$1/xattr" && i=0; while true; do f=x.$((i%50)); touch $f; ' +
          'setfattr -n user.v$((i%7)) -v "$(printf %0$(( (i%2)*3000 + 10 ))d $i)" $f; ' +
          "setfattr -x user.v$(((i+3)%7)) $f 2>/dev/null; i=$((i+1)); done",
        "xattrs",
        f.driver.layout.sandbox(id).workspace,
      ],
      { detached: true, stdio: "ignore" },
    );
    const first = testId("snp");
    const second = testId("snp");
    const third = testId("snp");
    try {
      // The writer under way (all 50 of its files made) before the first snapshot, however
      // slow the host: a fixed 300 ms saw 33 of them on a loaded 2-core machine.
      const dir = path.join(f.driver.layout.sandbox(id).workspace, "xattr");
      await eventually("the xattr writer's 50 files", async () => (await readdir(dir)).length >= 50, 120_000);
      // Three snapshots in a row of the same storm.
      await f.driver.snapshot(id, first);
      await sleep(300); // the storm moves on between snapshots (how far does not matter to the checks)
      await f.driver.snapshot(id, second);
      await f.driver.snapshot(id, third);
    } finally {
      process.kill(-(xattrs.pid as number), "SIGKILL");
    }
    const attributes = (await sh(id, "ls /workspace/xattr | wc -l")).stdout.trim();
    assert.equal(attributes, "50", "the xattr writer ran");
    await progressBeyond(id, rootBefore as number);
    const checked = [];
    for (const [where, snapshotId] of [
      ["first", first],
      ["second", second],
      ["third", third],
    ] as const)
      checked.push(await checkSnapshot(snapshotId, where));
    console.log(
      `[snapshot-consistency] storm steps before ${rootBefore}/${workspaceBefore}, in the snapshots ${JSON.stringify(checked)}`,
    );
    // Everything finished before the call is in the snapshot (processes frozen, then flushed).
    assert.ok((checked[0]?.root.n as number) >= (rootBefore as number), "the root layer's steps before the call");
    assert.ok(
      (checked[0]?.workspace.n as number) >= (workspaceBefore as number),
      "the workspace's steps before the call",
    );
    // (On a loaded host the storm may not have made a step between two snapshots.)
    assert.ok((checked[1]?.root.n as number) >= (checked[0]?.root.n as number), "a later snapshot is never older");

    // The child: restored from the first (its logs replayed at its mounts), grown to 2 GiB
    // after the replay, the storm resumed on the restored files, snapshotted mid-storm.
    const child = await restore(first, { storageClass: "durable", workspaceCapacityGiB: 2, command: storm });
    const childRoot = await progressBeyond(child, checked[0]?.root.n as number);
    const grandchild = testId("snp");
    const taken = await f.driver.snapshot(child, grandchild);
    assert.equal(taken.workspaceCapacityGiB, 2);
    const grand = await checkSnapshot(grandchild, "child's snapshot");
    assert.ok(grand.root.n >= (childRoot as number), "the child's snapshot holds the child's steps");

    // Restored once more, stopped (the storm's processes gone mid-step), grown online after
    // its mount replayed the log, snapshotted stopped: checked inside and on the host.
    const quiet = await restore(grandchild, {
      storageClass: "durable",
      workspaceCapacityGiB: 2,
      command: ["sleep", "1000000"],
    });
    for (const dir of ["/data", "/workspace/data"]) {
      const outcome = await f.driver.exec(quiet, {
        argv: ["sh", "-c", CHECK, "check", dir],
        timeoutSeconds: 120,
        maxOutputBytes: 1 << 20,
      });
      parseCheck(completed(outcome).stdout, `restored ${dir} in the sandbox`);
    }
    await f.driver.growWorkspace(quiet, 3);
    await sh(quiet, "echo grown > /workspace/data/after-growth");
    await f.driver.stop(quiet);
    const stopped = testId("snp");
    await f.driver.snapshot(quiet, stopped);
    const last = await checkSnapshot(stopped, "stopped sandbox's snapshot");
    assert.equal(last.root.n, grand.root.n, "nothing ran in between");
  });

  it("a snapshot mid-storm (random data included) replicated and rebuilt from the blob store is the same bytes, replays, checks clean and restores", async () => {
    // A fourth writer: random files, so whole chunks are framed raw (no zstd) into the packs.
    const random = "(j=0; while true; do head -c 300000 /dev/urandom > /workspace/r.$((j%4)); j=$((j+1)); done) &";
    const id = await sandbox({ command: ["sh", "-c", `${random} ${storm[2]}`] });
    // Both storms past their first step (each dir has its `done`), whatever the host's load.
    await stormPast(id, 1);
    const snapshots = [testId("snp"), testId("snp")];
    for (const snapshotId of snapshots) {
      await f.driver.snapshot(id, snapshotId);
      await sleep(300); // the storm moves on between snapshots (how far does not matter to the checks)
    }
    // The storm's CPU is not the replication's.
    await f.driver.stop(id);
    let started = Date.now();
    const lap = (what: string) => {
      console.log(`[snapshot-consistency] ${what} ${Date.now() - started} ms`);
      started = Date.now();
    };
    const blobs = await openTestBlobStore(path.join(f.root, "blobs"));
    const chunks = blobPackStore(blobs, "orgs/org_test", { targetBytes: 4 * 1024 * 1024 });
    const windows = new WindowPool();
    const manifests: Record<string, ImageManifest>[] = [];
    for (const [i, snapshotId] of snapshots.entries()) {
      const images = (await f.driver.localSnapshot(snapshotId)) as SnapshotImages;
      const previous = i > 0 ? await f.driver.localSnapshot(snapshots[i - 1] as string) : null;
      const manifest: Record<string, ImageManifest> = {};
      for (const kind of ["root", "workspace"] as const) {
        // The second against the first: only what changed is read.
        const base =
          previous && manifests[i - 1]
            ? { path: previous[kind], manifest: manifests[i - 1]?.[kind] as ImageManifest }
            : undefined;
        manifest[kind] = (
          await replicateImage({ path: images[kind], chunks, windows, ...(base ? { base } : {}) })
        ).manifest;
      }
      manifests.push(manifest);
      lap(`replicated ${i}`);
    }
    for (const [i, snapshotId] of snapshots.entries()) {
      const rebuilt = testId("rbl");
      await f.driver.importSnapshot(rebuilt, async (staging) => {
        for (const kind of ["root", "workspace"] as const)
          await rebuildImage({ manifest: manifests[i]?.[kind] as ImageManifest, path: staging[kind], chunks });
      });
      const [sealed, copy] = [await f.driver.localSnapshot(snapshotId), await f.driver.localSnapshot(rebuilt)];
      for (const kind of ["root", "workspace"] as const)
        assert.ok(
          await sameBytes(sealed?.[kind] as string, copy?.[kind] as string),
          `rebuilt ${i} ${kind}: the same bytes`,
        );
      lap(`rebuilt and compared ${i}`);
      const checked = await checkSnapshot(rebuilt, `rebuilt ${i}`);
      lap(`checked ${i}`);
      const restored = await restore(rebuilt, { command: ["sleep", "1000000"] });
      const inside = completed(
        await f.driver.exec(restored, {
          argv: ["sh", "-c", CHECK, "check", "/workspace/data"],
          timeoutSeconds: 120,
          maxOutputBytes: 1 << 20,
        }),
      );
      assert.equal(parseCheck(inside.stdout, `rebuilt ${i} restored`).n, checked.workspace.n);
    }
  });
});
