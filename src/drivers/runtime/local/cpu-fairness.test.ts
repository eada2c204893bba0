// CPU fairness between organizations: the pure weight rule (cpuWeights), and the weights the
// driver writes into real runc sandboxes' cgroups on start, stop, destroy, a run's own end and
// a pooled sandbox's claim (assign). The share a busy organization gets is measured through
// the API in test/sandboxes-compute.test.ts.
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { eventually } from "../../../../test/support/eventually.js";
import { hostCgroupHierarchies } from "./cgroups.js";
import {
  cpuWeights,
  type RunningSandbox,
  V1_SHARES,
  V2_WEIGHT,
  type WeightScale,
  weightFileOf,
} from "./cpu-fairness.js";
import { LocalRuntimeDriver } from "./driver.js";
import { readRuncState } from "./runc.js";
import {
  type RuntimeFixture,
  startRuntimeFixture,
  startSandbox,
  TEST_RESOURCES,
  testSubnetPool,
} from "./test-support.js";

const sbx = (id: string, group: string, cpuMillis: number): RunningSandbox => ({ id, group, cpuMillis });
const sumOf = (weights: Map<string, number>, ids: string[]) => ids.reduce((n, id) => n + (weights.get(id) ?? 0), 0);

describe("cpuWeights", () => {
  const scale: WeightScale = { perGroup: 1000, min: 2, max: 1000 };

  it("is empty for no sandboxes", () => {
    assert.deepEqual(cpuWeights([], scale), new Map());
  });

  it("gives a group's only sandbox the whole group share, whatever it asked for", () => {
    for (const millis of [50, 1000, 128_000]) {
      assert.deepEqual(cpuWeights([sbx("a", "org-a", millis)], scale), new Map([["a", 1000]]));
    }
  });

  it("gives every group the same total, however many sandboxes it runs", () => {
    const many = [1, 2, 3, 4, 5, 8].map((n) => sbx(`a${n}`, "org-a", 1000));
    const weights = cpuWeights([...many, sbx("b", "org-b", 1000), sbx("c", "org-c", 250)], scale);
    assert.equal(
      sumOf(
        weights,
        many.map((s) => s.id),
      ),
      1002,
      "6 x round(1000/6) = 6 x 167",
    );
    assert.equal(weights.get("b"), 1000);
    assert.equal(weights.get("c"), 1000);
  });

  it("splits a group's share by cpu_millis", () => {
    const weights = cpuWeights([sbx("a1", "org-a", 1000), sbx("a2", "org-a", 3000), sbx("b", "org-b", 500)], scale);
    assert.deepEqual(
      weights,
      new Map([
        ["a1", 250],
        ["a2", 750],
        ["b", 1000],
      ]),
    );
  });

  it('keeps groups apart by exact name; the unowned group "" is a group like any other', () => {
    const weights = cpuWeights(
      [sbx("p1", "", 1000), sbx("p2", "", 1000), sbx("a", "org-a", 1000), sbx("A", "ORG-A", 1000)],
      scale,
    );
    assert.deepEqual(
      weights,
      new Map([
        ["p1", 500],
        ["p2", 500],
        ["a", 1000],
        ["A", 1000],
      ]),
    );
  });

  it("holds every weight within the kernel's bounds", () => {
    const crowd = Array.from({ length: 1000 }, (_, i) => sbx(`a${i}`, "org-a", 1000));
    for (const w of cpuWeights(crowd, scale).values()) assert.equal(w, 2, "1000/1000 = 1 is raised to the minimum");
    const capped = cpuWeights([sbx("x", "g", 1000)], { perGroup: 5000, min: 1, max: 4000 });
    assert.equal(capped.get("x"), 4000);
  });

  it("counts a cpu_millis that is not a positive number as 1 (no NaN reaches the kernel)", () => {
    for (const bad of [0, -5, Number.NaN, Number.POSITIVE_INFINITY]) {
      const weights = cpuWeights([sbx("bad", "g", bad), sbx("ok", "g", 999)], scale);
      assert.equal(weights.get("bad"), 2, `bad ${bad}`);
      assert.equal(weights.get("ok"), 999, `bad ${bad}`);
      for (const w of weights.values()) assert.ok(Number.isInteger(w));
    }
  });

  it("rounds to integers that sum to the group share within one per sandbox", () => {
    for (let n = 1; n <= 40; n++) {
      const group = Array.from({ length: n }, (_, i) => sbx(`s${i}`, "g", 100 + ((i * 37) % 900)));
      for (const s of [V1_SHARES, V2_WEIGHT]) {
        const weights = cpuWeights(group, s);
        const total = sumOf(
          weights,
          group.map((g) => g.id),
        );
        assert.ok(Math.abs(total - s.perGroup) <= n, `n=${n}: ${total} vs ${s.perGroup}`);
        for (const w of weights.values()) assert.ok(Number.isInteger(w) && w >= s.min && w <= s.max);
      }
    }
  });
});

