// What parts of the events table cost each insert, on both stores, side by side in one run
// (bench/README.md, "Run tail" and "Telemetry SQL"): the run tail's trigger (migration 0013:
// one NOTIFY per run written, per statement) and the telemetry index `events_org_ts`
// (migration 0023), each measured against the same inserts with it dropped, and the stored
// generated column `ts` (0023) on twin tables with and without it. Focused on the write
// itself, where Annotate pays it: each statement inserts `batch` rows over 20 runs in its own
// transaction, as the annotate write batcher does (about 10 rows per statement under load, 1
// when idle). Variants rotate round by round, so all see the same machine. On PostgreSQL a
// LISTEN connection is open, as the server keeps one, and the cost is the backend's CPU; on
// PGlite it is the CPU of this process, which runs the store.
//
//   node --import tsx bench/events-write.ts [--stores pglite,postgres] [--rounds 6]
//     [--statements 3000] [--batches 1,10] [--output bench/results/events-write.json]
import { execSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import pg from "pg";
import type { Db } from "../src/store/db.js";
import { migrate } from "../src/store/migrate.js";
import { openPglite } from "../src/store/pglite.js";
import { openPostgres } from "../src/store/postgres.js";
import { installCleanup, prepareStore, runMain, type Store, stopCluster } from "./lib/store.js";
import { textTable } from "./lib/table.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const { values: args } = parseArgs({
  options: {
    stores: { type: "string", default: "pglite,postgres" },
    rounds: { type: "string", default: "6" },
    statements: { type: "string", default: "3000" },
    batches: { type: "string", default: "1,10" },
    output: { type: "string", default: path.join(ROOT, "bench/results/events-write.json") },
  },
});
const log = (line: string) => process.stderr.write(`[bench:events-write] ${line}\n`);
installCleanup(log);

const insertInto = (
  table: string,
) => `INSERT INTO ${table} (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload)
  SELECT 'org_bench', $1 || '-' || i, 'prj_bench', 'run_' || ((i + $2::int) % 20), '', $3::bigint + i, 'bench.quality',
         'bench', '{"item":"x","label":"good"}'::jsonb
    FROM generate_series(1, $4::int) AS i`;
const CREATE_TRIGGER = `CREATE TRIGGER events_notify_tail AFTER INSERT ON events
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION events_notify_tail()`;
const CREATE_INDEX = "CREATE INDEX events_org_ts ON events (org_id, ts) INCLUDE (name)";
const AS_MIGRATED = `DROP TRIGGER IF EXISTS events_notify_tail ON events; ${CREATE_TRIGGER};
  DROP INDEX IF EXISTS events_org_ts; ${CREATE_INDEX}`;

/** Each variant: the table written and the DDL that puts it in place. */
const VARIANTS: { name: string; table: string; ddl: string }[] = [
  { name: "events as migrated", table: "events", ddl: AS_MIGRATED },
  {
    name: "events without the tail trigger",
    table: "events",
    ddl: `${AS_MIGRATED}; DROP TRIGGER events_notify_tail ON events`,
  },
  { name: "events without events_org_ts", table: "events", ddl: `${AS_MIGRATED}; DROP INDEX events_org_ts` },
  { name: "twin with the ts column", table: "bench_twin_ts", ddl: "SELECT 1" },
  { name: "twin without it", table: "bench_twin_plain", ddl: "SELECT 1" },
];
/** Twins of events with no index, trigger or policy: one with the generated column, one without. */
const TWINS = `CREATE TABLE bench_twin_ts (LIKE events INCLUDING DEFAULTS INCLUDING GENERATED);
  CREATE TABLE bench_twin_plain (LIKE events INCLUDING DEFAULTS);
  ALTER TABLE bench_twin_plain DROP COLUMN ts`;

/** CPU seconds of a process: /proc/<pid>/schedstat counts its time on a CPU in ns (stat has 10 ms ticks). */
function procCpuSeconds(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e9;
}

interface Sample {
  store: Store;
  batch: number;
  variant: string;
  round: number;
  rows: number;
  elapsedUsPerRow: number;
  cpuUsPerRow: number;
}

