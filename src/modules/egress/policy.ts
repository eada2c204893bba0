// The egress gateway's rules as pure functions: which host names are valid, which addresses
// a sandbox may never reach through the gateway, what an organization's allowlist admits,
// and the decision for one caller and destination.
import { BlockList, isIPv4, isIPv6 } from "node:net";
import { BLOCKED_V4 } from "../../lib/blocked-ranges.js";

const blockedV4 = new BlockList();
for (const range of BLOCKED_V4) {
  const [network = "", length = "32"] = range.split("/");
  blockedV4.addSubnet(network, Number(length), "ipv4");
}
// IPv6: only global unicast (2000::/3), without the prefixes that embed or tunnel to IPv4
// (6to4, Teredo) and the documentation prefix; ::ffff:a.b.c.d, NAT64, ULA, link-local and
// loopback all fall outside 2000::/3.
const globalV6 = new BlockList();
globalV6.addSubnet("2000::", 3, "ipv6");
const blockedInGlobalV6 = new BlockList();
for (const [network, length] of [
  ["2001::", 32],
  ["2001:db8::", 32],
  ["2002::", 16],
] as const) {
  blockedInGlobalV6.addSubnet(network, length, "ipv6");
}

/** True when `address` (IPv4 or IPv6 text) is one the gateway never connects to. */
export function isBlockedAddress(address: string, extraBlocked: BlockList | null = null): boolean {
  if (isIPv4(address)) return blockedV4.check(address, "ipv4") || (extraBlocked?.check(address, "ipv4") ?? false);
  if (isIPv6(address)) {
    return (
      !globalV6.check(address, "ipv6") ||
      blockedInGlobalV6.check(address, "ipv6") ||
      (extraBlocked?.check(address, "ipv6") ?? false)
    );
  }
  return true;
}

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** A lowercase DNS name: labels of letters, digits and inner hyphens, at most 253 characters, not all digits at the end. */
export function isDnsName(name: string): boolean {
  if (name.length === 0 || name.length > 253) return false;
  const labels = name.split(".");
  if (!labels.every((label) => LABEL.test(label))) return false;
  // A numeric last label would make it an address (or something resolvers read as one).
  return !/^\d+$/.test(labels[labels.length - 1] as string);
}

/**
 * The destination host of a request as the gateway accepts it: a DNS name (lowercased, a
 * trailing dot dropped) or an IPv4 literal; null for anything else (IPv6 literals included:
 * sandboxes have no IPv6).
 */
export function parseDestinationHost(raw: string): { kind: "name" | "ipv4"; host: string } | null {
  const host = raw.toLowerCase().replace(/\.$/, "");
  if (isIPv4(host)) return { kind: "ipv4", host };
  return isDnsName(host) ? { kind: "name", host } : null;
}

export const MAX_ALLOWLIST_ENTRIES = 256;

/**
 * Why `entry` cannot be an allowlist entry, or null when it can: an exact lowercase DNS name
 * or `*.` and a name of at least two labels (a wildcard of a whole top-level domain is
 * refused like a bare `*`); never an address.
 */
export function allowlistEntryProblem(entry: string): string | null {
  if (entry === "*" || entry === "*.") return "a bare * would allow every host; name a domain (*.example.com)";
  if (isIPv4(entry) || isIPv6(entry.replace(/^\[|\]$/g, ""))) return "addresses are not allowed, only host names";
  const wildcard = entry.startsWith("*.");
  const name = wildcard ? entry.slice(2) : entry;
  if (name !== name.toLowerCase()) return "host names must be lowercase";
  if (!isDnsName(name)) return "not a DNS host name";
  if (wildcard && name.split(".").length < 2) return "a wildcard needs a domain of at least two labels";
  return null;
}

/** `*.example.com` matches every name below example.com (not example.com itself); anything else matches exactly. */
export function hostMatches(host: string, pattern: string): boolean {
  if (pattern.startsWith("*.")) return host.endsWith(pattern.slice(1)) && host.length > pattern.length - 1;
  return host === pattern;
}

export type EgressDecision = { allowed: true } | { allowed: false; code: string; reason: string };

/**
 * Whether `mode` may reach `host` by name (before any address is looked at): `public` may ask
 * for any host, `gateway_only` only a host of its bound secrets or the organization's
 * allowlist, `none` nothing.
 */
export function decideHost(
  mode: "public" | "gateway_only" | "none",
  host: { kind: "name" | "ipv4"; host: string },
  allowed: readonly string[],
): EgressDecision {
  if (mode === "none") return { allowed: false, code: "network_none", reason: "the sandbox's network is none" };
  if (mode === "public") return { allowed: true };
  if (host.kind === "name" && allowed.some((pattern) => hostMatches(host.host, pattern))) return { allowed: true };
  return {
    allowed: false,
    code: "not_allowlisted",
    reason: `${host.host} is neither a host of the sandbox's secrets nor on the organization's egress allowlist`,
  };
}

/** Whether every resolved address may be reached; the gateway then connects to the first one it checked. */
export function decideAddresses(host: string, addresses: readonly string[], extra: BlockList | null): EgressDecision {
  if (addresses.length === 0) return { allowed: false, code: "unresolved", reason: `${host} has no address` };
  const blocked = addresses.find((address) => isBlockedAddress(address, extra));
  if (blocked !== undefined) {
    return {
      allowed: false,
      code: "blocked_address",
      reason: `${host} resolves to ${blocked}, a loopback, private, link-local or reserved address`,
    };
  }
  return { allowed: true };
}

/**
 * Parses WARREN_EGRESS_HOSTS ("name=ipv4,name2=ipv4"): names the gateway resolves to these
 * addresses instead of asking DNS. Throws with the offending item.
 */
export function parseEgressHosts(raw: string): Map<string, string> {
  const hosts = new Map<string, string>();
  for (const item of raw.split(",").map((part) => part.trim())) {
    if (item === "") continue;
    const [name = "", address = "", ...rest] = item.split("=");
    if (rest.length > 0 || !isDnsName(name) || !isIPv4(address)) {
      throw new Error(`WARREN_EGRESS_HOSTS entries are name=ipv4 with a lowercase DNS name, got "${item}"`);
    }
    hosts.set(name, address);
  }
  return hosts;
}
