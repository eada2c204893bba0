// Sandbox networking. Every sandbox has its own network namespace (`ip netns`, named after
// the root's tag and the sandbox id) that outlives its container, so the network can be
// switched live and survives stop/start.
//
// none:   the namespace with loopback up, nothing else.
// public: a veth pair (host `wr<tag><slot>`, sandbox `eth0`) on a /30 of the pool
//         (10.213.0.0/16 by default: slot s is 10.213.0.0 + 4s, gateway .1, sandbox .2),
//         routed (no bridge, so sandboxes share no L2) and masqueraded by the host.
//
// Firewall: one nftables table per root, `inet warren_<tag>`, never the host's tables.
//   forward:     jump sandboxes; then drop anything else from or to our veths
//   sandboxes:   per sandbox (comment `warren:<id>`): accept from its veth and address to
//                any destination outside @blocked_v4; accept replies back to it
//   input:       from our veths only replies to connections the host opened; everything
//                else (the host's own addresses and services, the gateway included) drops
//   postrouting: per sandbox, masquerade its address leaving through a non-sandbox link
// @blocked_v4 = 0/8, 10/8 (other sandboxes too), 100.64/10, 127/8, 169.254/16, 172.16/12,
// 192.168/16, 224/3. IPv6 is not routed for sandboxes (the host side has it disabled, and
// the forward chain drops it). No DNS resolver is offered: the gateway forwards but does not
// answer, so egress by address works and names resolve only if the image brings a resolver
// config pointing at a public address.

import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import { exists } from "../../../lib/fs.js";
import type { NetworkReceipt } from "../interface.js";
import { RuntimeError } from "../interface.js";
import { run, runOrFail, TOOLS } from "./host.js";
import { isSandboxId, type Layout, type SandboxPaths } from "./layout.js";
import { readNetworkRecord, writeNetworkRecord } from "./records.js";

