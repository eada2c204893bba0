import path from "node:path";
import { fileURLToPath } from "node:url";
import { pushTestImages } from "../test/support/registry.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { openRawRunc } from "./lib/raw-runc.js";
import { recordResults } from "./lib/results.js";
import { openBenchRig } from "./lib/rig.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const CREATES = Number(args.get("creates") ?? 50);
const EXECS = Number(args.get("execs") ?? 100);
const NETWORKS = (args.get("network") ?? "none,public").split(",");
const POOL = args.get("pool");
const CREATE_RATIO_TARGET = 1.3;
const EXEC_P50_TARGET_MS = 3;
const DEFAULT_RESOURCES = { memoryMiB: 512, cpuMillis: 1000, pids: 512 };

const summary = (values: number[]) => ({
  n: values.length,
  p50: Math.round(percentile(values, 50) * 10) / 10,
  p90: Math.round(percentile(values, 90) * 10) / 10,
  p99: Math.round(percentile(values, 99) * 10) / 10,
});

/** Raw and Warren side by side: both summaries, the ratio of p50s and the verdict. */
function sideBySide(raw: number[], warren: number[], target: { ratio?: number; warrenP50Ms?: number }) {
  const r = summary(raw);
  const w = summary(warren);
  const ratio = Math.round((w.p50 / r.p50) * 100) / 100;
  const pass =
    (target.ratio === undefined || ratio <= target.ratio) &&
    (target.warrenP50Ms === undefined || w.p50 <= target.warrenP50Ms);
  return {
    raw: r,
    warren: w,
    ratioP50: ratio,
    target: target.ratio !== undefined ? `p50 ratio <= ${target.ratio}` : `Warren p50 <= ${target.warrenP50Ms} ms`,
    pass,
  };
}

