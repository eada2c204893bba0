// The pure placement decision: candidates (ready, fresh, with room), scores (locality, least
// allocated), best-of-K sampling with a seeded random.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type PlacementHost, place } from "./placement.js";

const policy = { memoryOvercommit: 1, cpuOvercommit: 2 };

function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function host(id: string, extra: Partial<PlacementHost> = {}): PlacementHost {
  return {
    id,
    state: "ready",
    heartbeatAgeSeconds: 1,
    capacity: { cpu_millis: 4000, memory_mib: 8192, storage_bytes: 100e9 },
    allocated: { cpuMillis: 0, memoryMiB: 0, storageBytes: 0 },
    ...extra,
  };
}

const request = { cpuMillis: 1000, memoryMiB: 1024, storageBytes: 10e9, image: "img" };

describe("place", () => {
  it("never chooses a host that is not ready, is stale or has no room", () => {
    const hosts = [
      host("draining", { state: "draining" }),
      host("cordoned", { state: "cordoned" }),
      host("unreachable", { state: "unreachable" }),
      host("stale", { heartbeatAgeSeconds: 11 }),
      host("no-memory", { allocated: { cpuMillis: 0, memoryMiB: 7500, storageBytes: 0 } }),
      host("no-cpu", { allocated: { cpuMillis: 7500, memoryMiB: 0, storageBytes: 0 } }),
      host("no-storage", { allocated: { cpuMillis: 0, memoryMiB: 0, storageBytes: 95e9 } }),
      host("ok"),
    ];
    for (let seed = 0; seed < 50; seed++) {
      assert.deepEqual(
        place(hosts, request, seeded(seed), { policy }).map((h) => h.id),
        ["ok"],
      );
    }
    assert.deepEqual(place(hosts.slice(0, 7), request, seeded(1), { policy }), []);
  });

  it("uses the compute overcommit: cpu up to 2x, memory up to 1x", () => {
    const busy = host("a", { allocated: { cpuMillis: 6900, memoryMiB: 7168, storageBytes: 0 } });
    assert.equal(place([busy], { ...request, cpuMillis: 1000, memoryMiB: 1024 }, seeded(1), { policy }).length, 1);
    assert.equal(place([busy], { ...request, cpuMillis: 1200, memoryMiB: 1024 }, seeded(1), { policy }).length, 0);
    assert.equal(place([busy], { ...request, cpuMillis: 100, memoryMiB: 1025 }, seeded(1), { policy }).length, 0);
  });

  it("prefers snapshot locality, then the warm pool, then the image cache, then the least allocated", () => {
    const opts = { policy, k: 10 };
    const empty = host("empty");
    const cached = host("cached", {
      images: ["img"],
      allocated: { cpuMillis: 3000, memoryMiB: 4096, storageBytes: 0 },
    });
    const warm = host("warm", {
      warmImages: ["img"],
      allocated: { cpuMillis: 3000, memoryMiB: 4096, storageBytes: 0 },
    });
    const snap = host("snap", { allocated: { cpuMillis: 3000, memoryMiB: 4096, storageBytes: 0 } });
    const all = [empty, cached, warm, snap];
    assert.deepEqual(
      place(all, { ...request, snapshotHostId: "snap" }, seeded(3), opts).map((h) => h.id),
      ["snap", "warm", "cached", "empty"],
    );
    assert.equal(
      place(
        [empty, host("busy", { allocated: { cpuMillis: 4000, memoryMiB: 4096, storageBytes: 0 } })],
        { ...request, image: undefined },
        seeded(3),
        opts,
      )[0]?.id,
      "empty",
    );
    const vol = host("vol", { volumes: ["v1"], allocated: { cpuMillis: 3000, memoryMiB: 4096, storageBytes: 0 } });
    assert.equal(place([empty, vol], { ...request, image: undefined, volumes: ["v1"] }, seeded(3), opts)[0]?.id, "vol");
  });

  it("best-of-3 spreads equal hosts instead of herding, and lists every candidate once", () => {
    const hosts = Array.from({ length: 10 }, (_, i) => host(`h${i}`));
    const random = seeded(42);
    const firsts = new Map<string, number>();
    for (let i = 0; i < 1000; i++) {
      const order = place(hosts, request, random, { policy });
      assert.equal(new Set(order.map((h) => h.id)).size, 10);
      const id = order[0]?.id as string;
      firsts.set(id, (firsts.get(id) ?? 0) + 1);
    }
    assert.equal(firsts.size, 10, "every equal host is chosen first some of the time");
    for (const n of firsts.values()) assert.ok(n > 50 && n < 150, `roughly uniform: ${n}`);
  });

  it("the best of the sample wins over a better host outside it (K bounds the search)", () => {
    const hosts = [host("best", { warmImages: ["img"] }), ...Array.from({ length: 9 }, (_, i) => host(`h${i}`))];
    let outside = 0;
    const random = seeded(7);
    for (let i = 0; i < 500; i++) if (place(hosts, request, random, { policy })[0]?.id !== "best") outside++;
    // P(best not among 3 of 10) = 9/10 * 8/9 * 7/8 = 0.7
    assert.ok(outside > 300 && outside < 400, `${outside}`);
  });

  it("local_first: the preferred host comes first when a candidate, unless a restore's snapshot is on another", () => {
    const hosts = [
      host("self"),
      host("warm", { warmImages: ["img"] }),
      host("snap"),
      host("full", { state: "cordoned" }),
    ];
    for (let seed = 0; seed < 20; seed++) {
      const order = place(hosts, request, seeded(seed), { policy, preferHostId: "self" }).map((h) => h.id);
      assert.deepEqual(order, ["self", "warm", "snap"]);
      assert.equal(
        place(hosts, { ...request, snapshotHostId: "snap" }, seeded(seed), { policy, preferHostId: "self" })[0]?.id,
        "snap",
      );
      // Not a candidate (cordoned): placement as usual.
      assert.notEqual(place(hosts, request, seeded(seed), { policy, preferHostId: "full" })[0]?.id, "full");
    }
  });
});
