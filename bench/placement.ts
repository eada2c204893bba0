// Placement's decision in the create transaction (bench/README.md, "Placement"): with --hosts
// hosts in the registry and --per-host live sandboxes on each, the decision as
// host-placement.ts makes it (readCandidates, eligibleHosts, decidePlacement: the hosts rows,
// the candidates' allocation from this server's AllocationView, place()), the same on a fresh
// read of the allocation every time, and as it was before (every host's live rows summed),
// beside the raw operation it cannot go below (the bare SELECT of the hosts rows), alternated,
// each in a transaction of its own, on the embedded store (PGlite).
//
//   node --import tsx bench/placement.ts [--hosts 100] [--per-host 20] [--rounds 2000]
//     [--output bench/results/placement.json]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { parseArgs } from "node:util";
import type { StorageMeasure } from "../src/drivers/runtime/interface.js";
import { createLogger } from "../src/lib/logger.js";
import { readCandidates } from "../src/modules/hosts/candidates.js";
import { type PlacementHost, place } from "../src/modules/hosts/placement.js";
import { ALLOCATION_VIEW_MS, AllocationView } from "../src/modules/sandboxes/allocation-view.js";
import {
  decidePlacement,
  eligibleHosts,
  type PlacedRequest,
  type PlacementDeps,
} from "../src/modules/sandboxes/host-placement.js";
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
const HOLDS_COMPUTE = `((desired_state = 'running' AND state NOT IN ('failed', 'terminated', 'terminating')) OR state = 'running')`;

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

  // The decision as placeAndAdmit makes it (readCandidates, eligibleHosts, decidePlacement):
  // on an allocation view reused between creates (what a server does), on a fresh read of the
  // candidates' allocation every time (no view), and as it was before (every host's live
  // rows summed, in its own query), beside the bare SELECT of the hosts rows.
  const measure: StorageMeasure = { bytesOf: () => 20 * GIB, decide: () => ({ admitted: true }) };
  const request: PlacedRequest = {
    id: "sbx-bench",
    compute: { memory_mb: 512, cpu_millis: 1000 },
    storage: { shape: { storageClass: "standard", workspaceCapacityGiB: null } },
    measure,
    image: "busybox",
    volumes: [],
    snapshotHostId: null,
  };
  const silent = createLogger("fatal", new Writable({ write: (_c, _e, cb) => cb() }));
  const depsOf = (view?: AllocationView): PlacementDeps => ({
    self: null,
    localCompute: null,
    policy,
    mode: "spread",
    log: silent,
    view,
  });
  const view = new AllocationView();
  const decide = (deps: PlacementDeps) => async (): Promise<number> =>
    db.tx(async (q) => {
      const eligible = eligibleHosts(await readCandidates(q), null);
      return (await decidePlacement(q, deps, request, eligible)).order.length;
    });
  const before = async (): Promise<number> =>
    db.tx(async (q) => {
      const rows = await readCandidates(q);
      const allocated = new Map<string, PlacementHost["allocated"]>();
      const { rows: sums } = await q.query<{ host_id: string; n: string; memory: string; cpu: string }>(
        `SELECT host_id, storage_class, workspace_capacity_gib, count(*)::text AS n,
                COALESCE(sum((resources->>'memory_mb')::bigint) FILTER (WHERE ${HOLDS_COMPUTE}), 0)::text AS memory,
                COALESCE(sum((resources->>'cpu_millis')::bigint) FILTER (WHERE ${HOLDS_COMPUTE}), 0)::text AS cpu
           FROM sandboxes WHERE host_id IS NOT NULL AND state NOT IN ('failed', 'terminated')
          GROUP BY host_id, storage_class, workspace_capacity_gib`,
      );
      for (const a of sums) {
        const sum = allocated.get(a.host_id) ?? { cpuMillis: 0, memoryMiB: 0, storageBytes: 0 };
        sum.cpuMillis += Number(a.cpu);
        sum.memoryMiB += Number(a.memory);
        sum.storageBytes += Number(a.n) * 20 * GIB;
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
        { cpuMillis: 1000, memoryMiB: 512, storageBytes: 20 * GIB, image: "busybox", volumes: [] },
        Math.random,
        { policy },
      );
      return order.length;
    });
  const raw = async (): Promise<number> =>
    db.tx(async (q) => (await q.query("SELECT * FROM hosts WHERE state <> 'dead'")).rows.length);
  const variants = { view: decide(depsOf(view)), fresh: decide(depsOf()), before, raw };

  const ms: Record<keyof typeof variants, number[]> = { view: [], fresh: [], before: [], raw: [] };
  const counts: Record<string, number> = {};
  for (let i = 0; i < rounds + 100; i++) {
    // The hosts' heartbeats (every 2 s in a deployment), outside the timing: they stay fresh.
    if (i % 100 === 0) await db.query("UPDATE hosts SET heartbeat_at = now()");
    for (const [name, run] of Object.entries(variants)) {
      const t = performance.now();
      counts[name] = await run();
      if (i >= 100) ms[name as keyof typeof variants].push(performance.now() - t);
    }
  }
  if (new Set([counts.view, counts.fresh, counts.before]).size !== 1) {
    throw new Error(`the variants disagree on the candidates: ${JSON.stringify(counts)}`);
  }
  const candidates = counts.view ?? 0;
  const loadPct = await machineLoad(1000);
  const result = {
    store: "pglite",
    hosts: hostCount,
    liveSandboxes: hostCount * perHost,
    candidates,
    rounds,
    allocationViewMs: ALLOCATION_VIEW_MS,
    decisionMs: { p50: percentile(ms.view, 50), p99: percentile(ms.view, 99) },
    decisionFreshMs: { p50: percentile(ms.fresh, 50), p99: percentile(ms.fresh, 99) },
    beforeMs: { p50: percentile(ms.before, 50), p99: percentile(ms.before, 99) },
    rawSelectMs: { p50: percentile(ms.raw, 50), p99: percentile(ms.raw, 99) },
    loadavg: os.loadavg().map((v) => Math.round(v * 100) / 100),
    machineLoadPct: Math.round(loadPct),
  };
  const p = (v: { p50: number; p99: number }) => `${v.p50.toFixed(3)} ms (p99 ${v.p99.toFixed(3)})`;
  log(
    `decision p50 ${p(result.decisionMs)} on the view, ${p(result.decisionFreshMs)} fresh, ${p(result.beforeMs)} before; ` +
      `bare SELECT of the hosts p50 ${result.rawSelectMs.p50.toFixed(3)} ms (p99 ${result.rawSelectMs.p99.toFixed(3)}); ` +
      `${candidates} candidates; load ${result.loadavg.join(" ")} (others ${result.machineLoadPct}% of a core)`,
  );
  mkdirSync(path.dirname(args.output), { recursive: true });
  writeFileSync(args.output, `${JSON.stringify(result, null, 2)}\n`);
  await db.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
