// Idempotency-Key on the operations that honour it (CreateProject, StartRun, CompleteRun,
// CreateFeedback): replay of the stored response, conflicts, scoping by organization and
// operation, key validation, in-flight and abandoned claims, and retention.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import type { Clock } from "../src/lib/clock.js";
import type { ProjectJson } from "../src/modules/projects/schemas.js";
import type { RunJson } from "../src/modules/runs/schemas.js";
import { forEachStore, type TestApp, type TestResponse } from "./harness.js";
import { ERROR_KEYS } from "./support/assertions.js";
import { countRows } from "./support/fixtures.js";

const REPLAYED = "idempotent-replayed";

/** A looser error check than the shared assertError: the message and request id need only be strings. */
function assertError(res: TestResponse, status: number, code: string): void {
  assert.equal(res.status, status, res.raw);
  assert.equal(res.body.code, code, res.raw);
  assert.equal(typeof res.body.message, "string");
  assert.equal(typeof res.body.request_id, "string");
  for (const key of Object.keys(res.body)) assert.ok(ERROR_KEYS.includes(key), `unexpected error field ${key}`);
}

const newKey = () => `idem-${randomBytes(8).toString("hex")}`;
const uniqueSlug = () => `i-${randomBytes(5).toString("hex")}`;

function withKey(key: string) {
  return { "idempotency-key": key };
}

function post(t: TestApp, url: string, apiKey: string, body: unknown, idemKey?: string) {
  return t.request("POST", url, { key: apiKey, body, ...(idemKey !== undefined ? { headers: withKey(idemKey) } : {}) });
}

function assertFresh(res: TestResponse): void {
  assert.equal(res.status, 200, res.raw);
  assert.equal(res.headers[REPLAYED], undefined);
}

function assertReplayOf(replay: TestResponse, original: TestResponse): void {
  assert.equal(replay.status, original.status, replay.raw);
  assert.equal(replay.headers[REPLAYED], "true");
  assert.equal(replay.raw, original.raw);
  assert.match(String(replay.headers["content-type"]), /^application\/json/);
}