const results: Record<string, unknown> = {};
const rig = await openBenchRig("sbx", ROOT);
try {
  await pushTestImages(rig.registry);
  const key = rig.key;
  const server = await rig.start({
    WARREN_QUOTA_SANDBOXES_RUNNING: "100",
    WARREN_QUOTA_SANDBOXES_TOTAL: "200",
    ...(POOL !== undefined ? { WARREN_SANDBOX_POOL_SIZE: POOL } : {}),
  });
  const api = async (method: string, url: string, body?: unknown) => {
    const response = await call<Record<string, unknown>>(server.baseUrl, key, method, url, body);
    if (response.status >= 300)
      throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const waitState = async (id: string, state: string) => {
    const got = (await api("GET", `/v1/sandboxes/${id}?wait_state=${state}&wait_timeout_seconds=25`)) as {
      sandbox: { state: string; state_reason?: unknown };
    };
    if (got.sandbox.state !== state)
      throw new Error(`${id} is ${got.sandbox.state}, not ${state}: ${JSON.stringify(got.sandbox)}`);
  };
  const createRunning = async (network: string) => {
    const started = performance.now();
    const created = (await api("POST", "/v1/sandboxes", { command: ["sleep", "3600"], network_access: network })) as {
      id: string;
    };
    await waitState(created.id, "running");
    return { id: created.id, ms: performance.now() - started };
  };
  // Warm the image cache (the first create pulls and unpacks it).
  const warm = await createRunning("none");
  results.firstCreateWithPullMs = Math.round(warm.ms);

  const plain = await openRawRunc(DEFAULT_RESOURCES);
  rig.onClose(() => plain.close());
  const rawOnce = async () => {
    const { id, ms } = await plain.run();
    await plain.remove(id);
    return ms;
  };
  await rawOnce();
  const remove = async (id: string) => {
    await api("DELETE", `/v1/sandboxes/${id}`);
    await waitState(id, "terminated");
  };
  for (const network of NETWORKS) {
    const rawTimes: number[] = [];
    const warrenTimes: number[] = [];
    const warrenOnce = async () => {
      const { id, ms } = await createRunning(network);
      await remove(id);
      return ms;
    };
    // One unmeasured round: a pool (when on) is full afterwards, as in steady use.
    await warrenOnce();
    for (let i = 0; i < CREATES; i++) {
      if (i % 2 === 0) {
        rawTimes.push(await rawOnce());
        warrenTimes.push(await warrenOnce());
      } else {
        warrenTimes.push(await warrenOnce());
        rawTimes.push(await rawOnce());
      }
    }
    results[`createToRunning_${network}`] = sideBySide(rawTimes, warrenTimes, { ratio: CREATE_RATIO_TARGET });
  }

  const target = warm.id;
  const rawTarget = await plain.run();
  const rawExecTimes: number[] = [];
  const execTimes: number[] = [];
  const warrenExec = async () => {
    const started = performance.now();
    await api("POST", `/v1/sandboxes/${target}:exec`, { cmd: ["true"] });
    return performance.now() - started;
  };
  await warrenExec();
  // Alternating blocks, not single samples: a `runc exec` leaves its Go processes exiting on
  // the other core for a few ms, which a Warren exec right after it would pay for.
  const BLOCK = 10;
  for (let i = 0; i < EXECS; i += BLOCK) {
    const n = Math.min(BLOCK, EXECS - i);
    const rawBlock = async () => {
      for (let j = 0; j < n; j++) rawExecTimes.push(await plain.execTrue(rawTarget.id));
    };
    const warrenBlock = async () => {
      for (let j = 0; j < n; j++) execTimes.push(await warrenExec());
    };
    if ((i / BLOCK) % 2 === 0) {
      await rawBlock();
      await warrenBlock();
    } else {
      await warrenBlock();
      await rawBlock();
    }
  }
  await plain.remove(rawTarget.id);
  results.execTrue = sideBySide(rawExecTimes, execTimes, { warrenP50Ms: EXEC_P50_TARGET_MS });
  const bigTimes: number[] = [];
  for (let i = 0; i < Math.max(10, EXECS / 4); i++) {
    const started = performance.now();
    const out = (await api("POST", `/v1/sandboxes/${target}:exec`, {
      cmd: ["sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' a"],
    })) as { stdout: string };
    bigTimes.push(performance.now() - started);
    if (out.stdout.length !== 1_048_576) throw new Error(`expected 1 MiB of output, got ${out.stdout.length}`);
  }
  results.exec1MiB = summary(bigTimes);

  const wakeTimes: number[] = [];
  for (let i = 0; i < 20; i++) {
    await api("PATCH", `/v1/sandboxes/${target}`, { state: "stopped" });
    await waitState(target, "stopped");
    const started = performance.now();
    await api("PATCH", `/v1/sandboxes/${target}`, { state: "running" });
    await waitState(target, "running");
    wakeTimes.push(performance.now() - started);
  }
  results.wakeToRunning = summary(wakeTimes);

  const concurrent = await Promise.allSettled(Array.from({ length: 20 }, () => createRunning("none")));
  const ok = concurrent.filter((r) => r.status === "fulfilled") as PromiseFulfilledResult<{ id: string; ms: number }>[];
  results.concurrentCreates = {
    requested: 20,
    running: ok.length,
    failures: concurrent.filter((r) => r.status === "rejected").map((r) => String((r as PromiseRejectedResult).reason)),
    ...summary(ok.map((r) => r.value.ms)),
  };
  for (const r of ok) await api("DELETE", `/v1/sandboxes/${r.value.id}`);
  await api("DELETE", `/v1/sandboxes/${target}`);

  const verdicts = Object.entries(results)
    .filter(([, value]) => typeof value === "object" && value !== null && "pass" in value)
    .map(([name, value]) => `${name}: ${(value as { pass: boolean }).pass ? "PASS" : "FAIL"}`);
  results.verdicts = verdicts;
  await recordResults("sandboxes.json", results);
} finally {
  await rig.close();
}
process.exit(0);
