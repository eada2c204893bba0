// The streaming exec's socket in Node (the `ws` package): the key in the Authorization
// header, an error answer before the upgrade read as the API's error, reading paused for
// backpressure.
import WebSocket from "ws";
import { ConnectionError, errorFromResponse } from "./errors.js";
import type { StreamSocketOpener } from "./exec-stream.js";

/** The most of an error answer's body read (it is a small JSON envelope). */
const MAX_ERROR_BODY_BYTES = 65_536;

export const openNodeSocket: StreamSocketOpener = (url, apiKey, events) => {
  const ws = new WebSocket(url, { headers: { authorization: `Bearer ${apiKey}` }, perMessageDeflate: false });
  ws.on("unexpected-response", (_req, res) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    res.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes <= MAX_ERROR_BODY_BYTES) chunks.push(chunk);
    });
    res.on("end", () => {
      let body: unknown = null;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        // Not JSON: the status alone names the error.
      }
      const header = res.headers["retry-after"];
      events.failure(errorFromResponse(res.statusCode ?? 0, body, typeof header === "string" ? header : null));
      ws.terminate();
    });
  });
  ws.on("open", () => events.open());
  ws.on("message", (data: Buffer, isBinary: boolean) => {
    if (isBinary) events.binary(data);
    else events.text(data.toString("utf8"));
  });
  ws.on("error", (error: Error) =>
    events.failure(new ConnectionError(`the exec stream failed: ${error.message}`, { cause: error })),
  );
  ws.on("close", () => events.close());
  return {
    get isOpen() {
      return ws.readyState === WebSocket.OPEN;
    },
    send: (data) =>
      new Promise<void>((resolve, reject) =>
        ws.send(data, { binary: typeof data !== "string" }, (error) => (error ? reject(error) : resolve())),
      ),
    pause: () => ws.pause(),
    resume: () => ws.resume(),
    terminate: () => ws.terminate(),
  };
};
