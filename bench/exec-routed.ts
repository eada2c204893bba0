// Exec `true` through a non-owner vs through the owner (issue 25: routed at most +1 ms p50).
// Two hosts of the multi-host harness (test/support/multi-host.ts: real processes, each in
// its own network namespace, one PostgreSQL and s3rver); the sandbox is on A. The two paths
// are alternated, one exec at a time, after a warm-up. Run as root:
//   node --import tsx test/run.ts bench/exec-routed.ts   (the runner starts PostgreSQL)
// BENCH_OUTPUT names a JSON file to write the run's figures to.
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { writeFileSync } from "node:fs";
import os from "node:os";
import { after, it } from "node:test";
import { type Host, type MultiHost, startMultiHost } from "../test/support/multi-host.js";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 300);
const WARMUP = 30;

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
};

let cluster: MultiHost | undefined;
const children: ChildProcess[] = [];
after(async () => {
  for (const child of children) child.kill("SIGKILL");
  await cluster?.cleanup();
});

// The raw operation under the routed path's extra cost: one keep-alive HTTP/1.1 POST from B's
// network namespace to A's and its answer, between two plain Node processes (no Warren): a
// server in A's namespace answering a JSON body of an exec answer's size, and a client in B's
// namespace that makes one request per line the bench writes to it and prints the round
// trip it timed itself. Interleaved with the execs, so both processes idle between requests
// as A and B do.
const RAW_PORT = 39_999;
const rawServer = (address: string) => `
const http = require("node:http");
const answer = JSON.stringify({ result: { exit: 0, stdout: "", stderr: "", truncated: false } });
http.createServer((req, res) => {
  req.resume();
  req.on("end", () => { res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) }); res.end(answer); });
}).listen(${RAW_PORT}, "${address}", () => process.stdout.write("listening\\n"));`;
const rawClient = (address: string) => `
const http = require("node:http");
const agent = new http.Agent({ keepAlive: true });
const body = Buffer.from(JSON.stringify({ cmd: ["true"], env: {}, request_hash: "", target: { id: "x".repeat(44), org_id: "x".repeat(30), project_id: "x".repeat(30), run_id: "x".repeat(30), lineage_path: "x".repeat(44), state: "running", desired_state: "running", quarantined: false, finished_at: null, created_by: "x".repeat(30), created_by_kind: "api_key", created_by_key_id: "x".repeat(30), host_id: "x".repeat(26), host_epoch: 1 } }));
let buffered = "";
process.stdin.on("data", (data) => {
  buffered += data;
  while (buffered.includes("\\n")) {
    buffered = buffered.slice(buffered.indexOf("\\n") + 1);
    const began = process.hrtime.bigint();
    const req = http.request("http://${address}:${RAW_PORT}/", { method: "POST", agent, headers: { "content-type": "application/json", "content-length": body.length, authorization: "WarrenGrant " + "x".repeat(300) } }, (res) => {
      res.resume();
      res.on("end", () => process.stdout.write(String(Number(process.hrtime.bigint() - began) / 1e6) + "\\n"));
    });
    req.end(body);
  }
});`;

function inNamespace(netns: string, script: string): ChildProcess {
  const child = spawn("ip", ["netns", "exec", netns, process.execPath, "-e", script], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  children.push(child);
  return child;
}

it("exec true: owner vs routed through a non-owner", async () => {
  cluster = await startMultiHost("bench-routed", { hosts: 2 });
  const [a, b] = cluster.hosts as [Host, Host];
  const id = await a.createSandbox();
  await a.waitFor(id, "running");
  const server = inNamespace(a.netns, rawServer(a.address));
  await once(server.stdout as NodeJS.ReadableStream, "data");
  const client = inNamespace(b.netns, rawClient(a.address));
  const rawHop = async () => {
    (client.stdin as NodeJS.WritableStream).write("\n");
    const [line] = (await once(client.stdout as NodeJS.ReadableStream, "data")) as [Buffer];
    return Number(line.toString("utf8").trim());
  };
  const timed = async (host: Host) => {
    const began = performance.now();
    const res = await host.exec(id, ["true"]);
    if (res.status !== 200) throw new Error(res.raw);
    return performance.now() - began;
  };
  for (let i = 0; i < WARMUP; i++) {
    await timed(a);
    await timed(b);
    await rawHop();
  }
  const owner: number[] = [];
  const routed: number[] = [];
  const hop: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    owner.push(await timed(a));
    routed.push(await timed(b));
    hop.push(await rawHop());
  }
  const row = (name: string, values: number[]) =>
    `${name.padEnd(8)} p50 ${percentile(values, 50).toFixed(2)} ms  p90 ${percentile(values, 90).toFixed(2)} ms  p99 ${percentile(values, 99).toFixed(2)} ms`;
  const delta = percentile(routed, 50) - percentile(owner, 50);
  process.stdout.write(
    `exec true, ${ROUNDS} rounds alternated\n${row("owner", owner)}\n${row("routed", routed)}\n${row("raw hop", hop)}\n` +
      `p50 delta ${delta.toFixed(2)} ms (routed - owner); beyond the raw hop B -> A ${(delta - percentile(hop, 50)).toFixed(2)} ms\n`,
  );
  const figures = (values: number[]) => ({
    p50: percentile(values, 50),
    p90: percentile(values, 90),
    p99: percentile(values, 99),
  });
  if (process.env.BENCH_OUTPUT) {
    const result = {
      rounds: ROUNDS,
      ownerMs: figures(owner),
      routedMs: figures(routed),
      rawHopMs: figures(hop),
      p50DeltaMs: delta,
      p50DeltaBeyondRawHopMs: delta - percentile(hop, 50),
      loadavg: os.loadavg().map((v) => Math.round(v * 100) / 100),
    };
    writeFileSync(process.env.BENCH_OUTPUT, `${JSON.stringify(result, null, 2)}\n`);
  }
});
