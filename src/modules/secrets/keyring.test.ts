// Envelope-encryption primitives and the master keyring, without a store: AES-256-GCM with
// bound additional data, packing, key ids, configured and key-file keyrings, and rotation.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { AppError } from "../../lib/errors.js";
import { KEY_FILE, Keyring, keyId, open, pack, seal, unpack } from "./keyring.js";

const key = () => randomBytes(32);

describe("seal and open", () => {
  it("round-trips with the same key and additional data, and never stores the plaintext", () => {
    const k = key();
    const plaintext = Buffer.from("sk-live-round-trip");
    const sealed = seal(k, plaintext, "warren-secret:org_a:sec_1:1");
    assert.equal(sealed.nonce.length, 12);
    assert.equal(sealed.ciphertext.length, plaintext.length + 16);
    assert.equal(sealed.ciphertext.includes(plaintext), false);
    assert.deepEqual(open(k, sealed, "warren-secret:org_a:sec_1:1"), plaintext);
  });

  it("uses a fresh nonce for every seal of the same value", () => {
    const k = key();
    const nonces = new Set<string>();
    const ciphertexts = new Set<string>();
    for (let i = 0; i < 50; i++) {
      const sealed = seal(k, Buffer.from("same value"), "aad");
      nonces.add(sealed.nonce.toString("hex"));
      ciphertexts.add(sealed.ciphertext.toString("hex"));
    }
    assert.equal(nonces.size, 50);
    assert.equal(ciphertexts.size, 50);
  });

  it("refuses other additional data: another organization, secret or version", () => {
    const k = key();
    const sealed = seal(k, Buffer.from("bound"), "warren-secret:org_a:sec_1:1");
    for (const aad of [
      "warren-secret:org_b:sec_1:1",
      "warren-secret:org_a:sec_2:1",
      "warren-secret:org_a:sec_1:2",
      "",
    ]) {
      assert.throws(() => open(k, sealed, aad));
    }
  });

  it("refuses another key, another nonce and any flipped bit", () => {
    const k = key();
    const sealed = seal(k, Buffer.from("tamper-evident"), "aad");
    assert.throws(() => open(key(), sealed, "aad"));
    assert.throws(() => open(k, { ...sealed, nonce: randomBytes(12) }, "aad"));
    for (let i = 0; i < sealed.ciphertext.length; i++) {
      const flipped = Buffer.from(sealed.ciphertext);
      flipped[i] = (flipped[i] ?? 0) ^ 1;
      assert.throws(() => open(k, { nonce: sealed.nonce, ciphertext: flipped }, "aad"));
    }
    assert.throws(() => open(k, { nonce: sealed.nonce, ciphertext: sealed.ciphertext.subarray(0, 10) }, "aad"));
  });

  it("packs nonce and ciphertext into one buffer and back", () => {
    const sealed = seal(key(), Buffer.from("packed"), "aad");
    const packed = pack(sealed);
    assert.equal(packed.length, 12 + sealed.ciphertext.length);
    assert.deepEqual(unpack(packed), sealed);
  });
});

