import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import ssh2 from "ssh2";
import { systemClock } from "../../lib/clock.js";
import { migrate } from "../../store/migrate.js";
import { openPglite } from "../../store/pglite.js";
import { Keyring } from "../secrets/keyring.js";
import { generateHostKey, LEGACY_HOST_KEY_FILE, openHostKey, publicKeyLine } from "./host-key.js";

describe("the SSH host key", () => {
  it("is the deployment's: two servers on one database (different data dirs) present the same key", async () => {
    const db = await openPglite();
    const dirs = [
      await mkdtemp(path.join(os.tmpdir(), "warren-hk-a-")),
      await mkdtemp(path.join(os.tmpdir(), "warren-hk-b-")),
    ];
    try {
      await migrate(db);
      const keyring = Keyring.ephemeral();
      const [a, b] = await Promise.all(dirs.map((dir) => openHostKey(db, keyring, systemClock(), dir)));
      assert.equal(a, b);
      assert.ok(!(ssh2.utils.parseKey(a as string) instanceof Error), "an OpenSSH key ssh2 loads");
      const { rows } = await db.query<{ public_part: string }>(
        "SELECT public_part FROM deployment_keys WHERE name = 'ssh-host-key'",
      );
      assert.equal(rows[0]?.public_part, publicKeyLine(a as string));
      assert.match(rows[0]?.public_part ?? "", /^ssh-ed25519 [A-Za-z0-9+/=]+$/);
    } finally {
      await db.close();
      for (const dir of dirs) await rm(dir, { recursive: true, force: true });
    }
  });

  it("keeps the key a server kept in its data dir before, so its clients' known_hosts stay valid", async () => {
    const db = await openPglite();
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-hk-legacy-"));
    try {
      await migrate(db);
      const legacy = generateHostKey();
      await writeFile(path.join(dir, LEGACY_HOST_KEY_FILE), legacy, { mode: 0o600 });
      const keyring = Keyring.ephemeral();
      assert.equal(await openHostKey(db, keyring, systemClock(), dir), legacy);
      // Stored: another data dir (a replica without the file) gets it too.
      const other = await mkdtemp(path.join(os.tmpdir(), "warren-hk-other-"));
      assert.equal(await openHostKey(db, keyring, systemClock(), other), legacy);
      await rm(other, { recursive: true, force: true });
    } finally {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses a legacy file that is not a key rather than generating over it", async () => {
    const db = await openPglite();
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-hk-bad-"));
    try {
      await migrate(db);
      await writeFile(path.join(dir, LEGACY_HOST_KEY_FILE), "not a key", { mode: 0o600 });
      await assert.rejects(openHostKey(db, Keyring.ephemeral(), systemClock(), dir), /not a usable SSH host key/);
    } finally {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
