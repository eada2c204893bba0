// Sandbox metrics and traces on real runc sandboxes: create -> running split by image cache
// (a cold image, then the warm default), exec duration and outcome, reconcile lag and steps,
// image pull bytes, snapshot and replication durations; and the OTLP/HTTP export of a
// request's span and of reconciler steps, received by a small OTLP receiver in this test.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { SnapshotReplicator } from "../src/controllers/snapshot-replicator.js";
import { PooledRuntime } from "../src/drivers/runtime/local/pool.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { newSandboxId } from "../src/modules/sandboxes/service.js";
import { startTestApp, type TestApp } from "./harness.js";
import { openTestBlobStore } from "./support/blob-store.js";
import { type Exposition, parseExposition, sampleSum } from "./support/prometheus.js";
import { type CrashRig, startCrashRig } from "./support/server-process.js";

const OTLP_SECRET = "otlp-collector-credential-5e1f";
/** Largest OTLP request the receiver reads; the exporter batches far smaller ones. */
const MAX_OTLP_BODY = 8 * 1024 * 1024;

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
interface OtlpSpan {
  name: string;
  kind: number;
  traceId: string;
  parentSpanId?: string;
  attributes: { key: string; value: OtlpValue }[];
  status?: { code?: number };
}

/** An OTLP/HTTP traces receiver (the JSON encoding the exporter sends). */
class OtlpReceiver {
  readonly spans: OtlpSpan[] = [];
  readonly serviceNames = new Set<string>();
  readonly authorizations = new Set<string>();
  readonly raw: string[] = [];
  private readonly server: Server;

  constructor() {
    this.server = createServer((req, res) => {
      void this.receive(req).then(
        (status) => res.writeHead(status, { "content-type": "application/json" }).end("{}"),
        () => res.writeHead(400).end(),
      );
    });
  }

