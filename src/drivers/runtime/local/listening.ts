// Which TCP ports a sandbox listens on, read from its init's /proc/<pid>/net/tcp and tcp6
// (the tables of the sandbox's network namespace; one read each, no host tool). The files
// are written by the kernel, but their size grows with the sockets the sandbox opens, so a
// read is capped and a malformed line is skipped.
import { open } from "node:fs/promises";
import { isInitAlive, readRuncState } from "./runc.js";

/** The most bytes read of one table (about 7,000 sockets); the rest is ignored. */
export const MAX_TABLE_BYTES = 1_048_576;
const LISTEN = "0A";

/**
 * Ports in LISTEN state bound to an address the host can reach through the sandbox's veth:
 * the wildcard (0.0.0.0, ::, or ::ffff:0.0.0.0) or `reachable` (the sandbox's IPv4 address,
 * also as its v4-mapped IPv6 form). A server bound to 127.0.0.1 only is not an endpoint.
 */
export function listeningPorts(tcp: string, tcp6: string, reachable: string | null): number[] {
  const v4 = new Set(["00000000"]);
  const v6 = new Set(["00000000000000000000000000000000", "0000000000000000FFFF000000000000"]);
  if (reachable) {
    const hex = ipv4ProcHex(reachable);
    v4.add(hex);
    v6.add(`0000000000000000FFFF0000${hex}`);
  }
  const ports = new Set<number>();
  for (const [table, addresses] of [
    [tcp, v4],
    [tcp6, v6],
  ] as const) {
    for (const line of table.split("\n")) {
      // "  0: 00000000:1F90 00000000:0000 0A ..."
      const fields = line.trim().split(/\s+/);
      if (fields.length < 4 || fields[3] !== LISTEN) continue;
      const match = /^([0-9A-F]{8}|[0-9A-F]{32}):([0-9A-F]{4})$/.exec(fields[1] ?? "");
      if (!match || !addresses.has(match[1] as string)) continue;
      const port = Number.parseInt(match[2] as string, 16);
      if (port > 0) ports.add(port);
    }
  }
  return [...ports].sort((a, b) => a - b);
}

/** An IPv4 address as /proc/net/tcp writes it: the 32-bit value in host (little-endian) order. */
export function ipv4ProcHex(ip: string): string {
  const octets = ip.split(".").map(Number);
  return octets
    .reverse()
    .map((octet) => octet.toString(16).toUpperCase().padStart(2, "0"))
    .join("");
}

/** Reads at most MAX_TABLE_BYTES of a /proc table; "" when it cannot be read (the process is gone). */
export async function readProcTable(file: string): Promise<string> {
  const handle = await open(file, "r").catch(() => null);
  if (!handle) return "";
  try {
    const chunks: Buffer[] = [];
    let total = 0;
    while (total < MAX_TABLE_BYTES) {
      const chunk = Buffer.allocUnsafe(Math.min(65_536, MAX_TABLE_BYTES - total));
      const { bytesRead } = await handle.read(chunk, 0, chunk.length, null);
      if (bytesRead === 0) break;
      chunks.push(chunk.subarray(0, bytesRead));
      total += bytesRead;
    }
    return Buffer.concat(chunks).toString("latin1");
  } catch {
    return "";
  } finally {
    await handle.close();
  }
}

/** The listening ports of sandbox `id` (see listeningPorts), or [] when its init is not alive. */
export async function listeningPortsOfSandbox(runcRoot: string, id: string, address: string | null): Promise<number[]> {
  const state = await readRuncState(runcRoot, id);
  if (!state || !(await isInitAlive(state))) return [];
  const proc = `/proc/${state.initPid}/net`;
  const [tcp, tcp6] = await Promise.all([readProcTable(`${proc}/tcp`), readProcTable(`${proc}/tcp6`)]);
  // The PID may have been reused between the check and the reads: then the tables are another namespace's.
  if (!(await isInitAlive(state))) return [];
  return listeningPorts(tcp, tcp6, address);
}
