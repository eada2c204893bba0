// Port endpoint throughput through the API server's session plane (the `make run` bundle
// with WARREN_SESSION_LISTEN) on a real runc sandbox, side by side with the same port
// reached directly from the host at the sandbox's veth address:
//   small HTTP responses (GET / -> 200 "hello", keep-alive) through the endpoint: >= 5,000 req/s
// The server in the sandbox is test/support/http-echo.c (static C, one process per
// connection), so the direct run measures the sandbox's server and the host's network path
// alone and the proxied run adds the plane. A third path, `node-floor`, is the least a
// Node proxy does (http.createServer piping to http.request over a keep-alive agent, no
// routing, no credential) in its own process, to tell the plane's own cost from Node's.
// Closed loop, N connections, pipelining 1; the paths' order rotates every round so the
// machine's drift hits all of them.
// Usage: node --import tsx bench/endpoints.ts [--connections 50] [--duration 10] [--rounds 2]
//   [--tool autocannon|wrk]
import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { pushHttpEchoImage } from "../test/support/http-echo.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { machineLoad } from "./lib/cpu.js";
import { type LoadResult, type LoadSpec, pickTools, runLoad, type Tool } from "./lib/load.js";
import { openBenchRig } from "./lib/rig.js";
import { freePort, SERVER_METHOD } from "./lib/server.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const CONNECTIONS = Number(args.get("connections") ?? 50);
const DURATION_SEC = Number(args.get("duration") ?? 10);
const ROUNDS = Number(args.get("rounds") ?? 2);
const TARGET_REQ_PER_SEC = 5000;
type Path = "direct" | "node-floor" | "endpoint";

/** The node-floor proxy: the least a Node HTTP proxy does, to `target`, on `port`. */
const FLOOR_PROXY = `
const http = require("node:http");
const [host, port] = process.env.TARGET.split(":");
const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
http.createServer((req, res) => {
  const up = http.request({ host, port, method: req.method, path: req.url, headers: req.headers, agent }, (ur) => {
    res.writeHead(ur.statusCode, ur.headers);
    ur.pipe(res);
  });
  up.on("error", () => res.destroy());
  req.pipe(up);
}).listen(Number(process.env.PORT), "127.0.0.1");`;

const log = (line: string) => process.stderr.write(`${line}\n`);
const TOOL: Tool = pickTools(args.get("tool") ?? "autocannon", log)[0] ?? "autocannon";
const loadAverage = () => os.loadavg().map((value) => Math.round(value * 100) / 100);

const rig = await openBenchRig("endpoints", ROOT);
const { registry, key } = rig;

