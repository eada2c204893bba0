import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decideCompute } from "./compute-admission.js";

describe("compute admission", () => {
  const host = { memoryMiB: 23_000, cpuMillis: 2000 };
  const policy = { memoryOvercommit: 2, cpuOvercommit: 8 };
  const none = { memoryMiB: 0, cpuMillis: 0 };

  it("refuses one sandbox beyond the whole host, whatever the overcommit", () => {
    assert.deepEqual(decideCompute(host, none, { memoryMiB: 1_048_576, cpuMillis: 1000 }, policy), {
      admitted: false,
      resource: "memory",
      permanent: true,
    });
    assert.deepEqual(decideCompute(host, none, { memoryMiB: 512, cpuMillis: 128_000 }, policy), {
      admitted: false,
      resource: "cpu",
      permanent: true,
    });
    assert.deepEqual(decideCompute(host, none, { memoryMiB: 23_000, cpuMillis: 2000 }, policy), { admitted: true });
  });

  it("admits running sandboxes up to the overcommit of the host, then refuses for now", () => {
    const committed = { memoryMiB: 40_000, cpuMillis: 15_000 };
    assert.deepEqual(decideCompute(host, committed, { memoryMiB: 6000, cpuMillis: 1000 }, policy), { admitted: true });
    assert.deepEqual(decideCompute(host, committed, { memoryMiB: 6001, cpuMillis: 1000 }, policy), {
      admitted: false,
      resource: "memory",
      permanent: false,
    });
    assert.deepEqual(decideCompute(host, committed, { memoryMiB: 512, cpuMillis: 1001 }, policy), {
      admitted: false,
      resource: "cpu",
      permanent: false,
    });
  });
});
