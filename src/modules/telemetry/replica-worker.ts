// The telemetry replica's thread (replica.ts is the server's side): a PGlite instance of its
// own, started from a copy of the store's data directory and kept current by the batches of
// changed rows the server sends, on which telemetry queries run under layer 2 (runAsReader).
// A slow query, its deadline and the reopen after it hold this thread, never the server's.
// Messages are handled one at a time, in order: a batch sent before a query is in before it runs.
import { mkdir, rm } from "node:fs/promises";
import { parentPort } from "node:worker_threads";
import { openPglite, type PgliteDb } from "../../store/pglite.js";
import { applyChanges, dropCapture, insertableColumns, type ReplicatedTable } from "./replica-capture.js";
import type { ReplicaReply, ReplicaRequest } from "./replica-protocol.js";
import { CostOverCap, runAsReader } from "./repo.js";

const port = parentPort;
if (!port) throw new Error("replica-worker.ts runs as a worker thread");

let db: PgliteDb | null = null;
const columns = new Map<ReplicatedTable, string[]>();

function store(): PgliteDb {
  if (!db) throw new Error("the telemetry replica is not open");
  return db;
}

function failure(error: unknown): Extract<ReplicaReply, { ok: false }>["error"] {
  const e = error as { name?: unknown; message?: unknown; code?: unknown };
  return {
    name: error instanceof CostOverCap ? "CostOverCap" : String(e.name ?? "Error"),
    message: String(e.message ?? error),
    ...(typeof e.code === "string" ? { code: e.code } : {}),
    ...(error instanceof CostOverCap ? { estimatedCost: error.estimatedCost, maxCost: error.maxCost } : {}),
  };
}

async function handle(message: ReplicaRequest): Promise<unknown> {
  switch (message.type) {
    case "open": {
      if (message.dataDir) {
        // A replica is made anew at every start: whatever an earlier one left is dropped.
        await rm(message.dataDir, { recursive: true, force: true });
        await mkdir(message.dataDir, { recursive: true, mode: 0o700 });
      }
      db = await openPglite(message.dataDir ?? undefined, new Blob([message.files]));
      // The copy carries the store's capture; the replica notes nothing.
      await dropCapture(db);
      return null;
    }
    case "apply":
      await store().tx((q) =>
        // Learnt in the transaction: a root operation of the store would wait for it to end.
        applyChanges(q, message.batch, async (tx, table) => {
          let known = columns.get(table);
          if (!known) {
            known = await insertableColumns(tx, table);
            columns.set(table, known);
          }
          return known;
        }),
      );
      return null;
    case "query":
      return runAsReader(store(), message.orgId, message.sql, message.params, message.limits);
    case "close":
      await db?.close();
      db = null;
      return null;
  }
}

let tail: Promise<unknown> = Promise.resolve();

port.on("message", (message: ReplicaRequest) => {
  tail = tail.then(async () => {
    let reply: ReplicaReply;
    try {
      reply = { id: message.id, ok: true, value: await handle(message) };
    } catch (error) {
      reply = { id: message.id, ok: false, error: failure(error) };
    }
    port.postMessage(reply);
  });
});
