// The SSH gateway's round trip with the stock OpenSSH client, through a real server (the
// `make run` bundle, WARREN_SSH_LISTEN on a free port) on a real runc sandbox, side by side
// with the same `true` run by raw `runc exec` and by the API's exec, interleaved in blocks
// of 10 with the order swapped every block:
//   `ssh -p <port> <sandbox>@127.0.0.1 true` (a new connection each time: key exchange,
//   password auth with an API key, session, exit status) p50 <= 150 ms
// Usage: node --import tsx bench/ssh.ts [--runs 50]
import { execFile, spawn } from "node:child_process";
import { chmod, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { pushTestImages } from "../test/support/registry.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { openRawRunc } from "./lib/raw-runc.js";
import { recordResults } from "./lib/results.js";
import { openBenchRig } from "./lib/rig.js";
import { freePort } from "./lib/server.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const RUNS = Number(args.get("runs") ?? 50);
const SSH_P50_TARGET_MS = 150;
const BLOCK = 10;

const summary = (values: number[]) => ({
  n: values.length,
  p50: Math.round(percentile(values, 50) * 10) / 10,
  p90: Math.round(percentile(values, 90) * 10) / 10,
  p99: Math.round(percentile(values, 99) * 10) / 10,
});

const results: Record<string, unknown> = {};
const rig = await openBenchRig("ssh", ROOT);
const { registry, tmp, key } = rig;
try {
  await pushTestImages(registry);
  const sshPort = await freePort();
  const server = await rig.start({ WARREN_SSH_LISTEN: `127.0.0.1:${sshPort}` });
  const api = async (method: string, url: string, body?: unknown) => {
    const response = await call<Record<string, unknown>>(server.baseUrl, key, method, url, body);
    if (response.status >= 300)
      throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const created = (await api("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" })) as {
    id: string;
  };
  const got = (await api("GET", `/v1/sandboxes/${created.id}?wait_state=running&wait_timeout_seconds=25`)) as {
    sandbox: { state: string; ssh?: { host: string; port: number; user: string } };
  };
  const ssh = got.sandbox.ssh;
  if (got.sandbox.state !== "running" || !ssh) throw new Error(`not running with ssh: ${JSON.stringify(got.sandbox)}`);

  const askpass = path.join(tmp, "askpass");
  await writeFile(askpass, '#!/bin/sh\nprintf "%s\\n" "$WARREN_BENCH_SECRET"\n');
  await chmod(askpass, 0o700);
  const sshTrue = () =>
    new Promise<number>((resolve, reject) => {
      const started = performance.now();
      const child = spawn(
        "/usr/bin/ssh",
        [
          ...["-F", "/dev/null", "-p", String(ssh.port), "-o", "StrictHostKeyChecking=no"],
          ...["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "PubkeyAuthentication=no"],
          ...["-o", "PreferredAuthentications=password", `${ssh.user}@${ssh.host}`, "true"],
        ],
        {
          env: { PATH: "/usr/bin:/bin", SSH_ASKPASS: askpass, SSH_ASKPASS_REQUIRE: "force", WARREN_BENCH_SECRET: key },
          stdio: ["ignore", "ignore", "pipe"],
        },
      );
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => {
        stderr += d.toString();
      });
      child.on("error", reject);
      child.on("close", (code) => {
        if (code === 0) resolve(performance.now() - started);
        else reject(new Error(`ssh exited ${code}: ${stderr}`));
      });
    });
  const apiTrue = async () => {
    const started = performance.now();
    await api("POST", `/v1/sandboxes/${created.id}:exec`, { cmd: ["true"] });
    return performance.now() - started;
  };
  // The bare cost of the client: the same ssh binary printing its version (no connection).
  const clientOnly = async () => {
    const started = performance.now();
    await promisify(execFile)("/usr/bin/ssh", ["-V"]);
    return performance.now() - started;
  };

  const plain = await openRawRunc({ memoryMiB: 512, cpuMillis: 1000, pids: 512 });
  rig.onClose(() => plain.close());
  const rawTarget = await plain.run();
  await sshTrue();
  await apiTrue();
  await plain.execTrue(rawTarget.id);
  const times = { ssh: [] as number[], api: [] as number[], runc: [] as number[], client: [] as number[] };
  for (let i = 0; i < RUNS; i += BLOCK) {
    const n = Math.min(BLOCK, RUNS - i);
    const blocks = [
      async () => {
        for (let j = 0; j < n; j++) times.ssh.push(await sshTrue());
      },
      async () => {
        for (let j = 0; j < n; j++) times.runc.push(await plain.execTrue(rawTarget.id));
      },
      async () => {
        for (let j = 0; j < n; j++) times.api.push(await apiTrue());
      },
      async () => {
        for (let j = 0; j < n; j++) times.client.push(await clientOnly());
      },
    ];
    if ((i / BLOCK) % 2 === 1) blocks.reverse();
    for (const block of blocks) await block();
  }
  await plain.remove(rawTarget.id);
  await api("DELETE", `/v1/sandboxes/${created.id}`);
  const sshSummary = summary(times.ssh);
  results.sshTrue = {
    ...sshSummary,
    target: `p50 <= ${SSH_P50_TARGET_MS} ms`,
    pass: sshSummary.p50 <= SSH_P50_TARGET_MS,
  };
  results.runcExecTrue = summary(times.runc);
  results.apiExecTrue = summary(times.api);
  results.sshClientVersionOnly = summary(times.client);
  await recordResults("ssh.json", results);
} finally {
  await rig.close();
}
process.exit(0);
