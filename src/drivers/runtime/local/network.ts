// Sandbox networking. Every sandbox has its own network namespace (`ip netns`, named after
// the root's tag and the sandbox id) that outlives its container, so the network can be
// switched live and survives stop/start.
//
// none:         the namespace with loopback up, nothing else.
// public:       a veth pair (host `wr<tag><slot>`, sandbox `eth0`) on a /30 of the pool
//               (10.213.0.0/16 by default: slot s is 10.213.0.0 + 4s, gateway .1, sandbox .2),
//               routed (no bridge, so sandboxes share no L2) and masqueraded by the host.
// gateway_only: the same veth and slot, but no forward rule and no masquerade: the sandbox
//               reaches only the egress gateway (src/modules/egress/).
//
// The egress gateway is one listener of the server on the host. Sandboxes reach it at a
// fixed virtual address (169.254.213.1:80 by default), which the nat prerouting chain
// redirects to the gateway's port on the veth's host address.
//
// Firewall: one nftables table per root, `inet warren_<tag>`, never the host's tables.
//   forward:       jump sandboxes; then drop anything else from or to our veths
//   sandboxes:     per public sandbox (comment `warren:<id>`): accept from its veth and
//                  address to any destination outside @blocked_v4; accept replies back to it
//   input:         jump gateway; jump sandbox_input; from our veths only replies to
//                  connections the host opened; everything else (the host's own addresses
//                  and services) drops
//   sandbox_input: per public or gateway_only sandbox: accept, from its veth and address,
//                  connections first addressed to the gateway's virtual address and port
//                  (`ct original`, so the rule does not change with the gateway's real port)
//   gateway:       the gateway's port from anything but loopback, unless redirected there
//                  from the virtual address, drops (rebuilt when the port changes)
//   prerouting:    from our veths, the virtual address and port redirect to the gateway
//                  (rebuilt when the port changes)
//   postrouting:   per public sandbox, masquerade its address leaving through a non-sandbox link
// @blocked_v4 = src/lib/blocked-ranges.ts, the gateway's list too: 0/8, 10/8 (other sandboxes
// too), 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0/24, 192.168/16, 198.18/15, 224/3.
// IPv6 is not routed for sandboxes (the host side has it disabled, and the forward chain
// drops it). No DNS resolver is offered: the veth's host side forwards but
// does not answer, so egress by address works and names resolve only if the image brings a
// resolver config pointing at a public address; through the egress gateway's proxy, names
// are resolved by the gateway. The pure parts (slots, addresses, the nftables text) are in
// network-plan.ts; this file applies them.

import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import { exists } from "../../../lib/fs.js";
import type { NetworkReceipt } from "../interface.js";
import { RuntimeError } from "../interface.js";
import { run, runOrFail, TOOLS } from "./host.js";
import { isSandboxId, type Layout, type SandboxPaths } from "./layout.js";
import {
  type AttachedMode,
  attachedRules,
  BLOCKED_V4,
  blockedSetScript,
  DEFAULT_GATEWAY_ADDRESS,
  type GatewayTarget,
  gatewayScript,
  ipToInt,
  type ListedRule,
  type PublicRule,
  parseEchoHandles,
  parseNetDev,
  parsePool,
  parseTableRules,
  pickSlot,
  ruleComment,
  type SlotAddresses,
  type SubnetPool,
  slotAddresses,
  slotsInRoutes,
  tableScript,
  upgradeScript,
} from "./network-plan.js";
import { type NetworkRecord, readNetworkRecord, writeNetworkRecord } from "./records.js";

export const NETNS_DIR = "/run/netns";
export const SANDBOX_INTERFACE = "eth0";

// ---- host operations ----

export interface Attachment {
  mode: AttachedMode;
  slot: number;
  veth: string;
  addresses: SlotAddresses;
  rules: NetworkReceipt["rules"];
}