forEachStore("idempotency", (t) => {
  describe("CreateProject", () => {
    it("replays the stored response for the same key and body and creates one project", async () => {
      const key = newKey();
      const slug = uniqueSlug();
      const body = { name: "Once", slug, description: "exactly once" };
      const first = await post(t(), "/v1/projects", t().orgA.keys.owner, body, key);
      assertFresh(first);
      const id = (first.body.project as ProjectJson).id;

      // Same body with keys in another order, from another key of the same organization.
      const second = await post(
        t(),
        "/v1/projects",
        t().orgA.keys.admin,
        { slug, description: "exactly once", name: "Once" },
        key,
      );
      assertReplayOf(second, first);
      assert.equal((second.body.project as ProjectJson).id, id);
      assert.notEqual(second.headers["x-request-id"], first.headers["x-request-id"]);

      const third = await post(t(), "/v1/projects", t().orgA.keys.owner, body, key);
      assertReplayOf(third, first);
      assert.equal(await countRows(t(), "projects WHERE org_id = $1 AND slug = $2", [t().orgA.id, slug]), 1);
    });

    it("replays even after the created project is gone (a replay, not a re-execution)", async () => {
      const key = newKey();
      const body = { name: "Gone", slug: uniqueSlug() };
      const first = await post(t(), "/v1/projects", t().orgA.keys.owner, body, key);
      assertFresh(first);
      const id = (first.body.project as ProjectJson).id;
      const deleted = await t().request("DELETE", `/v1/projects/${id}`, { key: t().orgA.keys.owner });
      assert.equal(deleted.status, 200, deleted.raw);
      const again = await post(t(), "/v1/projects", t().orgA.keys.owner, body, key);
      assertReplayOf(again, first);
      assert.equal(await countRows(t(), "projects WHERE org_id = $1 AND slug = $2", [t().orgA.id, body.slug]), 0);
    });

    it("is 409 idempotency_conflict for the same key with a different body, creating nothing", async () => {
      const key = newKey();
      const first = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "A", slug: uniqueSlug() }, key);
      assertFresh(first);
      const otherSlug = uniqueSlug();
      for (const body of [
        { name: "A", slug: otherSlug },
        { name: "B", slug: (first.body.project as ProjectJson).slug },
        { name: "A", slug: (first.body.project as ProjectJson).slug, description: "" },
      ]) {
        const res = await post(t(), "/v1/projects", t().orgA.keys.owner, body, key);
        assertError(res, 409, "idempotency_conflict");
        assert.equal(res.headers[REPLAYED], undefined);
      }
      assert.equal(await countRows(t(), "projects WHERE slug = $1", [otherSlug]), 0);
      // The original is still replayable.
      const slug = (first.body.project as ProjectJson).slug;
      const replay = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "A", slug }, key);
      assertReplayOf(replay, first);
    });

    it("keeps keys per organization: orgB's use of the same key creates its own project", async () => {
      const key = newKey();
      const body = { name: "Shared", slug: uniqueSlug() };
      const a = await post(t(), "/v1/projects", t().orgA.keys.owner, body, key);
      assertFresh(a);
      const b = await post(t(), "/v1/projects", t().orgB.keys.owner, body, key);
      assertFresh(b);
      const aId = (a.body.project as ProjectJson).id;
      const bId = (b.body.project as ProjectJson).id;
      assert.notEqual(aId, bId);
      assert.equal(await countRows(t(), "projects WHERE org_id = $1 AND slug = $2", [t().orgB.id, body.slug]), 1);
      const bGet = await t().request("GET", `/v1/projects/${bId}`, { key: t().orgB.keys.owner });
      assert.equal(bGet.status, 200);
      // orgB with a different body is not a conflict with orgA's record either.
      const b2 = await post(t(), "/v1/projects", t().orgB.keys.owner, { name: "Other", slug: uniqueSlug() }, newKey());
      assertFresh(b2);
      // and each organization replays its own response.
      assertReplayOf(await post(t(), "/v1/projects", t().orgB.keys.owner, body, key), b);
      assertReplayOf(await post(t(), "/v1/projects", t().orgA.keys.owner, body, key), a);
    });

    it("replays a stored error response as-is", async () => {
      const slug = uniqueSlug();
      assertFresh(await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "Taken", slug }));
      const key = newKey();
      const body = { name: "Second", slug };
      const failed = await post(t(), "/v1/projects", t().orgA.keys.owner, body, key);
      assertError(failed, 409, "already_exists");
      assert.equal(failed.headers[REPLAYED], undefined);
      const replay = await post(t(), "/v1/projects", t().orgA.keys.owner, body, key);
      assertReplayOf(replay, failed);
      assert.equal(replay.body.code, "already_exists");

      // Even once the slug is free again, the key still answers with the stored error.
      const existing = await t().c.db.query<{ id: string }>("SELECT id FROM projects WHERE org_id = $1 AND slug = $2", [
        t().orgA.id,
        slug,
      ]);
      const del = await t().request("DELETE", `/v1/projects/${existing.rows[0]?.id}`, { key: t().orgA.keys.owner });
      assert.equal(del.status, 200, del.raw);
      assertReplayOf(await post(t(), "/v1/projects", t().orgA.keys.owner, body, key), failed);
      assert.equal(await countRows(t(), "projects WHERE org_id = $1 AND slug = $2", [t().orgA.id, slug]), 0);
    });

    it("does not spend the key on a request rejected before it ran (validation, authentication)", async () => {
      const key = newKey();
      const invalid = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "X", slug: "-bad-" }, key);
      assertError(invalid, 400, "invalid_argument");
      const unauth = await t().request("POST", "/v1/projects", {
        headers: { ...withKey(key), authorization: "Bearer wrn_not-a-real-key" },
        body: { name: "X", slug: uniqueSlug() },
      });
      assertError(unauth, 401, "unauthenticated");
      const ok = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "X", slug: uniqueSlug() }, key);
      assertFresh(ok);
    });
  });

  describe("key validation", () => {
    it("rejects a malformed key with 400 and runs nothing", async () => {
      const slug = uniqueSlug();
      for (const bad of ["k".repeat(256), "k".repeat(300), "has space", "tab\there", ""]) {
        const res = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "Bad key", slug }, bad);
        assertError(res, 400, "invalid_argument");
      }
      const runsBefore = await countRows(t(), "runs WHERE org_id = $1", [t().orgA.id]);
      assertError(await post(t(), "/v1/runs", t().orgA.keys.owner, {}, "x".repeat(300)), 400, "invalid_argument");
      assert.equal(await countRows(t(), "runs WHERE org_id = $1", [t().orgA.id]), runsBefore);
      assert.equal(await countRows(t(), "projects WHERE slug = $1", [slug]), 0);
    });

    it("accepts keys of 1 and 255 visible ASCII characters", async () => {
      const long = `${newKey()}${"~".repeat(234)}`;
      assert.equal(long.length, 255);
      for (const key of ["!", long]) {
        const first = await post(t(), "/v1/runs", t().orgA.keys.owner, { label: "edge" }, key);
        assertFresh(first);
        const again = await post(t(), "/v1/runs", t().orgA.keys.owner, { label: "edge" }, key);
        assertReplayOf(again, first);
      }
    });

    it("lets a request without the header run every time", async () => {
      const body = { label: "no key" };
      const a = await post(t(), "/v1/runs", t().orgA.keys.owner, body);
      const b = await post(t(), "/v1/runs", t().orgA.keys.owner, body);
      assertFresh(a);
      assertFresh(b);
      assert.notEqual((a.body.run as RunJson).id, (b.body.run as RunJson).id);
    });
  });

  describe("StartRun and CompleteRun", () => {
    it("replays StartRun without a second run, count or event", async () => {
      const projectRes = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "Runs", slug: uniqueSlug() });
      const projectId = (projectRes.body.project as ProjectJson).id;
      const key = newKey();
      const body = { project_id: projectId, label: "retry me" };
      const first = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertFresh(first);
      const runId = (first.body.run as RunJson).id;
      const second = await post(t(), "/v1/runs", t().orgA.keys.member, body, key);
      assertReplayOf(second, first);
      assert.equal((second.body.run as RunJson).id, runId);

      assert.equal(await countRows(t(), "runs WHERE project_id = $1", [projectId]), 1);
      assert.equal(await countRows(t(), "events WHERE project_id = $1 AND name = 'run.started'", [projectId]), 1);
      const project = await t().request("GET", `/v1/projects/${projectId}`, { key: t().orgA.keys.owner });
      assert.equal((project.body.project as ProjectJson).run_count, "1");

      const conflict = await post(t(), "/v1/runs", t().orgA.keys.owner, { ...body, label: "changed" }, key);
      assertError(conflict, 409, "idempotency_conflict");
      assert.equal(await countRows(t(), "runs WHERE project_id = $1", [projectId]), 1);
    });

    it("replays a StartRun error (404 for an unknown parent) as-is", async () => {
      const key = newKey();
      const body = { parent_run_id: "run_doesnotexist" };
      const failed = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertError(failed, 404, "not_found");
      assertReplayOf(await post(t(), "/v1/runs", t().orgA.keys.owner, body, key), failed);
    });

    it("replays CompleteRun instead of failing the retry as already completed", async () => {
      const run = await post(t(), "/v1/runs", t().orgA.keys.owner, {});
      const runId = (run.body.run as RunJson).id;
      const key = newKey();
      const first = await post(t(), `/v1/runs/${runId}:complete`, t().orgA.keys.owner, { status: "succeeded" }, key);
      assertFresh(first);
      assert.equal((first.body.run as RunJson).status, "succeeded");
      const retry = await post(t(), `/v1/runs/${runId}:complete`, t().orgA.keys.owner, { status: "succeeded" }, key);
      assertReplayOf(retry, first);
      assert.equal(await countRows(t(), "events WHERE run_id = $1 AND name = 'run.completed'", [runId]), 1);

      // Without the key (or with a new one) the second completion is refused.
      assertError(
        await post(t(), `/v1/runs/${runId}:complete`, t().orgA.keys.owner, { status: "succeeded" }),
        400,
        "failed_precondition",
      );
      assertError(
        await post(t(), `/v1/runs/${runId}:complete`, t().orgA.keys.owner, { status: "succeeded" }, newKey()),
        400,
        "failed_precondition",
      );
      // The same key with another status is a different request.
      assertError(
        await post(t(), `/v1/runs/${runId}:complete`, t().orgA.keys.owner, { status: "failed" }, key),
        409,
        "idempotency_conflict",
      );
    });

    it("treats the same key on another run's CompleteRun as a different request", async () => {
      const ids: string[] = [];
      for (let i = 0; i < 2; i++)
        ids.push(((await post(t(), "/v1/runs", t().orgA.keys.owner, {})).body.run as RunJson).id);
      const key = newKey();
      assertFresh(await post(t(), `/v1/runs/${ids[0]}:complete`, t().orgA.keys.owner, { status: "canceled" }, key));
      const other = await post(t(), `/v1/runs/${ids[1]}:complete`, t().orgA.keys.owner, { status: "canceled" }, key);
      assertError(other, 409, "idempotency_conflict");
      const got = await t().request("GET", `/v1/runs/${ids[1]}`, { key: t().orgA.keys.owner });
      assert.equal((got.body.run as RunJson).status, "running");
    });

    it("scopes StartRun keys per organization", async () => {
      const key = newKey();
      const a = await post(t(), "/v1/runs", t().orgA.keys.owner, { label: "per org" }, key);
      const b = await post(t(), "/v1/runs", t().orgB.keys.owner, { label: "per org" }, key);
      assertFresh(a);
      assertFresh(b);
      const bRun = b.body.run as RunJson;
      assert.notEqual((a.body.run as RunJson).id, bRun.id);
      assert.equal(bRun.project_id, t().orgB.defaultProjectId);
      assert.equal(await countRows(t(), "runs WHERE id = $1 AND org_id = $2", [bRun.id, t().orgB.id]), 1);
    });
  });

  describe("CreateFeedback", () => {
    it("replays the stored response and conflicts on a different body", async () => {
      const key = newKey();
      const fingerprint = `fp-${randomBytes(6).toString("hex")}`;
      const body = { title: "Replay me", surface: "api", fingerprint };
      const first = await post(t(), "/v1/feedback", t().orgA.keys.member, body, key);
      assertFresh(first);
      const id = first.body.id as string;
      assert.match(id, /^fb_/);
      const replay = await post(t(), "/v1/feedback", t().orgA.keys.member, body, key);
      assertReplayOf(replay, first);
      assert.equal(
        await countRows(t(), "feedback WHERE org_id = $1 AND fingerprint = $2", [t().orgA.id, fingerprint]),
        1,
      );

      // A replay does not consult the feedback table: it answers even after the row is gone.
      await t().c.db.query("DELETE FROM feedback WHERE id = $1", [id]);
      assertReplayOf(await post(t(), "/v1/feedback", t().orgA.keys.member, body, key), first);
      assert.equal(await countRows(t(), "feedback WHERE fingerprint = $1", [fingerprint]), 0);

      const conflict = await post(t(), "/v1/feedback", t().orgA.keys.member, { ...body, title: "Changed" }, key);
      assertError(conflict, 409, "idempotency_conflict");
      assert.equal(await countRows(t(), "feedback WHERE fingerprint = $1", [fingerprint]), 0);
    });
  });

  describe("operations are independent", () => {
    it("lets one key serve CreateProject, StartRun, CompleteRun and CreateFeedback once each", async () => {
      const key = newKey();
      const project = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "Multi", slug: uniqueSlug() }, key);
      assertFresh(project);
      const projectId = (project.body.project as ProjectJson).id;
      const run = await post(t(), "/v1/runs", t().orgA.keys.owner, { project_id: projectId }, key);
      assertFresh(run);
      const runId = (run.body.run as RunJson).id;
      assert.equal((run.body.run as RunJson).project_id, projectId);
      const done = await post(t(), `/v1/runs/${runId}:complete`, t().orgA.keys.owner, { status: "succeeded" }, key);
      assertFresh(done);
      const feedback = await post(
        t(),
        "/v1/feedback",
        t().orgA.keys.owner,
        { title: "Multi", surface: "docs", fingerprint: `fp-${randomBytes(6).toString("hex")}` },
        key,
      );
      assertFresh(feedback);
      const { rows } = await t().c.db.query<{ operation: string; state: string; status_code: number }>(
        "SELECT operation, state, status_code FROM idempotency_keys WHERE org_id = $1 AND idempotency_key = $2 ORDER BY operation",
        [t().orgA.id, key],
      );
      assert.deepEqual(rows, [
        { operation: "CompleteRun", state: "done", status_code: 200 },
        { operation: "CreateFeedback", state: "done", status_code: 200 },
        { operation: "CreateProject", state: "done", status_code: 200 },
        { operation: "StartRun", state: "done", status_code: 200 },
      ]);
      assertReplayOf(await post(t(), "/v1/runs", t().orgA.keys.owner, { project_id: projectId }, key), run);
    });

    it("ignores the header on operations that do not honour it", async () => {
      const key = newKey();
      const project = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "Patch", slug: uniqueSlug() });
      const id = (project.body.project as ProjectJson).id;
      const a = await t().request("PATCH", `/v1/projects/${id}`, {
        key: t().orgA.keys.owner,
        headers: withKey(key),
        body: { name: "p1" },
      });
      const b = await t().request("PATCH", `/v1/projects/${id}`, {
        key: t().orgA.keys.owner,
        headers: withKey(key),
        body: { name: "p1" },
      });
      assert.equal((a.body.project as ProjectJson).version, "2");
      assert.equal((b.body.project as ProjectJson).version, "3");
      assert.equal(b.headers[REPLAYED], undefined);
      assert.equal(await countRows(t(), "idempotency_keys WHERE idempotency_key = $1", [key]), 0);
    });
  });

  describe("claims in flight", () => {
    it("answers concurrent duplicates with one execution", async () => {
      const key = newKey();
      const projectRes = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "Race", slug: uniqueSlug() });
      const projectId = (projectRes.body.project as ProjectJson).id;
      const body = { project_id: projectId, label: "race" };
      const responses = await Promise.all(
        Array.from({ length: 4 }, () => post(t(), "/v1/runs", t().orgA.keys.owner, body, key)),
      );
      const fresh = responses.filter((r) => r.status === 200 && r.headers[REPLAYED] === undefined);
      assert.equal(fresh.length, 1, responses.map((r) => r.raw).join("\n"));
      const runId = ((fresh[0] as TestResponse).body.run as RunJson).id;
      for (const res of responses) {
        if (res === fresh[0]) continue;
        if (res.status === 200) {
          assert.equal(res.headers[REPLAYED], "true");
          assert.equal((res.body.run as RunJson).id, runId);
        } else {
          assertError(res, 409, "operation_conflict");
          assert.equal(res.headers["retry-after"], "1");
        }
      }
      assert.equal(await countRows(t(), "runs WHERE project_id = $1", [projectId]), 1);
    });

    it("is 409 operation_conflict while a claim is pending, and a claim abandoned for long is taken over", async () => {
      const key = newKey();
      const body = { label: "pending" };
      const first = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertFresh(first);
      const firstId = (first.body.run as RunJson).id;
      // Make the record look like a request that is still running (same request hash).
      await t().c.db.query(
        `UPDATE idempotency_keys SET state = 'pending', status_code = NULL, response_body = NULL
          WHERE org_id = $1 AND operation = 'StartRun' AND idempotency_key = $2`,
        [t().orgA.id, key],
      );
      const busy = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertError(busy, 409, "operation_conflict");
      assert.equal(busy.headers["retry-after"], "1");
      const differs = await post(t(), "/v1/runs", t().orgA.keys.owner, { label: "other" }, key);
      assertError(differs, 409, "idempotency_conflict");

      // A claim older than the abandonment window belongs to a request that died.
      await t().c.db.query(
        `UPDATE idempotency_keys SET created_at = created_at - interval '10 minutes'
          WHERE org_id = $1 AND operation = 'StartRun' AND idempotency_key = $2`,
        [t().orgA.id, key],
      );
      const takeover = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertFresh(takeover);
      const takeoverId = (takeover.body.run as RunJson).id;
      assert.notEqual(takeoverId, firstId);
      const replay = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertReplayOf(replay, takeover);
    });

    it("takes over at once a pending claim whose holder process is gone (a crash), not before", async () => {
      const key = newKey();
      const body = { label: "crashed" };
      const first = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertFresh(first);
      // The claim as a process that died before answering left it: pending, held by another instance.
      const other = "01JDEADPR0CESS0000000000000";
      await t().c.db.query(
        `UPDATE idempotency_keys SET state = 'pending', status_code = NULL, response_body = NULL, holder = $3
          WHERE org_id = $1 AND operation = 'StartRun' AND idempotency_key = $2`,
        [t().orgA.id, key, other],
      );
      if (t().store === "postgres") {
        // While its holder beats, the claim is in flight.
        await t().c.db.query("INSERT INTO server_instances (id) VALUES ($1)", [other]);
        const busy = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
        assertError(busy, 409, "operation_conflict");
        // Its heartbeat stops: the holder is gone.
        await t().c.db.query("UPDATE server_instances SET heartbeat_at = now() - interval '1 minute' WHERE id = $1", [
          other,
        ]);
      }
      const differs = await post(t(), "/v1/runs", t().orgA.keys.owner, { label: "other" }, key);
      assertError(differs, 409, "idempotency_conflict");
      const takeover = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertFresh(takeover);
      assert.notEqual((takeover.body.run as RunJson).id, (first.body.run as RunJson).id);
      const replay = await post(t(), "/v1/runs", t().orgA.keys.owner, body, key);
      assertReplayOf(replay, takeover);
      await t().c.db.query("DELETE FROM server_instances WHERE id = $1", [other]);
    });
  });
});

