// A BlobStore over a real directory, enough for the replication tests and bench
// (putIfAbsent, get, head, delete, list): a stand-in until the fs driver
// (src/drivers/blobs/) lands, then replaced by it. Writes go to a temporary file and are
// linked into place, so a reader never sees half an object and a second put changes nothing.
import { createHash, randomBytes } from "node:crypto";
import { link, mkdir, readdir, readFile, rm, stat, unlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { BlobError, type BlobInfo, type BlobStore } from "../../src/drivers/blobs/interface.js";

const SEGMENT = /^[A-Za-z0-9._:-]+$/;

function isMissing(error: unknown): boolean {
  return (error as NodeJS.ErrnoException).code === "ENOENT";
}

export function dirBlobStore(root: string): BlobStore {
  const file = (key: string) => {
    const segments = key.split("/");
    if (segments.some((segment) => !SEGMENT.test(segment) || segment === "." || segment === ".."))
      throw new BlobError("invalid_key", `invalid key ${JSON.stringify(key)}`);
    return path.join(root, ...segments);
  };
  return {
    kind: "fs",
    async putIfAbsent(key, data, options) {
      const target = file(key);
      if (options?.sha256 && createHash("sha256").update(data).digest("hex") !== options.sha256)
        throw new BlobError("digest_mismatch", `${key}: the data does not match its sha256`);
      await mkdir(path.dirname(target), { recursive: true });
      const temporary = `${target}.tmp-${randomBytes(6).toString("hex")}`;
      await writeFile(temporary, data);
      try {
        await link(temporary, target);
        return { written: true };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "EEXIST") return { written: false };
        throw error;
      } finally {
        await unlink(temporary);
      }
    },
    async get(key) {
      return readFile(file(key)).catch((error) => {
        if (isMissing(error)) return null;
        throw error;
      });
    },
    async head(key) {
      return stat(file(key)).then(
        (info) => ({ size: info.size }),
        (error) => {
          if (isMissing(error)) return null;
          throw error;
        },
      );
    },
    async delete(key) {
      await rm(file(key), { force: true });
    },
    async *list(prefix) {
      const found: BlobInfo[] = [];
      const walk = async (directory: string, keyPrefix: string): Promise<void> => {
        const entries = await readdir(directory, { withFileTypes: true }).catch((error) => {
          if (isMissing(error)) return [];
          throw error;
        });
        for (const entry of entries) {
          const key = keyPrefix ? `${keyPrefix}/${entry.name}` : entry.name;
          if (entry.isDirectory()) await walk(path.join(directory, entry.name), key);
          else if (key.startsWith(prefix) && !entry.name.includes(".tmp-")) {
            const info = await stat(path.join(directory, entry.name));
            found.push({ key, size: info.size, modifiedAt: info.mtime });
          }
        }
      };
      await walk(root, "");
      yield* found.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    },
    presignPut() {
      return Promise.reject(new Error("the test blob store does not presign"));
    },
    presignGet() {
      return Promise.reject(new Error("the test blob store does not presign"));
    },
    async close() {},
  };
}
