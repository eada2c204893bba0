// Before the server touches its store or the host, each address it will listen on is tried:
// beside another Warren (or anything else) on the same ports, it stops with one clear message
// naming each busy address, the setting that chose it and a free port to use instead.
import net from "node:net";

export interface PlannedListener {
  /** The setting that chose the address (WARREN_LISTEN, ...). */
  setting: string;
  host: string;
  port: number;
}

/** Resolves with the error code of listening on host:port (null when it could), and releases it. */
function tryListen(host: string, port: number): Promise<string | null> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? "error"));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(null)));
  });
}

async function freePortOn(host: string): Promise<number | null> {
  return await new Promise((resolve) => {
    const server = net.createServer();
    server.once("error", () => resolve(null));
    server.listen({ host, port: 0, exclusive: true }, () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : null));
    });
  });
}

const hostPort = (host: string, port: number) => `${host.includes(":") ? `[${host}]` : host}:${port}`;

/**
 * The message for every planned address that is in use (empty when all are free). Port 0 (the
 * kernel picks one) is never busy. Other errors (EADDRNOTAVAIL, EACCES) are left to the real listen.
 */
export async function busyListenersMessage(planned: PlannedListener[]): Promise<string> {
  const lines: string[] = [];
  for (const listener of planned) {
    if (listener.port === 0) continue;
    if ((await tryListen(listener.host, listener.port)) !== "EADDRINUSE") continue;
    const free = await freePortOn(listener.host);
    const instead = free === null ? "" : `; set ${listener.setting}=${hostPort(listener.host, free)} (free now)`;
    lines.push(`  ${hostPort(listener.host, listener.port)} (${listener.setting}) is in use${instead}`);
  }
  if (lines.length === 0) return "";
  return [
    "an address warren would listen on is in use (another Warren on this host?):",
    ...lines,
    "nothing was started; choose other ports with the settings above and start again.",
  ].join("\n");
}
