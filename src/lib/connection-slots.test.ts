import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  ConnectionSlots,
  clientOf,
  decideStartup,
  descriptorBudget,
  openFileLimit,
  planeStartupLimits,
  StartupSlots,
} from "./connection-slots.js";

describe("ConnectionSlots", () => {
  it("bounds each address and every address together, and gives a slot back once", () => {
    const slots = new ConnectionSlots({ perAddress: 2, overall: 3 });
    const a1 = slots.take("a");
    const a2 = slots.take("a");
    assert.ok(a1 && a2);
    assert.equal(slots.take("a"), null, "a third from one address");
    const b1 = slots.take("b");
    assert.ok(b1);
    assert.equal(slots.take("c"), null, "a fourth overall");
    assert.equal(slots.size, 3);
    a1();
    a1();
    assert.equal(slots.size, 2, "giving back twice counts once");
    assert.equal(slots.heldBy("a"), 1);
    assert.ok(slots.take("c"), "the freed slot serves another address");
    a2();
    b1();
    assert.equal(slots.heldBy("a"), 0);
  });

  it("refuses limits that are not positive integers", () => {
    assert.throws(() => new ConnectionSlots({ perAddress: 0, overall: 1 }), RangeError);
    assert.throws(() => new ConnectionSlots({ perAddress: 1, overall: 1.5 }), RangeError);
  });

  it("counts an IPv6 client by its /64 and an IPv4-mapped address as the IPv4 one", () => {
    assert.equal(clientOf("203.0.113.9"), "203.0.113.9");
    assert.equal(clientOf("::ffff:203.0.113.9"), "203.0.113.9");
    assert.equal(clientOf("2001:db8:a:b:1:2:3:4"), "2001:db8:a:b::/64");
    assert.equal(clientOf("2001:0db8:000a:000b::9"), "2001:db8:a:b::/64");
    assert.equal(clientOf("2001:db8::1"), "2001:db8:0:0::/64");
    assert.equal(clientOf("::1"), "0:0:0:0::/64");
    const slots = new ConnectionSlots({ perAddress: 2, overall: 10 });
    assert.ok(slots.take("2001:db8:a:b::1") && slots.take("2001:db8:a:b::2"));
    assert.equal(slots.take("2001:db8:a:b:ffff::3"), null, "a third address of the same /64");
    assert.ok(slots.take("2001:db8:a:c::1"), "another /64 is another client");
    const v4 = slots.take("198.51.100.1");
    assert.ok(v4);
    assert.equal(slots.heldBy("::ffff:198.51.100.1"), 1);
  });
});

describe("StartupSlots (MaxStartups with per-address accounting)", () => {
  const limits = { overall: 8, perAddress: 4, earlyDropFrom: 4 };

  it("admits below the early-drop start, then drops a client that already holds one with a rising chance", () => {
    const state = (held: number, mine: number) => ({ held, mine, heaviest: null });
    assert.deepEqual(decideStartup(state(3, 3), limits, 0), { kind: "admit" });
    assert.deepEqual(decideStartup(state(5, 4), limits, 0.99), { kind: "drop" }, "its address's bound");
    // From 4 held: a chance of 1/4 at 4, 2/4 at 5, ... 4/4 at 7.
    assert.deepEqual(decideStartup(state(4, 1), limits, 0.2), { kind: "drop" });
    assert.deepEqual(decideStartup(state(4, 1), limits, 0.3), { kind: "admit" });
    assert.deepEqual(decideStartup(state(7, 1), limits, 0.99), { kind: "drop" });
    assert.deepEqual(
      decideStartup(state(7, 0), limits, 0),
      { kind: "admit" },
      "a client holding none is never dropped early",
    );
  });

  it("at the bound, gives a client with fewer the place of the heaviest client's oldest, never the other way", () => {
    const full = (mine: number, heaviest: number) => ({ held: 8, mine, heaviest: { client: "h", held: heaviest } });
    assert.deepEqual(decideStartup(full(0, 2), limits, 0.99), { kind: "evict", from: "h" });
    assert.deepEqual(decideStartup(full(1, 2), limits, 0), { kind: "drop" }, "one fewer is a fair share already");
    assert.deepEqual(decideStartup(full(2, 4), limits, 0), { kind: "evict", from: "h" });
  });

  it("lets a ninth address in beside eight that filled the budget, closing one of theirs", () => {
    const slots = new StartupSlots({ overall: 16, perAddress: 2, earlyDropFrom: 16 }, () => 0.5);
    const evicted: string[] = [];
    for (let a = 1; a <= 8; a++) {
      for (let i = 0; i < 2; i++) assert.ok(slots.take(`10.0.0.${a}`, () => evicted.push(`10.0.0.${a}#${i}`)));
    }
    assert.equal(slots.size, 16);
    assert.equal(
      slots.take("10.0.0.1", () => undefined),
      null,
      "a full address gets nothing more",
    );
    const ninth = slots.take("10.0.0.9", () => evicted.push("ninth"));
    assert.ok(ninth, "the ninth address gets a place");
    assert.deepEqual(evicted, ["10.0.0.1#0"], "the oldest of a heaviest client is closed for it");
    assert.equal(slots.size, 16);
    assert.equal(slots.heldBy("10.0.0.1"), 1);
    // The client that lost a place cannot take one back from the ninth (one each is fair).
    assert.equal(
      slots.take("10.0.0.9", () => undefined),
      null,
      "nor may the ninth take a second place from others",
    );
    ninth();
    ninth();
    assert.equal(slots.size, 15, "given back once");
  });
});

describe("descriptorBudget", () => {
  it("keeps a reserve and fits every server's worst case in what is left", () => {
    for (const openFiles of [1024, 4096, 20_000, 65_536, 1_048_576]) {
      const budget = descriptorBudget(openFiles);
      const worst =
        3 * budget.plane.overall + 2 * budget.egress.overall + 3 * budget.ssh.connections.overall + budget.reserve;
      assert.ok(worst <= openFiles, `${openFiles}: ${JSON.stringify(budget)}`);
      assert.ok(budget.reserve >= openFiles / 4, `${openFiles}: a quarter at least is reserved`);
      assert.ok(budget.plane.perAddress < budget.plane.overall || budget.plane.overall === 1);
      assert.ok(budget.plane.perOrganization < budget.plane.overall || budget.plane.overall === 1);
    }
    // The red team's host: 20,000 descriptors; 9,901 upgrades (2 each) took 19,999.
    const red = descriptorBudget(20_000);
    assert.deepEqual(red.plane, { overall: 2_500, perAddress: 312, perOrganization: 625 });
    assert.deepEqual(red.egress, { overall: 1_875, perSource: 256 });
    assert.deepEqual(red.ssh.unauthenticated, { overall: 256, perAddress: 32 });
  });

  it("gives the plane's unauthenticated connections a quarter of its places, an eighth of those per client", () => {
    assert.deepEqual(planeStartupLimits(descriptorBudget(20_000).plane), { overall: 625, perAddress: 78 });
    assert.deepEqual(planeStartupLimits({ overall: 100, perAddress: 2 }), { overall: 25, perAddress: 2 });
    assert.deepEqual(planeStartupLimits({ overall: 1, perAddress: 1 }), { overall: 1, perAddress: 1 });
  });

  it("reads this process's open-file limit", () => {
    assert.ok(openFileLimit() >= 64);
  });
});