describe("Keyring", () => {
  it("names keys by a digest, stable for a key and distinct across keys", () => {
    const k = key();
    assert.match(keyId(k), /^mk_[0-9a-f]{16}$/);
    assert.equal(keyId(Buffer.from(k)), keyId(k));
    assert.notEqual(keyId(key()), keyId(k));
    assert.equal(keyId(k).includes(k.toString("hex").slice(0, 16)), false);
  });

  it("refuses configured keys that are not base64 of exactly 32 bytes", () => {
    for (const bad of [randomBytes(31).toString("base64"), randomBytes(33).toString("base64"), ""]) {
      assert.throws(() => Keyring.fromConfig(bad, []), /32 bytes/);
      assert.throws(() => Keyring.fromConfig(randomBytes(32).toString("base64"), [bad]), /32 bytes/);
    }
  });

  it("wraps under the current configured key and unwraps with previous keys", () => {
    const oldKey = randomBytes(32).toString("base64");
    const newKey = randomBytes(32).toString("base64");
    const dataKey = key();
    const before = Keyring.fromConfig(oldKey, []);
    const wrapped = before.wrap(dataKey, "warren-data-key:org_a:dek_1");
    assert.equal(wrapped.masterKeyId, keyId(Buffer.from(oldKey, "base64")));
    assert.equal(wrapped.wrapped.includes(dataKey), false);

    const after = Keyring.fromConfig(newKey, [oldKey]);
    assert.equal(after.currentId, keyId(Buffer.from(newKey, "base64")));
    assert.deepEqual(after.unwrap(wrapped.masterKeyId, wrapped.wrapped, "warren-data-key:org_a:dek_1"), dataKey);
    assert.throws(() => after.unwrap(wrapped.masterKeyId, wrapped.wrapped, "warren-data-key:org_b:dek_1"));
    assert.equal(after.wrap(dataKey, "x").masterKeyId, after.currentId);

    const withoutOld = Keyring.fromConfig(newKey, []);
    assert.throws(
      () => withoutOld.unwrap(wrapped.masterKeyId, wrapped.wrapped, "warren-data-key:org_a:dek_1"),
      (error: unknown) => error instanceof AppError && error.code === "internal",
    );
  });

  it("keeps configured keys on beginRotation; forgetOldKeys drops the previous ones", async () => {
    const oldKey = randomBytes(32).toString("base64");
    const newKey = randomBytes(32).toString("base64");
    const wrapped = Keyring.fromConfig(oldKey, []).wrap(key(), "aad");
    const ring = Keyring.fromConfig(newKey, [oldKey]);
    await ring.beginRotation();
    assert.equal(ring.currentId, keyId(Buffer.from(newKey, "base64")));
    ring.unwrap(wrapped.masterKeyId, wrapped.wrapped, "aad");
    await ring.forgetOldKeys();
    assert.throws(() => ring.unwrap(wrapped.masterKeyId, wrapped.wrapped, "aad"));
  });

  it("generates a mode-0600 key file on first start and reads the same key back", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-keyring-"));
    try {
      const first = await Keyring.fromDataDir(dir);
      const file = path.join(dir, KEY_FILE);
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      const stored = JSON.parse(await readFile(file, "utf8")) as { current: string; keys: string[] };
      assert.equal(Buffer.from(stored.current, "base64").length, 32);
      assert.equal(keyId(Buffer.from(stored.current, "base64")), first.currentId);
      const wrapped = first.wrap(key(), "aad");
      const second = await Keyring.fromDataDir(dir);
      assert.equal(second.currentId, first.currentId);
      second.unwrap(wrapped.masterKeyId, wrapped.wrapped, "aad");
      // load() prefers a configured key over the data dir.
      const configured = randomBytes(32).toString("base64");
      const loaded = await Keyring.load({ masterKey: configured, masterKeyPrevious: [], dataDir: dir });
      assert.equal(loaded.currentId, keyId(Buffer.from(configured, "base64")));
      assert.equal(
        (await Keyring.load({ masterKey: "", masterKeyPrevious: [], dataDir: dir })).currentId,
        first.currentId,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("rotates a key file: a new current key, the old one kept until forgotten, persisted at 0600", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-keyring-"));
    try {
      const ring = await Keyring.fromDataDir(dir);
      const oldId = ring.currentId;
      const wrapped = ring.wrap(key(), "aad");
      await ring.beginRotation();
      assert.notEqual(ring.currentId, oldId);
      assert.equal(ring.wrap(key(), "aad").masterKeyId, ring.currentId);
      ring.unwrap(wrapped.masterKeyId, wrapped.wrapped, "aad");
      const file = path.join(dir, KEY_FILE);
      const during = JSON.parse(await readFile(file, "utf8")) as { current: string; keys: string[] };
      assert.equal(during.keys.length, 2);
      assert.equal(keyId(Buffer.from(during.current, "base64")), ring.currentId);
      // A restart in the middle still holds both keys.
      (await Keyring.fromDataDir(dir)).unwrap(wrapped.masterKeyId, wrapped.wrapped, "aad");

      await ring.forgetOldKeys();
      assert.throws(() => ring.unwrap(wrapped.masterKeyId, wrapped.wrapped, "aad"));
      const after = JSON.parse(await readFile(file, "utf8")) as { current: string; keys: string[] };
      assert.deepEqual(after.keys, [after.current]);
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      const restarted = await Keyring.fromDataDir(dir);
      assert.equal(restarted.currentId, ring.currentId);
      assert.throws(() => restarted.unwrap(wrapped.masterKeyId, wrapped.wrapped, "aad"));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses a key file holding a key of the wrong length", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-keyring-"));
    try {
      const short = randomBytes(16).toString("base64");
      await writeFile(path.join(dir, KEY_FILE), JSON.stringify({ current: short, keys: [short] }), { mode: 0o600 });
      await assert.rejects(Keyring.fromDataDir(dir), /32 bytes/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
