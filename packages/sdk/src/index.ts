// @warren/sdk in Node: `new Warren({ apiKey, baseUrl })` (defaults WARREN_API_KEY /
// WARREN_API_URL, so code inside a sandbox works with its own credential), one property per
// contract group; execStream over `ws` and volumes.push over the file system.
// A browser bundle gets browser.ts instead (package.json's "browser" condition).
import { WarrenClient, type WarrenOptions } from "./client.js";
import { openNodeSocket } from "./socket-node.js";
import { pushVolume } from "./volume-push.js";

export * from "./client.js";
export { pushDirectory } from "./volume-push.js";

export class Warren extends WarrenClient {
  constructor(options: WarrenOptions = {}) {
    super({ openSocket: openNodeSocket, pushVolume, ...options });
  }
}
