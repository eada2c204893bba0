// A bound on what one PostgreSQL backend message may bring into this process. The pg client
// buffers a message whole and then decodes its text fields into JavaScript strings; one
// larger than a string may be (2^29 - 24 characters) throws inside the socket's data handler
// and ends the process. A telemetry query can make the backend send such a message: an
// error whose text quotes a 600 MB value it failed to cast, for example. So each connection's
// socket is watched from its first message on, and a message announcing more than the bound
// ends that connection before it is buffered: its query fails with BackendMessageTooLarge.
import type { Duplex } from "node:stream";
import type pg from "pg";

/** Larger than any row or error Warren itself reads or writes, far below a string's limit. */
export const MAX_BACKEND_MESSAGE_BYTES = 64 * 1024 * 1024;

export class BackendMessageTooLarge extends Error {
  constructor(readonly bytes: number) {
    super(`the database sent a message of ${bytes} bytes, over the ${MAX_BACKEND_MESSAGE_BYTES} this server accepts`);
  }
}

const HEADER = 5; // a type byte, then the length (itself included) as a 32-bit integer

/**
 * Watches a connected client's socket (the TLS one when the connection uses TLS) and destroys
 * it when a backend message announces more than `maxBytes`. The pg client's own parser sees
 * the same chunks; this only follows the message boundaries.
 */
export function guardBackendMessages(client: pg.Client | pg.PoolClient, maxBytes = MAX_BACKEND_MESSAGE_BYTES): void {
  const stream = (client as unknown as { connection?: { stream?: Duplex } }).connection?.stream;
  if (!stream) return;
  const header = Buffer.alloc(HEADER);
  let headerBytes = 0;
  let bodyLeft = 0;
  const onData = (chunk: Buffer) => {
    let i = 0;
    while (i < chunk.length) {
      if (bodyLeft > 0) {
        const take = Math.min(bodyLeft, chunk.length - i);
        bodyLeft -= take;
        i += take;
        continue;
      }
      const take = Math.min(HEADER - headerBytes, chunk.length - i);
      chunk.copy(header, headerBytes, i, i + take);
      headerBytes += take;
      i += take;
      if (headerBytes < HEADER) return;
      headerBytes = 0;
      const length = header.readUInt32BE(1);
      if (length - 4 > maxBytes) {
        stream.removeListener("data", onData);
        stream.destroy(new BackendMessageTooLarge(length - 4));
        return;
      }
      bodyLeft = length - 4;
    }
  };
  stream.on("data", onData);
}
