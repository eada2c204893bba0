// The worker's kept memory is let go only once no job has run for the idle time: not in the
// middle of a job longer than that, and not kept for good after one. The timers are mocked, so
// a loaded machine cannot stretch "20 ms later" past the idle time.
import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, it, mock } from "node:test";
import { IdleRelease } from "./idle-release.js";

describe("idle release", () => {
  beforeEach(() => mock.timers.enable({ apis: ["setTimeout"] }));
  afterEach(() => mock.timers.reset());

  it("keeps the memory while a job runs longer than the idle time, and lets it go that long after it ends", () => {
    let released = 0;
    const idle = new IdleRelease(40, () => released++);
    idle.started();
    mock.timers.tick(120);
    assert.equal(released, 0, "not in the middle of a job");
    idle.ended();
    mock.timers.tick(39);
    assert.equal(released, 0, "not before the idle time");
    mock.timers.tick(1);
    assert.equal(released, 1, "after the idle time with no job");
    mock.timers.tick(1000);
    assert.equal(released, 1, "once");
  });

  it("waits for the last of overlapping jobs, and a job started meanwhile keeps it", () => {
    let released = 0;
    const idle = new IdleRelease(40, () => released++);
    idle.started();
    idle.started();
    idle.ended();
    mock.timers.tick(100);
    assert.equal(released, 0, "one job still runs");
    idle.ended();
    mock.timers.tick(20);
    idle.started();
    mock.timers.tick(100);
    assert.equal(released, 0, "a new job started within the idle time");
    idle.ended();
    mock.timers.tick(40);
    assert.equal(released, 1);
    assert.throws(() => idle.ended(), /never started/);
  });
});
