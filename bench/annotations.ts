// Annotation benchmarks against the real server process (started as bench/run.ts does, with
// default settings), on the embedded store and on PostgreSQL:
//
//   list:   1,000,000 annotations in one organization (100,000 supersession keys) are
//           bulk-loaded with SQL that writes exactly the rows AnnotationService writes (server
//           stopped; see bench/annotations/data.ts), checked through the API, then
//           GET /v1/annotations?page_size=100 (latest per key; unfiltered, by schema_name, by
//           schema_name + a promoted field, and the second page) is timed over a few hundred
//           sequential requests from this process;   target p95 < 50 ms (PostgreSQL), < 200 ms (PGlite)
//   ingest: POST /v1/annotations (schema-validated) from 16 concurrent connections of a
//           separate load process (autocannon and wrk), closed loop, on top of that history;
//           target >= 4,000/s (PostgreSQL), >= 2,000/s (PGlite).
//
//   node --import tsx bench/annotations.ts [--stores pglite,postgres] [--phases list,ingest]
//     [--rows 1000000] [--keys 100000] [--requests 300] [--tools autocannon,wrk]
//     [--connections 16] [--duration 10] [--warmup 3] [--quiet-wait 120] [--retries 2] [--pglite-analyze]
//     [--keep] [--output bench/results/annotations.json]
import { mkdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import type { IngestLoadSpec } from "./annotations/annotate-load.js";
import { bulkLoad, check, connect, type LoadCheck } from "./annotations/bulk-load.js";
import {
  JSON_SCHEMA,
  type LoadContext,
  PROMOTED_FIELDS,
  payloadJson,
  SCHEMA_NAMES,
  type Slots,
} from "./annotations/data.js";
import { runIngestLoad } from "./annotations/ingest-load.js";
import { api, call } from "./lib/api.js";
import { awaitQuiet, type CpuUsage, cpuDuring, leastDisturbed, QUIET_PCT } from "./lib/cpu.js";
import { type LoadResult, pickTools, type Tool } from "./lib/load.js";
import { freePort, type RunningServer, SERVER_METHOD, startServer } from "./lib/server.js";
import { installCleanup, prepareStore, runMain, type Store, stopCluster } from "./lib/store.js";
import { textTable } from "./lib/table.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const RESULTS_FILE = path.join(ROOT, "bench/results/annotations.json");

const TARGETS = {
  ingestPerSec: { pglite: 2_000, postgres: 4_000 },
  listP95Ms: { pglite: 200, postgres: 50 },
};

const { values: args } = parseArgs({
  options: {
    stores: { type: "string", default: "pglite,postgres" },
    phases: { type: "string", default: "list,ingest" },
    rows: { type: "string", default: "1000000" },
    keys: { type: "string", default: "100000" },
    runs: { type: "string", default: "20" },
    requests: { type: "string", default: "300" },
    tools: { type: "string", default: "autocannon,wrk" },
    connections: { type: "string", default: "16" },
    duration: { type: "string", default: "10" },
    warmup: { type: "string", default: "3" },
    "ingest-keys": { type: "string", default: "100000" },
    "quiet-wait": { type: "string", default: "120" },
    retries: { type: "string", default: "2" },
    // Diagnostic: ANALYZE the PGlite store after the load (the server never does; PostgreSQL's
    // autovacuum does, so the PostgreSQL run is always analyzed).
    "pglite-analyze": { type: "boolean", default: false },
    keep: { type: "boolean", default: false },
    output: { type: "string", default: RESULTS_FILE },
  },
});

const stores = args.stores.split(",") as Store[];
const phases = new Set(args.phases.split(","));
const rowCount = Number(args.rows);
const keyCount = Number(args.keys);
const runCount = Number(args.runs);
const requestCount = Number(args.requests);
const connections = Number(args.connections);
const durationSec = Number(args.duration);
const warmupSec = Number(args.warmup);
const quietWaitSec = Number(args["quiet-wait"]);
const retries = Number(args.retries);
const log = (line: string) => process.stderr.write(`[bench:annotations] ${line}\n`);

// ---- cleanup ------------------------------------------------------------------------------
installCleanup(log, { keep: args.keep });

// ---- helpers ------------------------------------------------------------------------------
function loadAverage(): number {
  return os.loadavg()[0] ?? 0;
}

function assert(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Error(`check failed: ${message}`);
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] ?? 0;
}

// ---- setup through the API ----------------------------------------------------------------
interface Setup {
  orgId: string;
  principal: string;
  projectId: string;
  runs: { id: string; lineagePath: string }[];
  slots: Slots;
}

