// Statement deadlines on the embedded store: a statement past its deadline fails with
// 57014 and the store reopens its data directory, losing nothing committed, serving what
// queued meanwhile, keeping its LISTEN subscribers and leaking no descriptor, timer or heap.
import assert from "node:assert/strict";
import { readdirSync, readlinkSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import v8 from "node:v8";
import vm from "node:vm";
import { pgliteTemplate } from "../../test/harness.js";
import { eventually } from "../../test/support/eventually.js";
import { openPglite, type PgliteDb } from "./pglite.js";

/** The planner thinks little of it; it would run for minutes. */
const HOSTILE =
  "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 100000000) SELECT count(*) FROM r";
const TIMEOUT_MS = 300;

v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;

/** Host descriptors open on files under `dir` (the process's others come and go: the runner's, libuv's). */
function openDescriptors(dir: string): number {
  let n = 0;
  for (const fd of readdirSync("/proc/self/fd")) {
    const target = (() => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`);
      } catch {
        return "";
      }
    })();
    if (target.startsWith(`${dir}/`)) n++;
  }
  return n;
}
const pendingTimers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;

async function failure(promise: Promise<unknown>): Promise<{ code?: string; message: string }> {
  return promise.then(
    () => assert.fail("expected a failure"),
    (error: { code?: string; message: string }) => error,
  );
}

/** A session setting: it survives on one instance and is back to its default on a new one. */
async function sessionMark(db: PgliteDb): Promise<string> {
  const { rows } = await db.query<{ name: string }>("SELECT current_setting('application_name') AS name");
  return rows[0]?.name ?? "";
}

describe("statement deadlines on the embedded store (data directory)", () => {
  let dir: string;
  let db: PgliteDb;
  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), "warren-deadline-"));
    db = await openPglite(path.join(dir, "pglite"), await pgliteTemplate());
    await db.exec("CREATE TABLE deadline_t (id int PRIMARY KEY, note text)");
  });
  after(async () => {
    await db?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("runs a statement within its deadline on the same instance", async () => {
    await db.exec("SET application_name = 'same-instance'");
    const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM generate_series(1, 1000)", [], {
      timeoutMs: 5000,
    });
    assert.deepEqual(rows, [{ n: 1000 }]);
    const raw = await db.queryRaw("SELECT $1::int + 1 AS x", [41], { timeoutMs: 5000 });
    assert.deepEqual(raw.rows, [["42"]]);
    assert.equal(await sessionMark(db), "same-instance");
  });

  it("stops a statement at its deadline with 57014, and keeps everything committed before", async () => {
    for (let i = 1; i <= 3; i++) {
      await db.tx(async (q) => {
        await q.query("INSERT INTO deadline_t (id, note) VALUES ($1, $2)", [i, `tx-${i}`]);
      });
    }
    await db.query("INSERT INTO deadline_t (id, note) VALUES (4, 'root')");
    await db.exec("SET application_name = 'before-timeout'");
    const started = performance.now();
    const error = await failure(db.queryRaw(HOSTILE, [], { timeoutMs: TIMEOUT_MS }));
    const ms = performance.now() - started;
    assert.equal(error.code, "57014");
    assert.match(error.message, /statement timeout/);
    // Stopped, not run to its end (minutes); the upper bound leaves room for a loaded machine.
    assert.ok(ms >= TIMEOUT_MS - 5 && ms < TIMEOUT_MS + 20_000, `stopped after ${ms.toFixed(0)} ms`);

    const { rows } = await db.query<{ id: number; note: string }>("SELECT id, note FROM deadline_t ORDER BY id");
    assert.deepEqual(
      rows.map((r) => r.note),
      ["tx-1", "tx-2", "tx-3", "root"],
    );
    // A new instance: the session setting is gone.
    assert.equal(await sessionMark(db), "");
    await db.query("INSERT INTO deadline_t (id, note) VALUES (5, 'after')");
    assert.equal((await db.query("SELECT note FROM deadline_t WHERE id = 5")).rows[0]?.note, "after");
  });

  it("fails the rest of a transaction whose statement was stopped, and runs nothing on that instance", async () => {
    const after: { code?: string }[] = [];
    const error = await failure(
      db.tx(async (q) => {
        await q.query("INSERT INTO deadline_t (id, note) VALUES (6, 'uncommitted')");
        await q.queryRaw(HOSTILE, [], { timeoutMs: TIMEOUT_MS }).catch(async (stopped: Error) => {
          after.push(await failure(q.query("SELECT 1")));
          throw stopped;
        });
      }),
    );
    assert.equal(error.code, "57014");
    assert.equal(after[0]?.code, "25P02");
    // The transaction never committed; the store serves again.
    assert.deepEqual((await db.query("SELECT id FROM deadline_t WHERE id = 6")).rows, []);
  });

  it("runs the operations queued behind the stopped statement after the reopen", async () => {
    const hostile = db.tx((q) => q.queryRaw(HOSTILE, [], { timeoutMs: TIMEOUT_MS }));
    const queued = [
      db.query<{ n: number }>("SELECT count(*)::int AS n FROM deadline_t"),
      db.tx(async (q) => {
        await q.query("INSERT INTO deadline_t (id, note) VALUES (7, 'queued-tx')");
        return (await q.query<{ note: string }>("SELECT note FROM deadline_t WHERE id = 7")).rows[0]?.note;
      }),
      db.exec("INSERT INTO deadline_t (id, note) VALUES (8, 'queued-exec')"),
      db.queryRaw("SELECT note FROM deadline_t WHERE id = $1", [1]),
    ] as const;
    assert.equal((await failure(hostile)).code, "57014");
    const [count, txNote, , raw] = await Promise.all(queued);
    assert.equal(count.rows[0]?.n, 5);
    assert.equal(txNote, "queued-tx");
    assert.deepEqual(raw.rows, [["tx-1"]]);
    const { rows } = await db.query<{ id: number }>("SELECT id FROM deadline_t WHERE id IN (7, 8) ORDER BY id");
    assert.deepEqual(
      rows.map((r) => r.id),
      [7, 8],
    );
  });

  it("keeps LISTEN subscribers: they hear of the gap, then get NOTIFY from the new instance", async () => {
    const payloads: string[] = [];
    const gaps: boolean[] = [];
    const unlisten = await db.listen?.("deadline_channel", {
      onPayload: (payload) => payloads.push(payload),
      onGap: (down) => gaps.push(down),
    });
    try {
      await db.query("SELECT pg_notify('deadline_channel', 'before')");
      assert.equal((await failure(db.queryRaw(HOSTILE, [], { timeoutMs: TIMEOUT_MS }))).code, "57014");
      // Both the statement path and PGlite's own exec deliver to subscribers on the new instance.
      await db.query("SELECT pg_notify('deadline_channel', 'after')");
      await db.tx(async (q) => {
        await q.query("SELECT pg_notify('deadline_channel', 'after-commit')");
      });
      await db.exec("NOTIFY deadline_channel, 'after-exec'");
      assert.deepEqual(payloads, ["before", "after", "after-commit", "after-exec"]);
      assert.deepEqual(gaps, [true, false]);
    } finally {
      await unlisten?.();
    }
  });

  it("removes the stopped statement's spill files before the reopen", async () => {
    const spill = path.join(dir, "pglite", "base", "pgsql_tmp");
    const error = await failure(
      db.tx(async (q) => {
        await q.query("SET LOCAL work_mem = '64kB'");
        await q.queryRaw("SELECT count(*) FROM (SELECT i FROM generate_series(1, 100000000) i ORDER BY i DESC) s", [], {
          timeoutMs: 1000,
        });
      }),
    );
    assert.equal(error.code, "57014");
    assert.ok(readdirSync(spill).length > 0, "the sort spilled before it was stopped");
    await db.query("SELECT 1");
    assert.deepEqual(readdirSync(spill), []);
  });

  it("leaks no descriptor, timer or heap over repeated timeouts, and still works", async () => {
    // statement_timeout arms a timer in the instance (Emscripten's setitimer); a dropped
    // instance's timer must not survive it.
    const stop = () =>
      failure(
        db.tx(async (q) => {
          await q.query("SET LOCAL statement_timeout = 250");
          await q.queryRaw(HOSTILE, [], { timeoutMs: TIMEOUT_MS });
        }),
      );
    // Each round does the same on a fresh instance, so opens the same files: a leak adds up.
    const descriptors: number[] = [];
    const timers: number[] = [];
    const rssMiB: number[] = [];
    const counts = () => {
      gc();
      return { fds: openDescriptors(dir), timers: pendingTimers() };
    };
    const same = (a: { fds: number; timers: number }, b: { fds: number; timers: number }) =>
      a.fds === b.fds && a.timers === b.timers;
    let first: { fds: number; timers: number } | undefined;
    for (let i = 0; i < 6; i++) {
      assert.equal((await stop()).code, "57014");
      await db.query("INSERT INTO deadline_t (id, note) VALUES ($1, 'repeat')", [100 + i]);
      // A stopped instance lets go of its files and timers when the loop gets to it: the first
      // round's counts are taken once steady, each later round's once back there (a leak never
      // is), not after a fixed time.
      let now = counts();
      if (!first) {
        for (let steady = 0, deadline = Date.now() + 30_000; steady < 3 && Date.now() < deadline; ) {
          await new Promise((resolve) => setTimeout(resolve, 200));
          const next = counts();
          steady = same(next, now) ? steady + 1 : 0;
          now = next;
        }
        first = now;
      } else {
        const target = first;
        now = await eventually("the stopped instance's files and timers let go", async () => {
          const next = counts();
          return same(next, target) && next;
        }).catch(() => counts());
      }
      descriptors.push(now.fds);
      timers.push(now.timers);
      rssMiB.push(process.memoryUsage().rss / 2 ** 20);
    }
    assert.deepEqual(descriptors.slice(1), Array(5).fill(descriptors[0]), `host descriptors: ${descriptors}`);
    assert.deepEqual(timers.slice(1), Array(5).fill(timers[0]), `pending timers: ${timers}`);
    const grownMiB = (rssMiB.at(-1) as number) - (rssMiB[0] as number);
    // An instance kept alive holds its WASM heap (well over 100 MiB): five would show.
    assert.ok(grownMiB < 250, `RSS grew by ${grownMiB.toFixed(0)} MiB over five timeouts (${rssMiB.map(Math.round)})`);
    const { rows } = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM deadline_t WHERE note = 'repeat'");
    assert.equal(rows[0]?.n, 6);
  });
});

describe("statement deadlines on the embedded store (in memory)", () => {
  it("stops the statement, then reopens from the stopped instance's files: everything committed before is there", async () => {
    const db = await openPglite(undefined, await pgliteTemplate());
    try {
      await db.exec("CREATE TABLE memory_t (id int PRIMARY KEY, note text)");
      await db.tx(async (q) => {
        await q.query("INSERT INTO memory_t (id, note) VALUES (1, 'committed')");
      });
      await db.query("INSERT INTO memory_t (id, note) VALUES (2, 'root')");
      await db.exec("SET application_name = 'before-timeout'");
      const error = await failure(
        db.tx(async (q) => {
          await q.query("INSERT INTO memory_t (id, note) VALUES (3, 'rolled back')");
          await q.query("SET LOCAL statement_timeout = 250");
          await q.queryRaw(HOSTILE, [], { timeoutMs: TIMEOUT_MS });
        }),
      );
      assert.equal(error.code, "57014");
      const { rows } = await db.query<{ note: string }>("SELECT note FROM memory_t ORDER BY id");
      assert.deepEqual(
        rows.map((r) => r.note),
        ["committed", "root"],
      );
      assert.equal(await sessionMark(db), "", "a new instance");
      await db.query("INSERT INTO memory_t (id, note) VALUES (4, 'after')");
      // Twice: the reopened store can be stopped and reopened again.
      assert.equal((await failure(db.queryRaw(HOSTILE, [], { timeoutMs: TIMEOUT_MS }))).code, "57014");
      const again = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM memory_t");
      assert.equal(again.rows[0]?.n, 3);
    } finally {
      await db.close();
    }
  });
});
