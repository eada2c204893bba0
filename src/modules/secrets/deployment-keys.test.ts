import "reflect-metadata";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { copyFile, mkdtemp, readdir, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { systemClock } from "../../lib/clock.js";
import { MIGRATIONS_DIR, migrate } from "../../store/migrate.js";
import { openPglite } from "../../store/pglite.js";
import { EgressCa } from "../egress/ca.js";
import { openDeploymentKey, rewrapDeploymentKeys } from "./deployment-keys.js";
import { Keyring } from "./keyring.js";

const clock = systemClock();

describe("deployment keys", () => {
  it("are made once: racing openers get the first stored key, sealed, and the generator of a loser is discarded", async () => {
    const db = await openPglite();
    try {
      await migrate(db);
      const keyring = Keyring.ephemeral();
      let made = 0;
      const generate = async () => {
        made++;
        return { publicPart: `public-${made}`, privatePart: Buffer.from(`private-${made}-${"x".repeat(40)}`) };
      };
      const [a, b] = await Promise.all([
        openDeploymentKey(db, keyring, clock, "ssh-host-key", generate),
        openDeploymentKey(db, keyring, clock, "ssh-host-key", generate),
      ]);
      assert.deepEqual(a, b);
      const again = await openDeploymentKey(db, keyring, clock, "ssh-host-key", generate);
      assert.deepEqual(again, a);
      const { rows } = await db.query<{ wrapped_key: Uint8Array }>("SELECT wrapped_key FROM deployment_keys");
      assert.equal(rows.length, 1);
      assert.ok(!Buffer.from(rows[0]?.wrapped_key ?? []).includes(Buffer.from("private-")), "sealed");
      await assert.rejects(openDeploymentKey(db, Keyring.ephemeral(), clock, "ssh-host-key", generate), /master key/);
    } finally {
      await db.close();
    }
  });

  it("are re-sealed under a new master key, which then opens them alone", async () => {
    const db = await openPglite();
    try {
      await migrate(db);
      const oldKey = randomBytes(32).toString("base64");
      const newKey = randomBytes(32).toString("base64");
      const generate = async () => ({ publicPart: "p", privatePart: randomBytes(48) });
      const first = await openDeploymentKey(db, Keyring.fromConfig(oldKey, []), clock, "ssh-host-key", generate);
      await openDeploymentKey(db, Keyring.fromConfig(oldKey, []), clock, "egress-ca", generate);
      assert.equal(await rewrapDeploymentKeys(db, Keyring.fromConfig(newKey, [oldKey]), clock.now()), 2);
      assert.equal(await rewrapDeploymentKeys(db, Keyring.fromConfig(newKey, [oldKey]), clock.now()), 0);
      const reopened = await openDeploymentKey(db, Keyring.fromConfig(newKey, []), clock, "ssh-host-key", generate);
      assert.deepEqual(reopened, first);
      // A row this version does not know stops the rotation before old keys are forgotten.
      await db.query(
        "INSERT INTO deployment_keys (name, public_part, master_key_id, wrapped_key, created_at) VALUES ('future', '', 'k', '\\x00', now())",
      );
      const next = Keyring.fromConfig(randomBytes(32).toString("base64"), [newKey]);
      await assert.rejects(rewrapDeploymentKeys(db, next, clock.now()), /unknown to this server version/);
    } finally {
      await db.close();
    }
  });

  it("take over the egress CA of a database from before migration 0024", async () => {
    const before = await mkdtemp(path.join(os.tmpdir(), "warren-migrations-"));
    const source = await openPglite();
    const db = await openPglite();
    try {
      // A CA made by this version, put where the previous one kept it (egress_ca, same sealing).
      await migrate(source);
      const keyring = Keyring.ephemeral();
      const made = await EgressCa.open(source, keyring, clock);
      const { rows } = await source.query<{ master_key_id: string; wrapped_key: Uint8Array }>(
        "SELECT master_key_id, wrapped_key FROM deployment_keys WHERE name = 'egress-ca'",
      );
      for (const file of await readdir(MIGRATIONS_DIR))
        if (file < "0024") await copyFile(path.join(MIGRATIONS_DIR, file), path.join(before, file));
      await migrate(db, before);
      await db.query(
        "INSERT INTO egress_ca (id, certificate_pem, master_key_id, wrapped_key, created_at) VALUES ('deployment', $1, $2, $3, now())",
        [made.certificatePem, rows[0]?.master_key_id, rows[0]?.wrapped_key],
      );
      // 0024 first, then whatever later migrations there are.
      const applied = await migrate(db);
      assert.equal(applied[0], "0024_deployment_keys.sql");
      assert.ok(
        applied.every((file) => file >= "0024"),
        applied.join(", "),
      );
      const opened = await EgressCa.open(db, keyring, clock);
      assert.equal(opened.certificatePem, made.certificatePem, "the same CA, still opened by its sealed key");
      await assert.rejects(db.query("SELECT 1 FROM egress_ca"), /egress_ca/);
    } finally {
      await source.close();
      await db.close();
      await rm(before, { recursive: true, force: true });
    }
  });
});