async function setupThroughApi(base: string, key: string): Promise<Setup> {
  const who = await api<{ organization: { id: string }; principal: { id: string } }>(base, key, "GET", "/v1/whoami");
  const project = await api<{ project: { id: string } }>(base, key, "POST", "/v1/projects", {
    name: "Annotation bench",
    slug: "annotation-bench",
  });
  const runs: Setup["runs"] = [];
  for (let i = 0; i < runCount; i++) {
    const { run } = await api<{ run: { id: string; lineage_path: string } }>(base, key, "POST", "/v1/runs", {
      project_id: project.project.id,
      label: `bench-${i}`,
    });
    runs.push({ id: run.id, lineagePath: run.lineage_path });
  }
  let slots: Slots | null = null;
  for (const name of SCHEMA_NAMES) {
    const { schema } = await api<{ schema: { promoted_fields: { field: string; slot: string }[] } }>(
      base,
      key,
      "POST",
      "/v1/annotation-schemas",
      { name, description: "annotation bench", json_schema: JSON_SCHEMA, promoted_fields: PROMOTED_FIELDS },
    );
    const these = Object.fromEntries(schema.promoted_fields.map((p) => [p.field, p.slot])) as Slots;
    if (slots && JSON.stringify(slots) !== JSON.stringify(these)) throw new Error("schemas got different slots");
    slots = these;
  }
  if (!slots) throw new Error("no schema registered");
  return { orgId: who.organization.id, principal: who.principal.id, projectId: project.project.id, runs, slots };
}

// ---- list latency -------------------------------------------------------------------------
interface ListQuery {
  name: string;
  query: Record<string, string>;
}

interface ListResult {
  store: Store;
  query: string;
  url: string;
  requests: number;
  rowsPerPage: number;
  firstMs: number;
  latencyMs: { mean: number; p50: number; p95: number; p99: number; max: number };
  loadAverage1m: number;
  busyBeforePct: number;
  pass: boolean;
}

interface AnnotationList {
  annotations: { event_id: string; run_id?: string; payload_json: string; ts_wall_ns: string; schema_name: string }[];
  superseded_count: string;
  next_page_token: string;
}

async function timeList(base: string, key: string, store: Store, q: ListQuery): Promise<ListResult> {
  const route = `/v1/annotations?${new URLSearchParams(q.query).toString()}`;
  const once = async () => {
    const started = performance.now();
    const res = await call<AnnotationList>(base, key, "GET", route);
    const ms = performance.now() - started;
    if (res.status !== 200) throw new Error(`GET ${route}: ${res.status} ${JSON.stringify(res.body)}`);
    return { ms, rows: res.body.annotations.length };
  };
  const first = await once();
  for (let i = 0; i < 20; i++) await once(); // warm-up
  const busyBeforePct = await awaitQuiet(quietWaitSec, log);
  const load = loadAverage();
  const samples: number[] = [];
  let rows = 0;
  for (let i = 0; i < requestCount; i++) {
    const r = await once();
    samples.push(r.ms);
    rows = r.rows;
  }
  const sorted = [...samples].sort((a, b) => a - b);
  const latencyMs = {
    mean: samples.reduce((a, b) => a + b, 0) / samples.length,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? 0,
  };
  const result: ListResult = {
    store,
    query: q.name,
    url: route,
    requests: requestCount,
    rowsPerPage: rows,
    firstMs: first.ms,
    latencyMs,
    loadAverage1m: load,
    busyBeforePct,
    pass: latencyMs.p95 < TARGETS.listP95Ms[store],
  };
  log(
    `${store} list ${q.name}: ${rows} rows, p50 ${latencyMs.p50.toFixed(1)} ms, p95 ${latencyMs.p95.toFixed(1)} ms, p99 ${latencyMs.p99.toFixed(1)} ms (first ${first.ms.toFixed(0)} ms, load ${load.toFixed(2)})`,
  );
  return result;
}

