// @warren/sdk in Node: `new Warren({ apiKey, baseUrl })` (defaults WARREN_API_KEY /
// WARREN_API_URL, so code inside a sandbox works with its own credential), one property per
// contract group; execStream over `ws` and volumes.push over the file system.
// A browser bundle gets browser.ts instead (package.json's "browser" condition).
import { WarrenClient, type WarrenOptions } from "./client.js";
import type { VolumePusher } from "./resources.js";
import { openNodeSocket } from "./socket-node.js";
import type { PushOptions, PushResult } from "./volume-push.js";

export * from "./client.js";

// The volume push (and its native BLAKE3) is loaded by the first push, not by every client.
const pushVolume: VolumePusher = async (...args) => (await import("./volume-push.js")).pushVolume(...args);

/** Pushes a directory as a volume's new version (volume-push.ts; loaded on first use). */
export async function pushDirectory(options: PushOptions): Promise<PushResult> {
  return (await import("./volume-push.js")).pushDirectory(options);
}

export class Warren extends WarrenClient {
  constructor(options: WarrenOptions = {}) {
    super({ openSocket: openNodeSocket, pushVolume, ...options });
  }
}
