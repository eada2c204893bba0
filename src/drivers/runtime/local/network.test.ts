import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RuntimeError } from "../interface.js";
import { Layout } from "./layout.js";
import {
  attachedRules,
  BLOCKED_V4,
  gatewayScript,
  intToIp,
  ipToInt,
  parseEchoHandles,
  parseNetDev,
  parsePool,
  parseTableRules,
  pickSlot,
  publicRules,
  slotAddresses,
  slotsInRoutes,
  tableScript,
  upgradeScript,
} from "./network-plan.js";

describe("addresses", () => {
  it("converts IPv4 addresses both ways", () => {
    assert.equal(ipToInt("10.213.0.6"), 0x0ad50006);
    assert.equal(intToIp(0x0ad50006), "10.213.0.6");
    assert.equal(intToIp(ipToInt("255.255.255.255")), "255.255.255.255");
    for (const bad of ["10.0.0", "10.0.0.256", "a.b.c.d", "1.2.3.4.5"]) {
      assert.throws(() => ipToInt(bad), RuntimeError);
    }
  });

  it("carves a pool into /30 slots: network, gateway .1, sandbox .2", () => {
    const pool = parsePool("10.213.0.0/16");
    assert.equal(pool.slots, 16384);
    assert.deepEqual(slotAddresses(pool, 0), {
      network: "10.213.0.0",
      gateway: "10.213.0.1",
      sandbox: "10.213.0.2",
      cidr: "10.213.0.0/30",
    });
    assert.equal(slotAddresses(pool, 65).sandbox, "10.213.1.6");
    assert.equal(slotAddresses(pool, 16383).gateway, "10.213.255.253");
    assert.throws(() => slotAddresses(pool, 16384), RuntimeError);
    assert.throws(() => parsePool("10.213.0.1/16"), RuntimeError);
    // Only inside the private and shared ranges, whole.
    for (const outside of ["8.8.8.0/24", "11.0.0.0/16", "172.32.0.0/16", "192.168.0.0/15", "100.128.0.0/16"])
      assert.throws(() => parsePool(outside), /must lie inside/, outside);
    for (const inside of ["172.16.0.0/12", "192.168.4.0/22", "100.64.0.0/10"]) assert.ok(parsePool(inside).slots > 0);
    assert.throws(() => parsePool("10.213.0.0/31"), RuntimeError);
  });

  it("finds slots already routed on the host and picks the lowest free one", () => {
    const pool = parsePool("10.213.0.0/16");
    // 10.213.0.4/30 on wr..., 10.213.1.0/24 on something else, the default route, an unrelated /24.
    const routes = [
      "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT",
      "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0",
      "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0",
      "wrabc0001\t0400D50A\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0",
      "other\t0001D50A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0",
    ].join("\n");
    const used = slotsInRoutes(routes, pool);
    assert.ok(used.has(1));
    assert.ok(!used.has(0));
    for (let slot = 64; slot < 128; slot++) assert.ok(used.has(slot), `slot ${slot}`);
    assert.equal(used.size, 65);
    assert.equal(pickSlot(pool, used), 0);
    assert.equal(pickSlot(pool, used, new Set([0])), 2);
    const tiny = parsePool("10.0.0.0/30");
    assert.throws(() => pickSlot(tiny, new Set([0])), RuntimeError);
  });
});

describe("links", () => {
  it("reads the interface names of /proc/net/dev", () => {
    const dev = [
      "Inter-|   Receive                            |  Transmit",
      " face |bytes    packets errs drop fifo frame|bytes    packets",
      "    lo: 604770712   17087    0    0    0     0 604770712   17087",
      "wr1a2b3c0004:       0       0    0    0    0     0        0       0",
      "  eth0:12 3 0 0 0 0 4 5",
      "",
    ].join("\n");
    assert.deepEqual(parseNetDev(dev), ["lo", "wr1a2b3c0004", "eth0"]);
    assert.deepEqual(parseNetDev(""), []);
  });
});