/** Checks through the API that the bulk-loaded rows are what the service itself writes. */
async function verifyLoaded(base: string, key: string, ctx: LoadContext): Promise<number> {
  const versions = Math.ceil(ctx.rows / ctx.keys);
  const page = await api<AnnotationList>(base, key, "GET", "/v1/annotations?page_size=100");
  assert(page.annotations.length === 100, "a full first page");
  assert(page.superseded_count === String(100 * (versions - 1)), `superseded_count ${page.superseded_count}`);
  const newest = page.annotations[0];
  assert(
    newest !== undefined && newest.ts_wall_ns === (ctx.startNs + BigInt(ctx.rows - 1) * 1_000_000n).toString(),
    "newest row first",
  );
  const runId = newest.run_id as string;
  // Resending a loaded row's event_id with its payload is an idempotent replay: the content hash matches.
  const replay = await call<{ event_id: string }>(base, key, "POST", "/v1/annotations", {
    schema_name: newest.schema_name,
    payload_json: newest.payload_json,
    run_id: runId,
    event_id: newest.event_id,
  });
  assert(replay.status === 200 && replay.body.event_id === newest.event_id, `replay: ${JSON.stringify(replay)}`);
  const conflict = await call<{ error?: { code: string } }>(base, key, "POST", "/v1/annotations", {
    schema_name: newest.schema_name,
    payload_json: payloadJson("other", "good", 1, 1),
    run_id: runId,
    event_id: newest.event_id,
  });
  assert(conflict.status === 409, `reused event_id for other content: ${conflict.status}`);
  // A new version of a loaded key supersedes its head: the supersession key matches.
  const item = (JSON.parse(newest.payload_json) as { item: string }).item;
  const again = await api<{ event_id: string }>(base, key, "POST", "/v1/annotations", {
    schema_name: newest.schema_name,
    payload_json: payloadJson(item, "bad", 3, 3),
    run_id: runId,
  });
  const byItem = await api<AnnotationList>(
    base,
    key,
    "GET",
    `/v1/annotations?${new URLSearchParams({ schema_name: newest.schema_name, "promoted.item": item })}`,
  );
  assert(byItem.annotations.length === 1 && byItem.annotations[0]?.event_id === again.event_id, "one head per key");
  assert(byItem.superseded_count === String(versions), `new version hides ${byItem.superseded_count}`);
  return 1; // annotations written
}

// ---- ingest throughput --------------------------------------------------------------------
interface IngestResult extends LoadResult {
  store: Store;
  cpu: CpuUsage;
  loadAverage1m: number;
  busyBeforePct: number;
  /** Runs made to get this one (repeated while other processes disturbed it). */
  attempts: number;
  disturbed: boolean;
  pass: boolean;
}

async function ingestRun(
  server: RunningServer,
  tool: Tool,
  spec: IngestLoadSpec,
  dbPids: () => number[],
): Promise<{ result: LoadResult; cpu: CpuUsage }> {
  const load = runIngestLoad(tool, spec);
  return cpuDuring({ server: server.child.pid ?? -1, loadgen: load.pid, db: dbPids }, spec.durationSec, load.result);
}

// ---- one store ----------------------------------------------------------------------------
interface StoreReport {
  store: Store;
  load: { rows: number; keys: number; eventsSec: number; headsSec: number; analyzed: boolean; check: LoadCheck } | null;
  list: ListResult[];
  ingest: IngestResult[];
  finalCheck: LoadCheck | null;
}

