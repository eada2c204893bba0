// ProjectService over HTTP: create/get/list/update/delete, their validation limits,
// optimistic concurrency, cascading deletes, run statistics, and the per-route security
// checks (no key, another organization, sandbox-scoped credential, role).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import type { ProjectJson } from "../src/modules/projects/schemas.js";
import { forEachStore, type TestApp, type TestResponse } from "./harness.js";
import { assertError, assertUnauthenticatedOnEvery, fieldOf } from "./support/assertions.js";
import { countRows, freshOrg, listPages } from "./support/fixtures.js";

const SANDBOX_ID = `sbx-${"a".repeat(40)}`;

const uniqueSlug = (prefix = "p") => `${prefix}-${randomBytes(5).toString("hex")}`;

const projectOf = (res: TestResponse) => fieldOf<ProjectJson>(res, "project");

async function createProject(t: TestApp, key: string, body: Record<string, unknown> = {}): Promise<ProjectJson> {
  const res = await t.request("POST", "/v1/projects", {
    key,
    body: { name: "Project", slug: uniqueSlug(), ...body },
  });
  return projectOf(res);
}

async function startRun(t: TestApp, key: string, body: Record<string, unknown> = {}) {
  return fieldOf<{ id: string; started_at: string; project_id: string }>(
    await t.request("POST", "/v1/runs", { key, body }),
    "run",
  );
}

const NOTHING_DELETED = { api_keys_deleted: "0", runs_deleted: "0", secrets_deleted: "0", volumes_deleted: "0" };

/** Asserts a DeleteProject answered 200 with exactly these counts (the ones not named are "0"). */
function assertDeleted(res: TestResponse, counts: Partial<typeof NOTHING_DELETED> = {}): void {
  assert.equal(res.status, 200, res.raw);
  assert.deepEqual(res.body, { ...NOTHING_DELETED, ...counts });
}

const countProjects = (t: TestApp, orgId: string) => countRows(t, "projects WHERE org_id = $1", [orgId]);

const listAll = (t: TestApp, key: string, pageSize: number) =>
  listPages<ProjectJson>(t, "/v1/projects", "projects", key, pageSize);

