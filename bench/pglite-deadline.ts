// The embedded store's statement deadline (bench/README.md, "PGlite statement deadline"):
//
//   timeout: a recursive CTE stopped at its deadline: when the 57014 comes back, how long
//            the next statement (SELECT 1) waits for the reopen of the data directory, and
//            then a count of the events on the new, cold instance beside the same count on
//            a warm one, over a data dir holding --events events.
//   statement cost: primary-key lookups with no deadline (the path every other statement
//            takes) and with one (the vm round trip), alternated.
//
//   node --import tsx bench/pglite-deadline.ts [--events 100000] [--rounds 5] [--lookups 10000]
//     [--timeout-ms 1000] [--checkpoint] [--output bench/results/pglite-deadline.json]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { migrate } from "../src/store/migrate.js";
import { openPglite } from "../src/store/pglite.js";
import { machineLoad } from "./lib/cpu.js";
import { percentile } from "./lib/stats.js";

const { values: args } = parseArgs({
  options: {
    events: { type: "string", default: "100000" },
    rounds: { type: "string", default: "5" },
    lookups: { type: "string", default: "10000" },
    "timeout-ms": { type: "string", default: "1000" },
    /** CHECKPOINT after seeding: the reopen's recovery then replays no WAL of the seed. */
    checkpoint: { type: "boolean", default: false },
    output: { type: "string", default: "bench/results/pglite-deadline.json" },
  },
});
const eventCount = Number(args.events);
const rounds = Number(args.rounds);
const lookups = Number(args.lookups);
const timeoutMs = Number(args["timeout-ms"]);

const HOSTILE =
  "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 100000000) SELECT count(*) FROM r";
const PROBE = "SELECT count(*) AS n FROM events WHERE org_id = $1";
const LOOKUP = "SELECT id, slug FROM organizations WHERE id = $1";

const log = (line: string) => process.stderr.write(`${line}\n`);
const dir = mkdtempSync(path.join(os.tmpdir(), "warren-bench-deadline-"));
try {
  const db = await openPglite(path.join(dir, "pglite"));
  await migrate(db);
  await db.query("INSERT INTO organizations (id, slug, created_at) VALUES ('org_bench', 'bench', now())");
  await db.query(
    `INSERT INTO events (org_id, event_id, project_id, ts_wall_ns, name, principal, payload)
     SELECT 'org_bench', 'ev-' || i, 'prj_bench', i, 'event-' || (i % 25), 'bench', jsonb_build_object('i', i)
       FROM generate_series(1, $1::int) AS i`,
    [eventCount],
  );
  if (args.checkpoint) await db.exec("CHECKPOINT");
  log(`seeded ${eventCount} events${args.checkpoint ? ", checkpointed" : ""}`);

  const stopMs: number[] = [];
  const reopenMs: number[] = [];
  const coldMs: number[] = [];
  const warmMs: number[] = [];
  for (let round = 0; round < rounds; round++) {
    let started = performance.now();
    await db.query(PROBE, ["org_bench"]);
    warmMs.push(performance.now() - started);
    started = performance.now();
    const code = await db
      .tx((q) => q.queryRaw(HOSTILE, [], { timeoutMs }))
      .then(
        () => "finished",
        (error: { code?: string }) => error.code,
      );
    if (code !== "57014") throw new Error(`the hostile statement ended with ${code}`);
    stopMs.push(performance.now() - started);
    started = performance.now();
    await db.query("SELECT 1");
    reopenMs.push(performance.now() - started);
    started = performance.now();
    const { rows } = await db.query<{ n: string }>(PROBE, ["org_bench"]);
    coldMs.push(performance.now() - started);
    if (Number(rows[0]?.n) !== eventCount) throw new Error(`after the reopen: ${rows[0]?.n} events`);
  }

  const plainUs: number[] = [];
  const deadlineUs: number[] = [];
  for (let round = 0; round < 6; round++) {
    const withDeadline = round % 2 === 1;
    const started = performance.now();
    for (let i = 0; i < lookups; i++) {
      await db.query(LOOKUP, ["org_bench"], withDeadline ? { timeoutMs: 5000 } : undefined);
    }
    (withDeadline ? deadlineUs : plainUs).push(((performance.now() - started) * 1000) / lookups);
  }
  await db.close();

  const loadPct = await machineLoad(1000);
  const result = {
    at: new Date().toISOString(),
    events: eventCount,
    timeoutMs,
    rounds,
    stopMs: { p50: percentile(stopMs, 50), max: Math.max(...stopMs) },
    checkpointAfterSeed: args.checkpoint,
    reopenMs: { p50: percentile(reopenMs, 50), max: Math.max(...reopenMs), rounds: reopenMs.map(Math.round) },
    coldCountMs: { p50: percentile(coldMs, 50), max: Math.max(...coldMs) },
    warmCountMs: { p50: percentile(warmMs, 50) },
    lookupUs: { plain: percentile(plainUs, 50), deadline: percentile(deadlineUs, 50) },
    machineLoadPct: Math.round(loadPct),
    loadavg: os.loadavg().map((v) => Number(v.toFixed(2))),
  };
  log(
    `stopped at ${result.stopMs.p50.toFixed(0)} ms (timeout ${timeoutMs}); reopen ${result.reopenMs.p50.toFixed(0)} ms ` +
      `(rounds ${result.reopenMs.rounds.join(", ")}); count ${result.coldCountMs.p50.toFixed(0)} ms cold vs ` +
      `${result.warmCountMs.p50.toFixed(1)} ms warm; lookups ` +
      `${result.lookupUs.plain.toFixed(1)} us plain, ${result.lookupUs.deadline.toFixed(1)} us with a deadline; ` +
      `load ${result.loadavg.join(" ")} (others ${result.machineLoadPct}% of a core)`,
  );
  mkdirSync(path.dirname(args.output), { recursive: true });
  writeFileSync(args.output, `${JSON.stringify(result, null, 2)}\n`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
