// Placement's decision in the create transaction (bench/README.md, "Placement"): with --hosts
// hosts in the registry and --per-host live sandboxes on each, the decision as
// host-placement.ts makes it (the hosts rows, every host's allocation summed from its live
// rows, place()) beside the raw operation it cannot go below (the bare SELECT of the hosts
// rows), alternated, each in a transaction of its own, on the embedded store (PGlite).
//
//   node --import tsx bench/placement.ts [--hosts 100] [--per-host 20] [--rounds 2000]
//     [--output bench/results/placement.json]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { type PlacementHost, place } from "../src/modules/hosts/placement.js";
import { placementHosts } from "../src/modules/hosts/repo.js";
import { allocationByHost } from "../src/modules/sandboxes/repo.js";
import { migrate } from "../src/store/migrate.js";
import { openPglite } from "../src/store/pglite.js";
import { machineLoad } from "./lib/cpu.js";
import { percentile } from "./lib/stats.js";

const { values: args } = parseArgs({
  options: {
    hosts: { type: "string", default: "100" },
    "per-host": { type: "string", default: "20" },
    rounds: { type: "string", default: "2000" },
    output: { type: "string", default: "bench/results/placement.json" },
  },
});
const hostCount = Number(args.hosts);
const perHost = Number(args["per-host"]);
const rounds = Number(args.rounds);
const GIB = 1024 ** 3;
const policy = { memoryOvercommit: 2, cpuOvercommit: 8 };

const log = (line: string) => process.stderr.write(`${line}\n`);
const dir = mkdtempSync(path.join(os.tmpdir(), "warren-bench-placement-"));
try {
  const db = await openPglite(path.join(dir, "pglite"));
  await migrate(db);
  await db.query(
    `INSERT INTO hosts (id, role, state, epoch, capacity, images, warm_images)
     SELECT 'h_' || lpad(to_hex(i), 24, '0'), 'all', CASE WHEN i % 10 = 0 THEN 'cordoned' ELSE 'ready' END, 1,
            jsonb_build_object('cpu_millis', 16000, 'memory_mib', 65536, 'storage_bytes', 2000::bigint * 1073741824),
            ARRAY['img-' || (i % 7), 'busybox'], CASE WHEN i % 3 = 0 THEN ARRAY['busybox'] ELSE '{}' END
       FROM generate_series(1, $1::int) AS i`,
    [hostCount],
  );
  // Sandbox rows without their organization and project (foreign keys off for the seed only).
  await db.exec("SET session_replication_role = replica");
  await db.query(
    `INSERT INTO sandboxes (id, org_id, project_id, image, workload_image, storage_class, placement_class,
       network_access, lineage_path, resources, desired_state, state, run_id, created_at, updated_at, host_id, host_epoch)
     SELECT 'sbx-' || lpad(to_hex(i), 40, '0'), 'org_bench', 'prj_bench', 'busybox', 'busybox', 'standard', 'standard',
            'none', 'x', jsonb_build_object('memory_mb', 512, 'cpu_millis', 1000), 'running', 'running', 'run',
            now(), now(), 'h_' || lpad(to_hex(1 + i % $1::int), 24, '0'), 1
       FROM generate_series(1, $2::int) AS i`,
    [hostCount, hostCount * perHost],
  );
  await db.exec("SET session_replication_role = origin");
  await db.exec("ANALYZE");
  log(`seeded ${hostCount} hosts, ${hostCount * perHost} live sandboxes`);

  const bytesOf = () => 20 * GIB;
  const decide = async (): Promise<number> =>
    db.tx(async (q) => {
      const rows = await placementHosts(q);
      const allocated = new Map<string, PlacementHost["allocated"]>();
      for (const a of await allocationByHost(q)) {
        const sum = allocated.get(a.host_id) ?? { cpuMillis: 0, memoryMiB: 0, storageBytes: 0 };
        sum.cpuMillis += a.cpu;
        sum.memoryMiB += a.memory;
        sum.storageBytes += a.n * bytesOf();
        allocated.set(a.host_id, sum);
      }
      const hosts: PlacementHost[] = rows.map((row) => ({
        id: row.id,
        state: row.state,
        heartbeatAgeSeconds: row.heartbeat_age_seconds,
        capacity: row.capacity,
        allocated: allocated.get(row.id) ?? { cpuMillis: 0, memoryMiB: 0, storageBytes: 0 },
        images: row.images,
        warmImages: row.warm_images,
        volumes: row.volumes,
      }));
      const order = place(
        hosts,
        { cpuMillis: 1000, memoryMiB: 512, storageBytes: bytesOf(), image: "busybox", volumes: [] },
        Math.random,
        { policy },
      );
      return order.length;
    });
  const raw = async (): Promise<number> =>
    db.tx(async (q) => (await q.query("SELECT * FROM hosts WHERE state <> 'dead'")).rows.length);

  for (let i = 0; i < 100; i++) {
    await decide();
    await raw();
  }
  const decideMs: number[] = [];
  const rawMs: number[] = [];
  let candidates = 0;
  for (let i = 0; i < rounds; i++) {
    // The hosts' heartbeats (every 2 s in a deployment), outside the timing: they stay fresh.
    if (i % 100 === 0) await db.query("UPDATE hosts SET heartbeat_at = now()");
    let t = performance.now();
    candidates = await decide();
    decideMs.push(performance.now() - t);
    t = performance.now();
    await raw();
    rawMs.push(performance.now() - t);
  }
  const loadPct = await machineLoad(1000);
  const result = {
    store: "pglite",
    hosts: hostCount,
    liveSandboxes: hostCount * perHost,
    candidates,
    rounds,
    decisionMs: { p50: percentile(decideMs, 50), p99: percentile(decideMs, 99) },
    rawSelectMs: { p50: percentile(rawMs, 50), p99: percentile(rawMs, 99) },
    loadavg: os.loadavg().map((v) => Math.round(v * 100) / 100),
    machineLoadPct: Math.round(loadPct),
  };
  log(
    `decision p50 ${result.decisionMs.p50.toFixed(3)} ms (p99 ${result.decisionMs.p99.toFixed(3)}), ` +
      `bare SELECT of the hosts p50 ${result.rawSelectMs.p50.toFixed(3)} ms (p99 ${result.rawSelectMs.p99.toFixed(3)}); ` +
      `${candidates} candidates; load ${result.loadavg.join(" ")} (others ${result.machineLoadPct}% of a core)`,
  );
  mkdirSync(path.dirname(args.output), { recursive: true });
  writeFileSync(args.output, `${JSON.stringify(result, null, 2)}\n`);
  await db.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
