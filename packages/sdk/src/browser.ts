// @warren/sdk in a browser (package.json's "browser" condition; the web console imports it):
// the same client over the browser's fetch and WebSocket (the key as a WebSocket
// subprotocol). No Node module is reachable from here (test/sdk-package.test.ts bundles it
// with esbuild for the browser); volumes.push, which reads a directory, is Node's only.
import { WarrenClient, type WarrenOptions } from "./client.js";
import { openBrowserSocket } from "./socket-browser.js";

export * from "./client.js";

export class Warren extends WarrenClient {
  constructor(options: WarrenOptions = {}) {
    super({ openSocket: openBrowserSocket, ...options });
  }
}
