// The warm pool's plan (pool-plan.ts): the default image first, recent images most recent
// first, the least recently used image evicted past the limit, the total budget never exceeded.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { planMembers, RecentImages } from "./pool-plan.js";

const counts = (plan: ReturnType<typeof planMembers>) =>
  Object.fromEntries([...plan].map(([key, { count }]) => [key, count]));

describe("pool plan", () => {
  it("keeps the default image's members and then recent images, most recent first, within the budget", () => {
    const recent = new RecentImages(3);
    recent.touch("a", "none");
    recent.touch("b", "public");
    recent.touch("a", "public");
    recent.touch("c", "none");
    assert.deepEqual(
      recent.list().map((r) => r.image),
      ["c", "a", "b"],
    );
    const plan = planMembers({
      defaultImage: "d",
      defaultSize: 2,
      recent: recent.list(),
      recentSize: 1,
      maxMembers: 7,
    });
    assert.deepEqual(counts(plan), { "none d": 2, "public d": 2, "none c": 1, "none a": 1, "public a": 1 });
    assert.deepEqual([...plan.keys()][0], "none d", "the default image fills first");
  });

  it("evicts the least recently used image past the limit", () => {
    const recent = new RecentImages(2);
    assert.equal(recent.touch("a", "none"), true);
    assert.equal(recent.touch("a", "none"), false, "the same use again changes nothing");
    assert.equal(recent.touch("b", "none"), true);
    assert.equal(recent.touch("a", "none"), true, "a moved to the front");
    assert.equal(recent.touch("c", "none"), true);
    assert.deepEqual(
      recent.list().map((r) => r.image),
      ["c", "a"],
    );
    assert.equal(recent.has("b"), false);
    recent.forget("a");
    assert.deepEqual(
      recent.list().map((r) => r.image),
      ["c"],
    );
  });

  it("never plans more than the budget, nor the default image as a recent one, nor anything with no limit", () => {
    const recent = new RecentImages(4);
    for (const image of ["d", "a", "b", "c"]) recent.touch(image, "none");
    const plan = planMembers({
      defaultImage: "d",
      defaultSize: 1,
      recent: recent.list(),
      recentSize: 3,
      maxMembers: 4,
    });
    assert.deepEqual(counts(plan), { "none d": 1, "public d": 1, "none c": 2 });
    const total = [...plan.values()].reduce((sum, { count }) => sum + count, 0);
    assert.equal(total, 4);
    const off = new RecentImages(0);
    assert.equal(off.touch("a", "none"), false);
    assert.deepEqual(off.list(), []);
    assert.deepEqual(
      counts(planMembers({ defaultImage: "d", defaultSize: 2, recent: [], recentSize: 1, maxMembers: 0 })),
      {},
    );
  });
});
