// WarrenMetrics without a server: the scrape-time readers (sandbox states cached and shared,
// image pull bytes as a monotonic counter) and the bounded label sets.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseExposition, sampleSum } from "../../../test/support/prometheus.js";
import { WarrenMetrics } from "./registry.js";

const scrape = async (metrics: WarrenMetrics) => parseExposition((await metrics.scrape()).body);

describe("WarrenMetrics", () => {
  it("reads sandbox states once per cache period, one read shared by concurrent scrapes", async () => {
    let reads = 0;
    let counts: Record<string, number> = { running: 2, stopped: 1 };
    const cached = new WarrenMetrics({ stateCacheSeconds: 60 });
    cached.countSandboxStatesWith(async () => {
      reads++;
      await new Promise((resolve) => setTimeout(resolve, 20));
      return counts;
    });
    const [a, b] = await Promise.all([scrape(cached), scrape(cached)]);
    assert.equal(reads, 1, "concurrent scrapes share one store read");
    assert.equal(sampleSum(a, "warren_sandboxes", { state: "running" }), 2);
    assert.equal(sampleSum(b, "warren_sandboxes", { state: "stopped" }), 1);
    assert.equal(sampleSum(a, "warren_sandboxes", { state: "failed" }), 0, "a state with no sandbox reads 0");
    counts = { running: 5 };
    assert.equal(sampleSum(await scrape(cached), "warren_sandboxes", { state: "running" }), 2, "cached");
    assert.equal(reads, 1);

    const fresh = new WarrenMetrics({ stateCacheSeconds: 0 });
    fresh.countSandboxStatesWith(async () => {
      reads++;
      return counts;
    });
    await scrape(fresh);
    const second = await scrape(fresh);
    assert.equal(reads, 3, "without a cache every scrape reads");
    assert.equal(sampleSum(second, "warren_sandboxes", { state: "running" }), 5);
    assert.equal(sampleSum(second, "warren_sandboxes", { state: "stopped" }), 0, "a state that emptied reads 0");
  });

  it("counts image pull bytes from the driver's running total, never backwards", async () => {
    let total = 0;
    const metrics = new WarrenMetrics({ stateCacheSeconds: 0 });
    metrics.readPullBytesFrom(() => total);
    assert.equal(sampleSum(await scrape(metrics), "warren_image_pull_bytes_total"), 0);
    total = 1000;
    assert.equal(sampleSum(await scrape(metrics), "warren_image_pull_bytes_total"), 1000);
    total = 1500;
    assert.equal(sampleSum(await scrape(metrics), "warren_image_pull_bytes_total"), 1500);
    total = 10; // a reader that restarted its count: the counter holds, then grows past it again
    assert.equal(sampleSum(await scrape(metrics), "warren_image_pull_bytes_total"), 1500);
  });

  it("records requests and outcomes under the labels it is given, with the process metrics optional", async () => {
    const metrics = new WarrenMetrics({ stateCacheSeconds: 0 });
    metrics.requestAnswered("WhoAmI", 200, 0.002);
    metrics.requestAnswered("WhoAmI", 200, 0.004);
    metrics.execEnded("timeout", 1.5);
    metrics.sqlRefused("cost");
    metrics.replicationEnded("replicated", 2, 4096);
    metrics.replicationEnded("failed", 1);
    const exposition = await scrape(metrics);
    assert.equal(sampleSum(exposition, "warren_http_requests_total", { operation: "WhoAmI", status: "200" }), 2);
    assert.equal(sampleSum(exposition, "warren_http_request_duration_seconds_bucket", { le: "0.0025" }), 1);
    assert.equal(sampleSum(exposition, "warren_exec_duration_seconds_sum", { outcome: "timeout" }), 1.5);
    assert.equal(sampleSum(exposition, "warren_telemetry_sql_refusals_total", { reason: "cost" }), 1);
    assert.equal(sampleSum(exposition, "warren_snapshot_replication_uploaded_bytes_total"), 4096);
    assert.equal(sampleSum(exposition, "warren_snapshot_replication_duration_seconds_count", {}), 2);
    assert.equal(exposition.types.has("process_cpu_user_seconds_total"), false, "process metrics are opt-in here");
  });
});
