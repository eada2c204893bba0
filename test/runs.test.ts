// RunService over HTTP: run trees and their lineage, completion, reads and keyset paging,
// the lifecycle events written with them, and the per-route security checks.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import type { ProjectJson } from "../src/modules/projects/schemas.js";
import type { RunJson } from "../src/modules/runs/schemas.js";
import { forEachStore, type TestApp, type TestResponse } from "./harness.js";
import { assertError, assertUnauthenticatedOnEvery, fieldOf } from "./support/assertions.js";
import { countRows, freshOrg, listPages } from "./support/fixtures.js";

const SANDBOX_ID = `sbx-${"b".repeat(40)}`;

const runOf = (res: TestResponse) => fieldOf<RunJson>(res, "run");

async function startRun(t: TestApp, key: string, body: Record<string, unknown> = {}): Promise<RunJson> {
  return runOf(await t.request("POST", "/v1/runs", { key, body }));
}

function completeRun(t: TestApp, key: string, id: string, body: Record<string, unknown>) {
  return t.request("POST", `/v1/runs/${id}:complete`, { key, body });
}

async function createProject(t: TestApp, key: string): Promise<string> {
  const res = await t.request("POST", "/v1/projects", {
    key,
    body: { name: "Runs", slug: `r-${randomBytes(5).toString("hex")}` },
  });
  return fieldOf<{ id: string }>(res, "project").id;
}

async function getProject(t: TestApp, key: string, id: string) {
  return fieldOf<{ run_count: string; last_run_at?: string }>(
    await t.request("GET", `/v1/projects/${id}`, { key }),
    "project",
  );
}

const countRuns = (t: TestApp, orgId: string) => countRows(t, "runs WHERE org_id = $1", [orgId]);

async function eventsOf(t: TestApp, runId: string) {
  const { rows } = await t.c.db.query<{
    name: string;
    org_id: string;
    project_id: string;
    lineage_path: string;
    principal: string;
    payload: Record<string, unknown>;
  }>(
    "SELECT name, org_id, project_id, lineage_path, principal, payload FROM events WHERE run_id = $1 ORDER BY ts_wall_ns, event_id",
    [runId],
  );
  return rows;
}

const listAll = (t: TestApp, key: string, pageSize: number, filter: Record<string, string> = {}) =>
  listPages<RunJson>(t, "/v1/runs", "runs", key, pageSize, filter);

