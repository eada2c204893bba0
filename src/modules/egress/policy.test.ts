import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConfigError, loadConfig } from "../../config.js";
import {
  allowlistEntryProblem,
  decideAddresses,
  decideHost,
  hostMatches,
  isBlockedAddress,
  parseDestinationHost,
  parseEgressHosts,
} from "./policy.js";

describe("egress policy", () => {
  it("blocks loopback, private, link-local, metadata, CGNAT and multicast addresses, IPv4 and IPv6", () => {
    for (const address of [
      "127.0.0.1",
      "10.213.0.2",
      "172.16.5.4",
      "192.168.1.1",
      "169.254.169.254",
      "169.254.213.1",
      "100.64.0.1",
      "0.0.0.0",
      "224.0.0.1",
      "255.255.255.255",
      "::1",
      "::",
      "fe80::1",
      "fd00::1",
      "::ffff:127.0.0.1",
      "::ffff:10.0.0.1",
      "64:ff9b::a00:1",
      "2002:a00:1::1",
      "2001:db8::1",
      "not an address",
    ]) {
      assert.equal(isBlockedAddress(address), true, address);
    }
    for (const address of ["203.0.113.10", "8.8.8.8", "1.1.1.1", "2606:4700::1111"]) {
      assert.equal(isBlockedAddress(address), false, address);
    }
  });

  it("parses destination hosts: names lowercased, IPv4 literals, nothing else", () => {
    assert.deepEqual(parseDestinationHost("API.Example.com."), { kind: "name", host: "api.example.com" });
    assert.deepEqual(parseDestinationHost("203.0.113.5"), { kind: "ipv4", host: "203.0.113.5" });
    for (const bad of [
      "",
      "[::1]",
      "::1",
      "a..b",
      "-a.com",
      "a b",
      "x".repeat(64),
      "1.2.3.4.5",
      "exa_mple.com",
      "0x7f000001.1",
    ]) {
      assert.equal(parseDestinationHost(bad), null, bad);
    }
  });

  it("validates allowlist entries: lowercase names and *.domain, never addresses or bare *", () => {
    for (const good of ["api.example.com", "example.com", "*.example.com", "*.a.b.example.com", "localhost"]) {
      assert.equal(allowlistEntryProblem(good), null, good);
    }
    for (const bad of [
      "*",
      "*.",
      "*.com",
      "10.0.0.1",
      "::1",
      "[::1]",
      "API.example.com",
      "*.Example.com",
      "a*.b.com",
      "*.*.b.com",
      "exa mple.com",
      "http://x.com",
      "x.com:443",
      "",
      "1.2.3.4.5",
    ]) {
      assert.notEqual(allowlistEntryProblem(bad), null, bad);
    }
  });

  it("matches wildcards below the domain only", () => {
    assert.ok(hostMatches("a.example.com", "*.example.com"));
    assert.ok(hostMatches("a.b.example.com", "*.example.com"));
    assert.ok(!hostMatches("example.com", "*.example.com"));
    assert.ok(!hostMatches("badexample.com", "*.example.com"));
    assert.ok(!hostMatches("example.com.evil.net", "*.example.com"));
    assert.ok(hostMatches("example.com", "example.com"));
    assert.ok(!hostMatches("a.example.com", "example.com"));
  });

  it("decides by mode: public any host, gateway_only the allowed ones by name, none nothing", () => {
    const name = { kind: "name" as const, host: "api.example.com" };
    const literal = { kind: "ipv4" as const, host: "203.0.113.5" };
    assert.deepEqual(decideHost("public", name, []), { allowed: true });
    assert.deepEqual(decideHost("public", literal, []), { allowed: true });
    assert.equal(decideHost("none", name, ["api.example.com"]).allowed, false);
    assert.equal(decideHost("gateway_only", name, []).allowed, false);
    assert.equal(decideHost("gateway_only", name, ["*.example.com"]).allowed, true);
    assert.equal(decideHost("gateway_only", name, ["example.com"]).allowed, false);
    // An address never matches an allowlist of names.
    assert.equal(decideHost("gateway_only", literal, ["203.0.113.5"]).allowed, false);
    const refused = decideHost("gateway_only", name, []);
    assert.ok(!refused.allowed && refused.code === "not_allowlisted");
  });

  it("refuses a name when any of its addresses is blocked (no mixed answers)", () => {
    assert.deepEqual(decideAddresses("a.test", ["203.0.113.5"], null), { allowed: true });
    const mixed = decideAddresses("a.test", ["203.0.113.5", "127.0.0.1"], null);
    assert.ok(!mixed.allowed && mixed.code === "blocked_address" && mixed.reason.includes("127.0.0.1"));
    const none = decideAddresses("a.test", [], null);
    assert.ok(!none.allowed && none.code === "unresolved");
  });

  it("parses WARREN_EGRESS_HOSTS", () => {
    assert.deepEqual(
      [...parseEgressHosts("api.test=203.0.113.5, b.test=203.0.113.6,")],
      [
        ["api.test", "203.0.113.5"],
        ["b.test", "203.0.113.6"],
      ],
    );
    assert.equal(parseEgressHosts("").size, 0);
    for (const bad of ["api.test", "api.test=::1", "API.test=1.2.3.4", "a=b=c", "x.test=1.2.3"]) {
      assert.throws(() => parseEgressHosts(bad), /WARREN_EGRESS_HOSTS/, bad);
    }
  });
});

describe("egress settings", () => {
  it("defaults to port 8091 and 169.254.213.1, and parses the operator's options", () => {
    const defaults = loadConfig({}).egress;
    assert.deepEqual(
      { ...defaults, hosts: [...defaults.hosts] },
      { gatewayPort: 8091, gatewayAddress: "169.254.213.1", hosts: [], extraCaFile: "" },
    );
    const set = loadConfig({
      WARREN_EGRESS_GATEWAY_PORT: "0",
      WARREN_GATEWAY_ADDRESS: "169.254.1.1",
      WARREN_EGRESS_HOSTS: "a.test=203.0.113.1",
      WARREN_EGRESS_EXTRA_CA_FILE: "/etc/ca.pem",
    }).egress;
    assert.equal(set.gatewayPort, 0);
    assert.equal(set.gatewayAddress, "169.254.1.1");
    assert.equal(set.hosts.get("a.test"), "203.0.113.1");
    assert.equal(set.extraCaFile, "/etc/ca.pem");
  });

  it("refuses a gateway address outside link-local, bad host mappings and ports", () => {
    for (const env of [
      { WARREN_GATEWAY_ADDRESS: "10.0.0.1" },
      { WARREN_GATEWAY_ADDRESS: "not-an-ip" },
      { WARREN_EGRESS_HOSTS: "a.test" },
      { WARREN_EGRESS_GATEWAY_PORT: "70000" },
    ]) {
      assert.throws(() => loadConfig(env), ConfigError, JSON.stringify(env));
    }
  });
});