/** A clock that tests can move forward. */
function movableClock(): Clock & { advanceMs(ms: number): void } {
  let offsetMs = 0;
  return {
    now: () => new Date(Date.now() + offsetMs),
    nowNs: () => BigInt(Date.now() + offsetMs) * 1_000_000n,
    advanceMs(ms: number) {
      offsetMs += ms;
    },
  };
}

const clock = movableClock();
forEachStore(
  "idempotency retention",
  (t) => {
    it("forgets a key after the retention period", async () => {
      const key = newKey();
      const first = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "Old", slug: uniqueSlug() }, key);
      assertFresh(first);
      clock.advanceMs(60 * 60 * 1000); // 1 h: still remembered
      assertError(
        await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "New", slug: uniqueSlug() }, key),
        409,
        "idempotency_conflict",
      );
      clock.advanceMs(2 * 60 * 60 * 1000); // 3 h in all, past the 2 h retention
      const reused = await post(t(), "/v1/projects", t().orgA.keys.owner, { name: "New", slug: uniqueSlug() }, key);
      assertFresh(reused);
      assert.notEqual((reused.body.project as ProjectJson).id, (first.body.project as ProjectJson).id);
    });

    it("purges expired records", async () => {
      const key = newKey();
      assertFresh(await post(t(), "/v1/runs", t().orgA.keys.owner, {}, key));
      assert.equal(await countRows(t(), "idempotency_keys WHERE idempotency_key = $1", [key]), 1);
      clock.advanceMs(3 * 60 * 60 * 1000);
      assert.ok((await t().c.idempotency.purgeExpired()) >= 1);
      assert.equal(await countRows(t(), "idempotency_keys WHERE idempotency_key = $1", [key]), 0);
    });
  },
  { config: { idempotencyRetentionHours: 2 }, overrides: { clock } },
);
