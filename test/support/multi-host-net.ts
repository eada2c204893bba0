// The names and addresses of the multi-host harness (multi-host.ts), pure: every host-global
// name carries the test process's pid, so two test runs on one machine never collide and a
// later run can tell (and sweep) what a dead run left behind.

/** Network namespaces: `warren-mh-<pid>-<host index>`. */
export const NETNS_PREFIX = "warren-mh-";
/** Temp dirs of a run (its hosts' data dirs and runtime roots): `warren-mh-<pid>-XXXXXX`. */
export const RUN_DIR_PREFIX = "warren-mh-";
/** Links in the root namespace: `wmh<pid base 36>-b` (the bridge), `wmh<pid base 36>-h<index>` (a host's veth). */
const LINK_PREFIX = "wmh";

export function netnsName(pid: number, index: number): string {
  return `${NETNS_PREFIX}${pid}-${index}`;
}

/** The pid of the run that made netns `name`, or null when it is not one of the harness's. */
export function pidOfNetns(name: string): number | null {
  const match = /^warren-mh-(\d+)-\d+$/.exec(name);
  return match ? Number(match[1]) : null;
}

/** The pid of the run that made run dir `name` (a basename in the temp dir), or null. */
export function pidOfRunDir(name: string): number | null {
  const match = /^warren-mh-(\d+)-[A-Za-z0-9]{6}$/.exec(name);
  return match ? Number(match[1]) : null;
}

export function bridgeName(pid: number): string {
  return `${LINK_PREFIX}${pid.toString(36)}-b`;
}

/** The root-namespace end of host `index`'s veth pair (at most 15 characters, as the kernel requires). */
export function hostVethName(pid: number, index: number): string {
  return `${LINK_PREFIX}${pid.toString(36)}-h${index.toString(36)}`;
}

/** The other end, until it is moved into the host's namespace and renamed eth0. */
export function peerVethName(pid: number, index: number): string {
  return `${LINK_PREFIX}${pid.toString(36)}-p${index.toString(36)}`;
}

/** The pid of the run that made link `name` (bridge or veth), or null. */
export function pidOfLink(name: string): number | null {
  const match = /^wmh([0-9a-z]+)-(?:b|[hp][0-9a-z]+)$/.exec(name);
  if (!match) return null;
  const pid = Number.parseInt(match[1] as string, 36);
  return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
}

/** The /24s of 172.29.0.0/16 the harness picks its bridge's subnet from. */
const SUBNET_BASE = (172 << 24) | (29 << 16);

/**
 * The first 172.29.N.0/24 that no route of /proc/net/route (the root namespace's) touches:
 * another run's bridge, or anything else on the machine.
 */
export function pickSubnet(
  procNetRoute: string,
  taken: ReadonlySet<number> = new Set(),
): { n: number; bridge: string; host(index: number): string; prefix: number } {
  const used = new Set<number>();
  for (const line of procNetRoute.split("\n").slice(1)) {
    const fields = line.trim().split(/\s+/);
    const destination = littleEndian(fields[1] ?? "");
    const mask = littleEndian(fields[7] ?? "");
    if (destination === null || mask === null || mask === 0) continue;
    const start = destination >>> 0;
    const end = start + (2 ** 32 - (mask >>> 0));
    for (let n = 0; n < 256; n++) {
      const netStart = (SUBNET_BASE >>> 0) + n * 256;
      if (start < netStart + 256 && end > netStart) used.add(n);
    }
  }
  for (let n = 0; n < 256; n++) {
    if (used.has(n) || taken.has(n)) continue;
    const base = `172.29.${n}`;
    return { n, bridge: `${base}.1`, host: (index) => `${base}.${10 + index}`, prefix: 24 };
  }
  throw new Error("no free /24 in 172.29.0.0/16 for the multi-host bridge");
}

function littleEndian(hex: string): number | null {
  if (!/^[0-9A-Fa-f]{8}$/.test(hex)) return null;
  return Number.parseInt((hex.match(/../g) as string[]).reverse().join(""), 16);
}

/**
 * A disjoint range of host uids per host for the sandboxes' user-namespace owners
 * (WARREN_SANDBOX_UID_RANGE): 2^20 uids each from 2^30 up, so no two hosts of a run can
 * ever hand one uid to two sandboxes.
 */
export function uidRangeOf(index: number): string {
  const size = 2 ** 20;
  const start = 2 ** 30 + index * size;
  return `${start}-${start + size - 1}`;
}
