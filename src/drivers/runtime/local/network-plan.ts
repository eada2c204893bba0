// What a sandbox's network should be, as pure functions: the pool's /30 slots and their
// addresses, and the nftables text of the root's table and of each sandbox's rules (the
// layout and the reasons are in network.ts's header). network.ts applies them on the host.
import { BLOCKED_V4 } from "../../../lib/blocked-ranges.js";
import { RuntimeError } from "../interface.js";

/** Where sandboxes reach the egress gateway unless configured otherwise (WARREN_GATEWAY_ADDRESS). */
export const DEFAULT_GATEWAY_ADDRESS = "169.254.213.1";
/** The port of the virtual address; the nat chain redirects it to the gateway's real port. */
export const GATEWAY_VIRTUAL_PORT = 80;
export { BLOCKED_V4 };

// ---- addresses (pure) ----

export function ipToInt(ip: string): number {
  const parts = ip.split(".");
  if (parts.length !== 4) throw new RuntimeError("invalid_spec", `not an IPv4 address: ${ip}`);
  let value = 0;
  for (const part of parts) {
    const octet = Number(part);
    if (!/^\d{1,3}$/.test(part) || octet > 255) throw new RuntimeError("invalid_spec", `not an IPv4 address: ${ip}`);
    value = value * 256 + octet;
  }
  return value;
}

export function intToIp(value: number): string {
  return [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255].join(".");
}

const PRIVATE_POOLS = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"].map((cidr) => {
  const [address = "", length = ""] = cidr.split("/");
  return { base: ipToInt(address), size: 2 ** (32 - Number(length)) };
});

export interface SubnetPool {
  base: number;
  prefixLength: number;
  /** Number of /30 slots. */
  slots: number;
}

export function parsePool(cidr: string): SubnetPool {
  const [address = "", length = ""] = cidr.split("/");
  const prefixLength = Number(length);
  if (!Number.isInteger(prefixLength) || prefixLength < 8 || prefixLength > 30) {
    throw new RuntimeError("invalid_spec", `the sandbox subnet pool "${cidr}" needs a prefix from /8 to /30`);
  }
  const size = 2 ** (32 - prefixLength);
  const base = ipToInt(address);
  if (base % size !== 0) throw new RuntimeError("invalid_spec", `"${cidr}" is not a network address`);
  // Sandboxes reach each other and the host only because these ranges are blocked for them
  // (BLOCKED_V4), and nothing outside the host routes to them: a pool anywhere else would
  // leave sandbox addresses reachable as ordinary internet addresses.
  if (!PRIVATE_POOLS.some((range) => base >= range.base && base + size <= range.base + range.size)) {
    throw new RuntimeError(
      "invalid_spec",
      `the sandbox subnet pool "${cidr}" must lie inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10`,
    );
  }
  return { base, prefixLength, slots: size / 4 };
}

export interface SlotAddresses {
  network: string;
  gateway: string;
  sandbox: string;
  cidr: string;
}

export function slotAddresses(pool: SubnetPool, slot: number): SlotAddresses {
  if (!Number.isInteger(slot) || slot < 0 || slot >= pool.slots) {
    throw new RuntimeError("host_failure", `subnet slot ${slot} is outside the pool`);
  }
  const network = pool.base + slot * 4;
  return {
    network: intToIp(network),
    gateway: intToIp(network + 1),
    sandbox: intToIp(network + 2),
    cidr: `${intToIp(network)}/30`,
  };
}