async function benchStore(store: Store, tools: Tool[]): Promise<StoreReport> {
  const { dir, dataDir, logFile, key, env, dbPids } = await prepareStore(store, "warren-bench-annotations", log);
  const target = store === "postgres" ? { databaseUrl: env.DATABASE_URL } : { pgliteDir: path.join(dataDir, "pglite") };
  const port = await freePort();
  log(`${store}: first start (${dir})`);
  let server = await startServer({ root: ROOT, port, env, logFile });
  const setup = await setupThroughApi(server.baseUrl, key);
  let written = 0;
  let loadRuns = 0;
  const report: StoreReport = { store, load: null, list: [], ingest: [], finalCheck: null };
  const ctx: LoadContext = {
    ...setup,
    startNs: BigInt(Date.now() - rowCount - 60_000) * 1_000_000n,
    rows: rowCount,
    keys: keyCount,
  };

  try {
    if (phases.has("list") && rowCount > 0) {
      await server.stop();
      log(`${store}: bulk-loading ${rowCount} annotations over ${keyCount} keys`);
      const conn = await connect(target);
      try {
        const times = await bulkLoad(conn, ctx, log);
        const analyzed = store === "postgres" || args["pglite-analyze"];
        if (store === "postgres") {
          await conn.exec("VACUUM ANALYZE events");
          await conn.exec("VACUUM ANALYZE annotation_heads");
        } else if (analyzed) await conn.exec("ANALYZE events; ANALYZE annotation_heads");
        const loaded = await check(conn, setup.orgId);
        log(
          `${store}: loaded in ${times.eventsSec.toFixed(0)} + ${times.headsSec.toFixed(0)} s: ${JSON.stringify(loaded)}`,
        );
        assert(loaded.events === String(rowCount), "every row loaded");
        assert(loaded.heads === String(Math.min(keyCount, rowCount)), "one head per key");
        assert(loaded.consistent_heads === loaded.heads, "every head names the newest event of its key");
        assert(BigInt(loaded.superseded) + BigInt(loaded.heads) === BigInt(loaded.events), "superseded counts add up");
        report.load = { rows: rowCount, keys: keyCount, ...times, analyzed, check: loaded };
      } finally {
        await conn.close();
      }
      server = await startServer({ root: ROOT, port, env, logFile });
      written += await verifyLoaded(server.baseUrl, key, ctx);
      log(`${store}: the loaded rows read back as the service's own (replay, conflict, supersession)`);

      const firstPage = await api<AnnotationList>(server.baseUrl, key, "GET", "/v1/annotations?page_size=100");
      const queries: ListQuery[] = [
        { name: "latest", query: { page_size: "100" } },
        { name: "latest, schema_name", query: { page_size: "100", schema_name: "bench.quality" } },
        {
          name: "latest, schema_name + promoted.label",
          query: { page_size: "100", schema_name: "bench.quality", "promoted.label": "good" },
        },
        {
          name: "latest, schema_name + promoted.reviewer",
          query: { page_size: "100", schema_name: "bench.quality", "promoted.reviewer": "r07" },
        },
        { name: "latest, second page", query: { page_size: "100", page_token: firstPage.next_page_token } },
        // Every version, not only the latest: no target of its own, held to the same bar.
        { name: "history, schema_name", query: { page_size: "100", schema_name: "bench.quality", history: "true" } },
        {
          name: "history, schema_name + promoted.reviewer",
          query: { page_size: "100", schema_name: "bench.quality", "promoted.reviewer": "r07", history: "true" },
        },
        {
          name: "history, schema_name + promoted.item (one key)",
          query: { page_size: "100", schema_name: "bench.quality", "promoted.item": "item-0000400", history: "true" },
        },
      ];
      for (const q of queries) report.list.push(await timeList(server.baseUrl, key, store, q));
    }

    if (phases.has("ingest")) {
      const spec: IngestLoadSpec = {
        url: `${server.baseUrl}/v1/annotations`,
        key,
        connections,
        durationSec,
        schemas: SCHEMA_NAMES,
        runs: setup.runs.map((r) => r.id),
        keys: Number(args["ingest-keys"]),
        prefix: "ingest-",
      };
      for (const tool of tools) {
        if (warmupSec > 0) {
          const warm = await ingestRun(server, tool, { ...spec, durationSec: warmupSec }, dbPids);
          written += warm.result.ok2xx;
          loadRuns++;
        }
        // A run during which other processes took more than QUIET_PCT of a core is repeated
        // (up to --retries times); the least disturbed attempt is kept.
        const { kept, attempts } = await leastDisturbed(
          { retries, quietWaitSec, log, label: `${store} ingest ${tool}` },
          async () => {
            const load = loadAverage();
            const run = await ingestRun(server, tool, spec, dbPids);
            written += run.result.ok2xx;
            loadRuns++;
            return { ...run, load };
          },
        );
        const { result, cpu, busyBeforePct, load } = kept;
        const clean = result.non2xx === 0 && result.errors === 0 && result.timeouts === 0;
        const row: IngestResult = {
          ...result,
          store,
          cpu,
          loadAverage1m: load,
          busyBeforePct,
          attempts,
          disturbed: cpu.otherPct > QUIET_PCT,
          pass: clean && result.reqPerSec >= TARGETS.ingestPerSec[store],
        };
        report.ingest.push(row);
        log(
          `${store} ingest ${tool} c=${connections}: ${result.reqPerSec.toFixed(0)} annotations/s, p50 ${result.latencyMs.p50.toFixed(1)} ms, p99 ${result.latencyMs.p99.toFixed(1)} ms, errors ${result.non2xx + result.errors + result.timeouts}, server CPU ${cpu.serverPct.toFixed(0)}%, loadgen ${cpu.loadgenPct.toFixed(0)}%, db ${cpu.dbPct.toFixed(0)}%, other ${cpu.otherPct.toFixed(0)}% (load ${load.toFixed(2)})`,
        );
      }
    }
  } finally {
    await server.stop();
  }

  // Every 2xx annotate is one stored annotation; the heads still account for every version.
  const conn = await connect(target);
  try {
    const final = await check(conn, setup.orgId);
    report.finalCheck = final;
    // A load process stopping at its deadline drops up to one request per connection that
    // the server still completes, so those may be stored without being counted.
    const expected = (report.load ? rowCount : 0) + written;
    const inFlight = loadRuns * connections;
    log(
      `${store}: final store ${JSON.stringify(final)}; expected ${expected} (+ up to ${inFlight} in flight) annotations`,
    );
    const stored = Number(final.events);
    assert(stored >= expected && stored <= expected + inFlight, `stored annotations ${stored} vs accepted ${expected}`);
    assert(final.consistent_heads === final.heads, "every head names the newest event of its key");
    assert(BigInt(final.superseded) + BigInt(final.heads) === BigInt(final.events), "superseded counts add up");
  } finally {
    await conn.close();
  }
  if (store === "postgres") stopCluster();
  return report;
}

