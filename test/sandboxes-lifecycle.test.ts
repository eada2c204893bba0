// SandboxService lifecycle end to end on real runc sandboxes (the second round after
// sandboxes.test.ts): name lookup, listing and paging, every update field, durable storage
// growth, the live network switch and its receipt, idle stop, expiry, state deadlines,
// retention, quarantine, quotas, idempotent create, exec output and timeouts,
// secret_environment and the sandbox-scoped credential delivered inside the sandbox.
//
// Time-driven behaviour is driven through the store, not by waiting: the idle and expiry
// tests move the row's idle_deadline / expires_at into the past with SQL and kick the
// reconciler; the deadline test moves state_deadline of a sandbox really stuck pulling from
// a registry that never answers. Retention is configured short (RETENTION_SECONDS).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdir, writeFile } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { cgroupDirs } from "../src/drivers/runtime/local/cgroups.js";
import { run, TOOLS } from "../src/drivers/runtime/local/host.js";
import { type RuntimeFixture, startRuntimeFixture, vethsOf } from "../src/drivers/runtime/local/test-support.js";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import { STORE_KINDS, type TestApp, type TestResponse } from "./harness.js";
import { eventually, sleep } from "./support/eventually.js";
import { startRuntimeApp } from "./support/runtime-app.js";

// Long enough that a test reading a finished sandbox after its clean-up (seconds on a loaded
// machine) still finds it: at 3 s the stuck-deadline test's reads got 404 under load, and at
// 15 s (load 8) the retention test's row was purged before its long poll saw `terminated`.
const RETENTION_SECONDS = 40;
const ENVIRONMENT = "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT";

type Json = Record<string, unknown>;

function assertFlatError(res: TestResponse, status: number, code: string) {
  assert.equal(res.status, status, res.raw);
  assert.equal(res.body.code, code, res.raw);
  assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"], res.raw);
}

function assertQuotaError(res: TestResponse, metric: string, limit: number) {
  assert.equal(res.status, 429, res.raw);
  assert.equal(res.body.code, "quota_exceeded", res.raw);
  assert.equal(res.body.metric, metric, res.raw);
  assert.equal(res.body.limit, String(limit), res.raw);
  assert.equal(typeof res.body.retry_after_seconds, "number", res.raw);
  assert.deepEqual(res.body.details, { quota: { metric } }, res.raw);
  assert.equal(res.headers["retry-after"], String(res.body.retry_after_seconds));
}

