// Background processes (issue 26) through a real server (the `make run` bundle, PGlite) on real
// runc sandboxes:
//   throughput: one process's stdout to a reader: `cat` of MIB MiB in the sandbox, read as the
//     server-sent events of GET .../output:stream (attached before the bytes flow: the process
//     waits for its stdin, sent once the stream is open) until its end, against `runc exec <id>
//     cat` of the same file into this process, alternated per repetition. Target >= 200 MB/s.
//   idle: SANDBOXES sandboxes with PER idle background processes each (`sleep 3600`): the
//     server's RSS before and after starting them, and its CPU over IDLE_SECONDS while they idle.
// Usage: node --import tsx bench/processes.ts [--part throughput|idle|both] [--mib 256] [--reps 3]
//        [--sandboxes 50] [--per 20] [--idle-seconds 30]
import { execFile, spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { pushTestImages } from "../test/support/registry.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { recordResults } from "./lib/results.js";
import { openBenchRig } from "./lib/rig.js";

const run = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const PART = args.get("part") ?? "both";
const MIB = Number(args.get("mib") ?? 256);
const REPS = Number(args.get("reps") ?? 3);
const SANDBOXES = Number(args.get("sandboxes") ?? 50);
const PER = Number(args.get("per") ?? 20);
const IDLE_SECONDS = Number(args.get("idle-seconds") ?? 30);
const TARGET_MBPS = 200;

async function procStat(pid: number): Promise<{ rssMiB: number; cpuTicks: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
  const stat = (await readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1]?.split(" ") ?? [];
  return { rssMiB: Math.round(rss * 10) / 10, cpuTicks: Number(stat[11]) + Number(stat[12]) };
}

const results: Record<string, unknown> = { mib: MIB, reps: REPS };
const rig = await openBenchRig("processes", ROOT);
const { registry, key } = rig;
try {
  await pushTestImages(registry);
  const server = await rig.start({
    WARREN_SANDBOX_POOL_SIZE: "0",
    WARREN_SANDBOX_MEMORY_MB: "64",
    WARREN_SANDBOX_CPU_MILLIS: "100",
    WARREN_STORAGE_OVERCOMMIT: "1000",
    WARREN_QUOTA_SANDBOXES_RUNNING: "100",
    WARREN_QUOTA_SANDBOXES_TOTAL: "1000",
    WARREN_QUOTA_WORKSPACE_GIB: "100000",
  });
  const api = async (method: string, url: string, body?: unknown) => {
    const response = await call<Record<string, unknown>>(server.baseUrl, key, method, url, body);
    if (response.status >= 300)
      throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const createRunning = async () => {
    const created = (await api("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: "none" })) as {
      id: string;
    };
    for (;;) {
      const got = (await api("GET", `/v1/sandboxes/${created.id}?wait_state=running&wait_timeout_seconds=25`)) as {
        sandbox: { state: string };
      };
      if (got.sandbox.state === "running") return created.id;
    }
  };

  if (PART === "throughput" || PART === "both") {
    const id = await createRunning();
    const runc = ["--root", path.join(rig.runtimeRoot, "runc"), "exec", id];
    await run("runc", [...runc, "sh", "-c", `head -c ${MIB}m /dev/urandom > /workspace/data`], { maxBuffer: 1 << 20 });
    const bytes = MIB * 1024 * 1024;

    const viaWarren = async () => {
      const started = performance.now();
      const proc = (await api("POST", `/v1/sandboxes/${id}/processes`, {
        cmd: ["sh", "-c", "read go; exec cat /workspace/data"],
        stdin: true,
      })) as { id: string };
      const response = await fetch(`${server.baseUrl}/v1/sandboxes/${id}/processes/${proc.id}/output:stream`, {
        headers: { authorization: `Bearer ${key}` },
      });
      if (response.status !== 200 || !response.body) throw new Error(`stream: ${response.status}`);
      await api("POST", `/v1/sandboxes/${id}/processes/${proc.id}:stdin`, { data: "go\n" });
      let got = 0;
      let gap = false;
      let text = "";
      const decoder = new TextDecoder();
      for await (const piece of response.body as unknown as AsyncIterable<Uint8Array>) {
        text += decoder.decode(piece, { stream: true });
        let end = text.indexOf("\n\n");
        while (end >= 0) {
          const block = text.slice(0, end);
          text = text.slice(end + 2);
          end = text.indexOf("\n\n");
          const event = /^event: (\w+)/.exec(block)?.[1];
          const data = block.slice(block.indexOf("data: ") + 6);
          if (event === "stdout") got += Buffer.from((JSON.parse(data) as { data: string }).data, "base64").length;
          if (event === "gap") gap = true;
        }
      }
      const ms = performance.now() - started;
      if (got !== bytes || gap) throw new Error(`read ${got} of ${bytes} bytes (gap: ${gap})`);
      return ms;
    };
    const viaRunc = () =>
      new Promise<number>((resolve, reject) => {
        const started = performance.now();
        const child = spawn("runc", [...runc, "cat", "/workspace/data"], { stdio: ["ignore", "pipe", "inherit"] });
        let got = 0;
        child.stdout.on("data", (chunk: Buffer) => {
          got += chunk.length;
        });
        child.once("error", reject);
        child.once("close", (code) =>
          code === 0 && got === bytes ? resolve(performance.now() - started) : reject(new Error(`runc cat: ${code}`)),
        );
      });
    const times = { warren: [] as number[], runc: [] as number[] };
    await viaWarren();
    await viaRunc();
    for (let rep = 0; rep < REPS; rep++) {
      const order = rep % 2 === 0 ? ["warren", "runc"] : ["runc", "warren"];
      for (const which of order) {
        if (which === "warren") times.warren.push(await viaWarren());
        else times.runc.push(await viaRunc());
      }
    }
    const mbps = (ms: number) => Math.round((bytes / 1e6 / (ms / 1000)) * 10) / 10;
    const best = (list: number[]) => Math.min(...list);
    results.throughput = {
      warrenMs: times.warren.map(Math.round),
      runcMs: times.runc.map(Math.round),
      warrenBestMBps: mbps(best(times.warren)),
      runcBestMBps: mbps(best(times.runc)),
      ratio: Math.round((best(times.warren) / best(times.runc)) * 100) / 100,
      target: `>= ${TARGET_MBPS} MB/s`,
      pass: mbps(best(times.warren)) >= TARGET_MBPS,
    };
    console.log(JSON.stringify(results.throughput));
    await api("DELETE", `/v1/sandboxes/${id}`);
  }

  if (PART === "idle" || PART === "both") {
    const pid = server.child.pid as number;
    const ids: string[] = [];
    for (let i = 0; i < SANDBOXES; i++) ids.push(await createRunning());
    const before = await procStat(pid);
    const startedAt = performance.now();
    for (const id of ids)
      for (let j = 0; j < PER; j++) await api("POST", `/v1/sandboxes/${id}/processes`, { cmd: ["sleep", "3600"] });
    const startMs = performance.now() - startedAt;
    const loaded = await procStat(pid);
    await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
    const idled = await procStat(pid);
    const ticks = Number((await run("getconf", ["CLK_TCK"])).stdout.trim());
    results.idle = {
      sandboxes: SANDBOXES,
      processes: SANDBOXES * PER,
      startAllMs: Math.round(startMs),
      rssBeforeMiB: before.rssMiB,
      rssAfterStartMiB: loaded.rssMiB,
      rssAfterIdleMiB: idled.rssMiB,
      rssGrowthMiB: Math.round((idled.rssMiB - before.rssMiB) * 10) / 10,
      idleCpuPct: Math.round(((idled.cpuTicks - loaded.cpuTicks) / ticks / IDLE_SECONDS) * 1000) / 10,
      idleSeconds: IDLE_SECONDS,
    };
    console.log(JSON.stringify(results.idle));
    for (const id of ids) await api("DELETE", `/v1/sandboxes/${id}`);
  }
  await recordResults(PART === "both" ? "processes.json" : `processes-${PART}.json`, results);
} finally {
  await rig.close();
}
process.exit(0);
