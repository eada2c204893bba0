import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConnectionSlots } from "./connection-slots.js";

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
});
