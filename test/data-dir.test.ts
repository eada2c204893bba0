// The data directory is private whatever the umask: the embedded store's WAL holds exec
// output and other secrets. PGlite only: PostgreSQL keeps its files itself.
import assert from "node:assert/strict";
import { chmod, lstat, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { loadConfig } from "../src/config.js";
import { type Container, createContainer } from "../src/container.js";
import { createLogger } from "../src/lib/logger.js";
import { Keyring } from "../src/modules/secrets/keyring.js";
import { openPglite } from "../src/store/pglite.js";

/** Every entry under dir (not following symlinks) whose mode is not 0700 (dirs) or 0600 (files). */
async function notPrivate(dir: string, skip: string[] = []): Promise<string[]> {
  const wrong: string[] = [];
  const visit = async (entry: string) => {
    const stat = await lstat(entry);
    if (stat.isSymbolicLink()) return;
    const mode = stat.mode & 0o7777;
    if (mode !== (stat.isDirectory() ? 0o700 : 0o600)) wrong.push(`${mode.toString(8)} ${entry}`);
    if (stat.isDirectory()) {
      for (const name of await readdir(entry)) {
        if (!skip.includes(path.join(entry, name))) await visit(path.join(entry, name));
      }
    }
  };
  await visit(dir);
  return wrong;
}

async function chmodTree(dir: string, fileMode: number, dirMode: number): Promise<void> {
  const stat = await lstat(dir);
  if (!stat.isDirectory()) return chmod(dir, fileMode);
  await chmod(dir, dirMode);
  for (const name of await readdir(dir)) await chmodTree(path.join(dir, name), fileMode, dirMode);
}

describe("data dir permissions [pglite]", () => {
  let root = "";
  let dataDir = "";
  let c: Container | null = null;
  let umask = 0;

  before(async () => {
    umask = process.umask(0);
    root = await mkdtemp(path.join(os.tmpdir(), "warren-datadir-"));
    dataDir = path.join(root, "data");
    // A store an older version left world-readable and world-writable, and a stray file.
    await mkdir(dataDir);
    const old = await openPglite(path.join(dataDir, "pglite"));
    await old.exec("CREATE TABLE leftover (x int); INSERT INTO leftover VALUES (1)");
    await old.close();
    await writeFile(path.join(dataDir, "notes.txt"), "secret", { mode: 0o666 });
    await mkdir(path.join(dataDir, "runtime", "images"), { recursive: true });
    await writeFile(path.join(dataDir, "runtime", "images", "layer-file"), "x", { mode: 0o755 });
    // A volume cache entry: read-only files sandboxes read (some hard links to blob files).
    await mkdir(path.join(dataDir, "volume-cache", "org", "entry"), { recursive: true });
    await writeFile(path.join(dataDir, "volume-cache", "org", "entry", "f.txt"), "v");
    await chmodTree(dataDir, 0o666, 0o777);
    await chmod(path.join(dataDir, "runtime", "images", "layer-file"), 0o755);
    await chmodTree(path.join(dataDir, "volume-cache", "org"), 0o444, 0o555);
  });

  after(async () => {
    await c?.db.close();
    process.umask(umask);
    await rm(root, { recursive: true, force: true });
  });

  it("makes every dir 0700 and file 0600 at start, and what PGlite writes while serving", async () => {
    const config = { ...loadConfig({ WARREN_DATA_DIR: dataDir }) };
    const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
    c = await createContainer(config, createLogger("error", silent), { runtime: null, keyring: Keyring.ephemeral() });
    const runtimeRoot = path.join(dataDir, "runtime");
    const volumeCache = path.join(dataDir, "volume-cache");
    assert.deepEqual(await notPrivate(dataDir, [runtimeRoot, volumeCache]), []);
    // The runtime root keeps its modes: they are what a sandbox sees.
    assert.equal((await lstat(path.join(runtimeRoot, "images", "layer-file"))).mode & 0o777, 0o755);
    // So does the volume cache (a linked file's inode is the blob store's).
    assert.equal((await lstat(path.join(volumeCache, "org", "entry", "f.txt"))).mode & 0o777, 0o444);
    assert.equal((await lstat(path.join(volumeCache, "org", "entry"))).mode & 0o777, 0o555);

    const before = new Set(await readdir(path.join(dataDir, "pglite", "base"), { recursive: true }));
    await c.db.exec(
      "CREATE TABLE grown (x int, y text); INSERT INTO grown SELECT g, repeat('y', 200) FROM generate_series(1, 20000) g; CREATE INDEX grown_x ON grown (x); CHECKPOINT",
    );
    await c.db.query("SELECT pg_switch_wal()");
    const created = (await readdir(path.join(dataDir, "pglite", "base"), { recursive: true })).filter(
      (name) => !before.has(name),
    );
    assert.ok(created.length > 0, "PGlite wrote new relation files while serving");
    assert.deepEqual(await notPrivate(dataDir, [runtimeRoot, volumeCache]), []);
  });

  it("makes a new store private from the first start", async () => {
    const fresh = path.join(root, "fresh");
    const config = { ...loadConfig({ WARREN_DATA_DIR: fresh }) };
    const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
    const first = await createContainer(config, createLogger("error", silent), {
      runtime: null,
      keyring: Keyring.ephemeral(),
    });
    try {
      assert.deepEqual(await notPrivate(fresh, [path.join(fresh, "runtime")]), []);
    } finally {
      await first.db.close();
    }
  });
});