export interface SandboxNetworkOptions {
  /** More IPv4 ranges sandboxes may not reach (the host's LAN when it is not private). */
  extraBlocked?: readonly string[];
  /** The egress gateway: its virtual address and real port; null when this process runs none. */
  gateway?: GatewayTarget | null;
}

/** Who holds an address of the pool (the egress gateway's question). */
export interface AddressHolder {
  id: string;
  mode: AttachedMode;
}

export class SandboxNetwork {
  private readonly layout: Layout;
  private readonly pool: SubnetPool;
  private readonly blocked: string[];
  readonly gateway: GatewayTarget | null;
  readonly gatewayAddress: string;
  private tableReady: Promise<void> | null = null;
  /** Slots handed out by this process and not yet visible as routes. */
  private readonly reserved = new Set<number>();
  /** Attached sandboxes by slot, as applied by this process (filled from the records on a miss). */
  private readonly holders = new Map<number, AddressHolder>();
  private lastScan = 0;

  constructor(layout: Layout, poolCidr: string, options: SandboxNetworkOptions = {}) {
    this.layout = layout;
    this.pool = parsePool(poolCidr);
    const extraBlocked = options.extraBlocked ?? [];
    for (const range of extraBlocked) {
      const [address = "", length = "32"] = range.split("/");
      ipToInt(address);
      if (!/^\d{1,2}$/.test(length) || Number(length) > 32) {
        throw new RuntimeError("invalid_spec", `not an IPv4 range: ${range}`);
      }
    }
    this.blocked = [...BLOCKED_V4, ...extraBlocked];
    this.gateway = options.gateway ?? null;
    if (this.gateway) ipToInt(this.gateway.address);
    this.gatewayAddress = this.gateway?.address ?? DEFAULT_GATEWAY_ADDRESS;
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

  /**
   * Creates the root's table when missing (or upgrades one made before the gateway), syncs
   * its blocked set and the gateway's rules (once per process, again after a failure).
   */
  ensureTable(): Promise<void> {
    this.tableReady ??= (async () => {
      const table = this.layout.nftTable;
      const listing = await run(TOOLS.nft, ["list", "table", "inet", table]).catch(() => null);
      const sync = () =>
        runOrFail("updating the blocked ranges and the gateway's rules", TOOLS.nft, ["-f", "-"], {
          input: blockedSetScript(table, this.blocked) + gatewayScript(table, this.layout.vethPrefix, this.gateway),
        });
      if (listing !== null) {
        if (!/\bchain sandbox_input\b/.test(listing)) {
          await runOrFail("adding the gateway's chains to the table", TOOLS.nft, ["-f", "-"], {
            input: upgradeScript(table),
          });
        }
        await sync();
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
      await sync();
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
    await runOrFail("removing the sandbox's firewall rules", TOOLS.nft, ["-f", "-"], {
      input: this.deleteScript(rules),
    });
  }

  private deleteScript(rules: ListedRule[]): string {
    return rules
      .map((rule) => `delete rule inet ${this.layout.nftTable} ${rule.chain} handle ${rule.handle}\n`)
      .join("");
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

  private wantedRules(mode: AttachedMode, id: string, veth: string, address: string): PublicRule[] {
    return attachedRules(mode, {
      id,
      veth,
      vethPrefix: this.layout.vethPrefix,
      address,
      gatewayAddress: this.gatewayAddress,
    });
  }

  private receiptRules(rules: PublicRule[], handles: number[]): NetworkReceipt["rules"] {
    return rules.map((r, i) => ({
      family: "inet",
      table: this.layout.nftTable,
      chain: r.chain,
      handle: handles[i] as number,
      rule: r.rule,
    }));
  }

  /**
   * The attachment in force on `slot`: `whole` when the veth is up and exactly `mode`'s rules
   * are in place; `link` when only the veth is there (its rules are of another mode or half made).
   */
  private async current(
    id: string,
    slot: number,
    mode: AttachedMode,
  ): Promise<{ whole: Attachment | null; listed: ListedRule[]; link: boolean }> {
    const veth = this.layout.vethName(slot);
    const listed = (await this.listRules(id)).sort((a, b) => a.handle - b.handle);
    if (!(await linkExists(veth))) return { whole: null, listed, link: false };
    const addresses = slotAddresses(this.pool, slot);
    const wanted = this.wantedRules(mode, id, veth, addresses.sandbox);
    const matches = listed.length === wanted.length && listed.every((rule, i) => rule.chain === wanted[i]?.chain);
    if (!matches) return { whole: null, listed, link: true };
    return {
      whole: {
        mode,
        slot,
        veth,
        addresses,
        rules: this.receiptRules(
          wanted,
          listed.map((rule) => rule.handle),
        ),
      },
      listed,
      link: true,
    };
  }

  /**
   * Replaces the sandbox's rules by `mode`'s in one nft transaction (so a live switch has no
   * moment with a mix of both), on a link that is already up.
   */
  private async swapRules(id: string, slot: number, mode: AttachedMode, listed: ListedRule[]): Promise<Attachment> {
    const veth = this.layout.vethName(slot);
    const addresses = slotAddresses(this.pool, slot);
    const rules = this.wantedRules(mode, id, veth, addresses.sandbox);
    const script =
      this.deleteScript(listed) +
      rules.map((r) => `add rule inet ${this.layout.nftTable} ${r.chain} ${r.rule}\n`).join("");
    const echoed = await runOrFail(
      "switching the sandbox's firewall rules",
      TOOLS.nft,
      ["--echo", "--handle", "-f", "-"],
      {
        input: script,
      },
    );
    const handles = parseEchoHandles(echoed);
    if (handles.length !== rules.length) {
      throw new RuntimeError("host_failure", `nft echoed ${handles.length} handles for ${rules.length} rules`);
    }
    return { mode, slot, veth, addresses, rules: this.receiptRules(rules, handles) };
  }

  /**
   * Adds the veth, addresses, route and `mode`'s rules, after removing any half-made ones.
   * With `createNamespace` (a create, on a slot just allocated) the namespace is made in the
   * same `ip` process, and there is nothing half-made to remove.
   */
  async attach(
    id: string,
    slot: number,
    mode: AttachedMode,
    options: { createNamespace?: boolean } = {},
  ): Promise<Attachment> {
    await this.ensureTable();
    if (mode === "public") await enableForwarding();
    const name = this.layout.netnsName(id);
    const veth = this.layout.vethName(slot);
    const addresses = slotAddresses(this.pool, slot);
    if (!options.createNamespace) await this.detach(id, slot);
    // The rules match the veth by name and the sandbox by address, so they can go in while
    // the link is being made: two host tools at once instead of one after the other.
    const rules = this.wantedRules(mode, id, veth, addresses.sandbox);
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
    return { mode, slot, veth, addresses, rules: this.receiptRules(rules, handles) };
  }

  /**
   * Attaches sandbox `id` in `mode` (public or gateway_only) on `slot` (a fresh one when
   * null), recorded in its network.json before anything is attached, and reports what is in
   * force. A sandbox already attached on its slot keeps its veth and only has its rules
   * swapped (the live switch between public and gateway_only).
   */
  async apply(
    id: string,
    paths: SandboxPaths,
    mode: AttachedMode,
    slot: number | null,
    creating = false,
  ): Promise<NetworkReceipt> {
    const chosen = slot ?? (await this.allocateSlot(await this.slotsInUse(id)));
    await writeNetworkRecord(paths, { mode, slot: chosen });
    try {
      let attached: Attachment;
      const found = slot !== null ? await this.current(id, slot, mode) : null;
      if (found?.whole) attached = found.whole;
      else if (found?.link) {
        await this.ensureTable();
        if (mode === "public") await enableForwarding();
        attached = await this.swapRules(id, chosen, mode, found.listed);
      } else attached = await this.attach(id, chosen, mode, { createNamespace: creating && slot === null });
      this.holders.set(chosen, { id, mode });
      return {
        mode,
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
    for (const [id, network] of await this.records()) {
      if (id !== except && network.slot !== null && network.slot !== undefined) slots.add(network.slot);
    }
    return slots;
  }

  private async records(): Promise<[string, NetworkRecord][]> {
    const found: [string, NetworkRecord][] = [];
    for (const id of await readdir(this.layout.sandboxesDir).catch(() => [] as string[])) {
      if (!isSandboxId(id)) continue;
      const network = await readNetworkRecord(this.layout.sandbox(id)).catch(() => null);
      if (network) found.push([id, network]);
    }
    return found;
  }

  /** The addresses an attached (public or gateway_only) sandbox has (for tests and diagnostics). */
  async addressesOf(id: string): Promise<SlotAddresses | null> {
    const network = await readNetworkRecord(this.layout.sandbox(id)).catch(() => null);
    if (network?.mode === "none" || network?.slot === null || network?.slot === undefined) return null;
    return slotAddresses(this.pool, network.slot);
  }

  /**
   * The sandbox whose address `address` is (the `.2` of its slot) and its mode, or null. The
   * gateway identifies callers by it; the per-sandbox input rule accepts a connection only
   * from the sandbox's own veth and address, so the source cannot be spoofed from another.
   * Answered from memory; a miss re-reads the records at most once a second.
   */
  async holderOf(address: string): Promise<AddressHolder | null> {
    let value: number;
    try {
      value = ipToInt(address);
    } catch {
      return null;
    }
    const offset = value - this.pool.base;
    if (offset < 0 || offset >= this.pool.slots * 4 || offset % 4 !== 2) return null;
    const slot = (offset - 2) / 4;
    const known = this.holders.get(slot);
    if (known) return known;
    const now = Date.now();
    if (now - this.lastScan < 1000) return null;
    this.lastScan = now;
    for (const [id, network] of await this.records()) {
      if (network.mode !== "none" && network.slot !== null && !this.holders.has(network.slot)) {
        this.holders.set(network.slot, { id, mode: network.mode });
      }
    }
    return this.holders.get(slot) ?? null;
  }

  async detach(id: string, slot: number | null): Promise<void> {
    await this.deleteRules(id);
    if (slot !== null) {
      await deleteLink(this.layout.vethName(slot));
      if (this.holders.get(slot)?.id === id) this.holders.delete(slot);
    }
  }

  /** Host-side veths of this root (for the sweep). */
  async listVeths(): Promise<string[]> {
    return (await linkNames()).filter((name) => name.startsWith(this.layout.vethPrefix));
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

/**
 * The interfaces of this process's network namespace. Read from /proc/net/dev, never from
 * /sys/class/net: sysfs shows the namespace of whoever mounted it, so a server started in a
 * network namespace of its own with the host's mounts (`nsenter --net`, one host of several on
 * a machine) would see the machine's links there, not its own.
 */
export async function linkNames(): Promise<string[]> {
  return parseNetDev(await readFile("/proc/net/dev", "utf8").catch(() => ""));
}

export async function linkExists(name: string): Promise<boolean> {
  return (await linkNames()).includes(name);
}

export async function deleteLink(name: string): Promise<void> {
  if (await linkExists(name)) {
    await run(TOOLS.ip, ["link", "delete", name]).catch(async (error) => {
      if (await linkExists(name)) throw error;
    });
  }
}

/** Routing between interfaces is what `public` needs; Warren's own forward chain confines it for sandboxes. */
async function enableForwarding(): Promise<void> {
  const file = "/proc/sys/net/ipv4/ip_forward";
  if ((await readFile(file, "utf8")).trim() !== "1") await writeFile(file, "1");
}
