// The run tail (GET /v1/runs/{id}/tail) over real sockets: replay, live follow, resume by
// Last-Event-ID and cursor while writers run, out-of-order commits, the end of the stream,
// heartbeats, the lineage filter, authorization, stream limits and release on disconnect.
import assert from "node:assert/strict";
import net, { type AddressInfo } from "node:net";
import { describe, it } from "node:test";
import { newUlid } from "../src/lib/ids.js";
import { appendEvent } from "../src/modules/events/service.js";
import { formatCursor, parseCursor, START } from "../src/modules/tail/cursor.js";
import { readTail, type TailRow } from "../src/modules/tail/repo.js";
import { forEachStore, type TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";
import { API_ONLY_RUNTIME, freshOrg } from "./support/fixtures.js";
import { openSse, type SseItem, type SseStream } from "./support/sse.js";

const SCHEMA = JSON.stringify({
  type: "object",
  properties: { n: { type: "integer" } },
  required: ["n"],
  additionalProperties: false,
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function baseUrl(t: TestApp): Promise<string> {
  if (!t.app.server.listening) await t.app.listen({ host: "127.0.0.1", port: 0 });
  return `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
}

async function tail(
  t: TestApp,
  key: string,
  runId: string,
  options: { cursor?: string; lastEventId?: string; lineagePath?: string } = {},
): Promise<SseStream> {
  const query = new URLSearchParams();
  if (options.cursor) query.set("cursor", options.cursor);
  if (options.lineagePath !== undefined) query.set("lineage_path", options.lineagePath);
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  if (options.lastEventId) headers["last-event-id"] = options.lastEventId;
  return openSse(`${await baseUrl(t)}/v1/runs/${runId}/tail${query.size ? `?${query}` : ""}`, headers);
}

async function startRun(t: TestApp, key: string): Promise<string> {
  const res = await t.request("POST", "/v1/runs", { key, body: { label: "tail" } });
  assert.equal(res.status, 200, res.raw);
  return (res.body.run as { id: string }).id;
}

async function schemaName(t: TestApp, key: string): Promise<string> {
  const name = `tail${Math.random().toString(36).slice(2, 8)}`;
  const res = await t.request("POST", "/v1/annotation-schemas", { key, body: { name, json_schema: SCHEMA } });
  assert.equal(res.status, 200, res.raw);
  return name;
}

async function annotate(t: TestApp, key: string, name: string, runId: string, n: number): Promise<string> {
  const res = await t.request("POST", "/v1/annotations", {
    key,
    body: { schema_name: name, run_id: runId, payload_json: JSON.stringify({ n }) },
  });
  assert.equal(res.status, 200, res.raw);
  return res.body.event_id as string;
}

const TEXT_SCHEMA = JSON.stringify({ type: "object", properties: { text: { type: "string" } } });

async function textSchema(t: TestApp, key: string): Promise<string> {
  const name = `text${Math.random().toString(36).slice(2, 8)}`;
  const res = await t.request("POST", "/v1/annotation-schemas", { key, body: { name, json_schema: TEXT_SCHEMA } });
  assert.equal(res.status, 200, res.raw);
  return name;
}

async function annotateText(t: TestApp, key: string, name: string, runId: string, bytes: number): Promise<void> {
  const res = await t.request("POST", "/v1/annotations", {
    key,
    body: { schema_name: name, run_id: runId, payload_json: JSON.stringify({ text: "x".repeat(bytes) }) },
  });
  assert.equal(res.status, 200, res.raw);
}

function rowCursor(row: TailRow | undefined) {
  assert.ok(row);
  return { txid: row.txid, seq: row.seq };
}

async function committedIds(t: TestApp, runId: string): Promise<string[]> {
  const { rows } = await t.c.db.query<{ event_id: string }>("SELECT event_id FROM events WHERE run_id = $1", [runId]);
  return rows.map((row) => row.event_id).sort();
}

/** Items until the `end` item (returned last) or the stream's close. */
async function readToEnd(stream: SseStream): Promise<SseItem[]> {
  const items: SseItem[] = [];
  for (let item = await stream.next(); item; item = await stream.next()) {
    items.push(item);
    if (item.event === "end") break;
  }
  return items;
}

describe("tail cursor", () => {
  it("round-trips and refuses what Warren does not write", () => {
    assert.deepEqual(parseCursor("123-45"), { txid: "123", seq: "45" });
    assert.equal(formatCursor({ txid: "18446744073709551615", seq: "9" }), "18446744073709551615-9");
    assert.deepEqual(parseCursor("18446744073709551615-9223372036854775807"), {
      txid: "18446744073709551615",
      seq: "9223372036854775807",
    });
    for (const bad of [
      "",
      "1",
      "1-",
      "-1",
      "a-1",
      "1-2-3",
      "18446744073709551616-1",
      "1-9223372036854775808",
      " 1-2",
    ]) {
      assert.equal(parseCursor(bad), null, bad);
    }
  });
});

forEachStore(
  "run tail",
  (t) => {
    const owner = () => t().orgA.keys.owner;

    it("replays the run, follows annotations live and ends after the run completes", async () => {
      const name = await schemaName(t(), owner());
      const runId = await startRun(t(), owner());
      const stream = await tail(t(), owner(), runId);
      assert.equal(stream.status, 200);
      assert.match(String(stream.headers["content-type"]), /^text\/event-stream/);
      const started = await stream.next();
      assert.equal(started?.data.name, "run.started");
      assert.match(String(started?.id), /^\d+-\d+$/);
      const ids = [];
      for (let n = 0; n < 3; n++) {
        ids.push(await annotate(t(), owner(), name, runId, n));
        const item = await stream.next();
        assert.equal(item?.data.event_id, ids[n]);
        assert.equal(item?.data.kind, "annotation");
        assert.equal(item?.data.schema_name, name);
        assert.deepEqual(item?.data.payload, { n });
      }
      const done = await t().request("POST", `/v1/runs/${runId}:complete`, {
        key: owner(),
        body: { status: "failed" },
      });
      assert.equal(done.status, 200, done.raw);
      const rest = await readToEnd(stream);
      assert.deepEqual(
        rest.map((item) => item.event ?? item.data.name),
        ["run.completed", "end"],
      );
      assert.deepEqual(rest[1]?.data, { run_id: runId, status: "failed", reason: "run_completed" });
      assert.equal(await stream.next(), null, "the server closes the stream after end");
      // A completed run replays what follows a cursor, then ends at once.
      const again = await tail(t(), owner(), runId, { cursor: started?.id as string });
      assert.deepEqual(
        (await readToEnd(again)).map((item) => item.event ?? item.data.event_id),
        [...ids, rest[0]?.data.event_id, "end"],
      );
    });

    it("resumes by Last-Event-ID and by cursor with no gap and no duplicate while annotations are written", async () => {
      const name = await schemaName(t(), owner());
      const runId = await startRun(t(), owner());
      const writes = 60;
      let written = 0;
      const writers = Array.from({ length: 4 }, async (_, w) => {
        for (let n = w; n < writes; n += 4) {
          await annotate(t(), owner(), name, runId, n);
          written += 1;
          if (n % 3 === 0) await sleep(Math.random() * 5);
        }
      });
      const seen: string[] = [];
      let last: string | undefined;
      let reconnects = 0;
      while (seen.length < writes + 1) {
        const useHeader = reconnects % 2 === 0;
        const stream = await tail(
          t(),
          owner(),
          runId,
          last ? (useHeader ? { lastEventId: last, cursor: "1-1" } : { cursor: last }) : {},
        );
        const take = 1 + Math.floor(Math.random() * 9);
        for (let i = 0; i < take && seen.length < writes + 1; i++) {
          const item = await stream.next();
          assert.ok(item?.id, "an event item");
          seen.push(item.data.event_id as string);
          last = item.id;
        }
        stream.close();
        reconnects += 1;
      }
      await Promise.all(writers);
      assert.equal(written, writes);
      assert.ok(reconnects > 3, `reconnected ${reconnects} times`);
      assert.equal(new Set(seen).size, seen.length, "no duplicate");
      assert.deepEqual([...seen].sort(), await committedIds(t(), runId));
    });

    it("never skips an event committed late by a concurrent transaction", async () => {
      const runId = await startRun(t(), owner());
      const run = await t().c.runs.find(t().c.db, t().orgA.id, runId);
      assert.ok(run);
      const maxDelayMs = t().store === "postgres" ? 40 : 3;
      let rolledBack = 0;
      const writers = Array.from({ length: 6 }, async () => {
        for (let i = 0; i < 12; i++) {
          await t()
            .c.db.tx(async (q) => {
              for (let k = 0; k <= i % 3; k++) {
                await appendEvent(q, {
                  orgId: run.org_id,
                  eventId: newUlid(),
                  projectId: run.project_id,
                  runId,
                  lineagePath: run.lineage_path,
                  tsWallNs: BigInt(Date.now()) * 1_000_000n,
                  name: "test.write",
                  principal: "",
                  payload: { i, k },
                });
                // Out of order: rows minted earlier commit after rows minted later.
                await sleep(Math.random() * maxDelayMs);
              }
              if (Math.random() < 0.15) {
                rolledBack += 1;
                throw new Error("rolled back on purpose");
              }
            })
            .catch(() => undefined);
        }
      });
      const writing = Promise.all(writers);
      const seen: string[] = [];
      let last: string | undefined;
      let finished = false;
      void writing.then(() => {
        finished = true;
      });
      // Resume after every few items until the writers are done and the stream is idle.
      for (;;) {
        const stream = await tail(t(), owner(), runId, last ? { lastEventId: last } : {});
        let idle = false;
        for (let i = 0; i < 1 + Math.floor(Math.random() * 6); i++) {
          const item = await stream.next(finished ? 500 : 10_000).catch(() => null);
          if (!item) {
            idle = true;
            break;
          }
          seen.push(item.data.event_id as string);
          last = item.id;
        }
        stream.close();
        if (idle && finished) break;
      }
      assert.ok(rolledBack > 0 || t().store === "pglite");
      assert.equal(new Set(seen).size, seen.length, "no duplicate");
      assert.deepEqual([...seen].sort(), await committedIds(t(), runId), "every committed event, nothing else");
    });

    it("filters by lineage_path: the path itself and below it", async () => {
      const runId = await startRun(t(), owner());
      const run = await t().c.runs.find(t().c.db, t().orgA.id, runId);
      assert.ok(run);
      for (const lineagePath of [`${runId}.a`, `${runId}.a.b`, `${runId}.ab`, `${runId}.c`]) {
        await appendEvent(t().c.db, {
          orgId: run.org_id,
          eventId: newUlid(),
          projectId: run.project_id,
          runId,
          lineagePath,
          tsWallNs: 1n,
          name: "test.lineage",
          principal: "",
          payload: {},
        });
      }
      await t().request("POST", `/v1/runs/${runId}:complete`, { key: owner(), body: { status: "succeeded" } });
      const stream = await tail(t(), owner(), runId, { lineagePath: `${runId}.a` });
      assert.deepEqual(
        (await readToEnd(stream)).map((item) => item.event ?? item.data.lineage_path),
        [`${runId}.a`, `${runId}.a.b`, "end"],
      );
      const bad = await tail(t(), owner(), runId, { lineagePath: "a b" });
      assert.equal(bad.status, 400);
    });

    it("keeps an idle stream open with heartbeat comments", async () => {
      const runId = await startRun(t(), owner());
      const stream = await tail(t(), owner(), runId);
      await stream.next();
      await assert.rejects(stream.next(700), /no item/);
      assert.ok(stream.heartbeats() >= 2, `heartbeats: ${stream.heartbeats()}`);
      stream.close();
    });

    it("refuses before streaming: another org's run, an unknown run, a bad cursor, no key", async () => {
      const runId = await startRun(t(), owner());
      const other = await tail(t(), t().orgB.keys.owner, runId);
      assert.equal(other.status, 404);
      assert.deepEqual(Object.keys(JSON.parse(other.body)).sort(), ["code", "message", "request_id"]);
      assert.equal(JSON.parse(other.body).code, "not_found");
      assert.equal((await tail(t(), owner(), "run_nope")).status, 404);
      const badCursor = await tail(t(), owner(), runId, { cursor: "not-a-cursor" });
      assert.equal(badCursor.status, 400);
      assert.equal(JSON.parse(badCursor.body).code, "invalid_argument");
      const anonymous = await openSse(`${await baseUrl(t())}/v1/runs/${runId}/tail`, {});
      assert.equal(anonymous.status, 401);
    });

    it("lets a sandbox-scoped key tail its own sandbox's run only", async () => {
      const created = await t().request("POST", "/v1/sandboxes", { key: owner(), body: {} });
      assert.equal(created.status, 200, created.raw);
      const sandboxId = created.body.id as string;
      const confined = await t().issueKey(t().orgA, { sandbox: { sandboxId, lineagePath: sandboxId } });
      const own = await tail(t(), confined.key, created.body.run_id as string);
      assert.equal(own.status, 200);
      own.close();
      const elsewhere = await tail(t(), confined.key, await startRun(t(), owner()));
      assert.equal(elsewhere.status, 404);
    });

    it("caps open streams per organization and frees a slot and its listener when the client goes", async () => {
      const org = await freshOrg(t(), "owner");
      const key = org.key;
      const runId = await startRun(t(), key);
      const streams = [];
      for (let i = 0; i < 3; i++) {
        const stream = await tail(t(), key, runId);
        assert.equal(stream.status, 200);
        await stream.next();
        streams.push(stream);
      }
      const refused = await tail(t(), key, runId);
      assert.equal(refused.status, 429);
      assert.equal(JSON.parse(refused.body).code, "rate_limited");
      assert.ok(refused.headers["retry-after"]);
      const elsewhere = await tail(t(), owner(), await startRun(t(), owner()));
      assert.equal(elsewhere.status, 200, "another organization is not capped");
      streams.push(elsewhere);
      const open = t().c.tails.openStreams;
      streams.shift()?.close();
      await eventually("the closed stream's slot freed", async () => t().c.tails.openStreams < open).catch(
        () => undefined,
      );
      const again = await tail(t(), key, runId);
      assert.equal(again.status, 200, again.body);
      streams.push(again);
      for (const stream of streams) stream.close();
      await eventually("every stream closed", async () => t().c.tails.openStreams === 0).catch(() => undefined);
      assert.equal(t().c.tails.openStreams, 0, "every slot is freed");
      assert.equal(t().c.tailHub.subscriptions, 0, "every listener is gone");
    });

    it("reads a page bounded in bytes (a larger event alone), and says more follows", async () => {
      const org = await freshOrg(t(), "owner");
      const runId = await startRun(t(), org.key);
      const schema = await textSchema(t(), org.key);
      for (let n = 0; n < 4; n++) await annotateText(t(), org.key, schema, runId, 40 * 1024);
      const page = await readTail(t().c.db, org.id, runId, START, "", 200, 64 * 1024);
      // run.started and one 40 KiB annotation fit in 64 KiB; the next one does not.
      assert.equal(page.rows.length, 2);
      assert.ok(page.more);
      assert.ok(page.bytes > 40 * 1024 && page.bytes < 64 * 1024, String(page.bytes));
      const tiny = await readTail(t().c.db, org.id, runId, rowCursor(page.rows[0]), "", 200, 1024);
      assert.equal(tiny.rows.length, 1, "an event larger than the budget is read alone");
      assert.ok(tiny.more);
    });

    it("holds at most the organization's byte budget for clients that never read; other organizations stream", async () => {
      const org = await freshOrg(t(), "owner");
      const runId = await startRun(t(), org.key);
      const schema = await textSchema(t(), org.key);
      // More than a silent client's socket buffers take (about 4 MiB on loopback), so streams stay full.
      for (let n = 0; n < 64; n++) await annotateText(t(), org.key, schema, runId, 200 * 1024);
      const url = new URL(`${await baseUrl(t())}/v1/runs/${runId}/tail`);
      const silent: net.Socket[] = [];
      let peak = 0;
      try {
        for (let i = 0; i < 3; i++) {
          const socket = net.connect(Number(url.port), url.hostname);
          socket.on("error", () => undefined);
          socket.write(`GET ${url.pathname} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${org.key}\r\n\r\n`);
          await new Promise((resolve) => socket.once("data", resolve));
          socket.pause();
          silent.push(socket);
        }
        const bound = t().c.tails.settings.maxBufferedBytesPerOrg + 200 * 1024 + 1024;
        // Once a silent client's socket is full its stream holds its page for good; until
        // then (the reads are slow on a loaded host) the peak is sampled too.
        const sample = () => {
          peak = Math.max(peak, t().c.tails.bufferedBytes(org.id));
        };
        const deadline = Date.now() + 120_000;
        let heldSince = 0;
        while (Date.now() < deadline && (heldSince === 0 || Date.now() - heldSince < 2_000)) {
          sample();
          if (t().c.tails.bufferedBytes(org.id) === 0) heldSince = 0;
          else if (heldSince === 0) heldSince = Date.now();
          await sleep(10);
        }
        assert.ok(heldSince > 0, "a silent client's stream holds its page");
        assert.ok(peak <= bound, `held ${peak} bytes, more than the organization's ${bound}`);
        const other = await tail(t(), owner(), await startRun(t(), owner()));
        assert.equal(other.status, 200);
        assert.equal((await other.next(30_000))?.data.name, "run.started", "another organization is not held up");
        other.close();
      } finally {
        for (const socket of silent) socket.destroy();
      }
      await eventually("every page let go", async () => t().c.tails.bufferedBytes(org.id) === 0).catch(() => undefined);
      assert.equal(t().c.tails.bufferedBytes(org.id), 0, "every page is let go when its clients go");
    });

    it("serves the idle tails of one run woken by a commit with one store read", async () => {
      const org = await freshOrg(t(), "owner");
      const runId = await startRun(t(), org.key);
      const schema = await schemaName(t(), org.key);
      const streams: SseStream[] = [];
      const db = t().c.tails.db;
      const original = db.query;
      let reads = 0;
      try {
        // The organization's stream cap of this suite.
        for (let i = 0; i < 3; i++) {
          const stream = await tail(t(), org.key, runId);
          assert.equal((await stream.next(30_000))?.data.name, "run.started");
          streams.push(stream);
        }
        // Counts the tail reads that returned events (heartbeats re-read too, finding none).
        db.query = (async (sql: string, params?: unknown[]) => {
          const result = await original.call(db, sql, params);
          const rows = (result.rows[0] as { rows?: unknown } | undefined)?.rows;
          const found = typeof rows === "string" ? rows !== "[]" : Array.isArray(rows) && rows.length > 0;
          if (sql.includes("pg_snapshot_xmin") && found) reads += 1;
          return result;
        }) as typeof db.query;
        await annotate(t(), org.key, schema, runId, 1);
        for (const stream of streams) assert.equal((await stream.next(30_000))?.data.name, schema);
        assert.ok(reads <= 2, `${reads} store reads for ${streams.length} tails of one commit`);
      } finally {
        db.query = original;
        for (const stream of streams) stream.close();
      }
    });
  },
  {
    config: {
      tail: {
        heartbeatMs: 200,
        fallbackPollMs: 100,
        maxStreamsPerOrg: 3,
        maxStreamsPerServer: 50,
        pageBytes: 64 * 1024,
        maxBufferedBytesPerOrg: 256 * 1024,
      },
    },
    overrides: { runtime: API_ONLY_RUNTIME },
  },
);