// ---- output -------------------------------------------------------------------------------
async function main() {
  const tools = pickTools(args.tools, log);
  const started = new Date();
  log(
    `load average before the run: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
  const reports: StoreReport[] = [];
  for (const store of stores) reports.push(await benchStore(store, tools));

  const cpus = os.cpus();
  const output = {
    date: started.toISOString(),
    finished: new Date().toISOString(),
    machine: { nproc: cpus.length, cpuModel: cpus[0]?.model ?? "unknown", node: process.version },
    method: {
      server: SERVER_METHOD,
      rows: rowCount,
      keys: keyCount,
      runs: runCount,
      listRequests: requestCount,
      ingest: { connections, durationSec, warmupSec, tools, ingestKeys: Number(args["ingest-keys"]), retries },
      pgliteAnalyzed: args["pglite-analyze"],
    },
    targets: TARGETS,
    stores: reports,
  };
  mkdirSync(path.dirname(args.output), { recursive: true });
  writeFileSync(args.output, `${JSON.stringify(output, null, 2)}\n`);

  const listRows = reports.flatMap((r) => r.list);
  if (listRows.length > 0) {
    process.stdout.write(
      `\nListAnnotations, page_size=100, ${rowCount} annotations / ${keyCount} keys, ${requestCount} sequential requests\n\n`,
    );
    process.stdout.write(
      `${textTable([
        ["store", "query", "rows", "p50 ms", "p95 ms", "p99 ms", "max ms", "first ms", "load 1m", "target"],
        ...listRows.map((r) => [
          r.store,
          r.query,
          String(r.rowsPerPage),
          r.latencyMs.p50.toFixed(1),
          r.latencyMs.p95.toFixed(1),
          r.latencyMs.p99.toFixed(1),
          r.latencyMs.max.toFixed(1),
          r.firstMs.toFixed(0),
          r.loadAverage1m.toFixed(2),
          `${r.pass ? "PASS" : "MISS"} (p95 < ${TARGETS.listP95Ms[r.store]})`,
        ]),
      ])}\n`,
    );
  }
  const ingestRows = reports.flatMap((r) => r.ingest);
  if (ingestRows.length > 0) {
    process.stdout.write(`\nAnnotate, ${connections} connections, ${durationSec} s after ${warmupSec} s warm-up\n\n`);
    process.stdout.write(
      `${textTable([
        [
          "store",
          "tool",
          "annotations/s",
          "p50 ms",
          "p99 ms",
          "errors",
          "server CPU",
          "loadgen CPU",
          "db CPU",
          "other CPU",
          "load 1m",
          "target",
        ],
        ...ingestRows.map((r) => [
          r.store,
          r.tool,
          r.reqPerSec.toFixed(0),
          r.latencyMs.p50.toFixed(1),
          r.latencyMs.p99.toFixed(1),
          String(r.non2xx + r.errors + r.timeouts),
          `${r.cpu.serverPct.toFixed(0)}%`,
          `${r.cpu.loadgenPct.toFixed(0)}%`,
          `${r.cpu.dbPct.toFixed(0)}%`,
          `${r.cpu.otherPct.toFixed(0)}%${r.disturbed ? " (!)" : ""}`,
          r.loadAverage1m.toFixed(2),
          `${r.pass ? "PASS" : "MISS"} (>= ${TARGETS.ingestPerSec[r.store]}/s)`,
        ]),
      ])}\n`,
    );
  }
  process.stdout.write(`\nresults written to ${path.relative(ROOT, args.output)}\n`);
}

runMain(main, log);
