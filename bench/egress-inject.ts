// Secret egress overhead: a 1 KB HTTPS POST (1 KB answer) through the interceptor (CONNECT
// to a loopback gateway, TLS under the egress CA, the secret resolved from the store and
// injected, TLS again to the upstream, the answer scrubbed, a ledger entry) side by side
// with the same request made directly to the upstream. The server side (the app on PGlite,
// the interceptor, a loopback CONNECT gateway) runs in this process; the upstream and the
// client each run in a process of their own. Sequential requests, on one kept-alive
// connection and with a new connection per request; the two paths alternate in rounds so a
// neighbour's load hits both alike.  Target: p50 added <= 3 ms (kept-alive).
//
//   node --import tsx bench/egress-inject.ts [--requests 2000] [--rounds 4] [--output bench/results/egress-inject.json]
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { loadConfig } from "../src/config.js";
import { startTestApp } from "../test/harness.js";
import { makeTestPki, startTestGateway } from "../test/support/egress.js";
import { API_ONLY_RUNTIME } from "../test/support/fixtures.js";
import { textTable } from "./lib/table.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const HOST = "api.bench-upstream.com";
const TARGET_ADDED_P50_MS = 3;
const { values: args } = parseArgs({
  options: {
    requests: { type: "string", default: "2000" },
    rounds: { type: "string", default: "4" },
    output: { type: "string", default: path.join(ROOT, "bench/results/egress-inject.json") },
  },
});
const requests = Number(args.requests);
const rounds = Number(args.rounds);
const log = (line: string) => process.stderr.write(`[bench:egress] ${line}\n`);
const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0;
};

function peer(argv: string[]): { child: ReturnType<typeof spawn>; output: Promise<string> } {
  const child = spawn(process.execPath, ["--import", "tsx", path.join(ROOT, "bench/lib/egress-peer.ts"), ...argv], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  return {
    child,
    output: new Promise((resolve, reject) => {
      child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`peer exited ${code}`))));
      child.stdout?.on("data", () => {
        if (argv[0] === "upstream" && out.includes("\n")) resolve(out);
      });
    }),
  };
}

const pki = makeTestPki();
const t = await startTestApp("pglite", {
  config: { secretEgress: { modelGatewayHost: "" }, egress: { ...loadConfig({}).egress, extraCaFile: pki.caFile } },
  overrides: { runtime: API_ONLY_RUNTIME },
});
const leaf = pki.leaf([HOST]);
writeFileSync(path.join(pki.dir, "up.key"), leaf.key);
writeFileSync(path.join(pki.dir, "up.pem"), leaf.cert);
const upstream = peer(["upstream", path.join(pki.dir, "up.key"), path.join(pki.dir, "up.pem")]);
try {
  const upstreamPort = Number((await upstream.output).trim());
  await t.request("POST", "/v1/secrets", {
    key: t.orgA.keys.owner,
    body: { name: "bench-token", value: `sk-bench-${"z".repeat(40)}`, dest_host: HOST },
  });
  const created = await t.request("POST", "/v1/sandboxes", {
    key: t.orgA.keys.owner,
    body: { secrets: [{ name: "bench-token" }] },
  });
  const caller = {
    sandboxId: created.body.id as string,
    orgId: t.orgA.id,
    projectId: t.orgA.defaultProjectId,
    runId: created.body.run_id as string,
    mode: "gateway_only" as const,
  };
  const gateway = await startTestGateway(t.c.secretEgress, caller, { [HOST]: upstreamPort });
  const run = async (pathKind: "direct" | "egress", keepAlive: boolean, n: number) => {
    const client = peer([
      "client",
      JSON.stringify({
        path: pathKind,
        host: HOST,
        upstreamPort,
        gatewayPort: gateway.port,
        ca: pathKind === "egress" ? t.c.egressCa.certificatePem : pki.caPem,
        requests: n,
        warmup: Math.min(100, n),
        keepAlive,
      }),
    ]);
    return JSON.parse(await client.output) as number[];
  };
  const loadBefore = os.loadavg();
  const uptime = execFileSync("uptime", { encoding: "utf8" }).trim();
  const samples: Record<string, number[]> = {
    "direct keep-alive": [],
    "egress keep-alive": [],
    "direct new connection": [],
    "egress new connection": [],
  };
  for (let round = 0; round < rounds; round++) {
    log(`round ${round + 1}/${rounds}`);
    samples["direct keep-alive"]?.push(...(await run("direct", true, requests)));
    samples["egress keep-alive"]?.push(...(await run("egress", true, requests)));
    samples["direct new connection"]?.push(...(await run("direct", false, Math.ceil(requests / 10))));
    samples["egress new connection"]?.push(...(await run("egress", false, Math.ceil(requests / 10))));
  }
  await t.c.egressLedger.flush();
  const { rows } = await t.c.db.query<{ n: string }>(
    "SELECT count(*)::text AS n FROM events WHERE run_id = $1 AND name = 'egress.injected'",
    [caller.runId],
  );
  const summary = Object.fromEntries(
    Object.entries(samples).map(([name, values]) => [
      name,
      { n: values.length, p50: percentile(values, 50), p90: percentile(values, 90), p99: percentile(values, 99) },
    ]),
  );
  const added = (kind: string) => ({
    p50: (summary[`egress ${kind}`]?.p50 ?? 0) - (summary[`direct ${kind}`]?.p50 ?? 0),
    p99: (summary[`egress ${kind}`]?.p99 ?? 0) - (summary[`direct ${kind}`]?.p99 ?? 0),
  });
  const result = {
    when: new Date().toISOString(),
    commit: execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim(),
    cpus: os.cpus().length,
    uptime,
    loadBefore,
    loadAfter: os.loadavg(),
    requestsPerRound: requests,
    rounds,
    summary,
    added: { keepAlive: added("keep-alive"), newConnection: added("new connection") },
    ledgerEntries: Number(rows[0]?.n ?? 0),
    targetAddedP50Ms: TARGET_ADDED_P50_MS,
    pass: added("keep-alive").p50 <= TARGET_ADDED_P50_MS,
  };
  process.stdout.write(
    `${textTable([
      ["path", "n", "p50 ms", "p90 ms", "p99 ms"],
      ...Object.entries(summary).map(([name, s]) => [
        name,
        String(s.n),
        s.p50.toFixed(2),
        s.p90.toFixed(2),
        s.p99.toFixed(2),
      ]),
    ])}\n`,
  );
  process.stdout.write(
    `added p50: keep-alive ${result.added.keepAlive.p50.toFixed(2)} ms (target <= ${TARGET_ADDED_P50_MS}), new connection ${result.added.newConnection.p50.toFixed(2)} ms; ledger entries ${result.ledgerEntries}; ${uptime}\n`,
  );
  mkdirSync(path.dirname(args.output), { recursive: true });
  writeFileSync(args.output, `${JSON.stringify(result, null, 2)}\n`);
  await gateway.close();
} finally {
  upstream.child.kill();
  await t.close();
  pki.remove();
}
