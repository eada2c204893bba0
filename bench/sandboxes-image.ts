import path from "node:path";
import { fileURLToPath } from "node:url";
import { pushMarkedImage, pushTestImages } from "../test/support/registry.js";
import { call } from "./lib/api.js";
import { benchArgs } from "./lib/args.js";
import { openRawRunc } from "./lib/raw-runc.js";
import { recordResults } from "./lib/results.js";
import { openBenchRig } from "./lib/rig.js";
import { percentile } from "./lib/stats.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const args = benchArgs();
const CREATES = Number(args.get("creates") ?? 20);
const ROUNDS = Number(args.get("rounds") ?? 3);
const MODES = (args.get("modes") ?? "warm,cold").split(",");
const NETWORK = args.get("network") ?? "none";
// Members per recent image: with 1 (the default) a create arriving while the claimed member's
// replacement is still being made takes the normal path; 2 keeps one ready for back-to-back creates.
const RECENT_SIZE = args.get("recent-size") ?? "2";
const RATIO_TARGET = 1.3;
const DEFAULT_RESOURCES = { memoryMiB: 512, cpuMillis: 1000, pids: 512 };

const round1 = (value: number) => Math.round(value * 10) / 10;
const summary = (values: number[]) => ({
  n: values.length,
  p50: round1(percentile(values, 50)),
  p95: round1(percentile(values, 95)),
});
const compare = (raw: number[], warren: number[]) => {
  const r = summary(raw);
  const w = summary(warren);
  return { raw: r, warren: w, ratioP50: Math.round((w.p50 / r.p50) * 100) / 100 };
};

/** Pool hits and misses of the server's create -> running histogram so far. */
function poolCounts(metrics: string): { hit: number; miss: number } {
  const counts = { hit: 0, miss: 0 };
  for (const line of metrics.split("\n")) {
    const match = /^warren_sandbox_create_to_running_seconds_count\{([^}]*)\} (\d+)/.exec(line);
    const pool = match ? /pool="(hit|miss)"/.exec(match[1] as string)?.[1] : undefined;
    if (match && (pool === "hit" || pool === "miss")) counts[pool] += Number(match[2]);
  }
  return counts;
}

const results: Record<string, unknown> = {};
const rig = await openBenchRig("sbximg", ROOT);
try {
  await pushTestImages(rig.registry);
  await pushMarkedImage(rig.registry, "test/second", "second");
  const image = `${rig.registry.host}/test/second:latest`;
  const plain = await openRawRunc(DEFAULT_RESOURCES);
  rig.onClose(() => plain.close());
  const rawOnce = async () => {
    const { id, ms } = await plain.run();
    await plain.remove(id);
    return ms;
  };
  await rawOnce();
  for (const mode of MODES) {
    const server = await rig.start({
      WARREN_QUOTA_SANDBOXES_RUNNING: "100",
      WARREN_QUOTA_SANDBOXES_TOTAL: "1000",
      ...(mode === "cold"
        ? { WARREN_SANDBOX_POOL_RECENT_IMAGES: "0" }
        : { WARREN_SANDBOX_POOL_RECENT_SIZE: RECENT_SIZE }),
    });
    const api = async (method: string, url: string, body?: unknown) => {
      const response = await call<Record<string, unknown>>(server.baseUrl, rig.key, method, url, body);
      if (response.status >= 300)
        throw new Error(`${method} ${url} -> ${response.status} ${JSON.stringify(response.body)}`);
      return response.body;
    };
    const metrics = async () => {
      const response = await fetch(`${server.baseUrl}/metrics`, { headers: { authorization: `Bearer ${rig.key}` } });
      return poolCounts(await response.text());
    };
    const waitState = async (id: string, state: string) => {
      const got = (await api("GET", `/v1/sandboxes/${id}?wait_state=${state}&wait_timeout_seconds=25`)) as {
        sandbox: { state: string };
      };
      if (got.sandbox.state !== state) throw new Error(`${id} is ${got.sandbox.state}, not ${state}`);
    };
    const warrenOnce = async () => {
      const started = performance.now();
      const created = (await api("POST", "/v1/sandboxes", {
        image,
        command: ["sleep", "3600"],
        network_access: NETWORK,
      })) as { id: string };
      await waitState(created.id, "running");
      const ms = performance.now() - started;
      await api("DELETE", `/v1/sandboxes/${created.id}`);
      await waitState(created.id, "terminated");
      return ms;
    };
    // Unmeasured: the first create pulls the image (and makes it recent), the second is steady use.
    await warrenOnce();
    await warrenOnce();
    const before = await metrics();
    const allRaw: number[] = [];
    const allWarren: number[] = [];
    const rounds: unknown[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const raw: number[] = [];
      const warren: number[] = [];
      for (let i = 0; i < CREATES; i++) {
        if (i % 2 === 0) {
          raw.push(await rawOnce());
          warren.push(await warrenOnce());
        } else {
          warren.push(await warrenOnce());
          raw.push(await rawOnce());
        }
      }
      rounds.push(compare(raw, warren));
      allRaw.push(...raw);
      allWarren.push(...warren);
    }
    const after = await metrics();
    const overall = compare(allRaw, allWarren);
    results[`createToRunning_${mode}_${NETWORK}`] = {
      ...overall,
      rounds,
      pool: { hit: after.hit - before.hit, miss: after.miss - before.miss },
      ...(mode === "cold" ? {} : { recentSize: Number(RECENT_SIZE) }),
      target: `p50 ratio <= ${RATIO_TARGET}`,
      pass: overall.ratioP50 <= RATIO_TARGET,
    };
    await server.stop();
  }
  await recordResults("sandboxes-image.json", results);
} finally {
  await rig.close();
}
process.exit(0);
