// The worker's kept memory is let go only once no job has run for the idle time: not in the
// middle of a job longer than that, and not kept for good after one.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { IdleRelease } from "./idle-release.js";

describe("idle release", () => {
  it("keeps the memory while a job runs longer than the idle time, and lets it go that long after it ends", async () => {
    let released = 0;
    const idle = new IdleRelease(40, () => released++);
    idle.started();
    await sleep(120);
    assert.equal(released, 0, "not in the middle of a job");
    idle.ended();
    await sleep(20);
    assert.equal(released, 0, "not before the idle time");
    await sleep(80);
    assert.equal(released, 1, "after the idle time with no job");
  });

  it("waits for the last of overlapping jobs, and a job started meanwhile keeps it", async () => {
    let released = 0;
    const idle = new IdleRelease(40, () => released++);
    idle.started();
    idle.started();
    idle.ended();
    await sleep(100);
    assert.equal(released, 0, "one job still runs");
    idle.ended();
    await sleep(20);
    idle.started();
    await sleep(100);
    assert.equal(released, 0, "a new job started within the idle time");
    idle.ended();
    await sleep(100);
    assert.equal(released, 1);
    assert.throws(() => idle.ended(), /never started/);
  });
});
