// Opens the configured blob store: the fs driver under the data dir (the default) or S3.
import path from "node:path";
import type { Config } from "../../config.js";
import { FsBlobStore } from "./fs.js";
import type { BlobStore } from "./interface.js";
import { S3BlobStore } from "./s3.js";

/** The label of the HKDF-derived key that signs the fs store's presigned URLs. */
export const BLOB_SIGNING_KEY_LABEL = "warren blob url signing";

/**
 * The blob store `config.blobs` names. The fs store lives in `<dataDir>/blobs` and signs
 * its presigned URLs with `signingKey`, pointing them at `config.publicApiUrl` (this server
 * as its clients reach it); S3 presigns with its own credentials.
 */
export async function openBlobStore(
  config: Pick<Config, "blobs" | "publicApiUrl">,
  dataDir: string,
  signingKey: Buffer,
): Promise<BlobStore> {
  if (config.blobs.store === "s3") {
    const s3 = config.blobs.s3;
    return S3BlobStore.open({
      bucket: s3.bucket,
      endpoint: s3.endpoint,
      region: s3.region,
      accessKeyId: s3.accessKeyId,
      secretAccessKey: s3.secretAccessKey,
      forcePathStyle: s3.forcePathStyle,
      prefix: s3.prefix,
    });
  }
  return FsBlobStore.open({ dir: path.join(dataDir, "blobs"), signingKey, publicBaseUrl: config.publicApiUrl });
}
