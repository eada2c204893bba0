// The Db contract, run against both stores: what repos and services may rely on whichever
// store is configured. Also guards the PGlite internals pglite-wire.ts, pglite.ts and
// pglite-private-fs.ts use, so an upgrade that changes them fails a named test here.
import assert from "node:assert/strict";
import { readlinkSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import vm from "node:vm";
import { MemoryFS, messages, PGlite, protocol, TransactionAbortedError } from "@electric-sql/pglite";
import { openTestStore, pgliteTemplate, STORE_KINDS, type TestStore } from "../../test/harness.js";
import type { Db } from "./db.js";
import { PrivateNodeFS, TrackedMemoryFS } from "./pglite-private-fs.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

for (const kind of STORE_KINDS) {
  describe(`Db contract [${kind}]`, () => {
    let store: TestStore;
    let db: Db;
    before(async () => {
      store = await openTestStore(kind);
      db = store.db;
      await db.exec(
        "CREATE TABLE contract_t (id int PRIMARY KEY, note text, at timestamptz, big bigint, doc jsonb); CREATE TABLE contract_counter (n int NOT NULL); INSERT INTO contract_counter VALUES (0)",
      );
    });
    after(() => store?.close());

    it("reports its kind", () => assert.equal(db.kind, kind));

    it("runs parameterised queries and returns rows as objects", async () => {
      await db.query("INSERT INTO contract_t (id, note) VALUES ($1, $2)", [1, "one"]);
      const { rows } = await db.query<{ id: number; note: string }>(
        "SELECT id, note FROM contract_t WHERE id = $1",
        [1],
      );
      assert.deepEqual(rows, [{ id: 1, note: "one" }]);
      assert.deepEqual((await db.query("SELECT 1 AS x WHERE false")).rows, []);
    });

    it("returns 64-bit integers as decimal strings, 32-bit ones as numbers", async () => {
      const { rows } = await db.query<{ big: string; n: string; small: number }>(
        "SELECT $1::bigint AS big, count(*) AS n, 7::int AS small FROM contract_t",
        ["9007199254740993"],
      );
      assert.deepEqual(rows[0], { big: "9007199254740993", n: "1", small: 7 });
    });

    it("round-trips millisecond timestamps as Dates, jsonb as objects and nulls", async () => {
      const at = new Date("2026-11-23T10:11:12.345Z");
      await db.query("INSERT INTO contract_t (id, at, doc) VALUES ($1, $2, $3::jsonb)", [
        2,
        at,
        JSON.stringify({ a: [1] }),
      ]);
      const { rows } = await db.query<{ at: Date; doc: unknown; note: null }>(
        "SELECT at, doc, note FROM contract_t WHERE id = 2",
      );
      assert.ok(rows[0]?.at instanceof Date);
      assert.equal(rows[0]?.at.getTime(), at.getTime());
      assert.deepEqual(rows[0]?.doc, { a: [1] });
      assert.equal(rows[0]?.note, null);
    });

    it("commits a transaction whose function resolves, returning its value", async () => {
      const value = await db.tx(async (q) => {
        await q.query("INSERT INTO contract_t (id, note) VALUES ($1, 'tx')", [3]);
        return (await q.query<{ n: string }>("SELECT count(*) AS n FROM contract_t WHERE id = 3")).rows[0]?.n;
      });
      assert.equal(value, "1");
      assert.equal((await db.query("SELECT 1 FROM contract_t WHERE id = 3")).rows.length, 1);
    });

    it("rolls back a transaction whose function throws, and rethrows that error", async () => {
      const failure = new Error("abandon");
      await assert.rejects(
        db.tx(async (q) => {
          await q.query("INSERT INTO contract_t (id, note) VALUES ($1, 'gone')", [4]);
          await q.exec("UPDATE contract_counter SET n = 100");
          throw failure;
        }),
        (error) => error === failure,
      );
      assert.equal((await db.query("SELECT 1 FROM contract_t WHERE id = 4")).rows.length, 0);
      assert.equal((await db.query<{ n: number }>("SELECT n FROM contract_counter")).rows[0]?.n, 0);
    });

    it("rolls back when a statement fails inside the transaction, and the store stays usable", async () => {
      await assert.rejects(
        db.tx(async (q) => {
          await q.query("INSERT INTO contract_t (id, note) VALUES ($1, 'dup')", [5]);
          await q.query("INSERT INTO contract_t (id, note) VALUES ($1, 'dup')", [5]);
        }),
        (error: { code?: string }) => error.code === "23505",
      );
      assert.equal((await db.query("SELECT 1 FROM contract_t WHERE id = 5")).rows.length, 0);
      assert.equal((await db.query("SELECT 1 AS ok")).rows.length, 1);
    });

    it("maps database errors to errors carrying the SQLSTATE code", async () => {
      await assert.rejects(db.query("INSERT INTO contract_t (id) VALUES ($1)", [1]), (error: { code?: string }) => {
        return error.code === "23505";
      });
      await assert.rejects(db.query("SELEC 1"), (error: { code?: string }) => error.code === "42601");
      await assert.rejects(db.query("SELECT $1::int", ["x"]), (error: { code?: string }) => error.code === "22P02");
    });

    it("gives a transaction a Queryable without tx: transactions do not nest", async () => {
      await db.tx(async (q) => {
        assert.equal("tx" in q, false);
        await q.query("SELECT 1");
      });
    });

    it(
      kind === "pglite"
        ? "serializes concurrent transactions (one connection)"
        : "runs concurrent transactions on separate connections",
      async () => {
        await db.query("UPDATE contract_counter SET n = 0");
        const bump = () =>
          db.tx(async (q) => {
            const n = (await q.query<{ n: number }>("SELECT n FROM contract_counter")).rows[0]?.n ?? 0;
            await sleep(30);
            await q.query("UPDATE contract_counter SET n = $1", [n + 1]);
          });
        await Promise.all([bump(), bump(), bump()]);
        const n = (await db.query<{ n: number }>("SELECT n FROM contract_counter")).rows[0]?.n;
        // Read-modify-write without a lock: only serialized transactions keep every bump.
        if (kind === "pglite") assert.equal(n, 3);
        else assert.ok(n !== undefined && n >= 1 && n <= 3);
      },
    );

    it("runs multi-statement scripts through exec", async () => {
      await db.exec("CREATE TABLE contract_s (x int); INSERT INTO contract_s VALUES (1), (2)");
      assert.equal((await db.query("SELECT x FROM contract_s")).rows.length, 2);
    });
  });
}

describe("PGlite internals Warren relies on", () => {
  let pg: PGlite;
  before(async () => {
    pg = await PGlite.create();
  });
  after(() => pg?.close());

  it("pglite.ts: syncToFs, dumpDataDir, onNotification; TransactionAbortedError and MemoryFS exported", () => {
    for (const name of ["syncToFs", "dumpDataDir", "onNotification", "exec", "close"] as const) {
      assert.equal(typeof pg[name], "function", `PGlite.${name}`);
    }
    assert.equal(typeof TransactionAbortedError, "function");
    assert.equal(typeof MemoryFS, "function");
  });

  it("pglite-deadline.ts: a vm timeout stops execProtocolRawStream mid-statement (syncToFs false: synchronous to its end)", async () => {
    const fs = new TrackedMemoryFS();
    const scratch = await PGlite.create({ fs, loadDataDir: await pgliteTemplate() });
    const started = performance.now();
    assert.throws(
      () =>
        vm.runInNewContext(
          "run()",
          {
            run: () =>
              scratch.execProtocolRawStream(
                protocol.serialize.query(
                  "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 100000000) SELECT count(*) FROM r",
                ),
                { syncToFs: false, onRawData: () => undefined },
              ),
          },
          { timeout: 200 },
        ),
      { code: "ERR_SCRIPT_EXECUTION_TIMEOUT" },
    );
    assert.ok(performance.now() - started < 2000);
    // The interrupted instance is dropped, never closed (closing would run it); without its
    // timers cleared (here, one the interrupted backend armed) it would hold the process.
    fs.handles.release();
  });

  it("pglite-wire.ts: execProtocolRawStream streams raw reply bytes; serializers and parsers by type oid", async () => {
    assert.equal(typeof pg.execProtocolRawStream, "function");
    assert.equal(typeof pg.serializers, "object");
    assert.equal(typeof pg.parsers, "object");
    assert.equal(typeof pg.parsers[20], "function", "int8 parser");
    const chunks: Uint8Array[] = [];
    await pg._runExclusiveQuery(() =>
      pg.execProtocolRawStream(
        Buffer.concat([protocol.serialize.parse({ text: "SELECT 1", name: "" }), protocol.serialize.sync()]),
        { syncToFs: false, onRawData: (chunk: Uint8Array) => void chunks.push(Buffer.from(chunk)) },
      ),
    );
    // ParseComplete ('1') then ReadyForQuery ('Z').
    const reply = Buffer.concat(chunks);
    assert.equal(reply[0], 0x31);
    assert.ok(reply.includes(0x5a));
  });

  it("pglite-wire.ts: protocol.serialize, protocol.Parser and messages.DatabaseError", () => {
    for (const name of ["parse", "describe", "bind", "execute", "sync"] as const) {
      assert.equal(typeof protocol.serialize[name], "function", `protocol.serialize.${name}`);
    }
    assert.equal(typeof protocol.Parser, "function");
    assert.equal(typeof new protocol.Parser().parse, "function");
    assert.equal(typeof messages.DatabaseError, "function");
  });

  it("pglite-private-fs.ts: NODEFS node_ops.mknod/setattr and stream_ops.setattr", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-nodefs-"));
    let ops: { node_ops?: Record<string, unknown>; stream_ops?: Record<string, unknown> } | undefined;
    class Probe extends PrivateNodeFS {
      override async init(db: PGlite, opts: Parameters<PrivateNodeFS["init"]>[1]) {
        const result = await super.init(db, opts);
        const preRun = result.emscriptenOpts.preRun ?? [];
        result.emscriptenOpts.preRun = [
          (mod: { NODEFS: unknown }) => {
            ops = mod.NODEFS as typeof ops;
          },
          ...preRun,
        ];
        return result;
      }
    }
    try {
      const disk = await PGlite.create({ fs: new Probe(path.join(dir, "pglite")) });
      await disk.close();
      assert.equal(typeof ops?.node_ops?.mknod, "function");
      assert.equal(typeof ops?.node_ops?.setattr, "function");
      assert.equal(typeof ops?.stream_ops?.setattr, "function");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("pglite-private-fs.ts: NODEFS stream_ops.open/close keep stream.nfd; _setitimer_js among the module's imports", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "warren-nodefs-"));
    try {
      const fs = new PrivateNodeFS(path.join(dir, "pglite"));
      const disk = await PGlite.create({ fs });
      await disk.exec("CREATE TABLE probe (n int); INSERT INTO probe VALUES (1)");
      // Every tracked descriptor is a real one of this process, on a file of the data directory.
      assert.ok(fs.handles.descriptors.size > 0, "no NODEFS descriptor tracked");
      for (const fd of fs.handles.descriptors) {
        assert.ok(readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir), `fd ${fd}`);
      }
      await disk.close();
      // close() closes them through stream_ops.close, which the tracking follows.
      assert.equal(fs.handles.descriptors.size, 0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
