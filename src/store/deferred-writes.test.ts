// DeferringDb on both stores: a write deferred past an answer is seen by every store call
// made after defer() (queries, scripts, transactions), a failed one does not block them,
// and close() writes what is pending before the store closes.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { openTestStore, STORE_KINDS, type TestStore } from "../../test/harness.js";
import { eventually } from "../../test/support/eventually.js";
import type { Db } from "./db.js";
import { DeferringDb } from "./deferred-writes.js";

for (const kind of STORE_KINDS) {
  describe(`DeferringDb [${kind}]`, () => {
    let store: TestStore;
    let db: DeferringDb;
    before(async () => {
      store = await openTestStore(kind);
      db = new DeferringDb(store.db);
      await db.exec("CREATE TABLE deferred_t (id int PRIMARY KEY)");
    });
    after(() => store?.close());

    const ids = async () =>
      (await db.query<{ id: number }>("SELECT id FROM deferred_t ORDER BY id")).rows.map((r) => r.id);

    it("runs a deferred write after the current turn, before any later store call", async () => {
      let ran = false;
      const written = db.defer(async (q) => {
        ran = true;
        await q.query("INSERT INTO deferred_t (id) VALUES (1)");
      });
      assert.equal(ran, false, "not in the caller's turn");
      // Made at once, before the write has even started: each still sees it.
      const [read, inTx] = await Promise.all([
        ids(),
        db.tx(async (q) => (await q.query<{ n: string }>("SELECT count(*)::text AS n FROM deferred_t")).rows[0]?.n),
      ]);
      assert.deepEqual(read, [1]);
      assert.equal(inTx, "1");
      await written;
    });

    it("does not hold a call behind writes deferred after it", async () => {
      // A steady stream of deferred writes must not starve a read made in the middle of it.
      // The stream goes on until the read is answered (or a bound far past any machine's speed),
      // so the assertion does not depend on how fast either runs.
      let readAnswered = false;
      let deferred = 0;
      const stream = (async () => {
        // Deferred faster than they are written, so some are always pending.
        for (; !readAnswered && deferred < 20_000; deferred++) {
          void db.defer(async (q) => {
            await new Promise((resolve) => setTimeout(resolve, 5));
            await q.query("SELECT 1");
          });
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
        return readAnswered;
      })();
      await eventually("the stream's first deferred writes", async () => deferred > 10);
      await ids();
      readAnswered = true;
      assert.equal(await stream, true, `the read was answered while writes were still being deferred (${deferred})`);
      await db.settled();
    });

    it("lets later calls run after a deferred write that failed, and reports the failure to its caller", async () => {
      const failed = db.defer((q) => q.query("INSERT INTO deferred_t (id) VALUES (1)").then(() => undefined));
      assert.deepEqual(await ids(), [1]);
      await assert.rejects(failed);
    });

    it("writes what is pending before it closes", async () => {
      const inner = store.db;
      await inner.exec("CREATE TABLE deferred_close (id int)");
      let seenAtClose: number[] | null = null;
      // The inner store as it is when DeferringDb closes it (and not closed: the suite's store).
      const probe: Db = {
        kind: inner.kind,
        query: (sql, params) => inner.query(sql, params),
        queryRaw: (sql, params) => inner.queryRaw(sql, params),
        exec: (sql) => inner.exec(sql),
        tx: (fn) => inner.tx(fn),
        close: async () => {
          seenAtClose = (await inner.query<{ id: number }>("SELECT id FROM deferred_close")).rows.map((r) => r.id);
        },
      };
      const closing = new DeferringDb(probe);
      void closing.defer((q) => q.query("INSERT INTO deferred_close (id) VALUES (8)").then(() => undefined));
      await closing.close();
      assert.deepEqual(seenAtClose, [8], "the pending write landed before the store closed");
    });
  });
}
