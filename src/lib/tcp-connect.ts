// A TCP connection that resolves once connected (or rejects on error or after timeoutMs),
// for the SSH gateway's port forwards and the owner's side of a routed one. The socket is
// not read until its caller pipes it, so bytes that arrive first wait in its bounded buffer.
import net from "node:net";

export function connectTcp(host: string, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port, noDelay: true });
    socket.setTimeout(timeoutMs);
    const failed = (error?: Error) => {
      socket.destroy();
      reject(error ?? new Error("the connection timed out"));
    };
    socket.once("timeout", failed);
    socket.once("error", failed);
    socket.once("connect", () => {
      socket.removeListener("timeout", failed);
      socket.removeListener("error", failed);
      socket.setTimeout(0);
      resolve(socket);
    });
  });
}

/**
 * Joins two byte streams both ways (pipe: a side that cannot take more pauses the other, so
 * no buffer grows past its high-water mark) and destroys both when either closes or fails;
 * `closed` is called once, after both are destroyed.
 */
export function joinStreams(
  a: NodeJS.ReadWriteStream & Destroyable,
  b: NodeJS.ReadWriteStream & Destroyable,
  closed: () => void = () => undefined,
): void {
  let done = false;
  const end = () => {
    if (done) return;
    done = true;
    a.destroy();
    b.destroy();
    closed();
  };
  for (const side of [a, b]) {
    side.on("error", end);
    side.once("close", end);
  }
  a.pipe(b).pipe(a);
}

interface Destroyable {
  destroy(error?: Error): unknown;
}