/** Slots of `pool` that a route of /proc/net/route already covers (another root's sandboxes, anyone's). */
export function slotsInRoutes(procNetRoute: string, pool: SubnetPool): Set<number> {
  const used = new Set<number>();
  const poolEnd = pool.base + pool.slots * 4;
  for (const line of procNetRoute.split("\n").slice(1)) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 8) continue;
    const destination = littleEndianHex(fields[1] ?? "");
    const mask = littleEndianHex(fields[7] ?? "");
    if (destination === null || mask === null) continue;
    const size = 2 ** 32 - mask;
    const start = destination;
    const end = destination + size;
    if (end <= pool.base || start >= poolEnd) continue;
    if (mask === 0) continue; // a default route covers everything; it is not a sandbox
    const first = Math.max(0, Math.floor((start - pool.base) / 4));
    const last = Math.min(pool.slots - 1, Math.floor((end - 1 - pool.base) / 4));
    for (let slot = first; slot <= last; slot++) used.add(slot);
  }
  return used;
}

/** The interface names of /proc/net/dev (two header lines, then `  <name>: <counters>`). */
export function parseNetDev(procNetDev: string): string[] {
  const names: string[] = [];
  for (const line of procNetDev.split("\n").slice(2)) {
    const colon = line.indexOf(":");
    if (colon > 0) names.push(line.slice(0, colon).trim());
  }
  return names;
}

function littleEndianHex(hex: string): number | null {
  if (!/^[0-9A-Fa-f]{8}$/.test(hex)) return null;
  const bytes = hex.match(/../g) as string[];
  return Number.parseInt(bytes.reverse().join(""), 16);
}

/** The lowest slot in neither set. */
export function pickSlot(pool: SubnetPool, ...taken: ReadonlySet<number>[]): number {
  for (let slot = 0; slot < pool.slots; slot++) if (!taken.some((set) => set.has(slot))) return slot;
  throw new RuntimeError("host_failure", "the sandbox subnet pool is exhausted");
}

// ---- nftables text (pure) ----

export function ruleComment(id: string): string {
  return `warren:${id}`;
}

