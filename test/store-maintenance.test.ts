// The embedded store's VACUUM (ANALYZE) controller: it vacuums what churned, and stops
// cleanly. On PostgreSQL it never runs (autovacuum does the work).
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import { StoreMaintenance } from "../src/controllers/store-maintenance.js";
import { createLogger } from "../src/lib/logger.js";
import { openTestStore, STORE_KINDS } from "./harness.js";

const silent = createLogger("error", new Writable({ write: (_chunk, _encoding, callback) => callback() }));

interface TableStats {
  n_dead_tup: number;
  vacuum_count: number;
}

for (const kind of STORE_KINDS) {
  describe(`store maintenance [${kind}]`, () => {
    it(
      kind === "pglite"
        ? "vacuums and analyzes a churned table on its interval, and stops cleanly"
        : "never runs on PostgreSQL",
      async () => {
        const store = await openTestStore(kind);
        const maintenance = new StoreMaintenance(store.db, silent, { intervalMs: 50, busyBackoffMs: 10 });
        try {
          await store.db.exec(
            "CREATE TABLE churn (id int PRIMARY KEY, n int); INSERT INTO churn SELECT g, 0 FROM generate_series(1, 2000) g",
          );
          for (let i = 0; i < 3; i++) await store.db.exec("UPDATE churn SET n = n + 1");
          const stats = async () =>
            (
              await store.db.query<TableStats>(
                "SELECT n_dead_tup::int AS n_dead_tup, vacuum_count::int AS vacuum_count FROM pg_stat_user_tables WHERE relname = 'churn'",
              )
            ).rows[0] as TableStats;
          const before = await stats();
          assert.equal(before.vacuum_count, 0);
          maintenance.start();
          // PGlite: until the pass has run. PostgreSQL: a window of absence (its autovacuum is its own).
          const deadline = Date.now() + (kind === "pglite" ? 60_000 : 500);
          let now = before;
          while (Date.now() < deadline && now.vacuum_count === 0) {
            await new Promise((resolve) => setTimeout(resolve, 25));
            now = await stats();
          }
          await maintenance.stop();
          if (kind === "postgres") {
            assert.equal(now.vacuum_count, 0);
            return;
          }
          assert.ok(now.vacuum_count >= 1, "the churned table was vacuumed");
          const { rows } = await store.db.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_stat_user_tables WHERE relname = 'churn' AND last_analyze IS NOT NULL",
          );
          assert.equal(rows[0]?.n, 1, "and analyzed");
          // And checkpointed: a reopen of the data directory replays no WAL written before the pass.
          const redo = async () =>
            (await store.db.query<{ lsn: string }>("SELECT redo_lsn::text AS lsn FROM pg_control_checkpoint()")).rows[0]
              ?.lsn;
          await store.db.exec("CREATE TABLE fresh (id int); INSERT INTO fresh VALUES (1)");
          const redoBefore = await redo();
          const vacuumed = await new StoreMaintenance(store.db, silent, { intervalMs: 0, busyBackoffMs: 10 }).pass();
          assert.ok(vacuumed.includes("public.fresh"), `vacuumed ${vacuumed}`);
          assert.notEqual(await redo(), redoBefore, "the pass ended with a checkpoint");
          // Stopped: no pass runs any more.
          const afterStop = (await stats()).vacuum_count;
          await store.db.exec("UPDATE churn SET n = n + 1");
          // A window of absence six intervals long: a timer left running would pass in it.
          await new Promise((resolve) => setTimeout(resolve, 300));
          assert.equal((await stats()).vacuum_count, afterStop);
        } finally {
          await maintenance.stop();
          await store.close();
        }
      },
    );
  });
}