export const NETNS_DIR = "/run/netns";
export const SANDBOX_INTERFACE = "eth0";
export const BLOCKED_V4 = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.168.0.0/16",
  "224.0.0.0/3",
];

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
    `add chain inet ${table} input { type filter hook input priority filter; policy accept; }`,
    `add rule inet ${table} input iifname ${ours} ct state established,related accept`,
    `add rule inet ${table} input iifname ${ours} drop`,
    `add chain inet ${table} postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
    "",
  ].join("\n");
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

/** The rules that make one sandbox public (see the file comment). */
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

// ---- host operations ----

export interface PublicAttachment {
  slot: number;
  veth: string;
  addresses: SlotAddresses;
  rules: NetworkReceipt["rules"];
}

export class SandboxNetwork {
  private readonly layout: Layout;
  private readonly pool: SubnetPool;
  private readonly blocked: string[];
  private tableReady: Promise<void> | null = null;
  /** Slots handed out by this process and not yet visible as routes. */
  private readonly reserved = new Set<number>();

  /** `extraBlocked`: more IPv4 ranges sandboxes may not reach (the host's LAN when it is not private). */
  constructor(layout: Layout, poolCidr: string, extraBlocked: readonly string[] = []) {
    this.layout = layout;
    this.pool = parsePool(poolCidr);
    for (const range of extraBlocked) {
      const [address = "", length = "32"] = range.split("/");
      ipToInt(address);
      if (!/^\d{1,2}$/.test(length) || Number(length) > 32) {
        throw new RuntimeError("invalid_spec", `not an IPv4 range: ${range}`);
      }
    }
    this.blocked = [...BLOCKED_V4, ...extraBlocked];
  }

  netnsPath(id: string): string {
    return `${NETNS_DIR}/${this.layout.netnsName(id)}`;
  }

  async namespaceExists(id: string): Promise<boolean> {
    return exists(this.netnsPath(id));
  }

  /** A fresh namespace with loopback up (kept when it already exists). */
  async createNamespace(id: string): Promise<void> {
    const name = this.layout.netnsName(id);
    // One `ip` process for both steps (each host tool started costs a few ms here).
    const lines = [`netns exec ${name} ${TOOLS.ip} link set lo up`, ""];
    if (!(await this.namespaceExists(id))) lines.unshift(`netns add ${name}`);
    await runOrFail("creating the network namespace with loopback up", TOOLS.ip, ["-batch", "-"], {
      input: lines.join("\n"),
    });
  }

  async deleteNamespace(id: string): Promise<void> {
    if (await this.namespaceExists(id)) {
      await runOrFail("deleting the network namespace", TOOLS.ip, ["netns", "delete", this.layout.netnsName(id)]);
    }
  }

  async namespaceIdentity(id: string): Promise<NetworkReceipt["namespace"]> {
    const file = this.netnsPath(id);
    const info = await stat(file).catch(() => null);
    if (!info) throw new RuntimeError("host_failure", `the network namespace ${file} is missing`);
    return { name: this.layout.netnsName(id), path: file, inode: info.ino };
  }

  /** Creates the root's table when missing and syncs its blocked set (once per process, again after a failure). */
  ensureTable(): Promise<void> {
    this.tableReady ??= (async () => {
      const table = this.layout.nftTable;
      const listed = await run(TOOLS.nft, ["list", "table", "inet", table]).then(
        () => true,
        () => false,
      );
      if (listed) {
        await runOrFail("updating the blocked ranges", TOOLS.nft, ["-f", "-"], {
          input: blockedSetScript(table, this.blocked),
        });
        return;
      }
      try {
        await run(TOOLS.nft, ["-f", "-"], { input: tableScript(table, this.layout.vethPrefix, this.blocked) });
      } catch (error) {
        const now = await run(TOOLS.nft, ["list", "table", "inet", this.layout.nftTable]).then(
          () => true,
          () => false,
        );
        if (!now) throw new RuntimeError("host_failure", `creating the nftables table: ${(error as Error).message}`);
      }
    })().catch((error) => {
      this.tableReady = null;
      throw error;
    });
    return this.tableReady;
  }

  /** Rules of this root's table carrying the sandbox's comment (or every rule, for `null`). */
  async listRules(id: string | null): Promise<ListedRule[]> {
    let json: string;
    try {
      json = await run(TOOLS.nft, ["-j", "list", "table", "inet", this.layout.nftTable]);
    } catch {
      return [];
    }
    const rules = parseTableRules(json);
    return id === null ? rules : rules.filter((rule) => rule.comment === ruleComment(id));
  }

  async deleteRules(id: string): Promise<void> {
    const rules = await this.listRules(id);
    if (rules.length === 0) return;
    const script = rules
      .map((rule) => `delete rule inet ${this.layout.nftTable} ${rule.chain} handle ${rule.handle}`)
      .join("\n");
    await runOrFail("removing the sandbox's firewall rules", TOOLS.nft, ["-f", "-"], { input: `${script}\n` });
  }

  async allocateSlot(takenByRecords: ReadonlySet<number>): Promise<number> {
    const routes = await readFile("/proc/net/route", "utf8").catch(() => "");
    const slot = pickSlot(this.pool, takenByRecords, this.reserved, slotsInRoutes(routes, this.pool));
    this.reserved.add(slot);
    return slot;
  }

  releaseSlot(slot: number): void {
    this.reserved.delete(slot);
  }

  /** The public attachment in force on `slot`, when it is whole (veth up, every rule in place); else null. */
  async currentPublic(id: string, slot: number): Promise<PublicAttachment | null> {
    const veth = this.layout.vethName(slot);
    if (!(await exists(`/sys/class/net/${veth}`))) return null;
    const addresses = slotAddresses(this.pool, slot);
    const wanted = publicRules({ id, veth, vethPrefix: this.layout.vethPrefix, address: addresses.sandbox });
    const listed = (await this.listRules(id)).sort((a, b) => a.handle - b.handle);
    if (listed.length !== wanted.length || listed.some((rule, i) => rule.chain !== wanted[i]?.chain)) return null;
    return {
      slot,
      veth,
      addresses,
      rules: wanted.map((r, i) => ({
        family: "inet",
        table: this.layout.nftTable,
        chain: r.chain,
        handle: (listed[i] as ListedRule).handle,
        rule: r.rule,
      })),
    };
  }

  /**
   * Adds the veth, addresses, route and rules of `public`, after removing any half-made ones.
   * With `createNamespace` (a create, on a slot just allocated) the namespace is made in the
   * same `ip` process, and there is nothing half-made to remove.
   */
  async attachPublic(id: string, slot: number, options: { createNamespace?: boolean } = {}): Promise<PublicAttachment> {
    await this.ensureTable();
    await enableForwarding();
    const name = this.layout.netnsName(id);
    const veth = this.layout.vethName(slot);
    const addresses = slotAddresses(this.pool, slot);
    if (!options.createNamespace) await this.detachPublic(id, slot);
    // The rules match the veth by name and the sandbox by address, so they can go in while
    // the link is being made: two host tools at once instead of one after the other.
    const rules = publicRules({ id, veth, vethPrefix: this.layout.vethPrefix, address: addresses.sandbox });
    const script = rules.map((r) => `add rule inet ${this.layout.nftTable} ${r.chain} ${r.rule}`).join("\n");
    const [echoed] = await Promise.all([
      runOrFail("adding the sandbox's firewall rules", TOOLS.nft, ["--echo", "--handle", "-f", "-"], {
        input: `${script}\n`,
      }),
      (async () => {
        // Two `ip` processes: the second runs in the namespace (-n), which `netns exec` lines
        // in one batch would do at a few ms each.
        await runOrFail("creating the veth pair", TOOLS.ip, ["-batch", "-"], {
          input: [
            ...(options.createNamespace ? [`netns add ${name}`] : []),
            `link add ${veth} type veth peer name ${SANDBOX_INTERFACE} netns ${name}`,
            `addr add ${addresses.gateway}/30 dev ${veth}`,
            `link set ${veth} up`,
            "",
          ].join("\n"),
        });
        await writeFile(`/proc/sys/net/ipv6/conf/${veth}/disable_ipv6`, "1").catch(() => undefined);
        await runOrFail("configuring the sandbox's interface", TOOLS.ip, ["-n", name, "-batch", "-"], {
          input: [
            ...(options.createNamespace ? ["link set lo up"] : []),
            `addr add ${addresses.sandbox}/30 dev ${SANDBOX_INTERFACE}`,
            `link set ${SANDBOX_INTERFACE} up`,
            `route add default via ${addresses.gateway}`,
            "",
          ].join("\n"),
        });
      })(),
    ]);
    const handles = parseEchoHandles(echoed);
    if (handles.length !== rules.length) {
      throw new RuntimeError("host_failure", `nft echoed ${handles.length} handles for ${rules.length} rules`);
    }
    this.releaseSlot(slot);
    return {
      slot,
      veth,
      addresses,
      rules: rules.map((r, i) => ({
        family: "inet",
        table: this.layout.nftTable,
        chain: r.chain,
        handle: handles[i] as number,
        rule: r.rule,
      })),
    };
  }

  /** Removes the sandbox's rules and veth (the peer goes with it). Idempotent. */
  /**
   * Makes sandbox `id` public on `slot` (a fresh one when null), recorded in its
   * network.json before anything is attached, and reports what is in force.
   */
  async applyPublic(id: string, paths: SandboxPaths, slot: number | null, creating = false): Promise<NetworkReceipt> {
    const chosen = slot ?? (await this.allocateSlot(await this.slotsInUse(id)));
    await writeNetworkRecord(paths, { mode: "public", slot: chosen });
    try {
      const attached =
        (slot !== null ? await this.currentPublic(id, slot) : null) ??
        (await this.attachPublic(id, chosen, { createNamespace: creating && slot === null }));
      return {
        mode: "public",
        namespace: await this.namespaceIdentity(id),
        link: {
          hostInterface: attached.veth,
          sandboxInterface: SANDBOX_INTERFACE,
          sandboxAddress: attached.addresses.sandbox,
          gatewayAddress: attached.addresses.gateway,
        },
        rules: attached.rules,
      };
    } finally {
      this.releaseSlot(chosen);
    }
  }

  /** Slots recorded by this root's other sandboxes. */
  private async slotsInUse(except: string): Promise<Set<number>> {
    const slots = new Set<number>();
    for (const id of await readdir(this.layout.sandboxesDir).catch(() => [] as string[])) {
      if (id === except || !isSandboxId(id)) continue;
      const network = await readNetworkRecord(this.layout.sandbox(id)).catch(() => null);
      if (network?.slot !== null && network?.slot !== undefined) slots.add(network.slot);
    }
    return slots;
  }

  /** The addresses of a sandbox with a veth on a slot (every mode but `none`); null without one. */
  async addressesOf(id: string): Promise<SlotAddresses | null> {
    const network = await readNetworkRecord(this.layout.sandbox(id)).catch(() => null);
    if (!network || network.mode === "none" || network.slot === null) return null;
    return slotAddresses(this.pool, network.slot);
  }

  async detachPublic(id: string, slot: number | null): Promise<void> {
    await this.deleteRules(id);
    if (slot !== null) await deleteLink(this.layout.vethName(slot));
  }

  /** Host-side veths of this root (for the sweep). */
  async listVeths(): Promise<string[]> {
    return (await readdir("/sys/class/net").catch(() => [] as string[])).filter((name) =>
      name.startsWith(this.layout.vethPrefix),
    );
  }

  async listNamespaceIds(): Promise<string[]> {
    const names = await readdir(NETNS_DIR).catch(() => [] as string[]);
    return names.map((name) => this.layout.idOfNetns(name)).filter((id): id is string => id !== null);
  }

  async deleteTable(): Promise<void> {
    await run(TOOLS.nft, ["delete", "table", "inet", this.layout.nftTable]).catch(() => undefined);
    this.tableReady = null;
  }
}

export async function deleteLink(name: string): Promise<void> {
  if (await exists(`/sys/class/net/${name}`)) {
    await run(TOOLS.ip, ["link", "delete", name]).catch(async (error) => {
      if (await exists(`/sys/class/net/${name}`)) throw error;
    });
  }
}

/** Routing between interfaces is what `public` needs; Warren's own forward chain confines it for sandboxes. */
async function enableForwarding(): Promise<void> {
  const file = "/proc/sys/net/ipv4/ip_forward";
  if ((await readFile(file, "utf8")).trim() !== "1") await writeFile(file, "1");
}