forEachStore("projects", (t) => {
  /** GetProject for the id, as org A's owner. */
  const ownerGet = (id: string) => t().request("GET", `/v1/projects/${id}`, { key: t().orgA.keys.owner });

  describe("CreateProject", () => {
    it("creates a project with every field and returns it", async () => {
      const slug = uniqueSlug();
      const res = await t().request("POST", "/v1/projects", {
        key: t().orgA.keys.owner,
        body: { name: "Alpha", slug, description: "first project" },
      });
      const project = projectOf(res);
      assert.match(project.id, /^prj_[0-9a-z]{26}$/);
      assert.equal(project.name, "Alpha");
      assert.equal(project.slug, slug);
      assert.equal(project.description, "first project");
      assert.equal(project.version, "1");
      assert.equal(project.run_count, "0");
      assert.equal(project.is_default, false);
      assert.equal(project.created_by, t().orgA.principalIds.owner);
      assert.equal(project.last_run_at, undefined);
      assert.equal(project.created_at, project.updated_at);
      assert.equal(new Date(project.created_at).toISOString(), project.created_at);
      assert.ok(Math.abs(Date.parse(project.created_at) - Date.now()) < 60_000);

      const got = await t().request("GET", `/v1/projects/${project.id}`, { key: t().orgA.keys.member });
      assert.deepEqual(projectOf(got), project);
    });

    it("defaults an omitted description to empty", async () => {
      const project = await createProject(t(), t().orgA.keys.member);
      assert.equal(project.description, "");
      assert.equal(project.created_by, t().orgA.principalIds.member);
    });

    it("accepts a 63-character slug and a 1-character slug", async () => {
      const slug63 = `${randomBytes(4).toString("hex")}${"z".repeat(55)}`;
      assert.equal(slug63.length, 63);
      const long = await createProject(t(), t().orgA.keys.owner, { slug: slug63 });
      assert.equal(long.slug, slug63);
      const short = await createProject(t(), t().orgA.keys.owner, { slug: "7" });
      assert.equal(short.slug, "7");
    });

    it("rejects slugs outside the pattern and creates nothing", async () => {
      const before = await countProjects(t(), t().orgA.id);
      const bad = [
        `${randomBytes(4).toString("hex")}${"z".repeat(56)}`, // 64 characters
        "-leading-dash",
        "trailing-dash-",
        "Upper-case",
        "under_score",
        "has space",
        "dot.ted",
        "",
        "-",
      ];
      for (const slug of bad) {
        const res = await t().request("POST", "/v1/projects", {
          key: t().orgA.keys.owner,
          body: { name: "Bad", slug },
        });
        assertError(res, 400, "invalid_argument");
      }
      assert.equal(await countProjects(t(), t().orgA.id), before);
    });

    it("rejects a duplicate slug in the organization with 409 already_exists", async () => {
      const slug = uniqueSlug("dup");
      const first = await createProject(t(), t().orgA.keys.owner, { slug, name: "First" });
      const res = await t().request("POST", "/v1/projects", {
        key: t().orgA.keys.admin,
        body: { name: "Second", slug },
      });
      assertError(res, 409, "already_exists");
      const { rows } = await t().c.db.query<{ id: string; name: string }>(
        "SELECT id, name FROM projects WHERE org_id = $1 AND slug = $2",
        [t().orgA.id, slug],
      );
      assert.deepEqual(rows, [{ id: first.id, name: "First" }]);
    });

    it("scopes slug uniqueness to the organization", async () => {
      const slug = uniqueSlug("shared");
      const a = await createProject(t(), t().orgA.keys.owner, { slug });
      const b = await createProject(t(), t().orgB.keys.owner, { slug });
      assert.notEqual(a.id, b.id);
      assert.equal(b.slug, slug);
    });

    it("rejects the slug 'default' because every organization already has it", async () => {
      const res = await t().request("POST", "/v1/projects", {
        key: t().orgA.keys.owner,
        body: { name: "Another default", slug: "default" },
      });
      assertError(res, 409, "already_exists");
    });

    it("accepts a description of exactly 4096 bytes and rejects 4097", async () => {
      const ok = await createProject(t(), t().orgA.keys.owner, { description: "d".repeat(4096) });
      assert.equal(ok.description.length, 4096);
      const res = await t().request("POST", "/v1/projects", {
        key: t().orgA.keys.owner,
        body: { name: "Long", slug: uniqueSlug(), description: "d".repeat(4097) },
      });
      assertError(res, 400, "invalid_argument");
    });

    it("counts the description limit in UTF-8 bytes, not characters", async () => {
      // 2-byte characters: 2048 of them are exactly 4096 bytes, 2049 are 4098 bytes.
      const twoByte = await createProject(t(), t().orgA.keys.owner, { description: "é".repeat(2048) });
      assert.equal(twoByte.description, "é".repeat(2048));
      // 4-byte characters: 1024 are exactly 4096 bytes.
      const fourByte = await createProject(t(), t().orgA.keys.owner, { description: "😀".repeat(1024) });
      assert.equal(fourByte.description, "😀".repeat(1024));

      const before = await countProjects(t(), t().orgA.id);
      for (const description of ["é".repeat(2049), "😀".repeat(1025), `${"d".repeat(4095)}é`]) {
        assert.ok(description.length < 4096 + 1 && Buffer.byteLength(description) > 4096);
        const res = await t().request("POST", "/v1/projects", {
          key: t().orgA.keys.owner,
          body: { name: "Multibyte", slug: uniqueSlug(), description },
        });
        assertError(res, 400, "invalid_argument");
      }
      assert.equal(await countProjects(t(), t().orgA.id), before);
    });

    it("validates the name: required, 1 to 200 characters", async () => {
      const ok = await createProject(t(), t().orgA.keys.owner, { name: "n".repeat(200) });
      assert.equal(ok.name.length, 200);
      for (const body of [{ slug: uniqueSlug() }, { name: "", slug: uniqueSlug() }, { name: "n".repeat(201) }]) {
        const res = await t().request("POST", "/v1/projects", {
          key: t().orgA.keys.owner,
          body: { slug: uniqueSlug(), ...body },
        });
        assertError(res, 400, "invalid_argument");
      }
    });

    it("rejects unknown fields and wrongly typed fields with 400 invalid_argument", async () => {
      const slug = uniqueSlug();
      const unknown = await t().request("POST", "/v1/projects", {
        key: t().orgA.keys.owner,
        body: { name: "X", slug, color: "red" },
      });
      assertError(unknown, 400, "invalid_argument");
      assert.match(unknown.body.message as string, /color/);
      const typed = await t().request("POST", "/v1/projects", {
        key: t().orgA.keys.owner,
        body: { name: 42, slug },
      });
      assertError(typed, 400, "invalid_argument");
      const orgField = await t().request("POST", "/v1/projects", {
        key: t().orgA.keys.owner,
        body: { name: "X", slug, org_id: t().orgB.id },
      });
      assertError(orgField, 400, "invalid_argument");
      const { rows } = await t().c.db.query("SELECT 1 FROM projects WHERE slug = $1", [slug]);
      assert.equal(rows.length, 0);
    });

    it("rejects a body that is not JSON", async () => {
      const res = await t().request("POST", "/v1/projects", {
        key: t().orgA.keys.owner,
        body: "{not json",
        headers: { "content-type": "application/json" },
      });
      assertError(res, 400, "invalid_argument");
    });
  });

  describe("GetProject", () => {
    it("returns the project with its version in the ETag header", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const res = await t().request("GET", `/v1/projects/${project.id}`, { key: t().orgA.keys.service });
      assert.equal(projectOf(res).id, project.id);
      assert.equal(res.headers.etag, '"1"');

      await t().request("PATCH", `/v1/projects/${project.id}`, { key: t().orgA.keys.owner, body: { name: "v2" } });
      const again = await ownerGet(project.id);
      assert.equal(projectOf(again).version, "2");
      assert.equal(again.headers.etag, '"2"');
    });

    it("returns the organization's default project", async () => {
      const res = await t().request("GET", `/v1/projects/${t().orgA.defaultProjectId}`, {
        key: t().orgA.keys.member,
      });
      const project = projectOf(res);
      assert.equal(project.is_default, true);
      assert.equal(project.slug, "default");
    });

    it("is 404 not_found for an unknown id", async () => {
      const res = await t().request("GET", "/v1/projects/prj_doesnotexist", { key: t().orgA.keys.owner });
      assertError(res, 404, "not_found");
    });
  });

  describe("ListProjects", () => {
    it("pages newest first with no duplicates or gaps and an empty token on the last page", async () => {
      const org = await freshOrg(t(), "owner");
      const created: string[] = [];
      for (let i = 0; i < 7; i++) {
        created.push((await createProject(t(), org.key, { name: `P${i}` })).id);
      }
      const expected = [...created].reverse().concat(org.defaultProjectId);

      const pages = await listAll(t(), org.key, 3);
      assert.deepEqual(
        pages.map((p) => p.length),
        [3, 3, 2],
      );
      const ids = pages.flat().map((p) => p.id);
      assert.deepEqual(ids, expected);
      assert.equal(new Set(ids).size, ids.length);

      // Timestamps never increase down the list.
      const stamps = pages.flat().map((p) => Date.parse(p.created_at));
      for (let i = 1; i < stamps.length; i++) assert.ok((stamps[i] as number) <= (stamps[i - 1] as number));

      const one = await listAll(t(), org.key, 1);
      assert.equal(one.length, 8);
      assert.deepEqual(
        one.flat().map((p) => p.id),
        expected,
      );
    });

    it("returns everything with an empty token when the page is exactly full or larger", async () => {
      const org = await freshOrg(t(), "owner");
      await createProject(t(), org.key);
      await createProject(t(), org.key);
      const exact = await listAll(t(), org.key, 3);
      assert.equal(exact.length, 1);
      assert.equal(exact[0]?.length, 3);
      const dflt = await t().request("GET", "/v1/projects", { key: org.key });
      assert.equal(dflt.status, 200);
      assert.equal((dflt.body.projects as unknown[]).length, 3);
      assert.equal(dflt.body.next_page_token, "");
    });

    it("keeps a page token stable while new projects are created", async () => {
      const org = await freshOrg(t(), "owner");
      const created: string[] = [];
      for (let i = 0; i < 4; i++) created.push((await createProject(t(), org.key)).id);
      const first = await t().request("GET", "/v1/projects", { key: org.key, query: { page_size: "2" } });
      assert.equal(first.status, 200);
      assert.deepEqual(
        (first.body.projects as ProjectJson[]).map((p) => p.id),
        [created[3], created[2]],
      );
      const newer = await createProject(t(), org.key);
      const second = await t().request("GET", "/v1/projects", {
        key: org.key,
        query: { page_size: "10", page_token: first.body.next_page_token as string },
      });
      assert.equal(second.status, 200);
      const ids = (second.body.projects as ProjectJson[]).map((p) => p.id);
      assert.deepEqual(ids, [created[1], created[0], org.defaultProjectId]);
      assert.ok(!ids.includes(newer.id));
      assert.equal(second.body.next_page_token, "");
    });

    it("accepts page_size 1 and 200 and rejects 0, 201 and non-numbers", async () => {
      for (const size of ["1", "200"]) {
        const res = await t().request("GET", "/v1/projects", { key: t().orgA.keys.owner, query: { page_size: size } });
        assert.equal(res.status, 200, res.raw);
      }
      for (const size of ["0", "201", "-1", "abc", "2.5"]) {
        const res = await t().request("GET", "/v1/projects", { key: t().orgA.keys.owner, query: { page_size: size } });
        assertError(res, 400, "invalid_argument");
      }
    });

    it("rejects a page token it did not issue", async () => {
      const runToken = Buffer.from(JSON.stringify(["runs", new Date().toISOString(), "run_x"])).toString("base64url");
      const badDate = Buffer.from(JSON.stringify(["projects", "not a date", "prj_x"])).toString("base64url");
      for (const token of ["garbage", "!!!", runToken, badDate, "x".repeat(513)]) {
        const res = await t().request("GET", "/v1/projects", {
          key: t().orgA.keys.owner,
          query: { page_token: token },
        });
        assertError(res, 400, "invalid_argument");
      }
    });

    it("rejects unknown query parameters", async () => {
      const res = await t().request("GET", "/v1/projects", { key: t().orgA.keys.owner, query: { slug: "x" } });
      assertError(res, 400, "invalid_argument");
    });

    it("lists only the caller's organization", async () => {
      const a = await createProject(t(), t().orgA.keys.owner);
      const pages = await listAll(t(), t().orgB.keys.owner, 200);
      const ids = pages.flat().map((p) => p.id);
      assert.ok(ids.includes(t().orgB.defaultProjectId));
      assert.ok(!ids.includes(a.id));
      assert.ok(!ids.includes(t().orgA.defaultProjectId));
    });
  });

  describe("UpdateProject", () => {
    it("changes the name, bumps the version and leaves omitted fields unchanged", async () => {
      const project = await createProject(t(), t().orgA.keys.owner, { name: "Old", description: "keep me" });
      const res = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.member,
        body: { name: "New" },
      });
      const updated = projectOf(res);
      assert.equal(res.headers.etag, '"2"');
      assert.equal(updated.name, "New");
      assert.equal(updated.description, "keep me");
      assert.equal(updated.slug, project.slug);
      assert.equal(updated.version, "2");
      assert.equal(updated.created_at, project.created_at);
      assert.ok(Date.parse(updated.updated_at) >= Date.parse(project.updated_at));

      const described = projectOf(
        await t().request("PATCH", `/v1/projects/${project.id}`, {
          key: t().orgA.keys.owner,
          body: { description: "changed" },
        }),
      );
      assert.equal(described.name, "New");
      assert.equal(described.description, "changed");
      assert.equal(described.version, "3");

      const got = projectOf(await ownerGet(project.id));
      assert.deepEqual(got, described);
    });

    it("clears the description when it is sent empty", async () => {
      const project = await createProject(t(), t().orgA.keys.owner, { description: "to be cleared" });
      const updated = projectOf(
        await t().request("PATCH", `/v1/projects/${project.id}`, {
          key: t().orgA.keys.owner,
          body: { description: "" },
        }),
      );
      assert.equal(updated.description, "");
      assert.equal(updated.name, project.name);
      const got = projectOf(await ownerGet(project.id));
      assert.equal(got.description, "");
    });

    it("refuses to change the slug (unknown field) and changes nothing", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const res = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        body: { slug: uniqueSlug(), name: "renamed" },
      });
      assertError(res, 400, "invalid_argument");
      const got = projectOf(await ownerGet(project.id));
      assert.deepEqual(got, project);
    });

    it("applies an update whose If-Match names the current version", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const quoted = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        headers: { "if-match": '"1"' },
        body: { name: "quoted" },
      });
      assert.equal(projectOf(quoted).version, "2");
      const bare = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        headers: { "if-match": "2" },
        body: { name: "bare" },
      });
      assert.equal(projectOf(bare).version, "3");
      const fromEtag = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        headers: { "if-match": bare.headers.etag as string },
        body: { name: "etag" },
      });
      assert.equal(projectOf(fromEtag).name, "etag");
      assert.equal(projectOf(fromEtag).version, "4");
    });

    it("is 412 precondition_failed for a stale If-Match and changes nothing", async () => {
      const project = await createProject(t(), t().orgA.keys.owner, { name: "Original", description: "orig" });
      projectOf(
        await t().request("PATCH", `/v1/projects/${project.id}`, {
          key: t().orgA.keys.owner,
          body: { name: "Second" },
        }),
      );
      const current = projectOf(await ownerGet(project.id));
      for (const stale of ['"1"', "1", '"3"', '"0"']) {
        const res = await t().request("PATCH", `/v1/projects/${project.id}`, {
          key: t().orgA.keys.owner,
          headers: { "if-match": stale },
          body: { name: "Lost update", description: "" },
        });
        assertError(res, 412, "precondition_failed");
      }
      const after = projectOf(await ownerGet(project.id));
      assert.deepEqual(after, current);
      assert.equal(after.version, "2");
      assert.equal(after.name, "Second");
    });

    it("rejects an If-Match that is not a version", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      for (const header of ["abc", '"-1"', "1, 2", '"1.5"']) {
        const res = await t().request("PATCH", `/v1/projects/${project.id}`, {
          key: t().orgA.keys.owner,
          headers: { "if-match": header },
          body: { name: "x" },
        });
        assertError(res, 400, "invalid_argument");
      }
      const got = projectOf(await ownerGet(project.id));
      assert.deepEqual(got, project);
    });

    it("checks the body id against the path id", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const other = await createProject(t(), t().orgA.keys.owner);
      const mismatch = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        body: { id: other.id, name: "hijack" },
      });
      assertError(mismatch, 400, "invalid_argument");
      for (const p of [project, other]) {
        const got = projectOf(await ownerGet(p.id));
        assert.deepEqual(got, p);
      }
      const same = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        body: { id: project.id, name: "ok" },
      });
      assert.equal(projectOf(same).name, "ok");
    });

    it("validates name and description like create", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      for (const body of [{ name: "" }, { name: "n".repeat(201) }, { description: "é".repeat(2049) }]) {
        const res = await t().request("PATCH", `/v1/projects/${project.id}`, { key: t().orgA.keys.owner, body });
        assertError(res, 400, "invalid_argument");
      }
      const ok = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        body: { description: "é".repeat(2048) },
      });
      assert.equal(projectOf(ok).version, "2");
    });

    it("is 404 for an unknown id, with or without If-Match", async () => {
      for (const headers of [{}, { "if-match": '"1"' }] as Record<string, string>[]) {
        const res = await t().request("PATCH", "/v1/projects/prj_doesnotexist", {
          key: t().orgA.keys.owner,
          headers,
          body: { name: "x" },
        });
        assertError(res, 404, "not_found");
      }
    });
  });

  describe("DeleteProject", () => {
    it("deletes an empty project and reports all four counts as zero", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const res = await t().request("DELETE", `/v1/projects/${project.id}`, { key: t().orgA.keys.owner });
      assertDeleted(res);
      assertError(await ownerGet(project.id), 404, "not_found");
      assertError(
        await t().request("DELETE", `/v1/projects/${project.id}`, { key: t().orgA.keys.owner }),
        404,
        "not_found",
      );
      // The slug is free again.
      const again = await createProject(t(), t().orgA.keys.owner, { slug: project.slug });
      assert.notEqual(again.id, project.id);
    });

    it("refuses a project with runs unless cascading, and keeps it", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const run = await startRun(t(), t().orgA.keys.owner, { project_id: project.id });
      for (const query of [undefined, { cascade: "false" }]) {
        const res = await t().request("DELETE", `/v1/projects/${project.id}`, {
          key: t().orgA.keys.owner,
          ...(query ? { query } : {}),
        });
        assertError(res, 400, "failed_precondition");
      }
      const got = projectOf(await ownerGet(project.id));
      assert.equal(got.run_count, "1");
      const runRes = await t().request("GET", `/v1/runs/${run.id}`, { key: t().orgA.keys.owner });
      assert.equal(runRes.status, 200);
    });

    it("refuses a project with only a bound API key unless cascading", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const bound = await t().issueKey(t().orgA, { projectId: project.id });
      const res = await t().request("DELETE", `/v1/projects/${project.id}`, { key: t().orgA.keys.owner });
      assertError(res, 400, "failed_precondition");
      const whoami = await t().request("GET", "/v1/whoami", { key: bound.key });
      assert.equal(whoami.status, 200);
    });

    it("cascades to runs, events and project-bound keys and counts them", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const other = await createProject(t(), t().orgA.keys.owner);
      const keyA = await t().issueKey(t().orgA, { projectId: project.id });
      const keyB = await t().issueKey(t().orgA, { projectId: project.id, kind: "user", role: "admin" });
      const otherKey = await t().issueKey(t().orgA, { projectId: other.id });
      const root = await startRun(t(), t().orgA.keys.owner, { project_id: project.id });
      await startRun(t(), t().orgA.keys.owner, { parent_run_id: root.id });
      await startRun(t(), keyA.key, {});
      const survivor = await startRun(t(), t().orgA.keys.owner, { project_id: other.id });
      const complete = await t().request("POST", `/v1/runs/${root.id}:complete`, {
        key: t().orgA.keys.owner,
        body: { status: "succeeded" },
      });
      assert.equal(complete.status, 200, complete.raw);

      const res = await t().request("DELETE", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.admin,
        query: { cascade: "true" },
      });
      assertDeleted(res, { api_keys_deleted: "2", runs_deleted: "3" });

      assertError(await ownerGet(project.id), 404, "not_found");
      assertError(await t().request("GET", `/v1/runs/${root.id}`, { key: t().orgA.keys.owner }), 404, "not_found");
      const { rows: runs } = await t().c.db.query("SELECT id FROM runs WHERE project_id = $1", [project.id]);
      assert.equal(runs.length, 0);
      const { rows: events } = await t().c.db.query("SELECT 1 FROM events WHERE project_id = $1", [project.id]);
      assert.equal(events.length, 0);
      for (const key of [keyA.key, keyB.key]) {
        assertError(await t().request("GET", "/v1/whoami", { key }), 401, "unauthenticated");
      }

      // Other projects keep their runs, events and keys.
      assert.equal((await t().request("GET", `/v1/runs/${survivor.id}`, { key: t().orgA.keys.owner })).status, 200);
      const { rows: otherEvents } = await t().c.db.query("SELECT 1 FROM events WHERE run_id = $1", [survivor.id]);
      assert.equal(otherEvents.length, 1);
      assert.equal((await t().request("GET", "/v1/whoami", { key: otherKey.key })).status, 200);
      assert.equal((await t().request("GET", "/v1/whoami", { key: t().orgA.keys.owner })).status, 200);
    });

    it("with cascade=true on an empty project reports zeros", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const res = await t().request("DELETE", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        query: { cascade: "true" },
      });
      assertDeleted(res);
    });

    it("never deletes the default project", async () => {
      for (const query of [undefined, { cascade: "true" }]) {
        const res = await t().request("DELETE", `/v1/projects/${t().orgA.defaultProjectId}`, {
          key: t().orgA.keys.owner,
          ...(query ? { query } : {}),
        });
        assertError(res, 400, "failed_precondition");
      }
      const got = await t().request("GET", `/v1/projects/${t().orgA.defaultProjectId}`, { key: t().orgA.keys.owner });
      assert.equal(projectOf(got).is_default, true);
    });

    it("requires the admin role: members, service accounts and workloads are refused", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      for (const key of [t().orgA.keys.member, t().orgA.keys.service, t().orgA.keys.workload]) {
        const res = await t().request("DELETE", `/v1/projects/${project.id}`, {
          key,
          query: { cascade: "true" },
        });
        assertError(res, 403, "permission_denied");
      }
      assert.equal((await ownerGet(project.id)).status, 200);

      const byAdmin = await t().request("DELETE", `/v1/projects/${project.id}`, { key: t().orgA.keys.admin });
      assert.equal(byAdmin.status, 200, byAdmin.raw);
      const second = await createProject(t(), t().orgA.keys.owner);
      const byOwner = await t().request("DELETE", `/v1/projects/${second.id}`, { key: t().orgA.keys.owner });
      assert.equal(byOwner.status, 200, byOwner.raw);
    });

    it("rejects a cascade value that is not a boolean", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const res = await t().request("DELETE", `/v1/projects/${project.id}`, {
        key: t().orgA.keys.owner,
        query: { cascade: "maybe" },
      });
      assertError(res, 400, "invalid_argument");
      assert.equal((await ownerGet(project.id)).status, 200);
    });
  });

  describe("run statistics", () => {
    it("keeps run_count and last_run_at true as runs start, without bumping the version", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      assert.equal(project.run_count, "0");
      assert.equal(project.last_run_at, undefined);

      const first = await startRun(t(), t().orgA.keys.owner, { project_id: project.id });
      let got = projectOf(await ownerGet(project.id));
      assert.equal(got.run_count, "1");
      assert.equal(got.last_run_at, first.started_at);
      assert.equal(got.version, "1");

      await startRun(t(), t().orgA.keys.owner, { parent_run_id: first.id });
      const third = await startRun(t(), t().orgA.keys.owner, { project_id: project.id });
      // Runs elsewhere do not count here.
      await startRun(t(), t().orgA.keys.owner, {});
      got = projectOf(await ownerGet(project.id));
      assert.equal(got.run_count, "3");
      assert.match(got.run_count, /^[0-9]+$/);
      assert.equal(got.last_run_at, third.started_at);
      assert.equal(got.version, "1");

      // Completion is not a start.
      await t().request("POST", `/v1/runs/${third.id}:complete`, {
        key: t().orgA.keys.owner,
        body: { status: "failed" },
      });
      const after = projectOf(await ownerGet(project.id));
      assert.equal(after.run_count, "3");

      const listed = await listAll(t(), t().orgA.keys.owner, 200);
      const inList = listed.flat().find((p) => p.id === project.id);
      assert.equal(inList?.run_count, "3");
      assert.equal(inList?.last_run_at, third.started_at);
    });
  });

  describe("security", () => {
    const routes = (projectId: string) => [
      { name: "CreateProject", method: "POST", url: "/v1/projects", body: { name: "X", slug: uniqueSlug() } },
      { name: "GetProject", method: "GET", url: `/v1/projects/${projectId}` },
      { name: "ListProjects", method: "GET", url: "/v1/projects" },
      { name: "UpdateProject", method: "PATCH", url: `/v1/projects/${projectId}`, body: { name: "intruder" } },
      { name: "DeleteProject", method: "DELETE", url: `/v1/projects/${projectId}` },
    ];

    it("answers 401 unauthenticated with {code,message,request_id} on every route", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const before = await countProjects(t(), t().orgA.id);
      await assertUnauthenticatedOnEvery(t(), routes(project.id));
      const got = projectOf(await ownerGet(project.id));
      assert.deepEqual(got, project);
      assert.equal(await countProjects(t(), t().orgA.id), before);
    });

    it("answers 404 not_found for another organization's project and changes nothing", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const intruder = t().orgB.keys.owner;
      assertError(await t().request("GET", `/v1/projects/${project.id}`, { key: intruder }), 404, "not_found");
      for (const headers of [{}, { "if-match": '"1"' }] as Record<string, string>[]) {
        const res = await t().request("PATCH", `/v1/projects/${project.id}`, {
          key: intruder,
          headers,
          body: { name: "intruder" },
        });
        assertError(res, 404, "not_found");
      }
      const withId = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: intruder,
        body: { id: "prj_other", name: "intruder" },
      });
      assertError(withId, 404, "not_found");
      for (const query of [undefined, { cascade: "true" }]) {
        const res = await t().request("DELETE", `/v1/projects/${project.id}`, {
          key: intruder,
          ...(query ? { query } : {}),
        });
        assertError(res, 404, "not_found");
      }
      assertError(
        await t().request("DELETE", `/v1/projects/${t().orgA.defaultProjectId}`, { key: intruder }),
        404,
        "not_found",
      );
      const got = projectOf(await ownerGet(project.id));
      assert.deepEqual(got, project);
    });

    it("refuses a sandbox-scoped credential with 403 on every route", async () => {
      const project = await createProject(t(), t().orgA.keys.owner);
      const sandboxKey = await t().issueKey(t().orgA, {
        role: "owner",
        sandbox: { sandboxId: SANDBOX_ID, lineagePath: SANDBOX_ID },
      });
      const before = await countProjects(t(), t().orgA.id);
      for (const route of routes(project.id)) {
        const res = await t().request(route.method, route.url, {
          key: sandboxKey.key,
          ...(route.body ? { body: route.body } : {}),
        });
        assertError(res, 403, "permission_denied");
      }
      const mismatched = await t().request("PATCH", `/v1/projects/${project.id}`, {
        key: sandboxKey.key,
        body: { id: "prj_other", name: "x" },
      });
      assertError(mismatched, 403, "permission_denied");
      const got = projectOf(await ownerGet(project.id));
      assert.deepEqual(got, project);
      assert.equal(await countProjects(t(), t().orgA.id), before);
    });
  });
});
