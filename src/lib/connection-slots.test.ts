import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConnectionSlots, clientOf } from "./connection-slots.js";

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
