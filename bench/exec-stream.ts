// The streaming exec's first output byte against the unary exec of the same command, through a
// real server (the `make run` bundle, PGlite) on a real runc sandbox, interleaved in blocks of
// 10 with the order swapped every block:
//   stream: a new WebSocket to GET /v1/sandboxes/{id}/exec/stream (upgrade, auth, the start
//     message, the session opened on the exec agent) until the first stdout frame of `echo hi`
//   unary: POST /v1/sandboxes/{id}:exec of `echo hi` until its answer (its output is in it)
//   target: stream p50 <= unary p50 + 5 ms
// Usage: node --import tsx bench/exec-stream.ts [--runs 100]
import path from "node:path";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import { pushTestImages } from "../test/support/registry.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { recordResults } from "./lib/results.js";
import { openBenchRig } from "./lib/rig.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const RUNS = Number(args.get("runs") ?? 100);
const OVER_UNARY_TARGET_MS = 5;
const BLOCK = 10;

const summary = (values: number[]) => ({
  n: values.length,
  p50: Math.round(percentile(values, 50) * 10) / 10,
  p90: Math.round(percentile(values, 90) * 10) / 10,
  p99: Math.round(percentile(values, 99) * 10) / 10,
});

const results: Record<string, unknown> = {};
const rig = await openBenchRig("exec-stream", ROOT);
const { registry, key } = rig;
try {
  await pushTestImages(registry);
  const server = await rig.start({});
  const api = async (method: string, url: string, body?: unknown) => {
    const response = await call<Record<string, unknown>>(server.baseUrl, key, method, url, body);
    if (response.status >= 300)
      throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const created = (await api("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" })) as {
    id: string;
  };
  await api("GET", `/v1/sandboxes/${created.id}?wait_state=running&wait_timeout_seconds=25`);
  const streamUrl = `${server.baseUrl.replace(/^http/, "ws")}/v1/sandboxes/${created.id}/exec/stream`;

  /** Milliseconds to the first stdout byte; resolves once the stream has also ended cleanly. */
  const streamEcho = () =>
    new Promise<number>((resolve, reject) => {
      const started = performance.now();
      let first: number | null = null;
      let exit: unknown = null;
      const ws = new WebSocket(streamUrl, { headers: { authorization: `Bearer ${key}` }, perMessageDeflate: false });
      ws.on("open", () => ws.send(JSON.stringify({ cmd: ["echo", "hi"] })));
      ws.on("message", (data: Buffer, isBinary: boolean) => {
        if (isBinary && data[0] === 1 && first === null) first = performance.now() - started;
        if (!isBinary) {
          const message = JSON.parse(data.toString("utf8")) as { type: string; exit?: number };
          if (message.type === "exit") exit = message.exit;
        }
      });
      ws.on("error", reject);
      ws.on("close", () => {
        if (first !== null && exit === 0) resolve(first);
        else reject(new Error(`the stream ended without output or exit 0 (exit ${JSON.stringify(exit)})`));
      });
    });
  const unaryEcho = async () => {
    const started = performance.now();
    const body = await api("POST", `/v1/sandboxes/${created.id}:exec`, { cmd: ["echo", "hi"] });
    if (body.stdout !== "hi\n") throw new Error(`unexpected answer ${JSON.stringify(body)}`);
    return performance.now() - started;
  };

  for (let i = 0; i < 5; i++) {
    await streamEcho();
    await unaryEcho();
  }
  const times = { stream: [] as number[], unary: [] as number[] };
  for (let i = 0; i < RUNS; i += BLOCK) {
    const n = Math.min(BLOCK, RUNS - i);
    const blocks = [
      async () => {
        for (let j = 0; j < n; j++) times.stream.push(await streamEcho());
      },
      async () => {
        for (let j = 0; j < n; j++) times.unary.push(await unaryEcho());
      },
    ];
    if ((i / BLOCK) % 2 === 1) blocks.reverse();
    for (const block of blocks) await block();
  }
  await api("DELETE", `/v1/sandboxes/${created.id}`);
  const stream = summary(times.stream);
  const unary = summary(times.unary);
  const over = Math.round((stream.p50 - unary.p50) * 10) / 10;
  results.streamFirstByteEcho = stream;
  results.unaryExecEcho = unary;
  results.streamOverUnaryP50Ms = {
    value: over,
    target: `<= ${OVER_UNARY_TARGET_MS} ms`,
    pass: over <= OVER_UNARY_TARGET_MS,
  };
  await recordResults("exec-stream.json", results);
} finally {
  await rig.close();
}
process.exit(0);
