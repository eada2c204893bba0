// The SDK's browser entry (packages/sdk/src/browser.ts) against a real server and real runc
// sandboxes: its exec stream goes over a WHATWG WebSocket taken from globalThis (here `ws`'s
// WebSocket, which has that interface; Node 20 has no global one), so the key travels as the
// `warren.bearer.<key>` subprotocol the server answers with `warren.v1`. A refused key is a
// ConnectionError (a browser cannot read the answer of a refused upgrade).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import { ConnectionError, Sandbox, Warren } from "../packages/sdk/src/browser.js";
import { type ApiServer, startApiServer } from "./support/sdk-server.js";

const decoder = new TextDecoder();

async function text(stream: AsyncIterable<Uint8Array>): Promise<string> {
  let out = "";
  for await (const chunk of stream) out += decoder.decode(chunk, { stream: true });
  return out;
}

describe("SDK browser entry [pglite, local runtime]", () => {
  let api: ApiServer;
  let sandboxId: string;
  const global = globalThis as { WebSocket?: unknown };
  const before_ = global.WebSocket;

  before(async () => {
    global.WebSocket = WebSocket;
    api = await startApiServer("pglite", { runtime: "sdkbrowser" });
    const warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url });
    const sandbox = await warren.sandboxes.create({ command: ["sleep", "3600"], network_access: "none" });
    sandboxId = sandbox.id;
  });
  after(async () => {
    global.WebSocket = before_;
    await api?.close();
  });

  it("streams an exec over the browser's WebSocket, the key as a subprotocol", async () => {
    const warren = new Warren({ apiKey: api.t.orgA.keys.owner, baseUrl: api.url });
    const sandbox = await warren.sandboxes.get(sandboxId);
    const stream = sandbox.execStream(["sh", "-c", 'read line; echo "got $line"; echo oops >&2; exit 3'], {
      stdin: "hello\n",
    });
    const [stdout, stderr] = await Promise.all([text(stream.stdout), text(stream.stderr)]);
    assert.deepEqual({ stdout, stderr }, { stdout: "got hello\n", stderr: "oops\n" });
    assert.deepEqual(await stream.wait(), { kind: "completed", exit: 3, truncated: false });
  });

  it("answers a refused key as a ConnectionError", async () => {
    const refused = new Warren({ apiKey: "wrn_not-a-real-key", baseUrl: api.url });
    const handle = new Sandbox(refused.transport, sandboxId);
    await assert.rejects(handle.execStream(["true"]).wait(), ConnectionError);
  });
});
