// The embedded fs blob store in a directory of a test's (or benchmark's) own.
import { randomBytes } from "node:crypto";
import { FsBlobStore } from "../../src/drivers/blobs/fs.js";

export function openTestBlobStore(dir: string): Promise<FsBlobStore> {
  return FsBlobStore.open({ dir, signingKey: randomBytes(32), publicBaseUrl: "http://127.0.0.1:1" });
}