describe("CPU weights of running sandboxes", () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  let perGroup: number;

  before(async () => {
    f = await startRuntimeFixture("cpufair");
    const target = await weightFileOf(await hostCgroupHierarchies());
    assert.ok(target, "this host has a cpu controller");
    perGroup = target.scale.perGroup;
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await f?.cleanup();
  });

  const start = (cpuGroup: string | undefined, cpuMillis = TEST_RESOURCES.cpuMillis) =>
    startSandbox(f, made, {
      ...(cpuGroup !== undefined ? { cpuGroup } : {}),
      resources: { ...TEST_RESOURCES, cpuMillis },
    });
  const weights = () => f.driver.cpuFairness.currentWeights();

  it("weighs every organization alike on start, stop, destroy and a run's own end", async () => {
    const a1 = await start("org-a", 1000);
    const a2 = await start("org-a", 500);
    const b1 = await start("org-b", 1000);
    assert.deepEqual(
      await weights(),
      new Map([
        [a1, Math.round((perGroup * 2) / 3)],
        [a2, Math.round(perGroup / 3)],
        [b1, perGroup],
      ]),
    );
    // A stopped sandbox counts no more: its organization's other one has the whole share.
    await f.driver.stop(a2);
    assert.deepEqual(
      await weights(),
      new Map([
        [a1, perGroup],
        [b1, perGroup],
      ]),
    );
    const b2 = await start("org-b", 1000);
    assert.equal((await weights()).get(b1), Math.round(perGroup / 2));
    await f.driver.destroy(b2);
    assert.equal((await weights()).get(b1), perGroup);
    // A run that ends by itself (its init killed from the host) is seen through the exit watch.
    await f.driver.start(a2);
    assert.equal((await weights()).get(a1), Math.round((perGroup * 2) / 3));
    const state = await readRuncState(f.driver.layout.runcRoot, a2);
    assert.ok(state);
    process.kill(state.initPid, "SIGKILL");
    await eventually("a1 to get org-a's whole share back", async () => (await weights()).get(a1) === perGroup, 60_000);
    for (const id of [a1, a2, b1]) await f.driver.destroy(id);
  });

  it("gives a pooled sandbox its organization's weight when it is claimed", async () => {
    const a1 = await start("org-a", 1000);
    // As the pool makes it: no organization yet, so it is a group of its own.
    const spec = f.spec({ resources: { ...TEST_RESOURCES, cpuMillis: 1000 } });
    made.push(spec.id);
    await f.driver.create(spec);
    await f.driver.start(spec.id);
    assert.deepEqual(
      await weights(),
      new Map([
        [a1, perGroup],
        [spec.id, perGroup],
      ]),
    );
    assert.ok(await f.driver.assign({ ...spec, cpuGroup: "org-a" }));
    assert.deepEqual(
      await weights(),
      new Map([
        [a1, Math.round(perGroup / 2)],
        [spec.id, Math.round(perGroup / 2)],
      ]),
    );
    await f.driver.stop(a1);
    assert.deepEqual(await weights(), new Map([[spec.id, perGroup]]));
    // A restarted server (a second driver on the root) rebalances what it adopts, from the records.
    const target = await weightFileOf(await hostCgroupHierarchies());
    assert.ok(target);
    await writeFile(path.join(target.mountPoint, f.driver.layout.cgroupPath(spec.id), target.file), "7");
    assert.equal((await weights()).get(spec.id), 7);
    const second = await LocalRuntimeDriver.open({
      root: f.root,
      installPackages: false,
      subnetPool: testSubnetPool(f.root),
    });
    await second.close();
    assert.deepEqual(await weights(), new Map([[spec.id, perGroup]]));
    for (const id of [a1, spec.id]) await f.driver.destroy(id);
  });
});
