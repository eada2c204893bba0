// Telemetry SQL on the embedded store runs on a replica in a worker thread (src/modules/
// telemetry/replica.ts): one organization's slow queries, their deadlines and the reopen after
// each hold that thread, not the server's, and a query sees every write committed before it.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { startTestApp, type TestApp } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";

/** Layer 1 allows it; the planner guesses it cheap; it runs to its statement timeout. */
const SLOW =
  "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 100000000) SELECT count(*) FROM r";

describe("telemetry SQL on PGlite (data directory): queries run off the server's thread", () => {
  let dir: string;
  let t: TestApp;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-telemetry-replica-"));
    t = await startTestApp("pglite", {
      pgliteDataDir: path.join(dir, "pglite"),
      overrides: { runtime: API_ONLY_RUNTIME },
    });
  });
  after(async () => {
    await t?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const sql = (query: string, key = t.orgA.keys.owner) =>
    t.request("POST", "/v1/telemetry/sql", { key, body: { sql: query } });

  it("another organization's calls keep answering while one organization's slow queries run back to back", async () => {
    // A data view: its 5 s statement timeout, which held every request of the server for
    // 5 s and then the reopen when the query ran in the server's own PGlite.
    // Stored quickly (its param is null while it is checked), slow when run with n.
    const view = await t.request("PUT", "/v1/data-views/slow", {
      key: t.orgA.keys.owner,
      body: {
        spec: {
          type: "sql.v1",
          sql: "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < $1) SELECT count(*) FROM r",
          params: [{ name: "n", type: "bigint" }],
        },
      },
    });
    assert.equal(view.status, 200, view.raw);
    // The replica made (a copy of the store) before the clock starts.
    assert.equal((await sql("SELECT 1 AS one")).status, 200);

    let slowRunning = true;
    const outcomes: number[] = [];
    // Two clients of org A, each sending its next slow query as soon as the last one ends.
    const client = async () => {
      for (let i = 0; i < 2; i++) {
        const res = await t.request("POST", "/v1/data-views/slow:run", {
          key: t.orgA.keys.owner,
          body: { params: { n: 100_000_000 } },
        });
        outcomes.push(res.status);
      }
    };
    const slow = Promise.all([client(), client()]).finally(() => {
      slowRunning = false;
    });
    // Org B meanwhile: WhoAmI and a store read, each timed, for as long as org A's queries run.
    const latenciesMs: number[] = [];
    while (slowRunning) {
      const started = performance.now();
      const whoami = await t.request("GET", "/v1/whoami", { key: t.orgB.keys.owner });
      assert.equal(whoami.status, 200, whoami.raw);
      const runs = await t.request("GET", "/v1/runs", { key: t.orgB.keys.owner });
      assert.equal(runs.status, 200, runs.raw);
      latenciesMs.push(performance.now() - started);
      // inject() answers without I/O on PGlite: yield, or the worker's replies (macrotasks)
      // would never be read and the loop would spin forever.
      await new Promise((resolve) => setImmediate(resolve));
    }
    await slow;
    assert.deepEqual(outcomes, [504, 504, 504, 504], "each slow query ran to its 5 s timeout");
    const worst = Math.max(...latenciesMs);
    // On the server's thread each slow query held every request for its full 5 s (then the
    // reopen). Off it, a call waits for nothing of org A's: the bound is far above what a
    // loaded machine adds to two small requests, and well under the 5 s a stall costs.
    assert.ok(
      worst < 2500,
      `org B's slowest pair of calls took ${Math.round(worst)} ms (${latenciesMs.length} pairs answered)`,
    );
    // The replica reopened after each deadline and still answers.
    const after = await sql("SELECT count(*) AS n FROM runs");
    assert.equal(after.status, 200, after.raw);
  });

  it("a query sees every write committed before it: inserts, updates and deletes, after a deadline too", async () => {
    const key = t.orgA.keys.owner;
    const created = await t.request("POST", "/v1/runs", { key, body: { label: "replica-seen" } });
    assert.equal(created.status, 200, created.raw);
    const runId = (created.body.run as { id: string }).id;
    const labelled = await sql("SELECT label, status FROM runs WHERE label = 'replica-seen'");
    assert.equal(labelled.status, 200, labelled.raw);
    assert.deepEqual(labelled.body.rows, [["replica-seen", "running"]]);

    // Writes of the store's own (a transaction of several rows, an update, a delete).
    await t.c.db.tx(async (q) => {
      for (let i = 0; i < 3; i++) {
        await q.query(
          `INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload)
           VALUES ($1, $2, $3, $4, '', $5, 'replica-event', 'test', $6::jsonb)`,
          [t.orgA.id, `ev-replica-${i}`, t.orgA.defaultProjectId, runId, String(Date.now() * 1e6 + i), `{"i":${i}}`],
        );
      }
    });
    const events = () =>
      sql("SELECT event_id, payload->>'i' AS i FROM events WHERE name = 'replica-event' ORDER BY event_id");
    assert.deepEqual((await events()).body.rows, [
      ["ev-replica-0", "0"],
      ["ev-replica-1", "1"],
      ["ev-replica-2", "2"],
    ]);
    await t.c.db.query(`UPDATE events SET payload = '{"i":7}'::jsonb WHERE org_id = $1 AND event_id = 'ev-replica-1'`, [
      t.orgA.id,
    ]);
    await t.c.db.query("DELETE FROM events WHERE org_id = $1 AND event_id = 'ev-replica-2'", [t.orgA.id]);
    assert.deepEqual((await events()).body.rows, [
      ["ev-replica-0", "0"],
      ["ev-replica-1", "7"],
    ]);

    // A deadline in the replica, then writes: the reopened replica has them.
    assertError(await sql(SLOW), 504, "deadline_exceeded");
    await t.c.db.query("UPDATE runs SET label = 'replica-relabelled' WHERE id = $1", [runId]);
    const relabelled = await sql(`SELECT label FROM runs WHERE id = '${runId}'`);
    assert.deepEqual(relabelled.body.rows, [["replica-relabelled"]]);
    // Org B sees none of it, on the replica as on the store.
    const other = await sql("SELECT count(*) AS n FROM events WHERE name = 'replica-event'", t.orgB.keys.owner);
    assert.deepEqual(other.body.rows, [["0"]]);
  });
});
