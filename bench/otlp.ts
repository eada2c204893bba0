// OTLP trace ingest (issue 29) against the real server process (the `make run` bundle, default
// settings), on the embedded store and on PostgreSQL, side by side with the raw operation:
//
//   ingest:  POST /v1/traces of 1,000-span protobuf batches made by the real OpenTelemetry SDK
//            (its ProtobufTraceSerializer, as the OTLP/HTTP protobuf exporter sends them), one
//            request at a time and 4 at once; spans/s over the measured batches.
//            targets: >= 20,000 spans/s on PostgreSQL, >= 5,000 on PGlite.
//   direct:  the same rows (decoded and mapped once, beforehand) inserted through the store
//            with the events repo's one-statement insert, in this process: on PostgreSQL into
//            the server's database, on PGlite into a PGlite of its own (the server holds its
//            data directory).
//   tail:    a tail open on a run; sequential 1-span requests, each timed from the ingest's
//            answer (and from its start) to the span arriving on the tail. target: p99 <= 100 ms.
//
//   node --import tsx bench/otlp.ts [--stores pglite,postgres] [--batches 30] [--tail-spans 300]
//     [--output bench/results/otlp.json]
import { execSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { context, trace } from "@opentelemetry/api";
import { ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import * as events from "../src/modules/events/service.js";
import { decodeProtobufRequest } from "../src/modules/otlp/decode-proto.js";
import { spanEventOf } from "../src/modules/otlp/service.js";
import { spansOf } from "../src/modules/otlp/spans.js";
import type { Db } from "../src/store/db.js";
import { migrate } from "../src/store/migrate.js";
import { openPglite } from "../src/store/pglite.js";
import { openPostgres } from "../src/store/postgres.js";
import { api } from "./lib/api.js";
import { freePort, SERVER_METHOD, startServer } from "./lib/server.js";
import { installCleanup, prepareStore, runMain, type Store, stopCluster } from "./lib/store.js";
import { textTable } from "./lib/table.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const TARGETS: Record<Store, number> = { postgres: 20_000, pglite: 5_000 };
const TAIL_P99_MS = 100;
const BATCH = 1000;

const { values: args } = parseArgs({
  options: {
    stores: { type: "string", default: "pglite,postgres" },
    batches: { type: "string", default: "30" },
    "tail-spans": { type: "string", default: "300" },
    output: { type: "string", default: path.join(ROOT, "bench/results/otlp.json") },
  },
});
const stores = args.stores.split(",") as Store[];
const batchCount = Number(args.batches);
const tailSpans = Number(args["tail-spans"]);
const log = (line: string) => process.stderr.write(`[bench:otlp] ${line}\n`);
installCleanup(log);

/** `n` ended spans from the real SDK: traces of 10 spans (a root and 9 children), GenAI attributes. */
function sdkSpans(n: number, runId: string): ReadableSpan[] {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "bench-agent", "warren.run_id": runId }),
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  const tracer = provider.getTracer("bench", "1.0.0");
  for (let i = 0; i < n; i += 10) {
    const root = tracer.startSpan("agent turn", { attributes: { "user.id": "u-1", "session.id": `s-${i}` } });
    const ctx = trace.setSpan(context.active(), root);
    for (let c = 1; c < 10 && i + c < n; c++) {
      const span = tracer.startSpan(
        "chat model",
        {
          attributes: {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-x",
            "gen_ai.usage.input_tokens": 100 + c,
            "gen_ai.usage.output_tokens": 20 + c,
            "http.status_code": 200,
            "custom.label": "bench",
          },
        },
        ctx,
      );
      span.addEvent("gen_ai.choice", { index: 0 });
      span.end();
    }
    root.end();
  }
  return exporter.getFinishedSpans().slice(0, n);
}

const body = (spans: ReadableSpan[]) => Buffer.from(ProtobufTraceSerializer.serializeRequest(spans) as Uint8Array);

