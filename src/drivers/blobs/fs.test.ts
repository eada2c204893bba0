// What only the fs blob store has: its directory's modes, the temp files a crash leaves,
// publishing racing a delete of the same directory, and the signed URL check itself.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { FsBlobStore } from "./fs.js";
import { checkBlobUrl, signBlobUrl } from "./signed-url.js";

const KEY = randomBytes(32);

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

describe("fs blob store", () => {
  let root: string;
  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), "warren-fs-blobs-"));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });
  const open = (dir: string) => FsBlobStore.open({ dir, signingKey: KEY, publicBaseUrl: "http://127.0.0.1:1" });

  it("creates its directory private (0700) and objects 0600", async () => {
    const dir = path.join(root, "modes", "blobs");
    const store = await open(dir);
    await store.putIfAbsent("a/b/c", Buffer.from("x"));
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
    assert.equal((await stat(path.join(dir, "objects", "a", "b"))).mode & 0o777, 0o700);
    assert.equal((await stat(path.join(dir, "objects", "a", "b", "c@"))).mode & 0o777, 0o600);
  });

  it("removes at open the temp files of writers that are gone, keeps a live writer's, lists neither", async () => {
    const dir = path.join(root, "crash");
    const first = await open(dir);
    await first.putIfAbsent("kept/object", Buffer.from("published"));
    // A writer that has exited: its pid is free (or reused by an unrelated process later,
    // which only delays the cleanup to a later start).
    const dead = spawn(process.execPath, ["-e", ""]);
    const deadPid = await new Promise<number>((resolve) => dead.once("exit", () => resolve(dead.pid ?? 0)));
    const tmp = path.join(dir, "tmp");
    await writeFile(path.join(tmp, `${deadPid}-crashed.tmp`), "half an object");
    await writeFile(path.join(tmp, `${process.pid}-earlier-run.tmp`), "half an object");
    await writeFile(path.join(tmp, "stray"), "not ours at all");
    await writeFile(path.join(tmp, `${process.ppid}-in-flight.tmp`), "being written");
    await open(dir);
    assert.deepEqual(await readdir(tmp), [`${process.ppid}-in-flight.tmp`]);
    assert.deepEqual(
      (await collect(first.list(""))).map((info) => info.key),
      ["kept/object"],
    );
  });

  it("leaves no temp file behind a refused digest or a failed body", async () => {
    const dir = path.join(root, "leftovers");
    const store = await open(dir);
    await assert.rejects(store.putIfAbsent("d", Buffer.from("x"), { sha256: "0".repeat(64) }));
    async function* failing() {
      yield Buffer.from("part");
      throw new Error("connection lost");
    }
    await assert.rejects(store.putStream("s", failing()), /connection lost/);
    assert.deepEqual(await readdir(path.join(dir, "tmp")), []);
    assert.equal(await store.head("d"), null);
    assert.equal(await store.head("s"), null);
  });

  it("prunes emptied directories, and a publish racing that prune still lands", async () => {
    const dir = path.join(root, "race");
    const store = await open(dir);
    await store.putIfAbsent("x/y/z", Buffer.from("1"));
    await store.delete("x/y/z");
    assert.deepEqual(await readdir(path.join(dir, "objects")), []);
    for (let i = 0; i < 30; i++) {
      await store.putIfAbsent("p/q/old", Buffer.from("o"));
      const [, put] = await Promise.all([store.delete("p/q/old"), store.putIfAbsent(`p/q/new${i}`, Buffer.from("n"))]);
      assert.deepEqual(put, { written: true });
      assert.equal((await store.get(`p/q/new${i}`))?.toString(), "n");
    }
  });

  it("publishes again into a directory it knew, after a delete emptied and removed it", async () => {
    const dir = path.join(root, "known");
    const store = await open(dir);
    await store.putIfAbsent("k/l/first", Buffer.from("1"));
    await store.delete("k/l/first");
    assert.deepEqual(await readdir(path.join(dir, "objects")), []);
    assert.deepEqual(await store.putIfAbsent("k/l/second", Buffer.from("2")), { written: true });
    assert.equal((await store.get("k/l/second"))?.toString(), "2");
  });

  it("publishes many objects into one directory at once (their directory fsyncs shared)", async () => {
    const dir = path.join(root, "shared-dir");
    const store = await open(dir);
    const keys = Array.from({ length: 40 }, (_, i) => `s/${String(i).padStart(2, "0")}`);
    const puts = await Promise.all(keys.map((key) => store.putIfAbsent(key, Buffer.from(key))));
    assert.ok(puts.every((put) => put.written));
    assert.deepEqual(
      (await collect(store.list("s/"))).map((info) => info.key),
      keys,
    );
    assert.deepEqual(await readdir(path.join(dir, "tmp")), []);
  });

  it("ignores what is not an object in its tree when listing", async () => {
    const dir = path.join(root, "foreign");
    const store = await open(dir);
    await store.putIfAbsent("k", Buffer.from("v"));
    await writeFile(path.join(dir, "objects", "no-suffix"), "x");
    await mkdir(path.join(dir, "objects", "empty-dir"));
    assert.deepEqual(
      (await collect(store.list(""))).map((info) => info.key),
      ["k"],
    );
  });
});

describe("signed blob URLs", () => {
  const now = 1_800_000_000;
  const url = signBlobUrl({
    publicBaseUrl: "http://h:1/",
    signingKey: KEY,
    method: "PUT",
    key: "a/b",
    expires: now + 60,
  });
  const query = Object.fromEntries(new URL(url).searchParams) as Record<string, string>;
  const check = (
    over: Partial<{ method: "GET" | "PUT"; key: string; query: Record<string, string | undefined> }>,
    at = now,
  ) => checkBlobUrl(KEY, { method: "PUT", key: "a/b", query, ...over }, at);

  it("has the documented shape", () => {
    assert.match(url, /^http:\/\/h:1\/v1\/blobs\/a\/b\?method=PUT&expires=1800000060&signature=[0-9a-f]{64}$/);
  });

  it("is valid for its method and key until it expires", () => {
    assert.equal(check({}), "valid");
    assert.equal(check({}, now + 60), "valid");
    assert.equal(check({}, now + 61), "expired");
  });

  it("binds the method, the key, the expiry and the server's key", () => {
    assert.equal(check({ method: "GET" }), "invalid");
    assert.equal(check({ method: "GET", query: { ...query, method: "GET" } }), "invalid");
    assert.equal(check({ key: "a/c" }), "invalid");
    assert.equal(check({ query: { ...query, expires: String(now + 3600) } }), "invalid");
    assert.equal(checkBlobUrl(randomBytes(32), { method: "PUT", key: "a/b", query }, now), "invalid");
  });

  it("refuses missing and malformed fields without comparing", () => {
    for (const broken of [
      { ...query, signature: undefined },
      { ...query, expires: undefined },
      { ...query, method: undefined },
      { ...query, signature: `${query.signature}00` },
      { ...query, signature: query.signature?.toUpperCase() },
      { ...query, expires: "-1" },
      { ...query, expires: "1e9" },
    ]) {
      assert.equal(check({ query: broken }), "invalid", JSON.stringify(broken));
    }
  });
});
