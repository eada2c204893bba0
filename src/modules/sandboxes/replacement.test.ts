import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decideRefusal, MAX_PLACEMENTS, type RefusalInput } from "./replacement.js";

const base: RefusalInput = {
  state: "materializing",
  desiredState: "running",
  quarantined: false,
  code: "storage_exhausted",
  hostId: "h_a",
  refusedHosts: [],
  servedFromPool: false,
  localOnlySnapshot: false,
};

describe("decideRefusal: placing again on a host's refusal", () => {
  it("a storage refusal at start is handed back with the refusing host excluded", () => {
    assert.deepEqual(decideRefusal(base), { kind: "replace", refusedHosts: ["h_a"] });
    assert.deepEqual(decideRefusal({ ...base, state: "requested" }), { kind: "replace", refusedHosts: ["h_a"] });
  });

  it("earlier refusals stay excluded, oldest first, each host once", () => {
    assert.deepEqual(decideRefusal({ ...base, hostId: "h_b", refusedHosts: ["h_a"] }), {
      kind: "replace",
      refusedHosts: ["h_a", "h_b"],
    });
    assert.deepEqual(decideRefusal({ ...base, hostId: "h_a", refusedHosts: ["h_a"] }), {
      kind: "replace",
      refusedHosts: ["h_a"],
    });
  });

  it(`at most ${MAX_PLACEMENTS} placements: the refusal that ends the last one fails the sandbox`, () => {
    assert.equal(MAX_PLACEMENTS, 3);
    assert.equal(decideRefusal({ ...base, hostId: "h_b", refusedHosts: ["h_a"] }).kind, "replace");
    assert.deepEqual(decideRefusal({ ...base, hostId: "h_c", refusedHosts: ["h_a", "h_b"] }), {
      kind: "fail",
      why: "placements_used",
    });
  });

  it("any other failure fails it as on one host", () => {
    for (const code of ["image_unavailable", "start_failed", "host_failure", "runtime_error", "invalid_spec"]) {
      assert.deepEqual(decideRefusal({ ...base, code }), { kind: "fail", why: "not_a_refusal" }, code);
    }
  });

  it("only a sandbox on its way to its first start moves", () => {
    for (const state of ["ready", "running", "stopped", "terminating", "attention", "failed"] as const) {
      assert.deepEqual(decideRefusal({ ...base, state }), { kind: "fail", why: "not_starting" }, state);
    }
    assert.deepEqual(decideRefusal({ ...base, desiredState: "deleted" }), { kind: "fail", why: "not_starting" });
    assert.deepEqual(decideRefusal({ ...base, quarantined: true }), { kind: "fail", why: "not_starting" });
    assert.deepEqual(decideRefusal({ ...base, hostId: null }), { kind: "fail", why: "not_starting" });
  });

  it("a warm-pool claim or a restore of a local-only snapshot stays on its host", () => {
    assert.deepEqual(decideRefusal({ ...base, servedFromPool: true }), { kind: "fail", why: "cannot_move" });
    assert.deepEqual(decideRefusal({ ...base, localOnlySnapshot: true }), { kind: "fail", why: "cannot_move" });
  });
});
