// A hijacked response's writes (downloads, server-sent events): each one awaited, so a
// client that does not read holds the writer, never the server's memory.
import type { ServerResponse } from "node:http";

/** Writes and resolves once the response took it (drained when it was full); rejects once it closed. */
export function writeDrained(res: ServerResponse, data: string | Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    if (res.destroyed) return reject(new Error("the client went away"));
    if (res.write(data)) return resolve();
    const onDrain = () => {
      res.off("close", onClose);
      resolve();
    };
    const onClose = () => {
      res.off("drain", onDrain);
      reject(new Error("the client went away"));
    };
    res.once("drain", onDrain);
    res.once("close", onClose);
  });
}
