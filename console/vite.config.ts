// The console's build (`make build`): Preact with Vite, served by Warren at /console. The SDK
// is imported from its source (packages/sdk/src); the Node-only modules it names are replaced
// here, in the console's build only: `ws` by the browser's WebSocket (src/shims/ws.ts),
// node:crypto by Web Crypto, and the volume-push modules (node:fs, node:http, blake-hash, ...)
// by stubs that throw if called (the console never pushes a directory).
import { fileURLToPath } from "node:url";
import preact from "@preact/preset-vite";
import { defineConfig } from "vite";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const unsupported = here("./src/shims/unsupported.ts");

export default defineConfig({
  root: here("."),
  base: "/console/",
  plugins: [preact()],
  resolve: {
    alias: [
      { find: /^@warren\/sdk$/, replacement: here("../packages/sdk/src/index.ts") },
      { find: /^ws$/, replacement: here("./src/shims/ws.ts") },
      { find: /^node:crypto$/, replacement: here("./src/shims/node-crypto.ts") },
      { find: /^node:path$/, replacement: here("./src/shims/node-path.ts") },
      { find: /^node:os$/, replacement: here("./src/shims/node-path.ts") },
      {
        find: /^(node:fs|node:fs\/promises|node:http|node:https|node:stream\/promises|@napi-rs\/blake-hash)$/,
        replacement: unsupported,
      },
    ],
  },
  build: {
    outDir: here("./dist"),
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    // No inline script or style may be needed by the page (the server's CSP forbids inline script).
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
});
