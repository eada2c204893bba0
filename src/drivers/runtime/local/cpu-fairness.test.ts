// CPU fairness between organizations: the pure weight rule (cpuWeights), and the weights the
// driver writes into real runc sandboxes' cgroups on start, stop, destroy, a run's own end and
// a pooled sandbox's claim (assign). The share a busy organization gets is measured through
// the API in test/sandboxes-compute.test.ts.
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import path from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";
import { eventually } from "../../../../test/support/eventually.js";
import { hostCgroupHierarchies } from "./cgroups.js";
import {
  BUSY_CPU_FRACTION,
  cpuWeights,
  isBusy,
  MIN_SAMPLE_MS,
  type RunningSandbox,
  statIsRunnable,
  type UsageSample,
  V1_SHARES,
  V2_WEIGHT,
  type WeightFile,
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

const sbx = (id: string, group: string, cpuMillis: number, busy = true): RunningSandbox => ({
  id,
  group,
  cpuMillis,
  busy,
});
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

  it("counts only a group's busy sandboxes; an idle one weighs as if it woke alone beside them", () => {
    const weights = cpuWeights(
      [
        sbx("a-busy", "org-a", 1000),
        sbx("a-idle1", "org-a", 1000, false),
        sbx("a-idle3", "org-a", 3000, false),
        sbx("b", "org-b", 1000),
      ],
      scale,
    );
    assert.deepEqual(
      weights,
      new Map([
        ["a-busy", 1000],
        ["a-idle1", 500],
        ["a-idle3", 750],
        ["b", 1000],
      ]),
    );
    // Two busy of three: the busy ones share the group's total, the idle one as a third would.
    const mixed = cpuWeights([sbx("x", "g", 1000), sbx("y", "g", 3000), sbx("z", "g", 4000, false)], scale);
    assert.deepEqual(
      mixed,
      new Map([
        ["x", 250],
        ["y", 750],
        ["z", 500],
      ]),
    );
  });

  it("weighs a group with none busy as if all were", () => {
    const idle = [sbx("a1", "org-a", 1000, false), sbx("a2", "org-a", 3000, false)];
    const busy = idle.map((s) => ({ ...s, busy: true }));
    assert.deepEqual(cpuWeights(idle, scale), cpuWeights(busy, scale));
    assert.equal(cpuWeights(idle, scale).get("a2"), 750);
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

describe("isBusy", () => {
  const at = (usageMicros: number, atMs: number, busy: boolean): UsageSample => ({ usageMicros, atMs, busy });

  it("counts a sandbox seen for the first time as busy", () => {
    assert.deepEqual(isBusy(undefined, 0, 1000, false), at(0, 1000, true));
    assert.deepEqual(isBusy(undefined, 5_000_000, 1000, false), at(5_000_000, 1000, true));
  });

  it("is busy from BUSY_CPU_FRACTION of one CPU since the baseline, idle below", () => {
    const base = at(1_000_000, 10_000, false);
    const elapsedMs = 2000;
    const threshold = BUSY_CPU_FRACTION * elapsedMs * 1000;
    assert.equal(isBusy(base, 1_000_000 + threshold, 10_000 + elapsedMs, false).busy, true);
    assert.equal(isBusy(base, 1_000_000 + threshold - 1, 10_000 + elapsedMs, false).busy, false);
    assert.equal(isBusy(base, 1_000_000, 10_000 + elapsedMs, false).busy, false);
    assert.equal(isBusy({ ...base, busy: true }, 1_000_000, 10_000 + elapsedMs, false).busy, false, "busy, then idle");
    assert.deepEqual(
      isBusy(base, 3_000_000, 12_000, false),
      at(3_000_000, 12_000, true),
      "the sample becomes the baseline",
    );
  });

  it("keeps the baseline and the verdict within MIN_SAMPLE_MS (events close together)", () => {
    const base = at(1_000_000, 10_000, false);
    assert.equal(isBusy(base, 9_000_000, 10_000 + MIN_SAMPLE_MS - 1, false), base);
    assert.equal(isBusy(base, 1_000_000, 10_000, false), base);
    assert.equal(isBusy(base, 1_000_000, 10_000 + MIN_SAMPLE_MS, false).busy, false);
  });

  it("counts a sandbox whose usage went back (a new run) as busy, from a new baseline", () => {
    assert.deepEqual(isBusy(at(9_000_000, 10_000, false), 100, 10_100, false), at(100, 10_100, true));
  });

  it("counts a sandbox with a runnable task as busy, whatever CPU it got", () => {
    const base = at(1_000_000, 10_000, false);
    assert.deepEqual(isBusy(base, 1_000_000, 12_000, true), at(1_000_000, 12_000, true));
    assert.deepEqual(isBusy(base, 1_000_000, 10_100, true), { ...base, busy: true }, "within MIN_SAMPLE_MS too");
    assert.equal(isBusy({ ...base, busy: true }, 1_000_000, 12_000, false).busy, false);
  });

  it("keeps the baseline when the clock went back", () => {
    const base = at(1_000_000, 10_000, false);
    assert.equal(isBusy(base, 1_000_000, 5_000, false), base);
  });
});

describe("statIsRunnable", () => {
  it("reads the state after the command name, whatever the name holds", () => {
    assert.equal(statIsRunnable("42 (sh) R 1 42 42 0 -1"), true);
    assert.equal(statIsRunnable("42 (sh) S 1 42 42 0 -1"), false);
    assert.equal(statIsRunnable("42 (a) R (b) S 1 42"), false, "a name with ') R ' in it");
    assert.equal(statIsRunnable("42 (x) S) R 1"), true, "the last ')' ends the name");
    assert.equal(statIsRunnable(""), false);
    assert.equal(statIsRunnable("42 (sh"), false);
  });
});

describe("CPU weights of running sandboxes", () => {
  let f: RuntimeFixture;
  const made: string[] = [];
  let perGroup: number;
  let target: WeightFile;

  before(async () => {
    f = await startRuntimeFixture("cpufair");
    const found = await weightFileOf(await hostCgroupHierarchies());
    assert.ok(found, "this host has a cpu controller");
    target = found;
    perGroup = target.scale.perGroup;
  });
  // What a failed test left would weigh in the next one's expectations.
  beforeEach(async () => {
    for (const id of made.splice(0)) await f.driver.destroy(id).catch(() => undefined);
  });
  after(async () => {
    for (const id of made) await f?.driver.destroy(id).catch(() => undefined);
    await f?.cleanup();
  });

  const BUSY = ["sh", "-c", "while :; do :; done"];
  const start = (cpuGroup: string | undefined, cpuMillis = 1000, command?: string[]) =>
    startSandbox(f, made, {
      ...(cpuGroup !== undefined ? { cpuGroup } : {}),
      ...(command ? { command } : {}),
      resources: { ...TEST_RESOURCES, cpuMillis },
    });
  /**
   * Waits for the weights in the cgroups to be `expected` (a sandbox just started counts busy
   * until its first sample says otherwise, so a sleeping one settles within a few seconds).
   */
  const expectWeights = async (expected: Array<[string, number]>) => {
    const want = JSON.stringify([...expected].sort());
    let seen = "";
    await eventually(
      `weights ${want}`,
      async () => {
        seen = JSON.stringify([...(await f.driver.cpuFairness.currentWeights())].sort());
        return seen === want;
      },
      60_000,
    ).catch((error: Error) => {
      throw new Error(`${error.message}; last seen ${seen}`);
    });
  };

  it("weighs every organization alike on start, stop, destroy and a run's own end", async () => {
    const a1 = await start("org-a", 1000);
    const a2 = await start("org-a", 500);
    const b1 = await start("org-b", 1000);
    const [third, twoThirds, half] = [perGroup / 3, (perGroup * 2) / 3, perGroup / 2].map(Math.round);
    await expectWeights([
      [a1, twoThirds as number],
      [a2, third as number],
      [b1, perGroup],
    ]);
    // A stopped sandbox counts no more: its organization's other one has the whole share.
    await f.driver.stop(a2);
    await expectWeights([
      [a1, perGroup],
      [b1, perGroup],
    ]);
    const b2 = await start("org-b", 1000);
    await expectWeights([
      [a1, perGroup],
      [b1, half as number],
      [b2, half as number],
    ]);
    await f.driver.destroy(b2);
    await expectWeights([
      [a1, perGroup],
      [b1, perGroup],
    ]);
    // A run that ends by itself (its init killed from the host) is seen through the exit watch.
    await f.driver.start(a2);
    await expectWeights([
      [a1, twoThirds as number],
      [a2, third as number],
      [b1, perGroup],
    ]);
    const state = await readRuncState(f.driver.layout.runcRoot, a2);
    assert.ok(state);
    process.kill(state.initPid, "SIGKILL");
    await expectWeights([
      [a1, perGroup],
      [b1, perGroup],
    ]);
    for (const id of [a1, a2, b1]) await f.driver.destroy(id);
  });

  it("counts an organization's busy sandboxes only: its idle ones do not thin out its share", async () => {
    const busy = await start("org-a", 1000, BUSY);
    const idle = await start("org-a", 1000);
    const other = await start("org-b", 1000, BUSY);
    // Per sandbox of org-a's total the busy one would weigh a half; it has org-a's whole share.
    await expectWeights([
      [busy, perGroup],
      [idle, Math.round(perGroup / 2)],
      [other, perGroup],
    ]);
    for (const id of [busy, idle, other]) await f.driver.destroy(id);
  });

  it("gives a pooled sandbox its organization's weight when it is claimed, and a restarted driver too", async () => {
    const a1 = await start("org-a", 1000);
    // As the pool makes it: no organization yet, so it is a group of its own.
    const spec = f.spec({ resources: { ...TEST_RESOURCES, cpuMillis: 1000 } });
    made.push(spec.id);
    await f.driver.create(spec);
    await f.driver.start(spec.id);
    await expectWeights([
      [a1, perGroup],
      [spec.id, perGroup],
    ]);
    assert.ok(await f.driver.assign({ ...spec, cpuGroup: "org-a" }));
    const half = Math.round(perGroup / 2);
    await expectWeights([
      [a1, half],
      [spec.id, half],
    ]);
    // A restarted server (a second driver on the root) rebalances what it adopts, from the records.
    f.driver.cpuFairness.stop();
    await f.driver.cpuFairness.idle();
    const file = (id: string) => path.join(target.mountPoint, f.driver.layout.cgroupPath(id), target.file);
    await writeFile(file(a1), "7");
    await writeFile(file(spec.id), "7");
    const second = await LocalRuntimeDriver.open({
      root: f.root,
      installPackages: false,
      subnetPool: testSubnetPool(f.root),
    });
    await second.close();
    assert.deepEqual(
      await f.driver.cpuFairness.currentWeights(),
      new Map([
        [a1, half],
        [spec.id, half],
      ]),
    );
    f.driver.cpuFairness.start();
    for (const id of [a1, spec.id]) await f.driver.destroy(id);
  });
});