try {
  const image = await pushHttpEchoImage(registry);
  const planePort = await freePort();
  const server = await rig.start({
    WARREN_SANDBOX_POOL_SIZE: "0",
    WARREN_SESSION_LISTEN: `127.0.0.1:${planePort}`,
  });
  const api = async <T>(method: string, url: string, body?: unknown): Promise<T> => {
    const response = await call<T>(server.baseUrl, key, method, url, body);
    if (response.status >= 300)
      throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const { id } = await api<{ id: string }>("POST", "/v1/sandboxes", { image, ports: [8080], network_access: "public" });
  let endpoint: { port: number; url: string } | undefined;
  for (let tries = 0; !endpoint && tries < 300; tries++) {
    const view = await api<{ sandbox: { state: string; endpoints: { port: number; url: string }[] } }>(
      "GET",
      `/v1/sandboxes/${id}?wait_state=running&wait_timeout_seconds=25`,
    );
    endpoint = view.sandbox.endpoints[0];
    if (!endpoint) await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (!endpoint) throw new Error("the sandbox's endpoint never appeared");
  const ifconfig = await api<{ stdout: string }>("POST", `/v1/sandboxes/${id}:exec`, {
    cmd: ["busybox", "ifconfig", "eth0"],
  });
  const address = /inet addr:(\d+\.\d+\.\d+\.\d+)/.exec(ifconfig.stdout)?.[1];
  if (!address) throw new Error(`no address in ${ifconfig.stdout}`);
  const endpointHost = new URL(endpoint.url).host;
  log(`endpoint ${endpoint.url} (sent to 127.0.0.1:${planePort} with that Host), direct http://${address}:8080/`);
  const runs: { path: Path; result: LoadResult; load: number[]; otherCpuPct: number }[] = [];

  const floorPort = await freePort();
  const floor = spawn(process.execPath, ["-e", FLOOR_PROXY], {
    env: { ...process.env, TARGET: `${address}:8080`, PORT: String(floorPort) },
    stdio: "ignore",
  });
  try {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const specs: Record<Path, LoadSpec> = {
      direct: { url: `http://${address}:8080/`, headers: {}, connections: CONNECTIONS, durationSec: DURATION_SEC },
      "node-floor": {
        url: `http://127.0.0.1:${floorPort}/`,
        headers: {},
        connections: CONNECTIONS,
        durationSec: DURATION_SEC,
      },
      endpoint: {
        url: `http://127.0.0.1:${planePort}/`,
        headers: { host: endpointHost, authorization: `Bearer ${key}` },
        connections: CONNECTIONS,
        durationSec: DURATION_SEC,
      },
    };
    const paths: Path[] = ["direct", "node-floor", "endpoint"];
    // Warm-up of every path (connections, the plane's caches, JIT).
    for (const which of paths) await runLoad(TOOL, { ...specs[which], durationSec: 2 }).result;
    for (let round = 0; round < ROUNDS; round++) {
      const order = paths.map((_, i) => paths[(i + round) % paths.length] as Path);
      for (const which of order) {
        const busy = await machineLoad(1000);
        const result = await runLoad(TOOL, specs[which]).result;
        runs.push({ path: which, result, load: loadAverage(), otherCpuPct: Math.round(busy) });
        log(
          `${which}: ${Math.round(result.reqPerSec)} req/s, p50 ${result.latencyMs.p50} ms, p99 ${result.latencyMs.p99} ms, non-2xx ${result.non2xx}, errors ${result.errors}`,
        );
      }
    }
  } finally {
    floor.kill("SIGKILL");
  }
  const best = (which: Path) =>
    Math.max(...runs.filter((run) => run.path === which).map((run) => run.result.reqPerSec));
  const endpointBest = best("endpoint");
  const results = {
    at: new Date().toISOString(),
    machine: { cpus: os.cpus().length, loadAverageAtStart: runs[0]?.load, note: "shared with other helpers' work" },
    server: SERVER_METHOD,
    method: `${TOOL}, ${CONNECTIONS} connections, closed loop, ${DURATION_SEC} s per run, ${ROUNDS} rounds; GET / -> 200 "hello" from test/support/http-echo.c`,
    runs: runs.map((run) => ({
      path: run.path,
      reqPerSec: Math.round(run.result.reqPerSec),
      latencyMs: run.result.latencyMs,
      non2xx: run.result.non2xx,
      errors: run.result.errors,
      loadAverage: run.load,
      otherProcessesPctOfOneCoreBefore: run.otherCpuPct,
    })),
    directBestReqPerSec: Math.round(best("direct")),
    nodeFloorBestReqPerSec: Math.round(best("node-floor")),
    endpointBestReqPerSec: Math.round(endpointBest),
    endpointToDirect: Math.round((endpointBest / best("direct")) * 100) / 100,
    endpointToNodeFloor: Math.round((endpointBest / best("node-floor")) * 100) / 100,
    target: `endpoint >= ${TARGET_REQ_PER_SEC} req/s`,
    pass: endpointBest >= TARGET_REQ_PER_SEC && runs.every((run) => run.result.non2xx === 0),
  };
  await writeFile(path.join(ROOT, "bench/results/endpoints.json"), `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
} finally {
  await rig.close();
}
process.exit(0);