// The two stores' suites run side by side (each has its own registry, driver root and app),
// which halves the wall time of a file that mostly waits on runc.
describe("sandbox lifecycle", { concurrency: STORE_KINDS.length }, () => {
  for (const store of STORE_KINDS) {
    describe(`sandbox lifecycle [${store}]`, () => {
      let fixture: RuntimeFixture;
      let t: TestApp;
      let reconciler: SandboxReconciler;
      const owner = () => t.orgA.keys.owner;
      const cleanupIds: { id: string; key: string }[] = [];

      before(async () => {
        fixture = await startRuntimeFixture(`life-${store}`);
        ({ t, reconciler } = await startRuntimeApp(store, fixture, {
          sandbox: { retentionSeconds: RETENTION_SECONDS },
          reconciler: { retentionSeconds: RETENTION_SECONDS },
        }));
      });

      after(async () => {
        for (const { id, key } of cleanupIds) {
          await t?.request("DELETE", `/v1/sandboxes/${id}`, { key }).catch(() => undefined);
        }
        await reconciler?.idle();
        await reconciler?.stop();
        await t?.close();
        await fixture?.cleanup();
      });

      const create = (body: Json, key = owner(), headers: Record<string, string> = {}) =>
        t.request("POST", "/v1/sandboxes", { key, body, headers });
      const get = (ref: string, key = owner(), query: Record<string, string> = {}) =>
        t.request("GET", `/v1/sandboxes/${ref}`, { key, query });
      const patch = (id: string, body: Json, key = owner()) => t.request("PATCH", `/v1/sandboxes/${id}`, { key, body });
      const del = (id: string, key = owner()) => t.request("DELETE", `/v1/sandboxes/${id}`, { key });
      const exec = (id: string, cmd: string[], extra: Json = {}, headers: Record<string, string> = {}, key = owner()) =>
        t.request("POST", `/v1/sandboxes/${id}:exec`, { key, body: { cmd, ...extra }, headers });
      const sandboxOf = async (id: string, key = owner()) => {
        const res = await get(id, key);
        assert.equal(res.status, 200, res.raw);
        return res.body.sandbox as SandboxJson;
      };
      /** Long polls (25 s each, the most one may ask) until `state`, for up to 3 minutes: a loaded host may take longer than one. */
      const waitFor = async (id: string, state: string, key = owner()) => {
        const deadline = Date.now() + 180_000;
        for (;;) {
          const asked = Date.now();
          const res = await get(id, key, { wait_state: state, wait_timeout_seconds: "25" });
          assert.equal(res.status, 200, res.raw);
          const sandbox = res.body.sandbox as SandboxJson;
          if (sandbox.state === state || Date.now() > deadline) {
            assert.equal(sandbox.state, state, res.raw);
            return sandbox;
          }
          // An early answer (the state cannot come from where it is now) is not polled in a loop.
          if (Date.now() - asked < 1000) await sleep(1000);
        }
      };
      /** Creates a sandbox (deleted after the suite if a test leaves it) and returns its id. */
      const createId = async (body: Json, key = owner()) => {
        const res = await create({ network_access: "none", ...body }, key);
        assert.equal(res.status, 200, res.raw);
        const id = res.body.id as string;
        cleanupIds.push({ id, key });
        return id;
      };
      const createRunning = async (body: Json = {}, key = owner()) => {
        const id = await createId({ command: ["sleep", "3600"], ...body }, key);
        await waitFor(id, "running", key);
        return id;
      };
      const stdoutOf = (res: TestResponse) => {
        assert.equal(res.status, 200, res.raw);
        assert.equal(res.body.exit, 0, res.raw);
        return res.body.stdout as string;
      };
      const statesOf = async (runId: string) => {
        const { rows } = await t.c.db.query<{ payload: { to: string; reason?: string } }>(
          "SELECT payload FROM events WHERE run_id = $1 AND name = 'sandbox.state_changed' ORDER BY ts_wall_ns",
          [runId],
        );
        return rows.map((row) => row.payload);
      };
      const runIdOf = async (id: string) => {
        const { rows } = await t.c.db.query<{ run_id: string }>("SELECT run_id FROM sandboxes WHERE id = $1", [id]);
        return rows[0]?.run_id as string;
      };
      const newProject = async (slug: string) => {
        const res = await t.request("POST", "/v1/projects", {
          key: owner(),
          body: { name: slug, slug: `${slug}-${randomBytes(3).toString("hex")}` },
        });
        assert.equal(res.status, 200, res.raw);
        return (res.body.project as { id: string }).id;
      };

      it("resolves a name within the selected project, and only there", async () => {
        const projectId = await newProject("names");
        const inDefault = await createId({ command: ["true"], name: "alpha" });
        const inProject = await createId({ command: ["true"], name: "alpha", project_id: projectId });
        assert.notEqual(inDefault, inProject);

        assert.equal((await sandboxOf("alpha")).id, inDefault, "the organization's default project");
        const byQuery = await get("alpha", owner(), { project_id: projectId });
        assert.equal((byQuery.body.sandbox as SandboxJson).id, inProject, "the project_id query parameter");
        const projectKey = await t.issueKey(t.orgA, { role: "member", projectId });
        assert.equal((await sandboxOf("alpha", projectKey.key)).id, inProject, "the key's default project");
        assert.equal((await sandboxOf(inDefault, projectKey.key)).id, inDefault, "an id is used directly");

        assertFlatError(await get("beta"), 404, "not_found");
        assertFlatError(await get("alpha", t.orgB.keys.owner), 404, "not_found");
        assertFlatError(await get("alpha", t.orgB.keys.owner, { project_id: projectId }), 404, "not_found");
        const dup = await create({ command: ["true"], name: "alpha" });
        assertFlatError(dup, 409, "name_conflict");
      });

      it("lists created_at descending then id descending, pages with tokens, filters by exact name", async () => {
        const projectId = await newProject("list");
        const ids: string[] = [];
        for (const name of ["l-one", "l-two", "l-three", "l-four", undefined]) {
          ids.push(await createId({ command: ["true"], project_id: projectId, ...(name ? { name } : {}) }));
        }
        // Three rows share one creation instant, so the id breaks the tie.
        const instant = new Date(Date.now() - 60_000);
        await t.c.db.query("UPDATE sandboxes SET created_at = $2 WHERE id = ANY($1::text[])", [
          ids.slice(1, 4),
          instant,
        ]);
        const { rows } = await t.c.db.query<{ id: string; created_at: Date }>(
          "SELECT id, created_at FROM sandboxes WHERE project_id = $1",
          [projectId],
        );
        const expected = rows
          .sort((a, b) => b.created_at.getTime() - a.created_at.getTime() || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0))
          .map((row) => row.id);
        assert.equal(expected.length, 5);

        const seen: string[] = [];
        let token = "";
        let pages = 0;
        do {
          const res = await t.request("GET", "/v1/sandboxes", {
            key: owner(),
            query: { project_id: projectId, page_size: "2", ...(token ? { page_token: token } : {}) },
          });
          assert.equal(res.status, 200, res.raw);
          const page = res.body.sandboxes as SandboxJson[];
          assert.ok(page.length <= 2);
          seen.push(...page.map((s) => s.id));
          token = res.body.next_page_token as string;
          pages += 1;
        } while (token && pages < 10);
        assert.deepEqual(seen, expected);
        assert.equal(pages, 3);

        const all = await t.request("GET", "/v1/sandboxes", { key: owner(), query: { project_id: projectId } });
        assert.deepEqual(
          (all.body.sandboxes as SandboxJson[]).map((s) => s.id),
          expected,
        );
        assert.equal(all.body.next_page_token, "");
        const named = await t.request("GET", "/v1/sandboxes", {
          key: owner(),
          query: { project_id: projectId, name: "l-two" },
        });
        assert.deepEqual(
          (named.body.sandboxes as SandboxJson[]).map((s) => s.id),
          [ids[1]],
        );
        const prefix = await t.request("GET", "/v1/sandboxes", {
          key: owner(),
          query: { project_id: projectId, name: "l" },
        });
        assert.deepEqual(prefix.body.sandboxes, [], "the name filter is exact");
        const other = await t.request("GET", "/v1/sandboxes", { key: owner() });
        assert.ok(!(other.body.sandboxes as SandboxJson[]).some((s) => ids.includes(s.id)), "other projects are apart");
        const bad = await t.request("GET", "/v1/sandboxes", { key: owner(), query: { page_token: "garbage" } });
        assertFlatError(bad, 400, "invalid_argument");
      });

      it("long-polls wait_state without busy-looping and answers with the current row at the deadline", async () => {
        const id = await createRunning();
        let lookups = 0;
        const query = t.c.db.query.bind(t.c.db);
        t.c.db.query = ((sql: string, params?: unknown[]) => {
          if (typeof sql === "string" && sql.includes("FROM sandboxes WHERE id = $1") && params?.[0] === id) lookups++;
          return query(sql, params);
        }) as typeof t.c.db.query;
        const started = Date.now();
        let res: TestResponse;
        try {
          res = await get(id, owner(), { wait_state: "stopped", wait_timeout_seconds: "2" });
        } finally {
          t.c.db.query = query;
        }
        const took = Date.now() - started;
        assert.equal(res.status, 200, res.raw);
        assert.equal((res.body.sandbox as SandboxJson).state, "running", "the current row at the deadline");
        // At the deadline: not before it, and not long after (a loaded host adds seconds, not tens).
        assert.ok(took >= 1900 && took < 15_000, `returned after ${took} ms`);
        assert.ok(lookups <= 6, `${lookups} reads of the row in 2 s`);
        assert.equal(t.c.sandboxes.changes.listenerCount(id), 0, "no listener left behind");

        const waiting = get(id, owner(), { wait_state: "stopped", wait_timeout_seconds: "25" });
        await sleep(200); // the wait is most likely listening by then (if not, it starts at the stop)
        const woke = Date.now();
        assert.equal((await patch(id, { state: "stopped" })).status, 200);
        const stopped = await waiting;
        // The state says it returned on the stop, not at its deadline; the time says so too.
        assert.equal((stopped.body.sandbox as SandboxJson).state, "stopped");
        assert.ok(Date.now() - woke < 20_000, "returned as soon as the state was observed");
        for (const bad of ["0", "26", "x"]) {
          assertFlatError(
            await get(id, owner(), { wait_state: "stopped", wait_timeout_seconds: bad }),
            400,
            "invalid_argument",
          );
        }
        assertFlatError(
          await get(id, owner(), { wait_state: "asleep", wait_timeout_seconds: "1" }),
          400,
          "invalid_argument",
        );
        await del(id);
      });

      it("stops and wakes idempotently, and a wake racing a stop ends running", async () => {
        const id = await createRunning();
        assert.equal((await exec(id, ["sh", "-c", "echo kept > /tmp/mark"])).status, 200);
        for (let i = 0; i < 2; i++)
          assert.deepEqual((await patch(id, { state: "stopped" })).body, { id, request_state: "requested" });
        await waitFor(id, "stopped");
        assert.equal((await patch(id, { state: "stopped" })).status, 200, "stopping a stopped sandbox is accepted");
        await reconciler.idle();
        assert.equal((await sandboxOf(id)).state, "stopped");
        assert.equal((await patch(id, { state: "running" })).status, 200);
        await waitFor(id, "running");
        assert.equal((await patch(id, { state: "running" })).status, 200, "waking a running sandbox is accepted");
        await reconciler.idle();
        assert.equal((await sandboxOf(id)).state, "running");
        assert.equal(stdoutOf(await exec(id, ["cat", "/tmp/mark"])), "kept\n", "root filesystem changes are kept");

        // A stop and a wake back to back: whatever the reconciler saw, the wake wins and holds.
        assert.equal((await patch(id, { state: "stopped" })).status, 200);
        assert.equal((await patch(id, { state: "running" })).status, 200);
        await waitFor(id, "running");
        await reconciler.idle();
        await sleep(300); // a window of absence: a stray stop would show in it
        await reconciler.idle();
        assert.equal((await sandboxOf(id)).state, "running");
        assert.equal(stdoutOf(await exec(id, ["echo", "up"])), "up\n");
        const runId = await runIdOf(id);
        const states = (await statesOf(runId)).map((s) => s.to);
        assert.deepEqual(states.slice(0, 4), ["reserved", "materializing", "ready", "running"]);
        await del(id);
      });

      it("updates timeouts, ttl (from now, zero invalid) and metadata (complete replacement)", async () => {
        const id = await createRunning({ metadata: { a: "1", b: "2" }, ttl_seconds: 3600 });
        const before = await sandboxOf(id);
        assert.deepEqual(before.metadata, { a: "1", b: "2" });
        assert.equal(before.idle_timeout_seconds, undefined, "idle stopping is disabled by default");
        assert.equal(before.idle_deadline, undefined);
        assert.equal(before.last_activity, undefined, "no activity yet");

        assert.deepEqual((await patch(id, { metadata: { c: "3" } })).body, { id, request_state: "requested" });
        let now = await sandboxOf(id);
        assert.deepEqual(now.metadata, { c: "3" }, "metadata is replaced, not merged");
        assert.equal(now.last_activity?.source, "update");
        assert.equal((await patch(id, { metadata: {} })).status, 200);
        assert.deepEqual((await sandboxOf(id)).metadata, {});

        assertFlatError(await patch(id, { ttl_seconds: 0 }), 400, "invalid_argument");
        assertFlatError(await patch(id, { ttl_seconds: -5 }), 400, "invalid_argument");
        const asked = Date.now();
        assert.equal((await patch(id, { ttl_seconds: 120 })).status, 200);
        now = await sandboxOf(id);
        const expires = Date.parse(now.expires_at as string);
        assert.ok(Math.abs(expires - (asked + 120_000)) < 5000, `expires_at ${now.expires_at} is 120 s from now`);

        assert.equal((await patch(id, { idle_timeout_seconds: 300 })).status, 200);
        now = await sandboxOf(id);
        assert.equal(now.idle_timeout_seconds, 300);
        const idleDeadline = Date.parse(now.idle_deadline as string);
        assert.ok(Math.abs(idleDeadline - (Date.now() + 300_000)) < 5000, `idle_deadline ${now.idle_deadline}`);

        assert.equal(
          (await patch(id, { metadata: { x: "y" }, ttl_seconds: 600, idle_timeout_seconds: 60 })).status,
          200,
        );
        now = await sandboxOf(id);
        assert.deepEqual(now.metadata, { x: "y" });
        assert.equal(now.idle_timeout_seconds, 60);
        for (const body of [
          {},
          { idle_timeout_seconds: 59 },
          { metadata: { k: "v".repeat(4097) } },
          { name: "x" },
          { state: "deleted" },
        ]) {
          assertFlatError(await patch(id, body), 400, "invalid_argument");
        }
        assertFlatError(
          await patch("sbx-0000000000000000000000000000000000000000", { metadata: {} }),
          404,
          "not_found",
        );
        await del(id);
        assert.equal((await patch(id, { metadata: {} })).status >= 400, true, "no update once deleting");
      });

      it("grows a durable workspace live and while stopped, never shrinks (409)", async () => {
        const id = await createRunning({ storage_class: "durable", workspace_capacity_gib: 2 });
        const gib = async () => {
          const out = stdoutOf(await exec(id, ["df", "-k", "/workspace"]));
          const fields = (out.trim().split("\n").at(-1) as string).trim().split(/\s+/);
          return Number(fields[1]) / 1024 / 1024;
        };
        // XFS keeps a few percent for its log and metadata.
        const near = (actual: number, wanted: number) => actual > wanted * 0.93 && actual <= wanted;
        assert.equal((await sandboxOf(id)).workspace_capacity_gib, 2);
        const first = await gib();
        assert.ok(near(first, 2), `${first} GiB`);
        assert.equal((await exec(id, ["sh", "-c", "echo durable > /workspace/file"])).status, 200);

        const capacity = 3;
        const live = await patch(id, { workspace_capacity_gib: 3 });
        assert.deepEqual(live.body, { id, request_state: "requested" });
        const grown = await gib();
        assert.ok(near(grown, 3), `${grown} GiB after growing while running`);
        assert.equal((await sandboxOf(id)).workspace_capacity_gib, capacity);
        assert.equal(
          (await patch(id, { workspace_capacity_gib: capacity })).status,
          200,
          "the same target again is accepted",
        );
        assertFlatError(await patch(id, { workspace_capacity_gib: 1 }), 409, "workspace_shrink_unsupported");
        assert.equal((await sandboxOf(id)).workspace_capacity_gib, capacity);

        assert.equal((await patch(id, { state: "stopped" })).status, 200);
        await waitFor(id, "stopped");
        assert.deepEqual((await patch(id, { workspace_capacity_gib: 4 })).body, { id, request_state: "requested" });
        assert.equal((await sandboxOf(id)).workspace_capacity_gib, 4);
        assertFlatError(await patch(id, { workspace_capacity_gib: 3 }), 409, "workspace_shrink_unsupported");
        assert.equal((await patch(id, { state: "running" })).status, 200);
        await waitFor(id, "running");
        const offline = await gib();
        assert.ok(near(offline, 4), `${offline} GiB after growing while stopped`);
        assert.equal(stdoutOf(await exec(id, ["cat", "/workspace/file"])), "durable\n", "the files are kept");
        await del(id);

        const standard = await createRunning();
        assertFlatError(await patch(standard, { workspace_capacity_gib: 5 }), 400, "invalid_argument");
        await del(standard);
      });

      it("switches network_access none -> public -> none live, with a receipt of what was applied", async () => {
        const id = await createRunning();
        const layout = fixture.driver.layout;
        const ifaces = async () =>
          stdoutOf(await exec(id, ["ls", "/sys/class/net"]))
            .trim()
            .split(/\s+/)
            .sort();
        assert.deepEqual(await ifaces(), ["lo"]);
        const observed = await fixture.driver.observe(id);
        const nsLink = await run("readlink", [`/proc/${observed.pid}/ns/net`]);
        const inode = /net:\[(\d+)\]/.exec(nsLink)?.[1] as string;

        assertFlatError(await patch(id, { network_access: "public", metadata: {} }), 400, "invalid_argument");

        const toPublic = await patch(id, { network_access: "public" });
        assert.equal(toPublic.status, 200, toPublic.raw);
        assert.equal(toPublic.body.id, id);
        assert.equal(toPublic.body.request_state, "requested");
        const receipt = toPublic.body.network_access_receipt as {
          network_access: string;
          pod_uid: string;
          pod_resource_version: string;
          policies: { policy_name: string; policy_endpoint_name: string; policy_endpoint_uid: string }[];
        };
        assert.equal(receipt.network_access, "public");
        assert.equal(receipt.pod_uid, layout.netnsName(id), "the sandbox's network namespace");
        assert.equal(receipt.pod_resource_version, inode, "the namespace the sandbox's init lives in");
        assert.ok(receipt.policies.length > 0);
        const table = await run(TOOLS.nft, ["-a", "list", "table", "inet", layout.nftTable]);
        for (const policy of receipt.policies) {
          assert.match(policy.policy_name, new RegExp(`^inet ${layout.nftTable} \\S+$`));
          assert.ok(
            table.split("\n").some((line) => line.trimEnd().endsWith(`# handle ${policy.policy_endpoint_uid}`)),
            `rule ${policy.policy_endpoint_uid} is in force`,
          );
        }
        assert.deepEqual(await ifaces(), ["eth0", "lo"]);
        const addresses = await fixture.driver.addressesOf(id);
        assert.ok(addresses);
        const ipAddr = stdoutOf(await exec(id, ["busybox", "ip", "-o", "-4", "addr", "show", "eth0"]));
        assert.ok(ipAddr.includes(addresses.sandbox), ipAddr);
        const veths = await vethsOf(layout);
        assert.ok(veths.length > 0);

        const toNone = await patch(id, { network_access: "none" });
        assert.equal(toNone.status, 200, toNone.raw);
        const none = toNone.body.network_access_receipt as typeof receipt;
        assert.equal(none.network_access, "none");
        assert.equal(none.pod_uid, receipt.pod_uid);
        assert.equal(none.pod_resource_version, inode, "switched live: the same namespace");
        assert.deepEqual(none.policies, []);
        assert.deepEqual(await ifaces(), ["lo"]);
        const after = await run(TOOLS.nft, ["-a", "list", "table", "inet", layout.nftTable]).catch(() => "");
        for (const policy of receipt.policies) {
          assert.ok(
            !after.split("\n").some((line) => line.trimEnd().endsWith(`# handle ${policy.policy_endpoint_uid}`)),
            `rule ${policy.policy_endpoint_uid} is gone`,
          );
        }
        for (const veth of veths) assert.ok(!(await vethsOf(layout)).includes(veth), `${veth} is gone`);
        assert.equal((await sandboxOf(id)).state, "running");
        await del(id);
      });

      it("stops an idle sandbox at its idle deadline, but not while an exec runs", async () => {
        // The deadline is moved into the past with SQL and the reconciler kicked, rather than
        // waiting out the 60 s minimum idle timeout.
        const created = Date.now();
        const id = await createRunning({ idle_timeout_seconds: 60 });
        const start = await sandboxOf(id);
        assert.equal(start.idle_timeout_seconds, 60);
        const firstDeadline = Date.parse(start.idle_deadline as string);
        // 60 s after some moment between the create and now (however long the start took).
        assert.ok(
          firstDeadline >= created + 59_000 && firstDeadline <= Date.now() + 61_000,
          `idle_deadline ${start.idle_deadline}`,
        );
        await sleep(20);
        assert.equal((await exec(id, ["true"])).status, 200);
        const afterExec = await sandboxOf(id);
        assert.equal(afterExec.last_activity?.source, "exec");
        assert.ok(Date.parse(afterExec.idle_deadline as string) > firstDeadline, "exec advanced the idle deadline");
        await sleep(20);
        assert.equal((await patch(id, { metadata: { touched: "yes" } })).status, 200);
        const afterUpdate = await sandboxOf(id);
        assert.equal(afterUpdate.last_activity?.source, "update");
        assert.ok(
          Date.parse(afterUpdate.idle_deadline as string) > Date.parse(afterExec.idle_deadline as string),
          "an update advanced the idle deadline",
        );

        const expire = () =>
          t.c.db.query("UPDATE sandboxes SET idle_deadline = $2 WHERE id = $1", [id, new Date(Date.now() - 1000)]);
        // A command still running keeps the sandbox up past its deadline. It runs until the test
        // lets it end (a file), so "still running" holds however slow the host.
        const longExec = exec(id, ["sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.1; done; echo finished"]);
        await eventually("the exec to be in flight", async () => t.c.sandboxes.hasExecInFlight(id));
        await expire();
        reconciler.kick(id);
        await reconciler.idle();
        await sleep(1200); // a sweep runs meanwhile too
        await reconciler.idle();
        const during = await sandboxOf(id);
        if (during.state !== "running") {
          // Say what the exec answered, so a failure here tells a lost exec from a wrong stop.
          const answered = await Promise.race([longExec, sleep(3000).then(() => null)]);
          assert.fail(
            `kept alive by the running exec: ${during.state}; the exec answered ${answered?.raw ?? "nothing yet"}`,
          );
        }
        const released = Date.now();
        assert.equal((await exec(id, ["touch", "/tmp/go"])).status, 200);
        const finished = await longExec;
        assert.deepEqual(finished.body, { exit: 0, stdout: "finished\n", stderr: "", truncated: false });
        const kept = await sandboxOf(id);
        assert.equal(kept.state, "running");
        // The exec ended after `released`: its end set the deadline 60 s after that.
        assert.ok(Date.parse(kept.idle_deadline as string) >= released + 59_000, "the exec's end advanced it again");

        await expire();
        reconciler.kick(id);
        const stopped = await waitFor(id, "stopped");
        assert.equal(stopped.idle_deadline, undefined, "no idle deadline while not running");
        await reconciler.idle();
        await sleep(300); // a window of absence: a stray wake would show in it
        assert.equal((await sandboxOf(id)).state, "stopped", "an idle stop stays stopped");
        assertFlatError(await exec(id, ["true"]), 409, "sandbox_not_running");
        const waking = Date.now();
        assert.equal((await patch(id, { state: "running" })).status, 200);
        const woken = await waitFor(id, "running");
        assert.ok(Date.parse(woken.idle_deadline as string) >= waking + 59_000, "a wake starts a fresh idle period");
        await del(id);
      });

      it("deletes a sandbox when expires_at passes", async () => {
        const id = await createRunning({ ttl_seconds: 3600 });
        const key = (await exec(id, ["sh", "-c", 'printf %s "$WARREN_SANDBOX_TOKEN"'])).body.stdout as string;
        await t.c.db.query("UPDATE sandboxes SET expires_at = $2 WHERE id = $1", [id, new Date(Date.now() - 1000)]);
        reconciler.kick(id);
        const gone = await waitFor(id, "terminated");
        assert.equal(gone.id, id);
        const states = (await statesOf(await runIdOf(id))).map((s) => s.to);
        assert.deepEqual(states.slice(-3), ["running", "terminating", "terminated"]);
        assert.ok(!(await fixture.driver.list()).includes(id), "the runtime holds nothing of it");
        assert.equal((await t.request("GET", "/v1/whoami", { key })).status, 401, "its credential is revoked");
        assertFlatError(await del(id), 404, "not_found");
      });

      let failedId = "";
      it("fails a sandbox stuck past its state deadline with a state_reason, never leaving it stuck", async () => {
        // A registry that accepts connections and never answers: the image pull hangs.
        const sockets = new Set<net.Socket>();
        const hung = net.createServer((socket) => {
          sockets.add(socket);
          socket.on("error", () => undefined);
        });
        await new Promise<void>((resolve) => hung.listen(0, "127.0.0.1", resolve));
        const port = (hung.address() as net.AddressInfo).port;
        try {
          const id = await createId({ image: `127.0.0.1:${port}/stuck/image:latest`, command: ["true"] });
          failedId = id;
          await waitFor(id, "materializing");
          await eventually("the pull to reach the registry", async () => sockets.size > 0);
          await t.c.db.query("UPDATE sandboxes SET state_deadline = $2 WHERE id = $1", [
            id,
            new Date(Date.now() - 1000),
          ]);
          const started = Date.now();
          const failed = await waitFor(id, "failed");
          // A sweep runs every second; the bound is generous for a loaded host, and far from "stuck".
          assert.ok(Date.now() - started < 20_000, "failed within moments of the deadline");
          assert.equal(failed.state_reason?.code, "materializing_timeout");
          assert.ok(failed.state_reason?.message);
        } finally {
          for (const socket of sockets) socket.destroy();
          await new Promise((resolve) => hung.close(resolve));
        }
        // The abandoned pull now ends (in error); nothing it does may revive the sandbox (a window of absence).
        await sleep(500);
        await reconciler.idle();
        const still = await sandboxOf(failedId);
        assert.equal(still.state, "failed");
        assert.equal(still.state_reason?.code, "materializing_timeout");
        assert.ok(!(await fixture.driver.list()).includes(failedId));
        const { rows } = await t.c.db.query<{ n: string }>(
          "SELECT count(*)::text AS n FROM api_keys WHERE sandbox_id = $1 AND revoked_at IS NULL",
          [failedId],
        );
        assert.equal(rows[0]?.n, "0", "no live credential for a failed sandbox");
        assertFlatError(await exec(failedId, ["true"]), 409, "sandbox_not_running");
      });

      it("puts a delete that cannot clean up by its terminating deadline in attention, and finishes it once it can", async () => {
        const id = await createRunning();
        assert.equal((await patch(id, { state: "stopped" })).status, 200);
        await waitFor(id, "stopped");
        // A host process left in the sandbox's cgroup: the runtime cannot remove the cgroup.
        const cgroup = (await cgroupDirs(fixture.driver.layout.cgroupPath(id))).find((dir) => dir.includes("/pids"));
        assert.ok(cgroup, "a pids cgroup hierarchy");
        await mkdir(cgroup, { recursive: true });
        const squatter = spawn("sleep", ["600"], { stdio: "ignore" });
        try {
          await writeFile(path.join(cgroup, "cgroup.procs"), String(squatter.pid));
          assert.equal((await del(id)).status, 202);
          await waitFor(id, "terminating");
          await reconciler.idle();
          await sleep(1200); // a window of absence past a sweep: a give-up before the deadline would show
          assert.equal((await sandboxOf(id)).state, "terminating", "retried while its deadline lasts");
          await t.c.db.query("UPDATE sandboxes SET state_deadline = $2 WHERE id = $1", [
            id,
            new Date(Date.now() - 1000),
          ]);
          // Not failed: the sandbox still holds host state, which someone may need to look at.
          const attention = await waitFor(id, "attention");
          assert.equal(attention.state_reason?.code, "terminating_timeout");
          assert.match(attention.state_reason?.message ?? "", /retried every 10 s: .*cgroups still in use/);
          assertFlatError(await del(id), 404, "not_found");
          assertFlatError(await patch(id, { state: "running" }), 409, "operation_conflict");
          assertFlatError(await exec(id, ["true"]), 409, "sandbox_not_running");
          // While the cgroup stays busy, a retry leaves it in attention.
          await t.c.db.query("UPDATE sandboxes SET state_deadline = $2 WHERE id = $1", [
            id,
            new Date(Date.now() - 1000),
          ]);
          await eventually("a retry to push the next one out", async () => {
            const { rows } = await t.c.db.query<{ due: boolean }>(
              "SELECT state_deadline > now() AS due FROM sandboxes WHERE id = $1",
              [id],
            );
            return rows[0]?.due === true;
          });
          assert.equal((await sandboxOf(id)).state, "attention");
        } finally {
          squatter.kill("SIGKILL");
        }
        await new Promise((resolve) => squatter.once("exit", resolve));
        // The next retry (every 10 s; brought forward here) removes it from the host.
        await t.c.db.query("UPDATE sandboxes SET state_deadline = $2 WHERE id = $1", [id, new Date(Date.now() - 1000)]);
        const terminated = await waitFor(id, "terminated");
        assert.equal(terminated.state_reason, undefined);
        assert.ok(!(await fixture.driver.list()).includes(id), "nothing of it is left on the host");
        const { rows } = await t.c.db.query<{ name: string; to: string }>(
          "SELECT name, payload->>'to' AS to FROM events WHERE name = 'sandbox.state_changed' AND payload->>'sandbox_id' = $1 ORDER BY ts_wall_ns",
          [id],
        );
        assert.deepEqual(
          rows.map((row) => row.to).slice(-3),
          ["terminating", "attention", "terminated"],
          "one event per state change; the retries wrote none",
        );
      });

      it("fails a create whose image does not exist with the driver's reason", async () => {
        const id = await createId({ image: `${fixture.registry.host}/test/missing:latest` });
        const failed = await waitFor(id, "failed");
        assert.equal(failed.state_reason?.code, "image_unavailable");
      });

      it("keeps failed and terminated rows readable for the retention window, then 404", async () => {
        const id = await createId({ command: ["true"] });
        await waitFor(id, "stopped");
        const deleted = await del(id);
        assert.equal(deleted.status, 202);
        assert.equal((await waitFor(id, "terminated")).id, id);
        const listed = await t.request("GET", "/v1/sandboxes", { key: owner() });
        assert.ok(
          (listed.body.sandboxes as SandboxJson[]).some((s) => s.id === id),
          "listed while retained",
        );
        await eventually(
          "the retention window to end",
          async () => (await get(id)).status === 404,
          (RETENTION_SECONDS + 30) * 1000,
        );
        assertFlatError(await get(id), 404, "not_found");
        assertFlatError(await del(id), 404, "not_found");
        const later = await t.request("GET", "/v1/sandboxes", { key: owner() });
        assert.ok(!(later.body.sandboxes as SandboxJson[]).some((s) => s.id === id));
        if (failedId) assertFlatError(await get(failedId), 404, "not_found");
        await eventually("the purge of the rows", async () => {
          const { rows } = await t.c.db.query("SELECT 1 FROM sandboxes WHERE id = ANY($1::text[])", [
            [id, failedId].filter(Boolean),
          ]);
          return rows.length === 0;
        });
      });

      it("answers 409 quarantined to every mutating verb while quarantined", async () => {
        const id = await createRunning();
        await t.c.admin.quarantine(id, true, "under investigation");
        const held = await waitFor(id, "quarantined");
        assert.deepEqual(held.state_reason, { code: "operator_quarantine", message: "under investigation" });
        for (const body of [
          { state: "stopped" },
          { state: "running" },
          { metadata: { a: "b" } },
          { ttl_seconds: 60 },
          { network_access: "public" },
        ]) {
          assertFlatError(await patch(id, body), 409, "quarantined");
        }
        assertFlatError(await del(id), 409, "quarantined");
        assertFlatError(await exec(id, ["true"]), 409, "quarantined");
        assertFlatError(await exec(id, ["true"], {}, { "idempotency-key": "q-1" }), 409, "quarantined");
        // The reconciler leaves it alone: neither expiry nor an idle deadline touch it.
        await t.c.db.query("UPDATE sandboxes SET expires_at = $2, idle_deadline = $2 WHERE id = $1", [
          id,
          new Date(Date.now() - 1000),
        ]);
        reconciler.kick(id);
        await reconciler.idle();
        await sleep(1200); // a window of absence past a sweep: a stop or expiry would show
        assert.equal((await sandboxOf(id)).state, "quarantined");
        assert.equal((await fixture.driver.observe(id)).status, "running");
        await t.c.db.query("UPDATE sandboxes SET expires_at = NULL, idle_deadline = NULL WHERE id = $1", [id]);

        await t.c.admin.quarantine(id, false, "");
        const released = await sandboxOf(id);
        assert.equal(released.state, "running");
        assert.equal(released.state_reason, undefined);
        assert.equal(stdoutOf(await exec(id, ["echo", "free"])), "free\n");
        assert.equal((await del(id)).status, 202);
      });

      it("admits against sandboxes.running and sandboxes.workspace_capacity_gib with flat quota errors", async () => {
        const b = t.orgB;
        try {
          await t.c.admin.setQuota(b.slug, "sandboxes.running", 1);
          const first = await createRunning({}, b.keys.owner);
          assertQuotaError(
            await create({ command: ["true"], network_access: "none" }, b.keys.owner),
            "sandboxes.running",
            1,
          );
          assert.equal((await patch(first, { state: "stopped" }, b.keys.owner)).status, 200);
          await waitFor(first, "stopped", b.keys.owner);
          const second = await createRunning({}, b.keys.owner);
          assertQuotaError(await patch(first, { state: "running" }, b.keys.owner), "sandboxes.running", 1);
          assert.equal((await del(second, b.keys.owner)).status, 202);
          await waitFor(second, "terminated", b.keys.owner);
          assert.equal((await patch(first, { state: "running" }, b.keys.owner)).status, 200, "room again");
          await waitFor(first, "running", b.keys.owner);
          await del(first, b.keys.owner);
          await t.c.admin.setQuota(b.slug, "sandboxes.running", null);

          await t.c.admin.setQuota(b.slug, "sandboxes.workspace_capacity_gib", 2);
          assertQuotaError(
            await create({ storage_class: "durable", workspace_capacity_gib: 3, network_access: "none" }, b.keys.owner),
            "sandboxes.workspace_capacity_gib",
            2,
          );
          const durable = await createRunning({ storage_class: "durable", workspace_capacity_gib: 2 }, b.keys.owner);
          assertQuotaError(
            await patch(durable, { workspace_capacity_gib: 3 }, b.keys.owner),
            "sandboxes.workspace_capacity_gib",
            2,
          );
          assert.equal((await sandboxOf(durable, b.keys.owner)).workspace_capacity_gib, 2);
          await del(durable, b.keys.owner);
        } finally {
          await t.c.admin.setQuota(b.slug, "sandboxes.running", null);
          await t.c.admin.setQuota(b.slug, "sandboxes.workspace_capacity_gib", null);
        }
      });

      it("replays CreateSandbox under the same Idempotency-Key with the same id and run_id", async () => {
        const body = { command: ["sleep", "3600"], name: "idem", network_access: "none" };
        const first = await create(body, owner(), { "idempotency-key": "create-idem-1" });
        assert.equal(first.status, 200, first.raw);
        cleanupIds.push({ id: first.body.id as string, key: owner() });
        const second = await create(body, owner(), { "idempotency-key": "create-idem-1" });
        assert.equal(second.status, 200, second.raw);
        assert.equal(second.body.id, first.body.id);
        assert.equal(second.body.run_id, first.body.run_id);
        assert.equal(second.raw, first.raw);
        const { rows } = await t.c.db.query<{ n: string }>(
          "SELECT count(*)::text AS n FROM sandboxes WHERE org_id = $1 AND name = 'idem'",
          [t.orgA.id],
        );
        assert.equal(rows[0]?.n, "1", "one sandbox");
        const runs = await t.c.db.query<{ n: string }>(
          "SELECT count(*)::text AS n FROM runs WHERE org_id = $1 AND label = $2",
          [t.orgA.id, `sandbox ${first.body.id}`],
        );
        assert.equal(runs.rows[0]?.n, "1", "one ambient run");
        const conflict = await create({ ...body, name: "idem-2" }, owner(), { "idempotency-key": "create-idem-1" });
        assertFlatError(conflict, 409, "idempotency_conflict");
        await waitFor(first.body.id as string, "running");
        await del(first.body.id as string);
      });

      it("caps exec output at 1 MiB combined keeping the head and the tail, kills a timed-out process group, reports spawn failures", async () => {
        const id = await createRunning();
        const big = await exec(id, ["busybox", "seq", "1", "300000"]);
        assert.equal(big.status, 200);
        assert.equal(big.body.exit, 0, "truncation does not replace the real outcome");
        assert.equal(big.body.truncated, true);
        const stdout = big.body.stdout as string;
        assert.equal(Buffer.byteLength(stdout), 1_048_576);
        const full = Array.from({ length: 300000 }, (_, i) => `${i + 1}\n`).join("");
        assert.ok(full.startsWith(stdout.slice(0, 524_288)), "the head is kept");
        assert.ok(full.endsWith(stdout.slice(524_288)), "the tail is kept");

        const mixed = await exec(id, [
          "sh",
          "-c",
          "head -c 700000 /dev/zero | busybox tr '\\0' o; head -c 700000 /dev/zero | busybox tr '\\0' e >&2; exit 4",
        ]);
        assert.equal(mixed.body.exit, 4);
        assert.equal(mixed.body.truncated, true);
        assert.equal(mixed.body.stdout, "o".repeat(524_288), "the head: the first half of the cap");
        assert.equal(mixed.body.stderr, "e".repeat(524_288), "the tail: the last half, one cap for both streams");

        const small = await exec(id, ["sh", "-c", "printf out; printf err >&2"]);
        assert.deepEqual(small.body, { exit: 0, stdout: "out", stderr: "err", truncated: false });

        const timedOut = await exec(id, ["sh", "-c", "sleep 31 & sleep 32 & echo begun; wait"], { timeout_seconds: 1 });
        assert.equal(timedOut.status, 200);
        assert.deepEqual(timedOut.body, { timeout: {}, stdout: "begun\n", stderr: "", truncated: false });
        const ps = stdoutOf(await exec(id, ["ps"]));
        assert.ok(!/sleep 3[12]/.test(ps), `the whole process group was killed:\n${ps}`);

        for (const timeout of [0, 3601]) {
          assertFlatError(await exec(id, ["true"], { timeout_seconds: timeout }), 400, "invalid_argument");
        }
        const missing = await exec(id, ["/no/such/program"]);
        assert.equal(missing.body.code, "spawn_failed", missing.raw);
        assert.deepEqual(Object.keys(missing.body).sort(), ["code", "message", "request_id"]);
        assertFlatError(await exec(id, [""]), 400, "invalid_argument");
        await del(id);
      });

      it("releases secret_environment only into the child, from granted sandbox-environment secrets", async () => {
        const secretName = `ENV_${randomBytes(4).toString("hex").toUpperCase()}`;
        const value = `v4lue-${randomBytes(12).toString("hex")}`;
        const created = await t.request("POST", "/v1/secrets", {
          key: owner(),
          body: { name: secretName, value, delivery: ENVIRONMENT },
        });
        assert.equal(created.status, 200, created.raw);
        const id = await createRunning();
        const execRecords = async () =>
          (await t.c.db.query("SELECT 1 FROM sandbox_execs WHERE sandbox_id = $1", [id])).rows.length;
        const execEvents = async () =>
          (await t.c.db.query("SELECT 1 FROM events WHERE name = 'sandbox.exec' AND payload->>'sandbox_id' = $1", [id]))
            .rows.length;
        const baseline = { records: await execRecords(), events: await execEvents() };

        const digest = createHash("sha256").update(value).digest("hex");
        const used = await exec(
          id,
          ["sh", "-c", 'printf %s "$MY_SECRET" | busybox sha256sum'],
          { secret_environment: [{ secret_name: secretName, variable_name: "MY_SECRET" }] },
          { "idempotency-key": "secret-exec" },
        );
        assert.equal(used.status, 200, used.raw);
        assert.equal((used.body.stdout as string).split(/\s+/)[0], digest, "the child saw the value");
        assert.equal(stdoutOf(await exec(id, ["sh", "-c", 'echo "[$MY_SECRET]"'])), "[]\n", "only that exec saw it");
        const initEnv = stdoutOf(await exec(id, ["cat", "/proc/1/environ"]));
        assert.ok(!initEnv.includes(value), "not in the sandbox's own environment");

        // Refusals: a wrong delivery, a secret not granted to the sandbox's creator, a missing one.
        const egressName = `EGRESS_${randomBytes(4).toString("hex").toUpperCase()}`;
        const egressValue = `egr3ss-${randomBytes(12).toString("hex")}`;
        assert.equal(
          (
            await t.request("POST", "/v1/secrets", {
              key: owner(),
              body: { name: egressName, value: egressValue, dest_host: "api.openai.com" },
            })
          ).status,
          200,
        );
        const otherName = `ADMINS_${randomBytes(4).toString("hex").toUpperCase()}`;
        const otherValue = `adm1n-${randomBytes(12).toString("hex")}`;
        const adminSecret = await t.request("POST", "/v1/secrets", {
          key: t.orgA.keys.admin,
          body: { name: otherName, value: otherValue, delivery: ENVIRONMENT },
        });
        assert.equal(adminSecret.status, 200, adminSecret.raw);
        const messages: string[] = [];
        for (const name of [egressName, otherName, "NO_SUCH_SECRET"]) {
          // Under a key, so a record would be written if the refusal came after the claim.
          const refused = await exec(
            id,
            ["sh", "-c", "echo ran > /tmp/ran"],
            { secret_environment: [{ secret_name: name, variable_name: "V" }] },
            { "idempotency-key": `refused-${name}` },
          );
          assertFlatError(refused, 400, "invalid_argument");
          messages.push((refused.body.message as string).replace(name, "<name>"));
        }
        assert.equal(new Set(messages).size, 1, "every refusal reads the same");
        // The caller's own grant decides (issue 24 A3), not the sandbox creator's: a member
        // without one, and code in the sandbox with the sandbox's own token, are refused.
        const sandboxToken = stdoutOf(await exec(id, ["sh", "-c", 'printf %s "$WARREN_SANDBOX_TOKEN"']));
        for (const [label, key] of [
          ["a member without a grant", t.orgA.keys.member],
          ["the sandbox's own token", sandboxToken],
        ]) {
          const refused = await exec(
            id,
            ["sh", "-c", 'printf %s "$V" > /tmp/ran'],
            { secret_environment: [{ secret_name: secretName, variable_name: "V" }] },
            {},
            key,
          );
          assert.equal(refused.status, 400, `${label}: ${refused.raw}`);
          assert.equal(refused.body.code, "invalid_argument", label);
        }
        assert.equal(
          (await exec(id, ["test", "-e", "/tmp/ran"])).body.exit,
          1,
          "a refused exec does not run the command",
        );
        // Granting the creator makes the admin's secret deliverable.
        const adminSecretId = (adminSecret.body.secret as { id: string }).id;
        const granted = await t.request("POST", `/v1/secrets/${adminSecretId}/grants`, {
          key: t.orgA.keys.admin,
          body: { subject_kind: "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", subject_id: t.orgA.principalIds.owner },
        });
        assert.equal(granted.status, 200, granted.raw);
        const now = await exec(id, ["sh", "-c", 'printf %s "$V" | busybox sha256sum'], {
          secret_environment: [{ secret_name: otherName, variable_name: "V" }],
        });
        assert.equal(
          (now.body.stdout as string).split(/\s+/)[0],
          createHash("sha256").update(otherValue).digest("hex"),
        );
        const replay = await exec(
          id,
          ["sh", "-c", 'printf %s "$MY_SECRET" | busybox sha256sum'],
          { secret_environment: [{ secret_name: secretName, variable_name: "MY_SECRET" }] },
          { "idempotency-key": "secret-exec" },
        );
        assert.deepEqual(replay.body, used.body);

        // No value is anywhere but in the (encrypted) secret store: not in any row, event or log line.
        const { rows: tables } = await t.c.db.query<{ table_name: string }>(
          "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
        );
        for (const secret of [value, egressValue, otherValue]) {
          const hex = Buffer.from(secret).toString("hex");
          for (const { table_name } of tables) {
            const { rows } = await t.c.db.query(
              `SELECT 1 FROM "${table_name}" x WHERE x::text LIKE $1 OR x::text LIKE $2 LIMIT 1`,
              [`%${secret}%`, `%${hex}%`],
            );
            assert.equal(rows.length, 0, `a secret value is stored in plain text in ${table_name}`);
          }
          assert.ok(!t.logs().includes(secret), "a secret value reached the logs");
        }
        // Six execs ran (one under a key, recorded); the refused ones left no record and no event.
        assert.equal((await execRecords()) - baseline.records, 1, "refused execs left no record");
        assert.equal((await execEvents()) - baseline.events, 6, "refused execs wrote no sandbox.exec event");
        await del(id);
      });

      it("delivers a sandbox-scoped credential inside the sandbox that reaches only that sandbox", async () => {
        const id = await createRunning();
        const sibling = await createRunning();
        const env = stdoutOf(
          await exec(id, [
            "sh",
            "-c",
            'printf "%s\\n%s\\n%s\\n" "$WARREN_SANDBOX_TOKEN" "$WARREN_SANDBOX_ID" "$WARREN_RUN_ID"',
          ]),
        ).split("\n");
        const [token, sandboxId, runId] = env as [string, string, string];
        assert.match(token, /^wrn_/);
        assert.equal(sandboxId, id);
        assert.equal(runId, await runIdOf(id));

        const who = await t.request("GET", "/v1/whoami", { key: token });
        assert.equal(who.status, 200, who.raw);
        assert.deepEqual(who.body.organization, { id: t.orgA.id, slug: t.orgA.slug });
        const principal = who.body.principal as { id: string; key_id: string };
        assert.equal(principal.id, t.orgA.principalIds.owner, "acts for the sandbox's creator");
        const { rows } = await t.c.db.query<{ credential_key_id: string }>(
          "SELECT credential_key_id FROM sandboxes WHERE id = $1",
          [id],
        );
        assert.equal(principal.key_id, rows[0]?.credential_key_id);

        assert.equal((await sandboxOf(id, token)).id, id, "reads its own sandbox");
        assert.equal(stdoutOf(await exec(id, ["echo", "self"], {}, {}, token)), "self\n", "execs its own sandbox");
        const listed = await t.request("GET", "/v1/sandboxes", { key: token });
        assert.deepEqual(
          (listed.body.sandboxes as SandboxJson[]).map((s) => s.id),
          [id],
        );
        assertFlatError(await get(sibling, token), 404, "not_found");
        assertFlatError(await exec(sibling, ["true"], {}, {}, token), 404, "not_found");
        assertFlatError(await create({ command: ["true"] }, token), 403, "permission_denied");
        assertFlatError(await patch(id, { metadata: {} }, token), 403, "permission_denied");
        assertFlatError(await del(id, token), 403, "permission_denied");
        assert.equal((await t.request("GET", "/v1/secrets", { key: token })).status, 403);
        assert.equal(
          (await t.request("POST", "/v1/projects", { key: token, body: { name: "x", slug: "x" } })).status,
          403,
        );

        assert.equal((await del(id)).status, 202);
        await waitFor(id, "terminated");
        assert.equal((await t.request("GET", "/v1/whoami", { key: token })).status, 401, "revoked with its sandbox");
        await del(sibling);
      });
    });
  }
});
