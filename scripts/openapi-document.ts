// Builds the OpenAPI document exactly as GET /v1/openapi.json serves it, from an app on a
// throwaway in-memory store, and renders it as the committed text.
import { Writable } from "node:stream";
import { loadConfig } from "../src/config.js";
import { createApp, createContainer } from "../src/container.js";
import { createLogger } from "../src/lib/logger.js";
import { Keyring } from "../src/modules/secrets/keyring.js";
import { openPglite } from "../src/store/pglite.js";

export async function openApiDocumentText(loadDataDir?: Blob): Promise<string> {
  const db = await openPglite(undefined, loadDataDir);
  const silent = new Writable({ write: (_chunk, _encoding, callback) => callback() });
  const config = { ...loadConfig({}), publicApiUrl: "http://127.0.0.1:8080" };
  const c = await createContainer(config, createLogger("error", silent), {
    db,
    keyring: Keyring.ephemeral(),
    runtime: null,
  });
  const app = await createApp(c);
  try {
    return `${JSON.stringify(app.swagger(), null, 2)}\n`;
  } finally {
    await app.close();
    await db.close();
  }
}
