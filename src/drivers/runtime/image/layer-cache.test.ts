import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import {
  changesLayer,
  ensureImageTestTools,
  pushImage,
  pushTestImages,
  startTestRegistry,
  type TestImages,
  type TestRegistry,
} from "../../../../test/support/registry.js";
import { ImageError } from "./errors.js";
import { LayerCache } from "./layer-cache.js";
import { RegistryClient } from "./registry-client.js";
import { encodeTar } from "./tar.js";

/** A fetch that counts requests per URL path, for "pulled once" assertions. */
function countingFetch() {
  const counts = new Map<string, number>();
  const fetchImpl: typeof fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    counts.set(url.pathname, (counts.get(url.pathname) ?? 0) + 1);
    return fetch(input, init);
  };
  const matching = (part: string) => [...counts].filter(([pathname]) => pathname.includes(part));
  return { fetchImpl, counts, matching, total: () => [...counts.values()].reduce((a, b) => a + b, 0) };
}

describe("LayerCache against a local docker-registry", () => {
  let registry: TestRegistry;
  let images: TestImages;
  const work = mkdtempSync(path.join(os.tmpdir(), "warren-layer-cache-test-"));
  let roots = 0;
  const freshRoot = () => path.join(work, `cache${roots++}`);

  before(async () => {
    ensureImageTestTools();
    registry = await startTestRegistry();
    images = await pushTestImages(registry);
  });
  after(async () => {
    await registry?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  it("pulls a single-manifest image into unpacked layers with its config", async () => {
    const cache = new LayerCache({ root: freshRoot(), client: new RegistryClient() });
    const { image, downloaded } = await cache.pull(`${registry.host}/test/busybox:latest`);
    assert.equal(downloaded, true);
    assert.equal(image.reference, `${registry.host}/test/busybox:latest`);
    assert.equal(image.digest, images.busybox.digest);
    assert.equal(image.indexDigest, null);
    assert.equal(image.configDigest, images.busybox.configDigest);
    assert.deepEqual(image.platform, { os: "linux", architecture: "amd64" });
    assert.deepEqual(image.config.entrypoint, ["/bin/sh", "-c"]);
    assert.deepEqual(image.config.cmd, ["echo hi"]);
    assert.deepEqual(image.config.env, ["PATH=/bin", "GREETING=hi"]);
    assert.equal(image.config.workingDir, "/tmp");
    assert.equal(image.config.user, "");
    assert.deepEqual(
      image.layers.map((layer) => [layer.digest, layer.diffId]),
      images.busybox.layers.map((layer) => [layer.digest, layer.diffId]),
    );
    assert.deepEqual(image.lowerDirs, image.layers.map((layer) => layer.dir).reverse());
    const [base, changes] = image.layers.map((layer) => layer.dir) as [string, string];
    assert.equal(
      base,
      path.join(cache.root, "layers", "sha256", images.busybox.layers[0]?.diffId.slice(7) ?? "", "rootfs"),
    );
    assert.ok(lstatSync(path.join(base, "bin/busybox")).isFile());
    assert.equal(lstatSync(path.join(base, "bin/busybox")).mode & 0o777, 0o755);
    assert.ok(lstatSync(path.join(base, "bin/sh")).isSymbolicLink());
    assert.equal(lstatSync(path.join(base, "tmp")).mode & 0o7777, 0o1777);
    assert.ok(lstatSync(path.join(changes, "etc/motd")).isCharacterDevice(), "the whiteout is an overlay whiteout");
    const notes = lstatSync(path.join(changes, "home/user/notes"));
    assert.deepEqual([notes.uid, notes.gid, notes.mode & 0o777], [1000, 1000, 0o640]);
    assert.deepEqual(await cache.getImage(image.digest), image);
    assert.deepEqual(readdirSync(path.join(cache.root, "tmp")), [], "no temp entries are left");

    // The layers as a sandbox will see them: an overlay of the lower dirs, busybox runs.
    const mountPoint = path.join(work, "mnt-busybox");
    mkdirSync(mountPoint);
    const mount = spawnSync("mount", [
      "-t",
      "overlay",
      "overlay",
      "-o",
      `lowerdir=${image.lowerDirs.join(":")}`,
      mountPoint,
    ]);
    if (mount.status !== 0) return; // overlay mounts are tested where the kernel allows them
    try {
      assert.equal(existsSync(path.join(mountPoint, "etc/motd")), false);
      assert.deepEqual(readdirSync(path.join(mountPoint, "opt/data")), ["c"]);
      const out = execFileSync(
        "/usr/sbin/chroot",
        [mountPoint, "/bin/sh", "-c", "cat /opt/data/c; ls /etc; echo $((6*7))"],
        {
          env: { PATH: "/bin" },
        },
      ).toString();
      assert.equal(out, "c\ngroup\npasswd\n42\n");
    } finally {
      execFileSync("umount", [mountPoint]);
    }
  });

  it("resolves an image index to linux/amd64 and shares layers by diff ID", async () => {
    const counter = countingFetch();
    const cache = new LayerCache({ root: freshRoot(), client: new RegistryClient({ fetch: counter.fetchImpl }) });
    await cache.pull(`${registry.host}/test/busybox:latest`);
    const { image } = await cache.pull(`${registry.host}/test/multi:latest`);
    assert.equal(image.digest, images.multi.amd64.digest);
    assert.equal(image.indexDigest, images.multi.digest);
    const merged = image.lowerDirs.map((dir) => path.join(dir, "etc/arch")).find((file) => existsSync(file));
    assert.equal(readFileSync(merged ?? "", "utf8"), "amd64\n");
    // The base layer is gzip in one image and plain tar in the other; same diff ID, one unpack.
    assert.equal(image.layers[0]?.dir, (await cache.getImage(images.busybox.digest))?.layers[0]?.dir);
    assert.deepEqual(counter.matching(images.multi.amd64.layers[0]?.digest ?? "-"), []);
    assert.deepEqual(counter.matching(images.multi.arm64.digest), [], "the arm64 image is never fetched");
    // By digest, the index resolves from the cache without asking the registry.
    const before = counter.total();
    const again = await cache.pull(`${registry.host}/test/multi@${images.multi.digest}`);
    assert.equal(again.downloaded, false);
    assert.equal(counter.total(), before);
  });

  it("refuses an image for another platform", async () => {
    const cache = new LayerCache({ root: freshRoot(), client: new RegistryClient() });
    await assert.rejects(
      cache.pull(`${registry.host}/test/multi:arm64-only`),
      (error: unknown) =>
        error instanceof ImageError && error.code === "unsupported" && /linux\/arm64/.test(error.message),
    );
    await assert.rejects(
      cache.pull(`${registry.host}/test/nothing:here`),
      (error: unknown) => error instanceof ImageError && error.code === "not_found",
    );
  });

  it("pulls each blob once for concurrent pulls of one image, and reuses the cache afterwards", async () => {
    const counter = countingFetch();
    const root = freshRoot();
    const cache = new LayerCache({ root, client: new RegistryClient({ fetch: counter.fetchImpl }) });
    const reference = `${registry.host}/test/busybox:latest`;
    const results = await Promise.all([
      cache.pull(reference),
      cache.pull(reference),
      cache.pull(`${registry.host}/test/busybox`),
      cache.pull(reference),
      cache.pull(`${registry.host}/test/busybox@${images.busybox.digest}`),
    ]);
    for (const result of results) assert.equal(result.image.digest, images.busybox.digest);
    const blobs = [images.busybox.configDigest, ...images.busybox.layers.map((layer) => layer.digest)];
    for (const digest of blobs) {
      assert.deepEqual(
        counter.matching(digest).map(([, count]) => count),
        [1],
        `${digest} fetched once`,
      );
    }
    assert.equal(counter.matching("/manifests/latest")[0]?.[1], 1, "the tag is resolved once");

    // Second pull: the tag is re-resolved (it may have moved); nothing else is fetched.
    const before = counter.total();
    const second = await cache.pull(reference);
    assert.equal(second.downloaded, false);
    assert.equal(counter.total() - before, 1);
    // Another process (another LayerCache on the same root) finds everything in place.
    const other = new LayerCache({ root, client: new RegistryClient({ fetch: counter.fetchImpl }) });
    const third = await other.pull(`${registry.host}/test/busybox@${images.busybox.digest}`);
    assert.equal(third.downloaded, false);
    assert.equal(counter.total() - before, 1);
    assert.deepEqual(third.image.lowerDirs, second.image.lowerDirs);
  });

  it("reuses a tag's resolution within tagTtlMs and asks the registry again after it", async () => {
    const counter = countingFetch();
    // A stepped clock: a loaded host's slow pull must not run past the TTL by itself.
    let now = 1_000_000;
    const cache = new LayerCache({
      root: freshRoot(),
      client: new RegistryClient({ fetch: counter.fetchImpl }),
      tagTtlMs: 300,
      now: () => now,
    });
    const reference = `${registry.host}/test/busybox:latest`;
    await cache.pull(reference);
    const resolutions = () => counter.matching("/manifests/latest")[0]?.[1] ?? 0;
    assert.equal(resolutions(), 1);
    const again = await cache.pull(reference);
    assert.equal(again.image.digest, images.busybox.digest);
    assert.equal(again.downloaded, false);
    assert.equal(resolutions(), 1, "within the TTL the registry is not asked");
    now += 299;
    await cache.pull(reference);
    assert.equal(resolutions(), 1, "still within the TTL");
    now += 1;
    await cache.pull(reference);
    assert.equal(resolutions(), 2, "past the TTL the tag is resolved again (it may have moved)");
  });

  it("pulls again what was removed from under a cached record", async () => {
    const cache = new LayerCache({ root: freshRoot(), client: new RegistryClient() });
    const first = await cache.pull(`${registry.host}/test/busybox:latest`);
    rmSync(path.dirname(first.image.lowerDirs[0] ?? ""), { recursive: true });
    const second = await cache.pull(`${registry.host}/test/busybox:latest`);
    assert.equal(second.downloaded, true);
    assert.ok(existsSync(path.join(second.image.lowerDirs[0] ?? "", "home/user/notes")));
  });

  it("lets two caches on one root pull the same image at once", async () => {
    const root = freshRoot();
    const [a, b] = await Promise.all(
      [0, 1].map((_) =>
        new LayerCache({ root, client: new RegistryClient() }).pull(`${registry.host}/test/busybox:latest`),
      ),
    );
    assert.deepEqual(a?.image.lowerDirs, b?.image.lowerDirs);
    assert.ok(existsSync(path.join(a?.image.lowerDirs.at(-1) ?? "", "bin/busybox")));
    assert.deepEqual(readdirSync(path.join(root, "tmp")), []);
  });

  it("detects a corrupted blob in the registry and keeps nothing of it", async () => {
    const corrupt = await pushImage(registry.url, "test/corrupt", "latest", {
      layers: [changesLayer(), encodeTar([{ name: "only-here", type: "file", data: "unique\n" }])],
    });
    const victim = corrupt.layers[1]?.digest as string;
    const dataPath = registry.blobDataPath(victim);
    const original = readFileSync(dataPath);
    writeFileSync(dataPath, Buffer.alloc(original.length, 0x41));
    try {
      const root = freshRoot();
      const cache = new LayerCache({ root, client: new RegistryClient() });
      await assert.rejects(
        cache.pull(`${registry.host}/test/corrupt:latest`),
        (error: unknown) => error instanceof ImageError && error.code === "digest_mismatch",
      );
      assert.equal(await cache.getImage(corrupt.digest), null);
      assert.equal(existsSync(path.dirname(cache.layerDir(corrupt.layers[1]?.diffId as string))), false);
      assert.deepEqual(readdirSync(path.join(root, "tmp")), []);
    } finally {
      writeFileSync(dataPath, original);
    }
  });

  it("unpacks a layer while its blob is still arriving, and reports the bytes received", async () => {
    // 64 files of 64 KiB of random bytes: the gzip blob is about as large as the tar.
    const files = Array.from({ length: 64 }, (_, i) => ({
      name: `data/f${String(i).padStart(3, "0")}`,
      type: "file" as const,
      data: randomBytes(64 * 1024),
    }));
    const pushed = await pushImage(registry.url, "test/streamed", "latest", { layers: [encodeTar(files)] });
    const layer = pushed.layers[0] as { digest: string; size: number };
    // The registry's answer for the layer blob stops after half its bytes until released.
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const fetchImpl: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      const url = new URL(input instanceof Request ? input.url : String(input));
      if (!url.pathname.endsWith(`/blobs/${layer.digest}`) || !response.body) return response;
      const reader = response.body.getReader();
      let sent = 0;
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (sent >= layer.size / 2) await released;
          const next = await reader.read();
          if (next.done) controller.close();
          else {
            sent += next.value.length;
            controller.enqueue(next.value);
          }
        },
      });
      return new Response(body, { status: response.status, headers: response.headers });
    };
    const root = freshRoot();
    const cache = new LayerCache({ root, client: new RegistryClient({ fetch: fetchImpl }) });
    const reports: Array<{ bytesDone: number; bytesTotal: number }> = [];
    const pulling = cache.pull(`${registry.host}/test/streamed:latest`, { onProgress: (p) => reports.push(p) });
    pulling.catch(() => {});
    try {
      const unpackedSoFar = () =>
        (existsSync(path.join(root, "tmp")) ? readdirSync(path.join(root, "tmp")) : [])
          .filter((name) => name.startsWith("layer-"))
          .flatMap((name) => {
            const data = path.join(root, "tmp", name, "rootfs", "data");
            return existsSync(data) ? readdirSync(data) : [];
          });
      const deadline = Date.now() + 60_000;
      while (unpackedSoFar().length === 0 || !reports.some((r) => r.bytesDone > 0)) {
        assert.ok(Date.now() < deadline, "no file unpacked while half the blob was held back");
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const midway = reports.at(-1) as { bytesDone: number; bytesTotal: number };
      assert.equal(midway.bytesTotal, layer.size);
      assert.ok(midway.bytesDone > 0 && midway.bytesDone < layer.size, JSON.stringify(midway));
    } finally {
      release();
    }
    const { image } = await pulling;
    assert.equal(readdirSync(path.join(image.lowerDirs[0] as string, "data")).length, 64);
    assert.deepEqual(reports.at(-1), { bytesDone: layer.size, bytesTotal: layer.size });
    assert.deepEqual(readdirSync(path.join(root, "tmp")), []);
  });

  it("sweeps temp entries a crashed process left behind", async () => {
    const root = freshRoot();
    const cache = new LayerCache({ root, client: new RegistryClient() });
    mkdirSync(path.join(root, "tmp", "layer-stale"), { recursive: true });
    execFileSync("touch", ["-d", "2 hours ago", path.join(root, "tmp", "layer-stale")]);
    mkdirSync(path.join(root, "tmp", "layer-fresh"));
    assert.equal(await cache.sweepTemp(), 1);
    assert.deepEqual(readdirSync(path.join(root, "tmp")), ["layer-fresh"]);
  });
});

describe("LayerCache start-up", () => {
  it("removes the partial downloads of processes no longer running when it opens, and keeps live ones", async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), "warren-layer-cache-open-"));
    try {
      const dead = spawnSync("true").pid as number;
      const tmp = path.join(root, "tmp");
      mkdirSync(tmp, { recursive: true });
      // What a server killed mid-pull leaves: a partial blob and a half-unpacked layer.
      writeFileSync(path.join(tmp, `blob-${dead}-1700000000000-abc123`), Buffer.alloc(1024 * 1024));
      mkdirSync(path.join(tmp, `layer-${dead}-1700000000000-def456XyZ123`, "rootfs", "usr"), { recursive: true });
      const live = [`blob-${process.ppid}-1700000000000-aaa`, `write-${process.pid}-1700000000000-bbb`];
      for (const name of live) writeFileSync(path.join(tmp, name), "in progress");
      const cache = new LayerCache({ root, client: new RegistryClient() });
      assert.equal(await cache.opened, 2);
      assert.deepEqual(readdirSync(tmp).sort(), live.sort());
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
