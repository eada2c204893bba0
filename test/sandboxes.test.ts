// SandboxService end to end on real runc sandboxes: the API, the reconciler and the local
// driver, against a throwaway docker-registry holding a busybox test image.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import { STORE_KINDS, type TestApp } from "./harness.js";
import { startRuntimeApp } from "./support/runtime-app.js";

for (const store of STORE_KINDS) {
  describe(`sandboxes [${store}]`, () => {
    let fixture: RuntimeFixture;
    let t: TestApp;
    let reconciler: SandboxReconciler;
    const owner = () => t.orgA.keys.owner;

    before(async () => {
      fixture = await startRuntimeFixture(`api-${store}`);
      ({ t, reconciler } = await startRuntimeApp(store, fixture));
    });

    after(async () => {
      await reconciler?.stop();
      await t?.close();
      await fixture?.cleanup();
    });

    const create = (body: Record<string, unknown>, key = owner(), headers: Record<string, string> = {}) =>
      t.request("POST", "/v1/sandboxes", { key, body, headers });
    const waitFor = async (id: string, state: string) => {
      const res = await t.request("GET", `/v1/sandboxes/${id}`, {
        key: owner(),
        query: { wait_state: state, wait_timeout_seconds: "25" },
      });
      assert.equal(res.status, 200, res.raw);
      const sandbox = res.body.sandbox as { state: string; state_reason?: unknown };
      assert.equal(sandbox.state, state, res.raw);
      return sandbox as Record<string, unknown>;
    };
    const exec = (
      id: string,
      cmd: string[],
      extra: Record<string, unknown> = {},
      headers: Record<string, string> = {},
    ) => t.request("POST", `/v1/sandboxes/${id}:exec`, { key: owner(), body: { cmd, ...extra }, headers });

    it("creates, runs, execs, stops, wakes with the workspace kept, and deletes", async () => {
      const created = await create({ command: ["sleep", "3600"], name: "life", network_access: "none" });
      assert.equal(created.status, 200, created.raw);
      const id = created.body.id as string;
      assert.match(id, /^sbx-[0-9a-f]{40}$/);
      assert.equal(created.body.request_state, "requested");
      assert.match(String(created.body.run_id), /^run_/);
      const immediate = await t.request("GET", `/v1/sandboxes/${id}`, { key: owner() });
      assert.equal(immediate.status, 200, "read-your-writes right after create");
      const running = await waitFor(id, "running");
      assert.equal(running.name, "life");
      assert.deepEqual(running.resources, { memory_mb: 128, cpu_millis: 1000 });

      const hi = await exec(id, ["echo", "hi"]);
      assert.equal(hi.status, 200, hi.raw);
      assert.deepEqual(hi.body, { exit: 0, stdout: "hi\n", stderr: "", truncated: false });
      const err = await exec(id, ["sh", "-c", "echo oops >&2; exit 3"]);
      assert.deepEqual(err.body, { exit: 3, stdout: "", stderr: "oops\n", truncated: false });
      assert.equal((await exec(id, ["sh", "-c", "echo kept > /workspace/file"])).body.exit, 0);
      // Each exec is a sandbox.exec event in the sandbox's run, written before the answer.
      const { rows: execEvents } = await t.c.db.query<{ run_id: string; payload: Record<string, unknown> }>(
        "SELECT run_id, payload FROM events WHERE name = 'sandbox.exec' AND payload->>'sandbox_id' = $1 ORDER BY ts_wall_ns",
        [id],
      );
      assert.deepEqual(
        execEvents.map((e) => [e.run_id, e.payload.argv, e.payload.outcome, e.payload.exit, e.payload.stdout_bytes]),
        [
          [created.body.run_id, ["echo", "hi"], "completed", 0, 3],
          [created.body.run_id, ["sh", "-c", "echo oops >&2; exit 3"], "completed", 3, 0],
          [created.body.run_id, ["sh", "-c", "echo kept > /workspace/file"], "completed", 0, 0],
        ],
      );
      assert.ok(execEvents.every((e) => typeof e.payload.duration_ms === "number"));

      const stop = await t.request("PATCH", `/v1/sandboxes/${id}`, { key: owner(), body: { state: "stopped" } });
      assert.equal(stop.status, 200, stop.raw);
      assert.deepEqual(stop.body, { id, request_state: "requested" });
      await waitFor(id, "stopped");
      const refused = await exec(id, ["true"]);
      assert.equal(refused.status, 409);
      assert.deepEqual(Object.keys(refused.body).sort(), ["code", "message", "request_id"]);
      assert.equal(refused.body.code, "sandbox_not_running");

      assert.equal(
        (await t.request("PATCH", `/v1/sandboxes/${id}`, { key: owner(), body: { state: "running" } })).status,
        200,
      );
      await waitFor(id, "running");
      const kept = await exec(id, ["cat", "/workspace/file"]);
      assert.deepEqual(kept.body, { exit: 0, stdout: "kept\n", stderr: "", truncated: false });

      const del = await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
      assert.equal(del.status, 202, del.raw);
      assert.deepEqual(del.body, { id, request_state: "requested" });
      assert.equal(del.headers.location, `/v1/sandboxes/${id}`);
      assert.match(String(del.headers["retry-after"]), /^\d+$/);
      await waitFor(id, "terminated");
      const again = await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
      assert.equal(again.status, 404);
      assert.ok(!(await fixture.driver.list()).includes(id), "the runtime holds nothing of it");
      const reuse = await create({ command: ["sleep", "1"], name: "life", network_access: "none" });
      assert.equal(reuse.status, 200, "a terminated sandbox's name is free again");
      await t.request("DELETE", `/v1/sandboxes/${reuse.body.id}`, { key: owner() });
    });

    it("stops a sandbox whose first process exits and records telemetry in its ambient run", async () => {
      const created = await create({ command: ["sh", "-c", "exit 0"], network_access: "none" });
      const id = created.body.id as string;
      await waitFor(id, "stopped");
      const { rows } = await t.c.db.query<{ name: string; payload: { to?: string } }>(
        "SELECT name, payload FROM events WHERE run_id = $1 ORDER BY ts_wall_ns",
        [created.body.run_id],
      );
      const states = rows.filter((r) => r.name === "sandbox.state_changed").map((r) => r.payload.to);
      assert.deepEqual(states.slice(0, 4), ["reserved", "materializing", "ready", "running"]);
      assert.equal(states.at(-1), "stopped");
      await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
    });

    it("replays an exec with the same Idempotency-Key instead of running it twice", async () => {
      const id = (await create({ command: ["sleep", "3600"], network_access: "none" })).body.id as string;
      await waitFor(id, "running");
      const cmd = ["sh", "-c", "echo x >> /workspace/count; wc -l < /workspace/count"];
      const first = await exec(id, cmd, {}, { "idempotency-key": "exec-1" });
      const second = await exec(id, cmd, {}, { "idempotency-key": "exec-1" });
      assert.deepEqual(second.body, first.body);
      assert.equal((first.body as { stdout: string }).stdout.trim(), "1");
      const conflict = await exec(id, ["true"], {}, { "idempotency-key": "exec-1" });
      assert.equal(conflict.status, 409);
      assert.equal(conflict.body.code, "idempotency_conflict");
      const count = await exec(id, ["sh", "-c", "wc -l < /workspace/count"]);
      assert.equal((count.body as { stdout: string }).stdout.trim(), "1", "the command ran once");
      // The output is kept only where a replay can ask for it (under a key), and sealed there;
      // an exec without a key leaves no record (nothing can ask for it again).
      const { rows: kept } = await t.c.db.query<{ key: string | null; out: number; exit_code: number }>(
        "SELECT idempotency_key AS key, octet_length(coalesce(stdout, ''::bytea)) AS out, exit_code FROM sandbox_execs WHERE sandbox_id = $1 ORDER BY started_at",
        [id],
      );
      assert.deepEqual(
        kept.map((row) => [row.key, Number(row.out) > "1\n".length, row.exit_code]),
        [["exec-1", true, 0]],
      );
      const timedOut = await exec(id, ["sh", "-c", "echo partial; sleep 30"], { timeout_seconds: 1 });
      assert.equal(timedOut.status, 200);
      assert.deepEqual(timedOut.body, { timeout: {}, stdout: "partial\n", stderr: "", truncated: false });
      await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
    });

    it("records a keyed exec before it runs; a retry while it runs answers its outcome", async () => {
      const id = (await create({ command: ["sleep", "3600"], network_access: "none" })).body.id as string;
      await waitFor(id, "running");
      // It runs until the test lets it end (a file), so "while it runs" holds however slow the host.
      const cmd = ["sh", "-c", "echo x >> /tmp/once; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo done"];
      const first = exec(id, cmd, {}, { "idempotency-key": "slow-1" });
      let recorded = false;
      for (const deadline = Date.now() + 60_000; !recorded && Date.now() < deadline; ) {
        const { rows } = await t.c.db.query(
          "SELECT 1 FROM sandbox_execs WHERE sandbox_id = $1 AND idempotency_key = 'slow-1' AND outcome = 'running'",
          [id],
        );
        recorded = rows.length > 0;
        if (!recorded) await new Promise((resolve) => setTimeout(resolve, 10));
      }
      assert.ok(recorded, "the keyed exec is recorded as running while it runs");
      assert.ok(t.c.sandboxes.hasExecInFlight(id), "and is in flight");
      const retry = exec(id, cmd, {}, { "idempotency-key": "slow-1" });
      // Give the retry a moment to arrive while the first runs (arriving later, it replays the same).
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal((await exec(id, ["touch", "/tmp/go"])).status, 200);
      const second = await retry;
      const firstDone = await first;
      assert.deepEqual(firstDone.body, { exit: 0, stdout: "done\n", stderr: "", truncated: false });
      assert.deepEqual(second.body, firstDone.body);
      assert.equal(t.c.sandboxes.hasExecInFlight(id), false);
      const count = await exec(id, ["sh", "-c", "wc -l < /tmp/once"]);
      assert.equal((count.body as { stdout: string }).stdout.trim(), "1", "the command ran once");
      await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
    });

    it("seals exec output kept for a replay; the replay still returns it", async () => {
      const id = (await create({ command: ["sleep", "3600"], network_access: "none" })).body.id as string;
      await waitFor(id, "running");
      const marker = `sealed-${Date.now()}-output`;
      const cmd = ["sh", "-c", `echo ${marker}; echo ${marker}-err >&2`];
      const first = await exec(id, cmd, {}, { "idempotency-key": "sealed-1" });
      assert.deepEqual(first.body, { exit: 0, stdout: `${marker}\n`, stderr: `${marker}-err\n`, truncated: false });
      const { rows } = await t.c.db.query<{ stdout: Uint8Array; stderr: Uint8Array }>(
        "SELECT stdout, stderr FROM sandbox_execs WHERE sandbox_id = $1 AND idempotency_key = 'sealed-1'",
        [id],
      );
      const stored = Buffer.concat([Buffer.from(rows[0]?.stdout ?? []), Buffer.from(rows[0]?.stderr ?? [])]);
      assert.ok(stored.length > 2 * marker.length, "the output is kept");
      assert.ok(!stored.includes(marker), "the output is stored in plaintext");
      const replay = await exec(id, cmd, {}, { "idempotency-key": "sealed-1" });
      assert.equal(replay.status, 200, replay.raw);
      assert.deepEqual(replay.body, first.body);
      await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
    });

    it("answers indeterminate (200), not spawn_failed, for a command that ran while the exec agent died", async () => {
      const id = (await create({ command: ["sleep", "3600"], network_access: "none" })).body.id as string;
      await waitFor(id, "running");
      assert.equal((await exec(id, ["true"])).status, 200);
      const res = await exec(id, [
        "sh",
        "-c",
        "touch /tmp/before; kill -9 $(pidof .warren-exec); sleep 1; touch /tmp/after",
      ]);
      assert.equal(res.status, 200, res.raw);
      assert.deepEqual(res.body, { indeterminate: {}, stdout: "", stderr: "", truncated: false });
      // The command ran on (its agent gone) and finished: both files are there.
      let both = false;
      for (const deadline = Date.now() + 60_000; !both && Date.now() < deadline; ) {
        const check = await exec(id, ["ls", "/tmp/before", "/tmp/after"]);
        both = check.status === 200 && (check.body as { exit?: number }).exit === 0;
        if (!both) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.ok(both, "the command ran to its end");
      // Its sandbox.exec event says so.
      const { rows } = await t.c.db.query<{ outcome: string }>(
        "SELECT payload->>'outcome' AS outcome FROM events WHERE name = 'sandbox.exec' AND payload->>'sandbox_id' = $1 ORDER BY ts_wall_ns",
        [id],
      );
      assert.equal(rows[1]?.outcome, "indeterminate");
      // Under a key the record says so too, and a retry replays it rather than running the command again.
      const keyedCmd = ["sh", "-c", "echo run >> /tmp/keyed; kill -9 $(pidof .warren-exec); sleep 1"];
      const keyed = await exec(id, keyedCmd, {}, { "idempotency-key": "agent-died" });
      assert.deepEqual(keyed.body, { indeterminate: {}, stdout: "", stderr: "", truncated: false });
      const { rows: records } = await t.c.db.query<{ outcome: string }>(
        "SELECT outcome FROM sandbox_execs WHERE sandbox_id = $1 AND idempotency_key = 'agent-died'",
        [id],
      );
      assert.equal(records[0]?.outcome, "indeterminate");
      const retried = await exec(id, keyedCmd, {}, { "idempotency-key": "agent-died" });
      assert.deepEqual(retried.body, keyed.body);
      // A window of absence: a second run would have written its line at once.
      await new Promise((resolve) => setTimeout(resolve, 1200));
      const runs = await exec(id, ["sh", "-c", "wc -l < /tmp/keyed"]);
      assert.equal((runs.body as { stdout: string }).stdout.trim(), "1", "the keyed command ran once");
      await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
    });

    it("validates create and update bodies in the flat envelope", async () => {
      const cases: [Record<string, unknown>, number, string][] = [
        [{ name: "Bad_Name" }, 400, "invalid_argument"],
        [{ name: "x".repeat(64) }, 400, "invalid_argument"],
        [{ command: [""] }, 400, "invalid_argument"],
        [{ command: Array(257).fill("a") }, 400, "invalid_argument"],
        [{ idle_timeout_seconds: 59 }, 400, "invalid_argument"],
        [{ resources: { memory_mb: 0 } }, 400, "invalid_argument"],
        [{ resources: { cpu_millis: 49 } }, 400, "invalid_argument"],
        [{ resources: { gpus: { count: 1 } } }, 422, "unsupported_capability"],
        [{ ports: [80, 80] }, 400, "invalid_argument"],
        [{ ports: [65536] }, 400, "invalid_argument"],
        [{ metadata: { k: "v".repeat(4097) } }, 400, "invalid_argument"],
        [
          { metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, "v"])) },
          400,
          "invalid_argument",
        ],
        [{ workspace_capacity_gib: 5 }, 400, "invalid_argument"],
        // More storage than this host could back even empty (storage admission): never a 500.
        [{ storage_class: "durable", workspace_capacity_gib: 16_000 }, 422, "unsupported_capability"],
        [{ snapshot_id: "snap-1" }, 404, "not_found"],
        [{ unknown: 1 }, 400, "invalid_argument"],
      ];
      for (const [body, status, code] of cases) {
        const res = await create(body);
        assert.equal(res.status, status, `${JSON.stringify(body).slice(0, 80)} -> ${res.raw}`);
        assert.equal(res.body.code, code);
        assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"]);
      }
    });

    it("keeps organizations and sandbox-scoped credentials apart", async () => {
      const id = (await create({ command: ["sleep", "3600"], network_access: "none" })).body.id as string;
      await waitFor(id, "running");
      for (const [method, url, body] of [
        ["GET", `/v1/sandboxes/${id}`, undefined],
        ["PATCH", `/v1/sandboxes/${id}`, { state: "stopped" }],
        ["DELETE", `/v1/sandboxes/${id}`, undefined],
        ["POST", `/v1/sandboxes/${id}:exec`, { cmd: ["true"] }],
      ] as const) {
        const res = await t.request(method, url, { key: t.orgB.keys.owner, ...(body ? { body } : {}) });
        assert.equal(res.status, 404, `${method} ${url}`);
      }
      const confined = await t.issueKey(t.orgA, { sandbox: { sandboxId: id, lineagePath: id } });
      const own = await t.request("GET", `/v1/sandboxes/${id}`, { key: confined.key });
      assert.equal(own.status, 200);
      const ownExec = await t.request("POST", `/v1/sandboxes/${id}:exec`, {
        key: confined.key,
        body: { cmd: ["true"] },
      });
      assert.equal(ownExec.status, 200);
      assert.equal((await t.request("POST", "/v1/sandboxes", { key: confined.key, body: {} })).status, 403);
      assert.equal((await t.request("DELETE", `/v1/sandboxes/${id}`, { key: confined.key })).status, 403);
      const list = await t.request("GET", "/v1/sandboxes", { key: owner() });
      assert.ok((list.body.sandboxes as { id: string }[]).some((s) => s.id === id));
      assert.ok(Array.isArray((await t.request("GET", "/v1/sandboxes", { key: t.orgB.keys.owner })).body.sandboxes));
      assert.ok(
        !(
          (await t.request("GET", "/v1/sandboxes", { key: t.orgB.keys.owner })).body.sandboxes as { id: string }[]
        ).some((s) => s.id === id),
      );
      await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
    });

    it("refuses admission past a quota with the flat quota fields", async () => {
      await t.c.admin.setQuota(t.orgB.slug, "sandboxes.total", 0);
      const res = await t.request("POST", "/v1/sandboxes", { key: t.orgB.keys.owner, body: { command: ["true"] } });
      assert.equal(res.status, 429, res.raw);
      assert.equal(res.body.code, "quota_exceeded");
      assert.equal(res.body.metric, "sandboxes.total");
      assert.equal(res.body.limit, "0");
      assert.equal(typeof res.body.retry_after_seconds, "number");
      assert.deepEqual(res.body.details, { quota: { metric: "sandboxes.total" } });
      assert.match(String(res.headers["retry-after"]), /^\d+$/);
    });
  });
}