/** The table of a root, created whole in one transaction (it fails whole when it exists). */
export function tableScript(table: string, vethPrefix: string, blocked: readonly string[] = BLOCKED_V4): string {
  const ours = `"${vethPrefix}*"`;
  return [
    `add table inet ${table}`,
    `add set inet ${table} blocked_v4 { type ipv4_addr; flags interval; auto-merge; elements = { ${blocked.join(", ")} }; }`,
    `add chain inet ${table} sandboxes`,
    `add chain inet ${table} forward { type filter hook forward priority filter; policy accept; }`,
    `add rule inet ${table} forward jump sandboxes`,
    `add rule inet ${table} forward iifname ${ours} drop`,
    `add rule inet ${table} forward oifname ${ours} drop`,
    `add chain inet ${table} gateway`,
    `add chain inet ${table} sandbox_input`,
    `add chain inet ${table} input { type filter hook input priority filter; policy accept; }`,
    `add rule inet ${table} input jump gateway`,
    `add rule inet ${table} input jump sandbox_input`,
    `add rule inet ${table} input iifname ${ours} ct state established,related accept`,
    `add rule inet ${table} input iifname ${ours} drop`,
    `add chain inet ${table} prerouting { type nat hook prerouting priority dstnat; policy accept; }`,
    `add chain inet ${table} postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
    "",
  ].join("\n");
}

/**
 * Brings a table made before the gateway existed up to tableScript()'s shape (the chains
 * added, the jumps inserted at the head of input), in one transaction.
 */
export function upgradeScript(table: string): string {
  return [
    `add chain inet ${table} gateway`,
    `add chain inet ${table} sandbox_input`,
    `add chain inet ${table} prerouting { type nat hook prerouting priority dstnat; policy accept; }`,
    // `insert` puts a rule first: gateway ends up before sandbox_input, both before the drops.
    `insert rule inet ${table} input jump sandbox_input`,
    `insert rule inet ${table} input jump gateway`,
    "",
  ].join("\n");
}

export interface GatewayTarget {
  /** The virtual address sandboxes use (169.254.213.1 by default). */
  address: string;
  /** The gateway's real TCP port on the host. */
  port: number;
}

/**
 * The port-dependent rules, rebuilt whole (flush and add in one transaction) whenever the
 * driver opens: the redirect of the virtual address to the gateway, and the guard that
 * refuses the gateway's port to everything but loopback and those redirected connections.
 * Without a gateway both chains are left empty (the virtual address then leads nowhere).
 */
export function gatewayScript(table: string, vethPrefix: string, gateway: GatewayTarget | null): string {
  const lines = [`flush chain inet ${table} prerouting`, `flush chain inet ${table} gateway`];
  if (gateway) {
    lines.push(
      `add rule inet ${table} prerouting iifname "${vethPrefix}*" ip daddr ${gateway.address} tcp dport ${GATEWAY_VIRTUAL_PORT} redirect to :${gateway.port}`,
      `add rule inet ${table} gateway tcp dport ${gateway.port} iifname != "lo" ct original ip daddr != ${gateway.address} drop`,
      `add rule inet ${table} gateway tcp dport ${gateway.port} iifname != "lo" meta nfproto ipv6 drop`,
    );
  }
  lines.push("");
  return lines.join("\n");
}

/** Replaces the blocked set's elements in one transaction (options may change between runs). */
export function blockedSetScript(table: string, blocked: readonly string[]): string {
  return [
    `flush set inet ${table} blocked_v4`,
    `add element inet ${table} blocked_v4 { ${blocked.join(", ")} }`,
    "",
  ].join("\n");
}

export interface PublicRule {
  chain: string;
  rule: string;
}

/** A network mode with a veth and a slot. */
export type AttachedMode = "public" | "gateway_only";

export interface RuleInput {
  id: string;
  veth: string;
  vethPrefix: string;
  address: string;
  /** The gateway's virtual address. */
  gatewayAddress: string;
}

/** The rules of one attached sandbox (see the file comment): public's four, gateway_only's one. */
export function attachedRules(mode: AttachedMode, input: RuleInput): PublicRule[] {
  const comment = `comment "${ruleComment(input.id)}"`;
  const gateway: PublicRule = {
    chain: "sandbox_input",
    rule: `iifname "${input.veth}" ip saddr ${input.address} meta l4proto tcp ct original ip daddr ${input.gatewayAddress} ct original proto-dst ${GATEWAY_VIRTUAL_PORT} accept ${comment}`,
  };
  return mode === "public" ? [...publicRules(input), gateway] : [gateway];
}

/** The rules that let one sandbox out to the world (see the file comment). */
export function publicRules(input: { id: string; veth: string; vethPrefix: string; address: string }): PublicRule[] {
  const comment = `comment "${ruleComment(input.id)}"`;
  return [
    {
      chain: "sandboxes",
      rule: `iifname "${input.veth}" ip saddr ${input.address} ip daddr != @blocked_v4 accept ${comment}`,
    },
    {
      chain: "sandboxes",
      rule: `oifname "${input.veth}" ip daddr ${input.address} ct state established,related accept ${comment}`,
    },
    {
      chain: "postrouting",
      rule: `ip saddr ${input.address} oifname != "${input.vethPrefix}*" masquerade ${comment}`,
    },
  ];
}

/** Handles from `nft --echo --handle` output, in the order the rules were added. */
export function parseEchoHandles(output: string): number[] {
  const handles: number[] = [];
  for (const line of output.split("\n")) {
    const match = /^add rule .* # handle (\d+)$/.exec(line.trim());
    if (match) handles.push(Number(match[1]));
  }
  return handles;
}

export interface ListedRule {
  chain: string;
  handle: number;
  comment: string | null;
}

/** Rules of a table from `nft -j list table` output. */
export function parseTableRules(json: string): ListedRule[] {
  const doc = JSON.parse(json) as { nftables?: { rule?: { chain: string; handle: number; comment?: string } }[] };
  const rules: ListedRule[] = [];
  for (const item of doc.nftables ?? []) {
    if (item.rule) rules.push({ chain: item.rule.chain, handle: item.rule.handle, comment: item.rule.comment ?? null });
  }
  return rules;
}