  private async receive(req: IncomingMessage): Promise<number> {
    if (req.method !== "POST" || req.url !== "/v1/traces") return 404;
    this.authorizations.add(String(req.headers.authorization));
    let size = 0;
    const chunks: Buffer[] = [];
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > MAX_OTLP_BODY) return 413;
      chunks.push(chunk as Buffer);
    }
    const text = Buffer.concat(chunks).toString("utf8");
    this.raw.push(text);
    const body = JSON.parse(text) as {
      resourceSpans: {
        resource: { attributes: { key: string; value: OtlpValue }[] };
        scopeSpans: { spans: OtlpSpan[] }[];
      }[];
    };
    for (const rs of body.resourceSpans) {
      const service = rs.resource.attributes.find((a) => a.key === "service.name")?.value.stringValue;
      if (service) this.serviceNames.add(service);
      for (const ss of rs.scopeSpans) this.spans.push(...ss.spans);
    }
    return 200;
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1/traces`;
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

const attr = (span: OtlpSpan, key: string) => {
  const value = span.attributes.find((a) => a.key === key)?.value;
  return value?.stringValue ?? (value?.intValue !== undefined ? Number(value.intValue) : undefined);
};

describe("sandbox metrics and traces [pglite]", () => {
  let fixture: RuntimeFixture;
  let t: TestApp;
  let reconciler: SandboxReconciler;
  let replicator: SnapshotReplicator;
  let pool: PooledRuntime;
  const receiver = new OtlpReceiver();
  const owner = () => t.orgA.keys.owner;

  before(async () => {
    const url = await receiver.listen();
    fixture = await startRuntimeFixture("metrics");
    // One pooled sandbox of the default shape, so a default create is a pool hit.
    pool = await PooledRuntime.open(fixture.driver, {
      size: 1,
      image: fixture.busyboxRef,
      memoryMiB: 128,
      cpuMillis: 1000,
      pids: 128,
      newId: newSandboxId,
    });
    const base = (await import("../src/config.js")).loadConfig({});
    t = await startTestApp("pglite", {
      overrides: { runtime: pool, blobs: await openTestBlobStore(path.join(fixture.root, "blobs")) },
      config: {
        sandbox: { ...base.sandbox, defaultImage: fixture.busyboxRef, memoryMiB: 128, pids: 128 },
        metrics: { token: "", stateCacheSeconds: 0 },
        tracing: {
          enabled: true,
          url,
          headers: { authorization: `Bearer ${OTLP_SECRET}` },
          serviceName: "warren-metrics-test",
          sampleRatio: 1,
          exportDelayMs: 100,
        },
      },
    });
    reconciler = new SandboxReconciler(t.c, pool, {
      pids: 128,
      retentionSeconds: 3600,
      publicApiUrl: "http://127.0.0.1:1",
    });
    await reconciler.start();
    replicator = new SnapshotReplicator(t.c, pool, { gcIntervalSeconds: 3600, gcGraceSeconds: 0 });
    await replicator.start();
    pool.startFilling();
    await pool.settled();
  });

  after(async () => {
    await replicator?.stop();
    await reconciler?.stop();
    await pool?.close();
    await t?.close();
    await receiver.close();
    await fixture?.cleanup();
  });

  const scrape = async (): Promise<Exposition> => {
    const res = await t.request("GET", "/metrics", { key: owner() });
    assert.equal(res.status, 200, res.raw);
    return parseExposition(res.raw);
  };
  const createRunning = async (body: Record<string, unknown>) => {
    const created = await t.request("POST", "/v1/sandboxes", {
      key: owner(),
      body: { command: ["sleep", "3600"], network_access: "none", ...body },
    });
    assert.equal(created.status, 200, created.raw);
    const id = created.body.id as string;
    const res = await t.request("GET", `/v1/sandboxes/${id}`, {
      key: owner(),
      query: { wait_state: "running", wait_timeout_seconds: "25" },
    });
    assert.equal((res.body.sandbox as { state: string }).state, "running", res.raw);
    return id;
  };

  it("observes create -> running by image cache, exec by outcome, snapshots and the reconciler", async () => {
    const before = await scrape();
    const startCount = (labels: Record<string, string>) =>
      sampleSum(after, "warren_sandbox_create_to_running_seconds_count", labels) -
      sampleSum(before, "warren_sandbox_create_to_running_seconds_count", labels);
    // An image this host never pulled (a layer beyond busybox's), then the default shape,
    // which the pool serves.
    const cold = await createRunning({ image: `${fixture.registry.host}/test/multi:latest` });
    const warm = await createRunning({});
    const ok = await t.request("POST", `/v1/sandboxes/${warm}:exec`, { key: owner(), body: { cmd: ["true"] } });
    assert.equal(ok.status, 200, ok.raw);
    const slow = await t.request("POST", `/v1/sandboxes/${warm}:exec`, {
      key: owner(),
      body: { cmd: ["sleep", "5"], timeout_seconds: 1 },
    });
    assert.equal(slow.status, 200, slow.raw);
    assert.ok("timeout" in slow.body, slow.raw);
    const snap = await t.request("POST", `/v1/sandboxes/${cold}:snapshot`, {
      key: owner(),
      body: { wait_remote: true, wait_timeout_seconds: 25 },
    });
    assert.equal(snap.status, 200, snap.raw);
    assert.equal(snap.body.durability, "replicated", snap.raw);
    const after = await scrape();

    assert.equal(startCount({ image_cache: "cold", pool: "miss", source: "image" }), 1);
    assert.equal(startCount({ image_cache: "warm", pool: "hit", source: "image" }), 1);
    assert.equal(startCount({}), 2);
    const coldSeconds = sampleSum(after, "warren_sandbox_create_to_running_seconds_sum", { image_cache: "cold" });
    assert.ok(coldSeconds > 0 && coldSeconds < 60, `cold start took ${coldSeconds} s`);
    // The +Inf bucket holds every observation; a bucket below the sum's value cannot hold the cold one alone.
    assert.equal(
      sampleSum(after, "warren_sandbox_create_to_running_seconds_bucket", { image_cache: "cold", le: "+Inf" }),
      sampleSum(after, "warren_sandbox_create_to_running_seconds_count", { image_cache: "cold" }),
    );

    const execDelta = (outcome: string) =>
      sampleSum(after, "warren_exec_duration_seconds_count", { outcome }) -
      sampleSum(before, "warren_exec_duration_seconds_count", { outcome });
    assert.equal(execDelta("completed"), 1);
    assert.equal(execDelta("timeout"), 1);
    const timeoutSeconds =
      sampleSum(after, "warren_exec_duration_seconds_sum", { outcome: "timeout" }) -
      sampleSum(before, "warren_exec_duration_seconds_sum", { outcome: "timeout" });
    assert.ok(timeoutSeconds >= 0.9 && timeoutSeconds < 5, `the timed-out exec took ${timeoutSeconds} s`);

    assert.ok(
      sampleSum(after, "warren_image_pull_bytes_total") > sampleSum(before, "warren_image_pull_bytes_total"),
      "the cold image's layer was downloaded",
    );
    assert.ok(
      sampleSum(after, "warren_reconcile_lag_seconds_count") > sampleSum(before, "warren_reconcile_lag_seconds_count"),
    );
    for (const action of ["materialize", "start"]) {
      assert.ok(
        sampleSum(after, "warren_reconcile_step_duration_seconds_count", { action, result: "ok" }) >= 2,
        `${action} steps are timed`,
      );
    }
    assert.equal(sampleSum(after, "warren_snapshot_duration_seconds_count", { outcome: "sealed" }), 1);
    assert.equal(sampleSum(after, "warren_snapshot_replication_duration_seconds_count", { outcome: "replicated" }), 1);
    assert.ok(sampleSum(after, "warren_snapshot_replication_uploaded_bytes_total") > 0);
    assert.ok(sampleSum(after, "warren_sandboxes", { state: "running" }) >= 2);
    // The storage pool: two running sandboxes' filesystems promised, within what the host backs.
    const promised = sampleSum(after, "warren_storage_bytes", { kind: "promised" });
    assert.ok(promised >= 2 * 2 * 1024 ** 3, `promised ${promised}`);
    assert.ok(sampleSum(after, "warren_storage_bytes", { kind: "host_free" }) > 0);
    assert.ok(
      sampleSum(after, "warren_storage_bytes", { kind: "may_still_write" }) <=
        sampleSum(after, "warren_storage_bytes", { kind: "backable" }),
    );
  });

  it("exports spans of requests and reconciler steps over OTLP/HTTP, without credentials", async () => {
    const id = await createRunning({});
    const whoami = await t.request("GET", "/v1/whoami", { key: owner() });
    assert.equal(whoami.status, 200);
    // A caller's trace context is followed; a malformed one is ignored, never an error.
    const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
    const followed = await t.request("GET", "/v1/whoami", {
      key: owner(),
      headers: { traceparent: `00-${callerTrace}-00f067aa0ba902b7-01` },
    });
    assert.equal(followed.status, 200);
    const malformed = await t.request("GET", "/v1/whoami", {
      key: owner(),
      headers: { traceparent: `00-${"0".repeat(32)}-00f067aa0ba902b7-01` },
    });
    assert.equal(malformed.status, 200);
    await t.c.tracing?.flush();

    assert.deepEqual([...receiver.serviceNames], ["warren-metrics-test"]);
    assert.deepEqual(
      [...receiver.authorizations],
      [`Bearer ${OTLP_SECRET}`],
      "the configured headers go to the receiver",
    );
    const request = receiver.spans.find(
      (s) => s.name === "WhoAmI" && attr(s, "warren.request_id") === whoami.headers["x-request-id"],
    );
    assert.ok(request, "the WhoAmI request's span arrived");
    assert.equal(request.kind, 2, "a SERVER span");
    assert.equal(attr(request, "http.request.method"), "GET");
    assert.equal(attr(request, "http.route"), "/v1/whoami");
    assert.equal(attr(request, "http.response.status_code"), 200);
    assert.equal(attr(request, "warren.org_id"), t.orgA.id);
    const child = receiver.spans.find((s) => attr(s, "warren.request_id") === followed.headers["x-request-id"]);
    assert.equal(child?.traceId, callerTrace, "the request's span joins the caller's trace");
    assert.equal(child?.parentSpanId, "00f067aa0ba902b7");
    const root = receiver.spans.find((s) => attr(s, "warren.request_id") === malformed.headers["x-request-id"]);
    assert.ok(
      root && root.traceId !== "0".repeat(32) && !root.parentSpanId,
      "a malformed traceparent starts a new trace",
    );
    const create = receiver.spans.find((s) => s.name === "CreateSandbox");
    assert.ok(create, "the create's span arrived");
    for (const step of ["reconcile materialize", "reconcile start"]) {
      const span = receiver.spans.find((s) => s.name === step && attr(s, "warren.sandbox.id") === id);
      assert.ok(span, `${step} of ${id} arrived`);
      assert.match(String(attr(span, "warren.sandbox.state")), /^[a-z]+$/);
    }
    const everything = receiver.raw.join("\n");
    for (const secret of [owner(), OTLP_SECRET, t.orgA.keys.member]) {
      assert.ok(!everything.includes(secret), "no credential in any exported span");
    }
    // The sandbox's own credential (WARREN_SANDBOX_TOKEN) is no attribute either.
    assert.ok(!/wrn_[A-Za-z0-9_-]{20,}/.test(everything), "no API key in any exported span");
  });
});

describe("metrics and traces of the server bundle (make run's build/warren.mjs)", () => {
  const key = `wrn_${"b".repeat(43)}`;
  const token = "bundle-metrics-token-9c4e21";
  const receiver = new OtlpReceiver();
  let rig: CrashRig;

  before(async () => {
    const endpoint = (await receiver.listen()).replace(/\/v1\/traces$/, "");
    // The settings come from the environment, as an operator sets them.
    rig = await startCrashRig("metrics-bundle", key, (busyboxRef) => ({
      WARREN_DEFAULT_IMAGE: busyboxRef,
      WARREN_SANDBOX_POOL_SIZE: "0",
      WARREN_METRICS_TOKEN: token,
      OTEL_TRACES_EXPORTER: "otlp",
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_EXPORTER_OTLP_HEADERS: `authorization=Bearer%20${OTLP_SECRET}`,
      OTEL_BSP_SCHEDULE_DELAY: "100",
    }));
    await rig.server.start();
  });

  after(async () => {
    await rig?.cleanup();
    await receiver.close();
  });

  it("serves GET /metrics to the token and exports request spans, flushed at shutdown", async () => {
    const whoami = await rig.server.api("GET", "/v1/whoami");
    assert.equal(whoami.status, 200, whoami.raw);
    const refused = await rig.server.api("GET", "/metrics", undefined, { authorization: "Bearer wrong" });
    assert.equal(refused.status, 401, refused.raw);
    assert.equal(refused.body.code, "unauthenticated");
    const res = await fetch(`http://127.0.0.1:${rig.server.port}/metrics`, {
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(res.status, 200);
    const exposition = parseExposition(await res.text());
    assert.equal(sampleSum(exposition, "warren_http_requests_total", { operation: "WhoAmI", status: "200" }), 1);
    assert.ok(sampleSum(exposition, "process_resident_memory_bytes") > 0);
    assert.equal(await rig.server.stop("SIGTERM"), 0);
    assert.ok(receiver.serviceNames.has("warren"));
    assert.ok(
      receiver.spans.some((s) => s.name === "WhoAmI"),
      "the span was sent before the process ended",
    );
    assert.deepEqual([...receiver.authorizations], [`Bearer ${OTLP_SECRET}`]);
    assert.ok(!receiver.raw.join("\n").includes(key), "no API key in any exported span");
  });
});
