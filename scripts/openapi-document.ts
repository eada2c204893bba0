// Builds the OpenAPI document exactly as GET /v1/openapi.json serves it, from an app on a
// throwaway in-memory store, and renders it as the committed text.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { loadConfig } from "../src/config.js";
import { createApp, createContainer } from "../src/container.js";
import { FsBlobStore } from "../src/drivers/blobs/fs.js";
import { createLogger } from "../src/lib/logger.js";
import { Keyring } from "../src/modules/secrets/keyring.js";
import { openPglite } from "../src/store/pglite.js";

export async function openApiDocumentText(loadDataDir?: Blob): Promise<string> {
  const db = await openPglite(undefined, loadDataDir);
  const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
  const config = { ...loadConfig({}), publicApiUrl: "http://127.0.0.1:8080" };
  // The fs blob store (whose route is registered, hidden) in a temp dir, not ./data.
  const blobDir = await mkdtemp(path.join(os.tmpdir(), "warren-openapi-blobs-"));
  try {
    const blobs = await FsBlobStore.open({
      dir: blobDir,
      signingKey: randomBytes(32),
      publicBaseUrl: config.publicApiUrl,
    });
    const c = await createContainer(config, createLogger("error", silent), {
      db,
      keyring: Keyring.ephemeral(),
      runtime: null,
      blobs,
    });
    const app = await createApp(c);
    try {
      return `${JSON.stringify(app.swagger(), null, 2)}\n`;
    } finally {
      await app.close();
      await db.close();
    }
  } finally {
    await rm(blobDir, { recursive: true, force: true });
  }
}
