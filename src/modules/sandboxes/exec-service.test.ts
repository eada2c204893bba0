// Which driver failures may be answered "the command did not run": only those raised before
// anything reached the sandbox. Every other failure is indeterminate.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RuntimeError } from "../../drivers/runtime/interface.js";
import { outcomeOfFailure } from "./exec-service.js";

describe("outcomeOfFailure", () => {
  it("is spawn_failed only for errors raised before the command was handed over", () => {
    assert.equal(outcomeOfFailure(new RuntimeError("invalid_spec", "bad")).kind, "spawn_failed");
    assert.equal(outcomeOfFailure(new RuntimeError("not_found", "gone")).kind, "spawn_failed");
  });

  it("is indeterminate for a host failure, an unknown error or a non-error", () => {
    for (const error of [new RuntimeError("host_failure", "agent lost"), new Error("socket reset"), "thrown text"]) {
      assert.deepEqual(
        { ...outcomeOfFailure(error), message: "" },
        { kind: "indeterminate", stdout: "", stderr: "", truncated: false, message: "" },
      );
    }
  });
});