forEachStore("runs", (t) => {
  describe("StartRun", () => {
    it("starts a root run in the default project", async () => {
      const run = await startRun(t(), t().orgA.keys.member, {});
      assert.match(run.id, /^run_[0-9a-z]{26}$/);
      assert.equal(run.project_id, t().orgA.defaultProjectId);
      assert.equal(run.lineage_path, run.id);
      assert.equal(run.root_run_id, run.id);
      assert.equal(run.depth, 0);
      assert.equal(run.status, "running");
      assert.equal(run.label, "");
      assert.equal(run.created_by, t().orgA.principalIds.member);
      assert.equal(run.parent_run_id, undefined);
      assert.equal(run.ended_at, undefined);
      assert.equal(run.execute_as_workload, undefined);
      assert.equal(new Date(run.started_at).toISOString(), run.started_at);
      assert.ok(Math.abs(Date.parse(run.started_at) - Date.now()) < 60_000);
    });

    it("starts a run in a named project with a label", async () => {
      const projectId = await createProject(t(), t().orgA.keys.owner);
      const run = await startRun(t(), t().orgA.keys.service, { project_id: projectId, label: "nightly eval" });
      assert.equal(run.project_id, projectId);
      assert.equal(run.label, "nightly eval");
      assert.equal(run.created_by, t().orgA.principalIds.service);
    });

    it("treats empty project_id, parent_run_id and execute_as_workload as absent", async () => {
      const run = await startRun(t(), t().orgA.keys.owner, {
        project_id: "",
        parent_run_id: "",
        execute_as_workload: "",
      });
      assert.equal(run.project_id, t().orgA.defaultProjectId);
      assert.equal(run.depth, 0);
      assert.equal(run.lineage_path, run.id);
      assert.equal(run.execute_as_workload, undefined);
    });

    it("starts children that extend the parent's lineage in the parent's project", async () => {
      const projectId = await createProject(t(), t().orgA.keys.owner);
      const root = await startRun(t(), t().orgA.keys.owner, { project_id: projectId });
      const child = await startRun(t(), t().orgA.keys.member, { parent_run_id: root.id, label: "child" });
      assert.equal(child.parent_run_id, root.id);
      assert.equal(child.root_run_id, root.id);
      assert.equal(child.lineage_path, `${root.id}.${child.id}`);
      assert.equal(child.depth, 1);
      assert.equal(child.project_id, projectId);

      const grandchild = await startRun(t(), t().orgA.keys.owner, { parent_run_id: child.id, project_id: projectId });
      assert.equal(grandchild.parent_run_id, child.id);
      assert.equal(grandchild.root_run_id, root.id);
      assert.equal(grandchild.lineage_path, `${root.id}.${child.id}.${grandchild.id}`);
      assert.equal(grandchild.depth, 2);
      assert.equal(grandchild.project_id, projectId);

      const got = runOf(await t().request("GET", `/v1/runs/${grandchild.id}`, { key: t().orgA.keys.owner }));
      assert.deepEqual(got, grandchild);
    });

    it("rejects a project_id that differs from the parent's project and creates nothing", async () => {
      const projectId = await createProject(t(), t().orgA.keys.owner);
      const parent = await startRun(t(), t().orgA.keys.owner, { project_id: projectId });
      const before = await countRuns(t(), t().orgA.id);
      const res = await t().request("POST", "/v1/runs", {
        key: t().orgA.keys.owner,
        body: { parent_run_id: parent.id, project_id: t().orgA.defaultProjectId },
      });
      assertError(res, 400, "invalid_argument");
      assert.equal(await countRuns(t(), t().orgA.id), before);
      assert.equal((await getProject(t(), t().orgA.keys.owner, projectId)).run_count, "1");
    });

    it("is 404 for an unknown parent, another organization's parent, or another organization's project", async () => {
      const foreignParent = await startRun(t(), t().orgB.keys.owner, {});
      const foreignProject = await createProject(t(), t().orgB.keys.owner);
      const before = await countRuns(t(), t().orgA.id);
      const bodies = [
        { parent_run_id: "run_doesnotexist" },
        { parent_run_id: foreignParent.id },
        { project_id: foreignProject },
        { project_id: t().orgB.defaultProjectId },
        { project_id: "prj_doesnotexist" },
      ];
      for (const body of bodies) {
        const res = await t().request("POST", "/v1/runs", { key: t().orgA.keys.owner, body });
        assertError(res, 404, "not_found");
      }
      assert.equal(await countRuns(t(), t().orgA.id), before);
      assert.equal((await getProject(t(), t().orgB.keys.owner, foreignProject)).run_count, "0");
    });

    it("uses the project a key is bound to when the request names none", async () => {
      const projectId = await createProject(t(), t().orgA.keys.owner);
      const bound = await t().issueKey(t().orgA, { projectId });
      const run = await startRun(t(), bound.key, {});
      assert.equal(run.project_id, projectId);
      assert.equal(run.created_by, bound.principalId);
      const explicit = await startRun(t(), bound.key, { project_id: t().orgA.defaultProjectId });
      assert.equal(explicit.project_id, t().orgA.defaultProjectId);
      assert.equal((await getProject(t(), t().orgA.keys.owner, projectId)).run_count, "1");
    });

    it("answers 404 not_found for an unregistered or another organization's workload, creating nothing", async () => {
      const projectId = await createProject(t(), t().orgA.keys.owner);
      const orgBOwner = await t().c.identity.authenticate(t().orgB.keys.owner);
      const onlyInB = `only-b-${randomBytes(3).toString("hex")}`;
      await t().c.workloads.create(orgBOwner, { name: onlyInB });
      const before = await countRuns(t(), t().orgA.id);
      for (const name of ["does-not-exist", onlyInB]) {
        const res = await t().request("POST", "/v1/runs", {
          key: t().orgA.keys.owner,
          body: { project_id: projectId, execute_as_workload: name },
        });
        assertError(res, 404, "not_found");
      }
      assert.equal(await countRuns(t(), t().orgA.id), before);
      const project = await getProject(t(), t().orgA.keys.owner, projectId);
      assert.equal(project.run_count, "0");
      assert.equal(project.last_run_at, undefined);
    });

    it("records execute_as_workload for a registered workload the caller may launch", async () => {
      // The harness registers the workload "agent" in every organization (default launch policy).
      const run = await startRun(t(), t().orgA.keys.member, { execute_as_workload: "agent" });
      assert.equal(run.execute_as_workload, "agent");
      assert.equal(run.created_by, t().orgA.principalIds.member);
      const got = runOf(await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner }));
      assert.equal(got.execute_as_workload, "agent");
      const events = await eventsOf(t(), run.id);
      assert.equal(events[0]?.payload.execute_as_workload, "agent");
    });

    it("validates the body: label length, unknown fields and types", async () => {
      const ok = await startRun(t(), t().orgA.keys.owner, { label: "l".repeat(256) });
      assert.equal(ok.label.length, 256);
      const before = await countRuns(t(), t().orgA.id);
      for (const body of [
        { label: "l".repeat(257) },
        { status: "running" },
        { org_id: t().orgB.id },
        { label: 7 },
        { parent_run_id: null },
        { project_id: "p".repeat(65) },
      ]) {
        const res = await t().request("POST", "/v1/runs", { key: t().orgA.keys.owner, body });
        assertError(res, 400, "invalid_argument");
      }
      assert.equal(await countRuns(t(), t().orgA.id), before);
    });

    it("writes a run.started event in the run's project and lineage", async () => {
      const root = await startRun(t(), t().orgA.keys.owner, { label: "evented" });
      const child = await startRun(t(), t().orgA.keys.member, { parent_run_id: root.id });
      const rootEvents = await eventsOf(t(), root.id);
      assert.equal(rootEvents.length, 1);
      assert.equal(rootEvents[0]?.name, "run.started");
      assert.equal(rootEvents[0]?.org_id, t().orgA.id);
      assert.equal(rootEvents[0]?.project_id, root.project_id);
      assert.equal(rootEvents[0]?.lineage_path, root.id);
      assert.equal(rootEvents[0]?.principal, t().orgA.principalIds.owner);
      assert.equal(rootEvents[0]?.payload.label, "evented");
      const childEvents = await eventsOf(t(), child.id);
      assert.deepEqual(
        childEvents.map((e) => e.name),
        ["run.started"],
      );
      assert.equal(childEvents[0]?.lineage_path, child.lineage_path);
      assert.equal(childEvents[0]?.payload.parent_run_id, root.id);
      assert.equal(childEvents[0]?.principal, t().orgA.principalIds.member);
    });
  });

  describe("CompleteRun", () => {
    for (const status of ["succeeded", "failed", "canceled"]) {
      it(`completes a running run as ${status} and stamps ended_at`, async () => {
        const run = await startRun(t(), t().orgA.keys.owner, {});
        const res = await completeRun(t(), t().orgA.keys.member, run.id, { status });
        const done = runOf(res);
        assert.equal(done.id, run.id);
        assert.equal(done.status, status);
        assert.ok(done.ended_at, "ended_at is set");
        assert.equal(new Date(done.ended_at).toISOString(), done.ended_at);
        assert.ok(Date.parse(done.ended_at) >= Date.parse(run.started_at));
        assert.equal(done.started_at, run.started_at);
        assert.equal(done.lineage_path, run.lineage_path);
        assert.equal(done.created_by, run.created_by);

        const got = runOf(await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner }));
        assert.deepEqual(got, done);
        const events = await eventsOf(t(), run.id);
        assert.deepEqual(
          events.map((e) => e.name),
          ["run.started", "run.completed"],
        );
        assert.equal(events[1]?.payload.status, status);
        assert.equal(events[1]?.principal, t().orgA.principalIds.member);
        assert.equal(events[1]?.lineage_path, run.lineage_path);
        assert.equal(events[1]?.project_id, run.project_id);
      });
    }

    it("accepts a body id equal to the path id and rejects a different one", async () => {
      const run = await startRun(t(), t().orgA.keys.owner, {});
      const other = await startRun(t(), t().orgA.keys.owner, {});
      const mismatch = await completeRun(t(), t().orgA.keys.owner, run.id, { id: other.id, status: "succeeded" });
      assertError(mismatch, 400, "invalid_argument");
      for (const id of [run.id, other.id]) {
        assert.equal(runOf(await t().request("GET", `/v1/runs/${id}`, { key: t().orgA.keys.owner })).status, "running");
      }
      const ok = await completeRun(t(), t().orgA.keys.owner, run.id, { id: run.id, status: "succeeded" });
      assert.equal(runOf(ok).status, "succeeded");
    });

    it("refuses a second completion with 400 failed_precondition and keeps the first", async () => {
      const run = await startRun(t(), t().orgA.keys.owner, {});
      const first = runOf(await completeRun(t(), t().orgA.keys.owner, run.id, { status: "failed" }));
      for (const status of ["succeeded", "failed", "canceled"]) {
        const res = await completeRun(t(), t().orgA.keys.owner, run.id, { status });
        assertError(res, 400, "failed_precondition");
      }
      const got = runOf(await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner }));
      assert.deepEqual(got, first);
      const events = await eventsOf(t(), run.id);
      assert.deepEqual(
        events.map((e) => e.name),
        ["run.started", "run.completed"],
      );
    });

    it("rejects a status that is not terminal or not a status", async () => {
      const run = await startRun(t(), t().orgA.keys.owner, {});
      for (const body of [{ status: "running" }, { status: "done" }, { status: "SUCCEEDED" }, {}, { status: 1 }]) {
        const res = await completeRun(t(), t().orgA.keys.owner, run.id, body);
        assertError(res, 400, "invalid_argument");
      }
      const extra = await completeRun(t(), t().orgA.keys.owner, run.id, { status: "failed", ended_at: "x" });
      assertError(extra, 400, "invalid_argument");
      const got = runOf(await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner }));
      assert.equal(got.status, "running");
      assert.equal(got.ended_at, undefined);
    });

    it("completes only the named run, not its parent or children", async () => {
      const root = await startRun(t(), t().orgA.keys.owner, {});
      const child = await startRun(t(), t().orgA.keys.owner, { parent_run_id: root.id });
      runOf(await completeRun(t(), t().orgA.keys.owner, root.id, { status: "canceled" }));
      assert.equal(
        runOf(await t().request("GET", `/v1/runs/${child.id}`, { key: t().orgA.keys.owner })).status,
        "running",
      );
      runOf(await completeRun(t(), t().orgA.keys.owner, child.id, { status: "succeeded" }));
      assert.equal(
        runOf(await t().request("GET", `/v1/runs/${root.id}`, { key: t().orgA.keys.owner })).status,
        "canceled",
      );
    });

    it("is 404 for an unknown run", async () => {
      const res = await completeRun(t(), t().orgA.keys.owner, "run_doesnotexist", { status: "succeeded" });
      assertError(res, 404, "not_found");
    });

    it("is a custom verb: POST /v1/runs/{id} without :complete is not CompleteRun", async () => {
      const run = await startRun(t(), t().orgA.keys.owner, {});
      const res = await t().request("POST", `/v1/runs/${run.id}`, {
        key: t().orgA.keys.owner,
        body: { status: "succeeded" },
      });
      assert.ok(res.status >= 400, res.raw);
      const other = await t().request("POST", `/v1/runs/${run.id}:finish`, {
        key: t().orgA.keys.owner,
        body: { status: "succeeded" },
      });
      assert.ok(other.status >= 400, other.raw);
      assert.equal(
        runOf(await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner })).status,
        "running",
      );
    });
  });

  describe("GetRun", () => {
    it("returns the run as started", async () => {
      const run = await startRun(t(), t().orgA.keys.owner, { label: "get me" });
      const res = await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.workload });
      assert.deepEqual(runOf(res), run);
    });

    it("is 404 for an unknown id", async () => {
      assertError(
        await t().request("GET", "/v1/runs/run_doesnotexist", { key: t().orgA.keys.owner }),
        404,
        "not_found",
      );
    });
  });

  describe("ListRuns", () => {
    it("pages newest first with no duplicates or gaps and an empty token on the last page", async () => {
      const org = await freshOrg(t(), "member");
      const ids: string[] = [];
      for (let i = 0; i < 7; i++) ids.push((await startRun(t(), org.key, { label: `r${i}` })).id);
      const expected = [...ids].reverse();
      const pages = await listAll(t(), org.key, 3);
      assert.deepEqual(
        pages.map((p) => p.length),
        [3, 3, 1],
      );
      assert.deepEqual(
        pages.flat().map((r) => r.id),
        expected,
      );
      const single = await listAll(t(), org.key, 1);
      assert.equal(single.length, 7);
      assert.deepEqual(
        single.flat().map((r) => r.id),
        expected,
      );
      const exact = await listAll(t(), org.key, 7);
      assert.equal(exact.length, 1);
      assert.equal(exact[0]?.length, 7);
      const dflt = await t().request("GET", "/v1/runs", { key: org.key });
      assert.equal((dflt.body.runs as RunJson[]).length, 7);
      assert.equal(dflt.body.next_page_token, "");
      // The listed runs are the full records.
      const firstListed = pages[0]?.[0];
      const got = runOf(await t().request("GET", `/v1/runs/${ids[6]}`, { key: org.key }));
      assert.deepEqual(firstListed, got);
    });

    it("returns an empty list for an organization without runs", async () => {
      const org = await freshOrg(t(), "member");
      const res = await t().request("GET", "/v1/runs", { key: org.key });
      assert.equal(res.status, 200);
      assert.deepEqual(res.body, { runs: [], next_page_token: "" });
    });

    it("filters by project_id and by parent_run_id, with paging", async () => {
      const org = await freshOrg(t(), "member");
      const projRes = await t().request("POST", "/v1/projects", {
        key: org.key,
        body: { name: "Filtered", slug: "filtered" },
      });
      const projectId = (projRes.body.project as ProjectJson).id;
      const inProject: string[] = [];
      const inDefault: string[] = [];
      for (let i = 0; i < 3; i++) {
        inProject.push((await startRun(t(), org.key, { project_id: projectId })).id);
        inDefault.push((await startRun(t(), org.key, {})).id);
      }
      const child1 = (await startRun(t(), org.key, { parent_run_id: inProject[0] })).id;
      const child2 = (await startRun(t(), org.key, { parent_run_id: inProject[0] })).id;
      inProject.push(child1, child2);

      const filtered = await listAll(t(), org.key, 2, { project_id: projectId });
      assert.deepEqual(
        filtered.map((p) => p.length),
        [2, 2, 1],
      );
      assert.deepEqual(
        filtered.flat().map((r) => r.id),
        [child2, child1, inProject[2], inProject[1], inProject[0]],
      );
      const defaults = await listAll(t(), org.key, 50, { project_id: org.defaultProjectId });
      assert.deepEqual(
        defaults.flat().map((r) => r.id),
        [...inDefault].reverse(),
      );
      const children = await listAll(t(), org.key, 1, { parent_run_id: inProject[0] as string });
      assert.deepEqual(
        children.flat().map((r) => r.id),
        [child2, child1],
      );
      const both = await listAll(t(), org.key, 50, {
        project_id: org.defaultProjectId,
        parent_run_id: inProject[0] as string,
      });
      assert.deepEqual(both.flat(), []);
    });

    it("keeps a page token stable while new runs start", async () => {
      const org = await freshOrg(t(), "member");
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) ids.push((await startRun(t(), org.key, {})).id);
      const first = await t().request("GET", "/v1/runs", { key: org.key, query: { page_size: "2" } });
      assert.deepEqual(
        (first.body.runs as RunJson[]).map((r) => r.id),
        [ids[3], ids[2]],
      );
      const newer = await startRun(t(), org.key, {});
      const second = await t().request("GET", "/v1/runs", {
        key: org.key,
        query: { page_token: first.body.next_page_token as string },
      });
      assert.equal(second.status, 200, second.raw);
      const secondIds = (second.body.runs as RunJson[]).map((r) => r.id);
      assert.deepEqual(secondIds, [ids[1], ids[0]]);
      assert.ok(!secondIds.includes(newer.id));
      assert.equal(second.body.next_page_token, "");
    });

    it("rejects bad page sizes, foreign page tokens and unknown parameters", async () => {
      for (const size of ["0", "201", "-3", "many"]) {
        const res = await t().request("GET", "/v1/runs", { key: t().orgA.keys.owner, query: { page_size: size } });
        assertError(res, 400, "invalid_argument");
      }
      assert.equal(
        (await t().request("GET", "/v1/runs", { key: t().orgA.keys.owner, query: { page_size: "200" } })).status,
        200,
      );
      const projectsPage = await t().request("GET", "/v1/projects", {
        key: t().orgA.keys.owner,
        query: { page_size: "1" },
      });
      const projectToken = projectsPage.body.next_page_token as string;
      assert.notEqual(projectToken, "");
      for (const token of ["garbage", projectToken, "e30"]) {
        const res = await t().request("GET", "/v1/runs", { key: t().orgA.keys.owner, query: { page_token: token } });
        assertError(res, 400, "invalid_argument");
      }
      const unknown = await t().request("GET", "/v1/runs", { key: t().orgA.keys.owner, query: { status: "running" } });
      assertError(unknown, 400, "invalid_argument");
    });
  });

  describe("security", () => {
    const routes = (runId: string) => [
      { name: "StartRun", method: "POST", url: "/v1/runs", body: {} },
      { name: "CompleteRun", method: "POST", url: `/v1/runs/${runId}:complete`, body: { status: "failed" } },
      { name: "GetRun", method: "GET", url: `/v1/runs/${runId}` },
      { name: "ListRuns", method: "GET", url: "/v1/runs" },
    ];

    it("answers 401 unauthenticated with {code,message,request_id} on every route", async () => {
      const run = await startRun(t(), t().orgA.keys.owner, {});
      const before = await countRuns(t(), t().orgA.id);
      await assertUnauthenticatedOnEvery(t(), routes(run.id));
      assert.equal(
        runOf(await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner })).status,
        "running",
      );
      assert.equal(await countRuns(t(), t().orgA.id), before);
    });

    it("answers 404 not_found for another organization's runs and changes nothing", async () => {
      const projectId = await createProject(t(), t().orgA.keys.owner);
      const run = await startRun(t(), t().orgA.keys.owner, { project_id: projectId });
      const intruder = t().orgB.keys.owner;
      assertError(await t().request("GET", `/v1/runs/${run.id}`, { key: intruder }), 404, "not_found");
      assertError(await completeRun(t(), intruder, run.id, { status: "canceled" }), 404, "not_found");
      assertError(await completeRun(t(), intruder, run.id, { id: "run_other", status: "canceled" }), 404, "not_found");
      assertError(
        await t().request("POST", "/v1/runs", { key: intruder, body: { parent_run_id: run.id } }),
        404,
        "not_found",
      );
      assertError(
        await t().request("POST", "/v1/runs", { key: intruder, body: { project_id: projectId } }),
        404,
        "not_found",
      );
      // Listing shows nothing of it, and a filter naming its project or run is 404 like a read.
      const pages = await listAll(t(), intruder, 200, {});
      assert.ok(!pages.flat().some((r) => r.id === run.id || r.project_id === projectId));
      for (const query of [{ project_id: projectId }, { parent_run_id: run.id }] as Record<string, string>[]) {
        assertError(await t().request("GET", "/v1/runs", { key: intruder, query }), 404, "not_found");
      }
      const got = runOf(await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner }));
      assert.deepEqual(got, run);
      const project = await getProject(t(), t().orgA.keys.owner, projectId);
      assert.equal(project.run_count, "1");
      assert.deepEqual(
        (await eventsOf(t(), run.id)).map((e) => e.name),
        ["run.started"],
      );
    });

    it("refuses a sandbox-scoped credential with 403 on every route", async () => {
      const run = await startRun(t(), t().orgA.keys.owner, {});
      const sandboxKey = await t().issueKey(t().orgA, {
        role: "owner",
        sandbox: { sandboxId: SANDBOX_ID, lineagePath: `${run.lineage_path}.${SANDBOX_ID}` },
      });
      const before = await countRuns(t(), t().orgA.id);
      for (const route of routes(run.id)) {
        const res = await t().request(route.method, route.url, {
          key: sandboxKey.key,
          ...(route.body ? { body: route.body } : {}),
        });
        assertError(res, 403, "permission_denied");
      }
      const child = await t().request("POST", "/v1/runs", { key: sandboxKey.key, body: { parent_run_id: run.id } });
      assertError(child, 403, "permission_denied");
      assert.equal(await countRuns(t(), t().orgA.id), before);
      assert.equal(
        runOf(await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner })).status,
        "running",
      );
    });
  });
});