async function measureStore(store: Store, rounds: number, statements: number, batches: number[]): Promise<Sample[]> {
  const setup = await prepareStore(store, "warren-bench-tail-trigger", log);
  let db: Db;
  let cpu: () => number;
  let listener: pg.Client | null = null;
  if (store === "postgres") {
    const url = setup.env.DATABASE_URL as string;
    db = await openPostgres(url, 1);
    listener = new pg.Client({ connectionString: url });
    await listener.connect();
    await listener.query("LISTEN warren_events");
    listener.on("notification", () => {});
    const { rows } = await db.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
    const pid = Number(rows[0]?.pid);
    cpu = () => procCpuSeconds(pid);
  } else {
    mkdirSync(setup.dataDir, { recursive: true });
    db = await openPglite(path.join(setup.dataDir, "pglite"));
    db.listen?.("warren_events", { onPayload: () => {} });
    cpu = () => {
      const usage = process.cpuUsage();
      return (usage.user + usage.system) / 1e6;
    };
  }
  await migrate(db);
  await db.exec(TWINS);
  const samples: Sample[] = [];
  let serial = 0;
  const run = async (table: string, batch: number, count: number) => {
    const sql = insertInto(table);
    for (let i = 0; i < count; i++) {
      serial++;
      await db.query(sql, [`ev${serial}`, serial % 20, String(Date.now() * 1_000_000 + serial * 100), batch]);
    }
  };
  // Warm-up, so the first variant measured does not pay for the JIT and the caches.
  for (const variant of VARIANTS) for (const batch of batches) await run(variant.table, batch, 300);
  for (let round = 1; round <= rounds; round++) {
    // Rotate which variant goes first, so a drift in the machine's load favours none.
    const order = VARIANTS.map((_, i) => VARIANTS[(i + round) % VARIANTS.length] as (typeof VARIANTS)[number]);
    for (const batch of batches) {
      for (const variant of order) {
        await db.exec(variant.ddl);
        await run(variant.table, batch, 100);
        const count = Math.max(100, Math.round(statements / batch ** 0.5));
        const cpuBefore = cpu();
        const started = performance.now();
        await run(variant.table, batch, count);
        const elapsed = performance.now() - started;
        const rows = count * batch;
        samples.push({
          store,
          batch,
          variant: variant.name,
          round,
          rows,
          elapsedUsPerRow: (elapsed * 1000) / rows,
          cpuUsPerRow: ((cpu() - cpuBefore) * 1e6) / rows,
        });
      }
    }
    log(`${store}: round ${round} of ${rounds} (load ${os.loadavg()[0]?.toFixed(1)})`);
  }
  await db.exec(`${AS_MIGRATED}; DROP TABLE bench_twin_ts, bench_twin_plain`);
  await listener?.end();
  await db.close();
  if (store === "postgres") stopCluster();
  return samples;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] ?? 0) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
};

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const loadBefore = os.loadavg();
  const batches = args.batches.split(",").map(Number);
  const samples: Sample[] = [];
  for (const store of args.stores.split(",") as Store[]) {
    samples.push(...(await measureStore(store, Number(args.rounds), Number(args.statements), batches)));
  }
  // Each comparison: a variant against its reference, paired round by round (median of the differences).
  const comparisons = [
    { cost: "tail trigger", with: "events as migrated", without: "events without the tail trigger" },
    { cost: "events_org_ts index", with: "events as migrated", without: "events without events_org_ts" },
    { cost: "ts generated column", with: "twin with the ts column", without: "twin without it" },
  ];
  const summary = [];
  for (const store of args.stores.split(",") as Store[]) {
    for (const batch of batches) {
      const of = (variant: string) =>
        samples
          .filter((s) => s.store === store && s.batch === batch && s.variant === variant)
          .sort((a, b) => a.round - b.round);
      for (const c of comparisons) {
        const withIt = of(c.with);
        const without = of(c.without);
        const paired = withIt.map((s, i) => s.cpuUsPerRow - (without[i]?.cpuUsPerRow ?? 0));
        const base = median(without.map((s) => s.cpuUsPerRow));
        summary.push({
          store,
          batch,
          cost: c.cost,
          cpuUsPerRowWith: median(withIt.map((s) => s.cpuUsPerRow)),
          cpuUsPerRowWithout: base,
          cpuUsPerRowPaired: median(paired),
          pairedPct: (100 * median(paired)) / base,
          elapsedUsPerRowWith: median(withIt.map((s) => s.elapsedUsPerRow)),
          elapsedUsPerRowWithout: median(without.map((s) => s.elapsedUsPerRow)),
        });
      }
    }
  }
  const f = (v: number) => v.toFixed(1);
  process.stdout.write(
    `${textTable([
      [
        "store",
        "rows/stmt",
        "cost of",
        "CPU µs/row with",
        "without",
        "difference (paired median)",
        "%",
        "elapsed µs/row with",
        "without",
      ],
      ...summary.map((s) => [
        s.store,
        String(s.batch),
        s.cost,
        f(s.cpuUsPerRowWith),
        f(s.cpuUsPerRowWithout),
        f(s.cpuUsPerRowPaired),
        f(s.pairedPct),
        f(s.elapsedUsPerRowWith),
        f(s.elapsedUsPerRowWithout),
      ]),
    ])}\n`,
  );
  mkdirSync(path.dirname(args.output), { recursive: true });
  writeFileSync(
    args.output,
    `${JSON.stringify(
      {
        startedAt,
        finishedAt: new Date().toISOString(),
        loadBefore,
        loadAfter: os.loadavg(),
        machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version },
        git: {
          commit: execSync("git rev-parse HEAD", { cwd: ROOT, encoding: "utf8" }).trim(),
          dirty: execSync("git status --porcelain", { cwd: ROOT, encoding: "utf8" }).split("\n").filter(Boolean),
        },
        method: {
          insert: insertInto("<table>"),
          variants: VARIANTS,
          rounds: Number(args.rounds),
          statements: Number(args.statements),
          batches,
        },
        summary,
        samples,
      },
      null,
      2,
    )}\n`,
  );
  log(`wrote ${args.output}`);
}

runMain(main, log);
