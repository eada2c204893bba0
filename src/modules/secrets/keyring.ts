// Envelope encryption for secret values. Values are sealed with AES-256-GCM under a
// per-organization data key; data keys are sealed under a master key. Master keys come
// from WARREN_MASTER_KEY (+ _PREVIOUS) or from a key file generated into the data dir with
// mode 0600. Key ids are a digest of the key, so a stored wrap names the key it needs.
import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { AppError } from "../../lib/errors.js";
import { writeFileAtomically } from "../../lib/fs.js";

const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
export const KEY_FILE = "master-keys.json";

export interface MasterKey {
  id: string;
  key: Buffer;
}

export interface Sealed {
  nonce: Buffer;
  /** Ciphertext followed by the 16-byte GCM tag. */
  ciphertext: Buffer;
}

export function keyId(key: Buffer): string {
  return `mk_${createHash("sha256").update("warren-master-key").update(key).digest("hex").slice(0, 16)}`;
}

function parseKey(base64: string, source: string): MasterKey {
  const key = Buffer.from(base64, "base64");
  if (key.length !== KEY_BYTES) throw new Error(`${source} must be base64 of exactly ${KEY_BYTES} bytes`);
  return { id: keyId(key), key };
}

export function seal(key: Buffer, plaintext: Buffer, aad: string): Sealed {
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv("aes-256-gcm", key, nonce);
  cipher.setAAD(Buffer.from(aad, "utf8"));
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return { nonce, ciphertext: Buffer.concat([body, cipher.getAuthTag()]) };
}

/** Opens a sealed value; throws when the key, nonce, ciphertext or additional data do not match. */
export function open(key: Buffer, sealed: Sealed, aad: string): Buffer {
  const body = sealed.ciphertext.subarray(0, sealed.ciphertext.length - TAG_BYTES);
  const tag = sealed.ciphertext.subarray(sealed.ciphertext.length - TAG_BYTES);
  const decipher = createDecipheriv("aes-256-gcm", key, sealed.nonce);
  decipher.setAAD(Buffer.from(aad, "utf8"));
  decipher.setAuthTag(tag);
  return Buffer.concat([decipher.update(body), decipher.final()]);
}

/** Packs a sealed data key into one column: nonce then ciphertext+tag. */
export function pack(sealed: Sealed): Buffer {
  return Buffer.concat([sealed.nonce, sealed.ciphertext]);
}

export function unpack(packed: Buffer): Sealed {
  return { nonce: packed.subarray(0, NONCE_BYTES), ciphertext: packed.subarray(NONCE_BYTES) };
}

export class Keyring {
  private constructor(
    private current: MasterKey,
    private readonly keys: Map<string, MasterKey>,
    /** The key file this keyring was read from; null when the keys come from config. */
    private readonly file: string | null,
  ) {}

  static fromConfig(masterKey: string, previous: string[]): Keyring {
    const current = parseKey(masterKey, "WARREN_MASTER_KEY");
    const keys = new Map([[current.id, current]]);
    for (const key of previous) {
      const parsed = parseKey(key, "WARREN_MASTER_KEY_PREVIOUS");
      keys.set(parsed.id, parsed);
    }
    return new Keyring(current, keys, null);
  }

  /** Reads the data dir's key file, generating it (mode 0600) on first start. */
  static async fromDataDir(dataDir: string): Promise<Keyring> {
    const file = path.join(dataDir, KEY_FILE);
    let stored: { current: string; keys: string[] };
    try {
      stored = JSON.parse(await readFile(file, "utf8")) as { current: string; keys: string[] };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      const key = randomBytes(KEY_BYTES).toString("base64");
      stored = { current: key, keys: [key] };
      await writeFileAtomically(file, JSON.stringify(stored));
    }
    const current = parseKey(stored.current, file);
    const keys = new Map(stored.keys.map((key) => parseKey(key, file)).map((k) => [k.id, k] as const));
    keys.set(current.id, current);
    return new Keyring(current, keys, file);
  }

  static async load(config: { masterKey: string; masterKeyPrevious: string[]; dataDir: string }): Promise<Keyring> {
    return config.masterKey
      ? Keyring.fromConfig(config.masterKey, config.masterKeyPrevious)
      : Keyring.fromDataDir(config.dataDir);
  }

  /** A keyring for tests: one random key, nothing on disk. */
  static ephemeral(): Keyring {
    return Keyring.fromConfig(randomBytes(KEY_BYTES).toString("base64"), []);
  }

  get currentId(): string {
    return this.current.id;
  }

  /**
   * A 32-byte key for another purpose (`label` names it), derived from the current master
   * key with HKDF-SHA256, so it needs no storage of its own; it changes when the master key rotates.
   */
  deriveKey(label: string): Buffer {
    return Buffer.from(hkdfSync("sha256", this.current.key, Buffer.alloc(0), label, KEY_BYTES));
  }

  wrap(dataKey: Buffer, aad: string): { masterKeyId: string; wrapped: Buffer } {
    return { masterKeyId: this.current.id, wrapped: pack(seal(this.current.key, dataKey, aad)) };
  }

  unwrap(masterKeyId: string, wrapped: Buffer, aad: string): Buffer {
    const master = this.keys.get(masterKeyId);
    if (!master)
      throw new AppError("internal", "a secret data key is wrapped by a master key this server does not hold");
    return open(master.key, unpack(wrapped), aad);
  }

  /**
   * With a key file: generates a new current key and records it beside the old ones (which
   * stay until `forget` drops them after re-wrapping). With configured keys: the configured
   * current key is already the target, so nothing changes here.
   */
  async beginRotation(): Promise<void> {
    if (!this.file) return;
    const next = randomBytes(KEY_BYTES);
    const fresh = { id: keyId(next), key: next };
    this.keys.set(fresh.id, fresh);
    this.current = fresh;
    await this.persist();
  }

  /** Drops every key but the current one (after all data keys are re-wrapped). */
  async forgetOldKeys(): Promise<void> {
    for (const id of [...this.keys.keys()]) if (id !== this.current.id) this.keys.delete(id);
    await this.persist();
  }

  private async persist(): Promise<void> {
    if (!this.file) return;
    await writeFileAtomically(
      this.file,
      JSON.stringify({
        current: this.current.key.toString("base64"),
        keys: [...this.keys.values()].map((k) => k.key.toString("base64")),
      }),
    );
  }
}