describe("nftables", () => {
  const layout = new Layout("/var/lib/warren/runtime");

  it("names everything after the root's tag", () => {
    assert.match(layout.tag, /^[0-9a-f]{6}$/);
    assert.equal(layout.nftTable, `warren_${layout.tag}`);
    assert.equal(layout.vethName(0x2a).length <= 15, true);
    assert.equal(layout.vethName(0x2a), `wr${layout.tag}002a`);
    assert.equal(layout.vethName(16383).length, 12);
    assert.notEqual(new Layout("/other").tag, layout.tag);
    assert.equal(layout.idOfNetns(layout.netnsName("sbx-1")), "sbx-1");
    assert.equal(layout.idOfNetns("warren-test-abc"), null);
  });

  it("builds one table with drops for everything not explicitly allowed", () => {
    const script = tableScript("warren_abc123", "wrabc123");
    assert.match(script, /^add table inet warren_abc123$/m);
    for (const range of BLOCKED_V4) assert.ok(script.includes(range), range);
    assert.match(script, /forward jump sandboxes/);
    assert.match(script, /forward iifname "wrabc123\*" drop/);
    assert.match(script, /forward oifname "wrabc123\*" drop/);
    assert.match(script, /input iifname "wrabc123\*" ct state established,related accept/);
    assert.match(script, /input iifname "wrabc123\*" drop/);
    assert.match(script, /type nat hook postrouting/);
    assert.match(script, /type nat hook prerouting/);
    assert.ok(script.indexOf("jump sandboxes") < script.indexOf('forward iifname "wrabc123*" drop'));
    // The gateway's guard and the sandboxes' accepts come before the input drops.
    const drop = script.indexOf('input iifname "wrabc123*" ct state');
    assert.ok(script.indexOf("input jump gateway") < script.indexOf("input jump sandbox_input"));
    assert.ok(script.indexOf("input jump sandbox_input") < drop);
    assert.doesNotMatch(script, /\b(flush|delete)\b/);
  });

  it("makes a sandbox public with three commented rules", () => {
    const rules = publicRules({ id: "sbx-1", veth: "wrabc1230001", vethPrefix: "wrabc123", address: "10.213.0.6" });
    assert.deepEqual(rules, [
      {
        chain: "sandboxes",
        rule: 'iifname "wrabc1230001" ip saddr 10.213.0.6 ip daddr != @blocked_v4 accept comment "warren:sbx-1"',
      },
      {
        chain: "sandboxes",
        rule: 'oifname "wrabc1230001" ip daddr 10.213.0.6 ct state established,related accept comment "warren:sbx-1"',
      },
      {
        chain: "postrouting",
        rule: 'ip saddr 10.213.0.6 oifname != "wrabc123*" masquerade comment "warren:sbx-1"',
      },
    ]);
  });

  it("upgrades an older table: the gateway's chains, their jumps inserted first", () => {
    const script = upgradeScript("warren_abc123");
    assert.match(script, /^add chain inet warren_abc123 gateway$/m);
    assert.match(script, /^add chain inet warren_abc123 sandbox_input$/m);
    assert.match(script, /type nat hook prerouting/);
    // Inserted in reverse: gateway ends up first.
    assert.ok(
      script.indexOf("insert rule inet warren_abc123 input jump sandbox_input") < script.indexOf("jump gateway"),
    );
    assert.doesNotMatch(script, /\b(flush|delete)\b/);
  });

  it("redirects the virtual address to the gateway's port and guards that port", () => {
    const script = gatewayScript("warren_x", "wrx", { address: "169.254.213.1", port: 43210 });
    assert.deepEqual(script.trim().split("\n"), [
      "flush chain inet warren_x prerouting",
      "flush chain inet warren_x gateway",
      'add rule inet warren_x prerouting iifname "wrx*" ip daddr 169.254.213.1 tcp dport 80 redirect to :43210',
      'add rule inet warren_x gateway tcp dport 43210 iifname != "lo" ct original ip daddr != 169.254.213.1 drop',
      'add rule inet warren_x gateway tcp dport 43210 iifname != "lo" meta nfproto ipv6 drop',
    ]);
    // Without a gateway both chains are emptied (a port from an earlier run must not linger).
    assert.deepEqual(gatewayScript("warren_x", "wrx", null).trim().split("\n"), [
      "flush chain inet warren_x prerouting",
      "flush chain inet warren_x gateway",
    ]);
  });

  it("gives gateway_only only the gateway's accept, public its three rules and the same accept", () => {
    const input = {
      id: "sbx-1",
      veth: "wrx0001",
      vethPrefix: "wrx",
      address: "10.213.0.6",
      gatewayAddress: "169.254.213.1",
    };
    const accept = {
      chain: "sandbox_input",
      rule: 'iifname "wrx0001" ip saddr 10.213.0.6 meta l4proto tcp ct original ip daddr 169.254.213.1 ct original proto-dst 80 accept comment "warren:sbx-1"',
    };
    assert.deepEqual(attachedRules("gateway_only", input), [accept]);
    const pub = attachedRules("public", input);
    assert.deepEqual(pub.at(-1), accept);
    assert.deepEqual(
      pub.map((r) => r.chain),
      ["sandboxes", "sandboxes", "postrouting", "sandbox_input"],
    );
    assert.ok(attachedRules("gateway_only", input).every((r) => !/masquerade|@blocked_v4/.test(r.rule)));
  });

  it("reads rule handles from nft's echo and its JSON listing", () => {
    const echo = [
      'add rule inet warren_x sandboxes iifname "a" accept comment "warren:s" # handle 10',
      'add rule inet warren_x postrouting masquerade comment "warren:s" # handle 12',
      "# new generation 3 by process 31975 (nft)",
    ].join("\n");
    assert.deepEqual(parseEchoHandles(echo), [10, 12]);
    const listing = JSON.stringify({
      nftables: [
        { metainfo: { version: "1.0.6" } },
        { table: { family: "inet", name: "warren_x", handle: 1 } },
        { rule: { family: "inet", table: "warren_x", chain: "sandboxes", handle: 10, comment: "warren:s", expr: [] } },
        { rule: { family: "inet", table: "warren_x", chain: "forward", handle: 6, expr: [] } },
      ],
    });
    assert.deepEqual(parseTableRules(listing), [
      { chain: "sandboxes", handle: 10, comment: "warren:s" },
      { chain: "forward", handle: 6, comment: null },
    ]);
  });
});
