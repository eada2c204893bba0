// The console's build (`make build`): Preact with Vite, served by Warren at /console. The SDK
// is imported from its source, through its browser entry (packages/sdk/src/browser.ts: the
// browser's fetch and WebSocket, no Node module or global).
import { fileURLToPath } from "node:url";
import preact from "@preact/preset-vite";
import { defineConfig } from "vite";

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));

export default defineConfig({
  root: here("."),
  base: "/console/",
  plugins: [preact()],
  resolve: {
    alias: [{ find: /^@warren\/sdk$/, replacement: here("../packages/sdk/src/browser.ts") }],
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
