// The streaming exec's socket in a browser (globalThis.WebSocket, also Node 22's): a browser
// cannot set the Authorization header of a WebSocket, so the key travels as the subprotocol
// `warren.bearer.<key>` beside `warren.v1`, which the server answers (docs/api-decisions.md
// "Streaming exec"). It cannot pause reading, and an error answer before the upgrade is seen
// only as a failed connection.
import { ConnectionError } from "./errors.js";
import type { StreamSocketOpener } from "./exec-stream.js";

/** The subset of the WHATWG WebSocket used here (the DOM types are not in this build's lib). */
interface BrowserWebSocket {
  readonly readyState: number;
  readonly bufferedAmount: number;
  binaryType: string;
  send(data: string | Uint8Array): void;
  close(): void;
  addEventListener(type: string, listener: (event: { data?: unknown }) => void): void;
}
type BrowserWebSocketClass = new (url: string, protocols: string[]) => BrowserWebSocket;

const OPEN = 1;
/** send() resolves once the browser's buffer is below this (a poll: the API has no drain event). */
const SEND_BUFFER_BYTES = 1 << 20;

export const openBrowserSocket: StreamSocketOpener = (url, apiKey, events) => {
  const Socket = (globalThis as { WebSocket?: BrowserWebSocketClass }).WebSocket;
  if (!Socket) throw new ConnectionError("this runtime has no WebSocket");
  // No key (the web console): the session cookie, which the browser sends itself, is the credential.
  const ws = new Socket(url, apiKey ? ["warren.v1", `warren.bearer.${apiKey}`] : ["warren.v1"]);
  ws.binaryType = "arraybuffer";
  ws.addEventListener("open", () => events.open());
  ws.addEventListener("message", (event) => {
    if (typeof event.data === "string") events.text(event.data);
    else if (event.data instanceof ArrayBuffer) events.binary(new Uint8Array(event.data));
  });
  ws.addEventListener("error", () => events.failure(new ConnectionError("the exec stream failed")));
  ws.addEventListener("close", () => events.close());
  return {
    get isOpen() {
      return ws.readyState === OPEN;
    },
    send: async (data) => {
      ws.send(data);
      while (ws.readyState === OPEN && ws.bufferedAmount > SEND_BUFFER_BYTES) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    pause: () => undefined,
    resume: () => undefined,
    terminate: () => ws.close(),
  };
};