function post(base: string, key: string, payload: Buffer): Promise<{ status: number; ms: number }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${base}/v1/traces`,
      {
        method: "POST",
        headers: {
          authorization: `Bearer ${key}`,
          "content-type": "application/x-protobuf",
          "content-length": payload.length,
        },
      },
      (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - started }));
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}

/** A tail held open by this process; `onItem` sees each parsed data item. */
function openTail(base: string, key: string, runId: string, onItem: (data: Record<string, unknown>) => void) {
  return new Promise<{ close(): void }>((resolve, reject) => {
    const request = http.get(
      `${base}/v1/runs/${runId}/tail`,
      { headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" } },
      (res) => {
        if (res.statusCode !== 200) return reject(new Error(`tail answered ${res.statusCode}`));
        res.setEncoding("utf8");
        let buffer = "";
        res.on("data", (chunk: string) => {
          buffer += chunk;
          for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
            const data = buffer
              .slice(0, end)
              .split("\n")
              .find((line) => line.startsWith("data: "));
            buffer = buffer.slice(end + 2);
            if (data) onItem(JSON.parse(data.slice(6)) as Record<string, unknown>);
          }
        });
        resolve({ close: () => request.destroy() });
      },
    );
    request.on("error", reject);
  });
}

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0;

interface StoreResult {
  store: Store;
  ingestSerialSpansPerSec: number;
  ingestParallelSpansPerSec: number;
  requestMs: number[];
  directSpansPerSec: number;
  tailFromAnswerMs: number[];
  tailFromStartMs: number[];
}

/** The same rows the server writes for these bodies, inserted with the events repo's statement. */
async function direct(db: Db, orgId: string, run: { id: string; projectId: string }, bodies: Buffer[]) {
  const rows = bodies.map((b) =>
    spansOf(decodeProtobufRequest(b, { maxSpans: 10_000, maxValues: 1_000_000 })).spans.map((s) =>
      spanEventOf(orgId, "bench", { id: run.id, projectId: run.projectId, lineagePath: run.id }, s),
    ),
  );
  const started = performance.now();
  for (const list of rows) await db.tx((q) => events.appendSpanEvents(q, list));
  return (rows.length * BATCH) / ((performance.now() - started) / 1000);
}

async function measure(store: Store): Promise<StoreResult> {
  const setup = await prepareStore(store, "warren-bench-otlp", log);
  const server = await startServer({ root: ROOT, port: await freePort(), env: setup.env, logFile: setup.logFile });
  const { baseUrl: base } = server;
  const key = setup.key;
  try {
    const run = (
      await api<{ run: { id: string; project_id: string } }>(base, key, "POST", "/v1/runs", { label: "otlp" })
    ).run;
    log(`${store}: making ${2 * batchCount + 4} batches of ${BATCH} spans with the SDK`);
    const make = () => body(sdkSpans(BATCH, run.id));
    const warm = [make(), make()];
    const serial = Array.from({ length: batchCount }, make);
    const parallel = Array.from({ length: batchCount }, make);
    const directBodies = Array.from({ length: batchCount }, make);
    for (const b of warm) await post(base, key, b);

    log(`${store}: ${batchCount} batches one at a time`);
    const requestMs: number[] = [];
    let started = performance.now();
    for (const b of serial) {
      const r = await post(base, key, b);
      if (r.status !== 200) throw new Error(`ingest answered ${r.status}`);
      requestMs.push(r.ms);
    }
    const ingestSerialSpansPerSec = (batchCount * BATCH) / ((performance.now() - started) / 1000);

    log(`${store}: ${batchCount} batches, 4 at once`);
    started = performance.now();
    const queue = [...parallel];
    await Promise.all(
      [0, 1, 2, 3].map(async () => {
        for (let b = queue.shift(); b; b = queue.shift()) {
          const r = await post(base, key, b);
          if (r.status !== 200) throw new Error(`ingest answered ${r.status}`);
        }
      }),
    );
    const ingestParallelSpansPerSec = (batchCount * BATCH) / ((performance.now() - started) / 1000);

    log(`${store}: tail visibility, ${tailSpans} one-span requests`);
    const tailRun = (await api<{ run: { id: string } }>(base, key, "POST", "/v1/runs", { label: "tail" })).run.id;
    const arrived = new Map<string, number>();
    const waiting = new Map<string, () => void>();
    const tail = await openTail(base, key, tailRun, (data) => {
      const id = (data.payload as { span_id?: string } | undefined)?.span_id;
      if (!id) return;
      arrived.set(id, performance.now());
      waiting.get(id)?.();
    });
    const tailFromAnswerMs: number[] = [];
    const tailFromStartMs: number[] = [];
    for (let n = 0; n < tailSpans + 20; n++) {
      const [span] = sdkSpans(1, tailRun);
      const id = span?.spanContext().spanId as string;
      const seen = new Promise<void>((resolve) => waiting.set(id, resolve));
      const t0 = performance.now();
      const r = await post(base, key, body([span as ReadableSpan]));
      if (r.status !== 200) throw new Error(`ingest answered ${r.status}`);
      const answered = performance.now();
      await seen;
      if (n >= 20) {
        tailFromAnswerMs.push((arrived.get(id) as number) - answered);
        tailFromStartMs.push((arrived.get(id) as number) - t0);
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    tail.close();

    log(`${store}: the same rows through the store directly`);
    let directSpansPerSec: number;
    if (store === "postgres") {
      const db = await openPostgres(setup.env.DATABASE_URL as string);
      try {
        const { rows } = await db.query<{ org_id: string }>("SELECT org_id FROM runs WHERE id = $1", [run.id]);
        directSpansPerSec = await direct(
          db,
          rows[0]?.org_id as string,
          { id: run.id, projectId: run.project_id },
          directBodies,
        );
      } finally {
        await db.close();
      }
    } else {
      const dir = mkdtempSync(path.join(os.tmpdir(), "warren-bench-otlp-direct-"));
      const db = await openPglite(dir);
      try {
        await migrate(db);
        await db.query("INSERT INTO organizations (id, slug, created_at) VALUES ('org_bench', 'bench', now())");
        directSpansPerSec = await direct(db, "org_bench", { id: run.id, projectId: "prj_bench" }, directBodies);
      } finally {
        await db.close();
        rmSync(dir, { recursive: true, force: true });
      }
    }
    return {
      store,
      ingestSerialSpansPerSec,
      ingestParallelSpansPerSec,
      requestMs: requestMs.sort((a, b) => a - b),
      directSpansPerSec,
      tailFromAnswerMs: tailFromAnswerMs.sort((a, b) => a - b),
      tailFromStartMs: tailFromStartMs.sort((a, b) => a - b),
    };
  } finally {
    await server.stop();
    stopCluster();
  }
}

async function main() {
  const results: StoreResult[] = [];
  for (const store of stores) results.push(await measure(store));
  const f = (n: number) => n.toFixed(n >= 100 ? 0 : 1);
  const rows = [
    [
      "store",
      "ingest spans/s (1 conn)",
      "ingest spans/s (4 conn)",
      "target",
      "direct insert spans/s",
      "ingest/direct",
      "1,000-span request p50 ms",
      "p99 ms",
      "tail after answer p50 ms",
      "p99 ms",
      "tail p99 target",
      "tail after request start p99 ms",
    ],
  ];
  for (const r of results) {
    const best = Math.max(r.ingestSerialSpansPerSec, r.ingestParallelSpansPerSec);
    rows.push([
      r.store,
      f(r.ingestSerialSpansPerSec),
      f(r.ingestParallelSpansPerSec),
      `>= ${TARGETS[r.store]} ${best >= TARGETS[r.store] ? "ok" : "MISSED"}`,
      f(r.directSpansPerSec),
      (best / r.directSpansPerSec).toFixed(2),
      f(percentile(r.requestMs, 50)),
      f(percentile(r.requestMs, 99)),
      f(percentile(r.tailFromAnswerMs, 50)),
      f(percentile(r.tailFromAnswerMs, 99)),
      `<= ${TAIL_P99_MS} ${percentile(r.tailFromAnswerMs, 99) <= TAIL_P99_MS ? "ok" : "MISSED"}`,
      f(percentile(r.tailFromStartMs, 99)),
    ]);
  }
  process.stdout.write(`${textTable(rows)}\n`);
  mkdirSync(path.dirname(args.output), { recursive: true });
  writeFileSync(
    args.output,
    `${JSON.stringify(
      {
        machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, load: os.loadavg() },
        commit: execSync("git rev-parse --short HEAD", { cwd: ROOT }).toString().trim(),
        server: SERVER_METHOD,
        results,
      },
      null,
      2,
    )}\n`,
  );
}

runMain(main, log);
