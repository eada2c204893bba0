// The SSH gateway's host key: an Ed25519 key generated on first start and kept in the private
// data dir (owner-only), so clients see the same host key across restarts.
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import ssh2 from "ssh2";

export const HOST_KEY_FILE = "ssh_host_ed25519_key";

/** The key in OpenSSH format (loaded, or generated and written with mode 0600 when missing). */
export async function loadOrCreateHostKey(dataDir: string): Promise<string> {
  const file = path.join(dataDir, HOST_KEY_FILE);
  const existing = await readFile(file, "utf8").catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return null;
    throw error;
  });
  if (existing !== null) {
    const parsed = ssh2.utils.parseKey(existing);
    if (parsed instanceof Error) throw new Error(`${file} is not a usable SSH host key: ${parsed.message}`);
    return existing;
  }
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const generated = generateHostKey();
  // wx: two servers starting at once on one data dir never overwrite each other's key.
  await writeFile(file, generated, { mode: 0o600, flag: "wx" }).catch(async (error: NodeJS.ErrnoException) => {
    if (error.code !== "EEXIST") throw error;
  });
  return readFile(file, "utf8");
}

/**
 * A new Ed25519 key in OpenSSH format. ssh2 1.17 writes about 1 in 150 of the Ed25519 keys it
 * generates in a form its own parser refuses ("Malformed OpenSSH private key"), so a key is
 * kept only once it parses back.
 */
export function generateHostKey(): string {
  for (let attempt = 0; attempt < 20; attempt++) {
    const key = ssh2.utils.generateKeyPairSync("ed25519").private;
    if (!(ssh2.utils.parseKey(key) instanceof Error)) return key;
  }
  throw new Error("could not generate an SSH host key that parses");
}
