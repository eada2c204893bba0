// A TCP port forward in the test process: connections to <listen host>:<port> are piped to
// <target host>:<port>. The multi-host harness (multi-host.ts) gives the hosts in their network
// namespaces the root namespace's loopback services (PostgreSQL, s3rver, the test registry) this way.
import { createConnection, createServer, type Server, type Socket } from "node:net";

export class TcpForward {
  private readonly sockets = new Set<Socket>();

  private constructor(private readonly server: Server) {}

  static async listen(host: string, port: number, targetHost: string, targetPort: number): Promise<TcpForward> {
    const server = createServer();
    const forward = new TcpForward(server);
    server.on("connection", (client) => {
      const upstream = createConnection({ host: targetHost, port: targetPort });
      for (const socket of [client, upstream]) {
        forward.sockets.add(socket);
        socket.once("close", () => forward.sockets.delete(socket));
        // A reset on one side ends both; the error itself is the peer's business.
        socket.on("error", () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => {
        server.off("error", reject);
        resolve();
      });
    });
    return forward;
  }

  /** Stops listening and cuts every open connection. */
  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
