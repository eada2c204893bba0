import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { newUlid } from "../src/lib/ids.js";
import type { AnnotationJson, AnnotationSchemaJson, ListAnnotationsJson } from "../src/modules/annotations/schemas.js";
import type { ProjectJson } from "../src/modules/projects/schemas.js";
import type { RunJson } from "../src/modules/runs/schemas.js";
import { BAD_CREDENTIALS, forEachStore, type TestApp, type TestResponse } from "./harness.js";

const V1 = JSON.stringify({
  type: "object",
  properties: {
    label: { type: "string", enum: ["good", "bad"] },
    reviewer: { type: "string" },
    score: { type: "integer", minimum: 0, maximum: 10 },
  },
  required: ["label"],
  additionalProperties: false,
});
// Compatible: enum extended, bounds relaxed, integer widened to number, a property added to a closed object.
const V2 = JSON.stringify({
  type: "object",
  properties: {
    label: { type: "string", enum: ["good", "bad", "unsure"] },
    reviewer: { type: "string" },
    score: { type: "number", minimum: 0, maximum: 100 },
    note: { type: "string" },
  },
  required: ["label"],
  additionalProperties: false,
});
// Incompatible: enum narrowed and a new required field without default.
const V3 = JSON.stringify({
  type: "object",
  properties: {
    label: { type: "string", enum: ["good"] },
    reviewer: { type: "string" },
    score: { type: "number", minimum: 0, maximum: 100 },
    note: { type: "string" },
    must: { type: "string" },
  },
  required: ["label", "must"],
  additionalProperties: false,
});

const PROMOTED = [
  { field: "reviewer", identity: true, bloom: true },
  { field: "label", identity: false, bloom: true },
];

async function register(t: TestApp, key: string, name: string, jsonSchema: string, promoted = PROMOTED) {
  return t.request("POST", "/v1/annotation-schemas", {
    key,
    body: { name, description: "quality label", json_schema: jsonSchema, promoted_fields: promoted },
  });
}

async function startRun(t: TestApp, key: string) {
  const res = await t.request("POST", "/v1/runs", { key, body: { label: "r" } });
  assert.equal(res.status, 200, res.raw);
  return (res.body.run as RunJson).id;
}

forEachStore("annotation schemas", (t) => {
  const owner = () => t().orgA.keys.owner;

  it("registers v1, accepts a compatible v2 and refuses an incompatible v3 with pointers and rules", async () => {
    const v1 = await register(t(), owner(), "quality", V1);
    assert.equal(v1.status, 200, v1.raw);
    const s1 = v1.body.schema as AnnotationSchemaJson;
    assert.equal(s1.version, "1");
    assert.deepEqual(
      s1.promoted_fields.map((p) => [p.field, p.slot]),
      [
        ["reviewer", "p1"],
        ["label", "p2"],
      ],
    );
    const v2 = await register(t(), owner(), "quality", V2);
    assert.equal(v2.status, 200, v2.raw);
    assert.equal((v2.body.schema as AnnotationSchemaJson).version, "2");
    const v3 = await register(t(), owner(), "quality", V3);
    assert.equal(v3.status, 400, v3.raw);
    assert.equal(v3.body.code, "failed_precondition");
    const details = v3.body.details as { incompatibilities: { pointer: string; rule: string }[] };
    assert.ok(details.incompatibilities.length >= 2, v3.raw);
    assert.ok(details.incompatibilities.every((i) => typeof i.pointer === "string" && i.rule.length > 0));
    assert.ok(
      details.incompatibilities.some((i) => i.pointer.includes("label")),
      v3.raw,
    );
    assert.ok(
      details.incompatibilities.some((i) => i.pointer.includes("must") || i.pointer.includes("required")),
      v3.raw,
    );
    const latest = await t().request("GET", "/v1/annotation-schemas/quality", { key: owner() });
    assert.equal((latest.body.schema as AnnotationSchemaJson).version, "2");
    const first = await t().request("GET", "/v1/annotation-schemas/quality", { key: owner(), query: { version: "1" } });
    assert.equal((first.body.schema as AnnotationSchemaJson).json_schema, V1);
  });

  it("refuses invalid documents, remote $refs, reserved and undeclared promoted fields", async () => {
    const bad = await register(t(), owner(), "bad1", '{"type":"objectx"}', []);
    assert.equal(bad.status, 400);
    const notJson = await register(t(), owner(), "bad2", "{", []);
    assert.equal(notJson.status, 400);
    const remote = await register(t(), owner(), "bad3", JSON.stringify({ $ref: "https://example.com/s.json" }), []);
    assert.equal(remote.status, 400);
    assert.match(String(remote.body.message), /remote/);
    const undeclared = await register(t(), owner(), "bad4", V1, [{ field: "nope", identity: true, bloom: false }]);
    assert.equal(undeclared.status, 400);
    const badName = await register(t(), owner(), "Bad Name", V1, []);
    assert.equal(badName.status, 400);
    const list = await t().request("GET", "/v1/annotation-schemas", { key: owner() });
    assert.ok(!(list.body.schemas as AnnotationSchemaJson[]).some((s) => s.name.startsWith("bad")));
  });

  it("refuses removing or re-flagging a promoted field in a new version", async () => {
    assert.equal((await register(t(), owner(), "promo", V1)).status, 200);
    const removed = await register(t(), owner(), "promo", V1, [PROMOTED[0] as (typeof PROMOTED)[number]]);
    assert.equal(removed.status, 400);
    assert.ok(
      (removed.body.details as { incompatibilities: { rule: string }[] }).incompatibilities.some(
        (i) => i.rule === "promoted_field_removed",
      ),
    );
    const reflagged = await register(t(), owner(), "promo", V1, [
      { field: "reviewer", identity: false, bloom: true },
      { field: "label", identity: false, bloom: true },
    ]);
    assert.equal(reflagged.status, 400);
  });

  it("archives the latest live version, never deletes, and lists with and without include_archived", async () => {
    assert.equal((await register(t(), owner(), "arch", V1)).status, 200);
    assert.equal((await register(t(), owner(), "arch", V2)).status, 200);
    const archived = await t().request("POST", "/v1/annotation-schemas/arch:archive", {
      key: t().orgA.keys.admin,
      body: { name: "arch", version: "0" },
    });
    assert.equal(archived.status, 200, archived.raw);
    const row = archived.body.schema as AnnotationSchemaJson;
    assert.equal(row.version, "2");
    assert.ok(row.archived_at);
    const live = await t().request("GET", "/v1/annotation-schemas/arch", { key: owner() });
    assert.equal((live.body.schema as AnnotationSchemaJson).version, "1");
    const defaultList = await t().request("GET", "/v1/annotation-schemas", { key: owner() });
    const archRows = (defaultList.body.schemas as AnnotationSchemaJson[]).filter((s) => s.name === "arch");
    assert.deepEqual(
      archRows.map((s) => s.version),
      ["1"],
    );
    const all = await t().request("GET", "/v1/annotation-schemas", {
      key: owner(),
      query: { include_archived: "true" },
    });
    const allArch = (all.body.schemas as AnnotationSchemaJson[]).filter((s) => s.name === "arch");
    assert.deepEqual(
      allArch.map((s) => s.version),
      ["2", "1"],
    );
    const v3 = await register(t(), owner(), "arch", V2);
    assert.equal((v3.body.schema as AnnotationSchemaJson).version, "3", "versions stay monotonic past an archive");
    const member = await t().request("POST", "/v1/annotation-schemas/arch:archive", {
      key: t().orgA.keys.member,
      body: {},
    });
    assert.equal(member.status, 403);
  });

  it("is scoped to the organization", async () => {
    assert.equal((await register(t(), owner(), "mine", V1)).status, 200);
    const other = await t().request("GET", "/v1/annotation-schemas/mine", { key: t().orgB.keys.owner });
    assert.equal(other.status, 404);
    const theirs = await register(t(), t().orgB.keys.owner, "mine", V3, []);
    assert.equal(theirs.status, 200, "another organization's name is independent");
    assert.equal((theirs.body.schema as AnnotationSchemaJson).version, "1");
    for (const bad of BAD_CREDENTIALS) {
      const res = await t().request("GET", "/v1/annotation-schemas", { headers: bad.headers });
      assert.equal(res.status, 401, bad.name);
    }
  });
});

forEachStore("annotations", (t) => {
  const owner = () => t().orgA.keys.owner;
  const setup = async () => {
    const name = `q${Math.random().toString(36).slice(2, 8)}`;
    assert.equal((await register(t(), owner(), name, V1)).status, 200);
    const runId = await startRun(t(), owner());
    return { name, runId };
  };
  const annotate = (body: Record<string, unknown>, key = owner()) =>
    t().request("POST", "/v1/annotations", { key, body });
  const list = (query: Record<string, string>, key = owner()) => t().request("GET", "/v1/annotations", { key, query });

  it("validates payloads against the latest live version and keeps them byte-exact", async () => {
    const { name, runId } = await setup();
    const payload = '{ "label":"good" ,"score": 3 }';
    const ok = await annotate({ schema_name: name, payload_json: payload, run_id: runId });
    assert.equal(ok.status, 200, ok.raw);
    assert.match(String(ok.body.event_id), /^[0-9A-HJKMNP-TV-Z]{26}$/);
    const rows = await list({ run_id: runId });
    const row = (rows.body.annotations as Record<string, string>[])[0] as Record<string, string>;
    assert.equal(row.payload_json, payload);
    assert.equal(row.schema_name, name);
    assert.equal(row.run_id, runId);
    assert.match(row.ts_wall_ns as string, /^\d{19}$/);
    assert.equal(row.lineage_path, runId);
    const invalidPayload = await annotate({
      schema_name: name,
      payload_json: '{"label":"meh","score":11}',
      run_id: runId,
    });
    assert.equal(invalidPayload.status, 400);
    assert.match(String(invalidPayload.body.message), /\/label/);
    assert.match(String(invalidPayload.body.message), /\/score/);
    for (const bad of ['["label"]', "not json", '"x"']) {
      const res = await annotate({ schema_name: name, payload_json: bad, run_id: runId });
      assert.equal(res.status, 400, bad);
    }
  });

  it("validates against the latest live version right after it changes, and sees deleted targets", async () => {
    const { name, runId } = await setup();
    const unsure = '{"label":"unsure"}';
    const versionOf = async (eventId: string) => {
      const rows = await list({ run_id: runId, history: "true", page_size: "100" });
      const row = (rows.body.annotations as Record<string, string>[]).find((r) => r.event_id === eventId);
      return row?.schema_version;
    };
    const first = await annotate({ schema_name: name, payload_json: '{"label":"good"}', run_id: runId });
    assert.equal(first.status, 200, first.raw);
    assert.equal((await annotate({ schema_name: name, payload_json: unsure, run_id: runId })).status, 400);
    assert.equal((await register(t(), owner(), name, V2)).status, 200);
    const onV2 = await annotate({ schema_name: name, payload_json: unsure, run_id: runId });
    assert.equal(onV2.status, 200, onV2.raw);
    assert.equal(await versionOf(String(onV2.body.event_id)), "2");
    const archived = await t().request("POST", `/v1/annotation-schemas/${name}:archive`, {
      key: owner(),
      body: { version: "2" },
    });
    assert.equal(archived.status, 200, archived.raw);
    assert.equal((await annotate({ schema_name: name, payload_json: unsure, run_id: runId })).status, 400);
    const onV1 = await annotate({ schema_name: name, payload_json: '{"label":"bad"}', run_id: runId });
    assert.equal(onV1.status, 200, onV1.raw);
    assert.equal(await versionOf(String(onV1.body.event_id)), "1");

    const project = await t().request("POST", "/v1/projects", {
      key: owner(),
      body: { name: `p ${name}`, slug: name },
    });
    assert.equal(project.status, 200, project.raw);
    const projectId = (project.body.project as ProjectJson).id;
    const run = await t().request("POST", "/v1/runs", { key: owner(), body: { project_id: projectId } });
    const doomedRun = (run.body.run as RunJson).id;
    const p = '{"label":"good"}';
    assert.equal((await annotate({ schema_name: name, payload_json: p, run_id: doomedRun })).status, 200);
    assert.equal((await annotate({ schema_name: name, payload_json: p, project_id: projectId })).status, 200);
    const deleted = await t().request("DELETE", `/v1/projects/${projectId}`, {
      key: owner(),
      query: { cascade: "true" },
    });
    assert.equal(deleted.status, 200, deleted.raw);
    assert.equal((await annotate({ schema_name: name, payload_json: p, run_id: doomedRun })).status, 404);
    assert.equal((await annotate({ schema_name: name, payload_json: p, project_id: projectId })).status, 404);
    // The deleted project's annotations were the newest: none of them may cut a page short.
    const firstPage = await list({ schema_name: name, page_size: "1" });
    assert.deepEqual(
      (firstPage.body.annotations as AnnotationJson[]).map((r) => r.event_id),
      [onV1.body.event_id],
    );

    await t().request("POST", `/v1/annotation-schemas/${name}:archive`, { key: owner(), body: { version: "1" } });
    const gone = await annotate({ schema_name: name, payload_json: p, run_id: runId });
    assert.equal(gone.status, 404, "no live version is left");
  });

  it("stores concurrent annotates independently: one the store refuses fails alone", async (ctx) => {
    const { name, runId } = await setup();
    // A value the store refuses (a trigger of this test's database): valid for the schema.
    const huge = "refused-by-the-store";
    await t().c.db.exec(`
      CREATE FUNCTION test_refuse_reviewer() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.p1 = '${huge}' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;
      CREATE TRIGGER test_refuse_reviewer BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION test_refuse_reviewer()`);
    ctx.after(() => t().c.db.exec("DROP TRIGGER test_refuse_reviewer ON events; DROP FUNCTION test_refuse_reviewer()"));
    const alone = await annotate({
      schema_name: name,
      payload_json: JSON.stringify({ label: "good", reviewer: huge }),
      run_id: runId,
    });
    assert.equal(alone.status, 500, alone.raw);
    const bodies = Array.from({ length: 12 }, (_, i) => ({
      schema_name: name,
      payload_json: JSON.stringify({ label: i % 2 ? "good" : "bad", reviewer: `r${i % 5}` }),
      run_id: runId,
    }));
    const responses = await Promise.all([
      ...bodies.map((body) => annotate(body)),
      annotate({ schema_name: name, payload_json: JSON.stringify({ label: "bad", reviewer: huge }), run_id: runId }),
    ]);
    assert.deepEqual(
      responses.map((r) => r.status),
      [...bodies.map(() => 200), 500],
    );
    const history = await list({ run_id: runId, history: "true", page_size: "100" });
    assert.equal((history.body.annotations as unknown[]).length, 12);
    const latest = await list({ run_id: runId, page_size: "100" });
    assert.equal((latest.body.annotations as unknown[]).length, 5, "one head per reviewer");
    assert.equal(latest.body.superseded_count, "7");

    // Written together right after a new version: each is validated against, and stamped with, it.
    assert.equal((await register(t(), owner(), name, V2)).status, 200);
    const after = await Promise.all(
      ["x", "y", "z"].map((reviewer) =>
        annotate({ schema_name: name, payload_json: JSON.stringify({ label: "good", reviewer }), run_id: runId }),
      ),
    );
    assert.deepEqual(
      after.map((r) => r.status),
      [200, 200, 200],
    );
    const stamped = await list({ run_id: runId, history: "true", page_size: "3" });
    assert.deepEqual(
      (stamped.body.annotations as AnnotationJson[]).map((r) => r.schema_version),
      ["2", "2", "2"],
    );
  });

  it("stores, indexes and finds promoted and identity values of any length (issue 24 A15)", async () => {
    const { name, runId } = await setup();
    // Past the ~2,700-byte bound of a GIN entry, and multi-byte: indexed as the md5 of its bytes.
    const longReviewer = `${"é".repeat(300)}${randomBytes(2400).toString("base64")}`;
    const payload = JSON.stringify({ label: "good", reviewer: longReviewer });
    const point = await annotate({ schema_name: name, payload_json: payload, run_id: runId });
    assert.equal(point.status, 200, point.raw);
    const range = await t().request("POST", "/v1/annotations:range", {
      key: owner(),
      body: { run_id: runId, schema_name: name, payload_json: payload, range_start_ns: "100", range_end_ns: "200" },
    });
    assert.equal(range.status, 200, range.raw);
    const stored = await list({ run_id: runId, history: "true" });
    assert.deepEqual(
      (stored.body.annotations as AnnotationJson[]).map((row) => row.payload_json),
      [payload, payload],
    );
    // Filters (at most 1,024 characters) find values indexed as themselves (512 bytes) and by
    // their hash (513 bytes; 1,000 two-byte characters), and nothing for a near miss.
    const findable = ["a".repeat(512), "a".repeat(513), "é".repeat(1000)];
    const written = new Map<string, string[]>();
    for (const reviewer of findable) {
      const body = { schema_name: name, payload_json: JSON.stringify({ label: "bad", reviewer }), run_id: runId };
      const ids: string[] = [];
      for (let i = 0; i < 2; i++) {
        const res = await annotate(body);
        assert.equal(res.status, 200, res.raw);
        ids.push(String(res.body.event_id));
      }
      written.set(reviewer, ids);
    }
    const ids = (res: TestResponse) => (res.body.annotations as AnnotationJson[]).map((row) => row.event_id).sort();
    for (const reviewer of findable) {
      const history = await list({ schema_name: name, "promoted.reviewer": reviewer, history: "true" });
      assert.equal(history.status, 200, history.raw);
      assert.deepEqual(
        ids(history),
        [...(written.get(reviewer) ?? [])].sort(),
        `${reviewer.length} characters, every version`,
      );
      const latest = await list({ schema_name: name, "promoted.reviewer": reviewer });
      assert.deepEqual(
        ids(latest),
        written.get(reviewer)?.slice(1),
        `${reviewer.length} characters, the newer is the head`,
      );
      const miss = await list({ schema_name: name, "promoted.reviewer": `${reviewer.slice(1)}b`, history: "true" });
      assert.deepEqual(miss.body.annotations, []);
    }
  });

  it("rejects the reserved svc.annotation. prefix", async () => {
    const { name, runId } = await setup();
    const open = `${name}o`;
    assert.equal((await register(t(), owner(), open, JSON.stringify({ type: "object" }), [])).status, 200);
    const res = await annotate({
      schema_name: open,
      payload_json: '{"svc.annotation.schema_version":"9"}',
      run_id: runId,
    });
    assert.equal(res.status, 400);
    assert.match(String(res.body.message), /reserved/);
    const fine = await annotate({ schema_name: open, payload_json: '{"svc.other":"1"}', run_id: runId });
    assert.equal(fine.status, 200);
  });

  it("needs exactly one of run_id or project_id, and target_event_id only with an event of that run", async () => {
    const { name, runId } = await setup();
    const p = '{"label":"good"}';
    assert.equal((await annotate({ schema_name: name, payload_json: p })).status, 400);
    assert.equal(
      (await annotate({ schema_name: name, payload_json: p, run_id: runId, project_id: t().orgA.defaultProjectId }))
        .status,
      400,
    );
    const onProject = await annotate({ schema_name: name, payload_json: p, project_id: t().orgA.defaultProjectId });
    assert.equal(onProject.status, 200, onProject.raw);
    const withTargetNoRun = await annotate({
      schema_name: name,
      payload_json: p,
      project_id: t().orgA.defaultProjectId,
      target_event_id: newUlid(),
    });
    assert.equal(withTargetNoRun.status, 400);
    const missingTarget = await annotate({
      schema_name: name,
      payload_json: p,
      run_id: runId,
      target_event_id: newUlid(),
    });
    assert.equal(missingTarget.status, 404);
    const { rows } = await t().c.db.query<{ event_id: string }>(
      "SELECT event_id FROM events WHERE run_id = $1 AND name = 'run.started'",
      [runId],
    );
    const runStarted = rows[0]?.event_id as string;
    const onEvent = await annotate({ schema_name: name, payload_json: p, run_id: runId, target_event_id: runStarted });
    assert.equal(onEvent.status, 200, onEvent.raw);
    const filtered = await list({ target_event_id: runStarted });
    assert.equal((filtered.body.annotations as unknown[]).length, 1);
  });

  it("replays a caller-minted event_id for the same content and refuses it for different content", async () => {
    const { name, runId } = await setup();
    const eventId = newUlid();
    const body = {
      schema_name: name,
      payload_json: '{"label":"good","reviewer":"ann"}',
      run_id: runId,
      event_id: eventId,
    };
    const first = await annotate(body);
    assert.equal(first.status, 200, first.raw);
    assert.equal(first.body.event_id, eventId);
    const again = await annotate(body);
    assert.equal(again.status, 200);
    assert.equal(again.body.event_id, eventId);
    const { rows } = await t().c.db.query<{ n: string }>(
      "SELECT count(*)::text AS n FROM events WHERE org_id = $1 AND event_id = $2",
      [t().orgA.id, eventId],
    );
    assert.equal(rows[0]?.n, "1");
    const different = await annotate({ ...body, payload_json: '{"label":"bad","reviewer":"ann"}' });
    assert.equal(different.status, 409);
    const history = await list({ run_id: runId, history: "true" });
    assert.equal((history.body.annotations as unknown[]).length, 1);
    assert.equal((await annotate({ ...body, event_id: "not-a-ulid" })).status, 400);
    const otherOrg = await t().request("POST", "/v1/annotations", {
      key: t().orgB.keys.owner,
      body: { ...body, run_id: await startRun(t(), t().orgB.keys.owner) },
    });
    assert.equal(otherOrg.status, 404, "orgB has no schema of that name");
  });

  it("shows the latest version per supersession key unless history is asked", async () => {
    const { name, runId } = await setup();
    const a1 = await annotate({ schema_name: name, payload_json: '{"label":"good","reviewer":"ann"}', run_id: runId });
    const a2 = await annotate({ schema_name: name, payload_json: '{"label":"bad","reviewer":"ann"}', run_id: runId });
    const b1 = await annotate({ schema_name: name, payload_json: '{"label":"good","reviewer":"bob"}', run_id: runId });
    assert.ok(a1.status === 200 && a2.status === 200 && b1.status === 200);
    const latest = await list({ run_id: runId });
    const rows = latest.body.annotations as AnnotationJson[];
    assert.deepEqual(
      rows.map((r) => r.event_id),
      [b1.body.event_id, a2.body.event_id],
    );
    assert.equal(latest.body.superseded_count, "1");
    const history = await list({ run_id: runId, history: "true" });
    assert.deepEqual(
      (history.body.annotations as AnnotationJson[]).map((r) => r.event_id),
      [b1.body.event_id, a2.body.event_id, a1.body.event_id],
    );
    assert.equal(history.body.superseded_count, "0");
  });

  it("filters on bloom-indexed promoted fields and pages newest first", async () => {
    const { name, runId } = await setup();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await annotate({
        schema_name: name,
        payload_json: JSON.stringify({ label: i % 2 === 0 ? "good" : "bad", reviewer: `r${i}` }),
        run_id: runId,
      });
      ids.push(String(res.body.event_id));
    }
    const good = await list({ schema_name: name, "promoted.label": "good" });
    assert.equal((good.body.annotations as unknown[]).length, 3);
    const bad = await list({ schema_name: name, "promoted.reviewer": "r1" });
    assert.deepEqual(
      (bad.body.annotations as AnnotationJson[]).map((r) => r.event_id),
      [ids[1]],
    );
    // History filters see every version that had the value, not only the latest ones.
    const relabelled = await annotate({
      schema_name: name,
      payload_json: JSON.stringify({ label: "bad", reviewer: "r0" }),
      run_id: runId,
    });
    assert.equal(relabelled.status, 200, relabelled.raw);
    const idsOf = async (query: Record<string, string>) =>
      ((await list({ schema_name: name, ...query })).body.annotations as AnnotationJson[]).map((r) => r.event_id);
    assert.deepEqual(await idsOf({ "promoted.label": "good" }), [ids[4], ids[2]]);
    assert.deepEqual(await idsOf({ "promoted.label": "good", history: "true" }), [ids[4], ids[2], ids[0]]);
    assert.deepEqual(await idsOf({ "promoted.reviewer": "r0", history: "true" }), [relabelled.body.event_id, ids[0]]);
    assert.deepEqual(await idsOf({ "promoted.reviewer": "r0", "promoted.label": "bad", history: "true" }), [
      relabelled.body.event_id,
    ]);
    assert.deepEqual(
      await idsOf({ "promoted.reviewer": "r0\u001f2\u001fgood", history: "true" }),
      [],
      "no key forging",
    );
    assert.deepEqual(await idsOf({ "promoted.label": "good", history: "true", page_size: "1" }), [ids[4]]);
    assert.equal((await list({ "promoted.label": "good" })).status, 400, "needs schema_name");
    assert.equal((await list({ schema_name: name, "promoted.score": "1" })).status, 400, "not promoted");
    const seen: string[] = [];
    let token = "";
    do {
      const page = await list({ run_id: runId, page_size: "2", ...(token ? { page_token: token } : {}) });
      assert.equal(page.status, 200, page.raw);
      seen.push(...(page.body.annotations as AnnotationJson[]).map((r) => r.event_id));
      token = String(page.body.next_page_token);
    } while (token);
    assert.deepEqual(seen, [relabelled.body.event_id, ...ids.slice(1).reverse()], "r0's new version hides its old one");
    assert.equal((await list({ page_token: "garbage" })).status, 400);
  });

  it("pages a history filter that matches many versions as one that matches few", async () => {
    const { name, runId } = await setup();
    // More matches than the store counts as few (annotation-repo.ts FEW_MATCHES), so the
    // page comes from walking the annotations newest first rather than from the GIN index.
    const good: string[] = [];
    const reviewerOf = new Map<string, string>();
    for (let chunk = 0; chunk < 21; chunk++) {
      const answers = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          annotate({
            schema_name: name,
            payload_json: JSON.stringify({ label: "good", reviewer: `r${chunk * 50 + i}` }),
            run_id: runId,
          }),
        ),
      );
      for (const [i, answer] of answers.entries()) {
        assert.equal(answer.status, 200, answer.raw);
        good.push(String(answer.body.event_id));
        reviewerOf.set(String(answer.body.event_id), `r${chunk * 50 + i}`);
      }
    }
    const bad = await annotate({ schema_name: name, payload_json: '{"label":"bad","reviewer":"x"}', run_id: runId });
    const newestFirst = async (query: Record<string, string>) => {
      const page = await list({ schema_name: name, history: "true", page_size: "100", ...query });
      assert.equal(page.status, 200, page.raw);
      return page.body as unknown as ListAnnotationsJson;
    };
    const idsIn = (body: ListAnnotationsJson) => body.annotations.map((r) => r.event_id);
    const first = await newestFirst({});
    const all = [...idsIn(first), ...idsIn(await newestFirst({ page_token: first.next_page_token }))];
    const many = await newestFirst({ "promoted.label": "good" });
    assert.deepEqual(idsIn(many), all.filter((id) => id !== bad.body.event_id).slice(0, 100));
    const next = await newestFirst({ "promoted.label": "good", page_token: many.next_page_token });
    assert.equal(next.annotations.length, 100);
    assert.deepEqual(idsIn(await newestFirst({ "promoted.label": "bad" })), [bad.body.event_id]);
    assert.equal(good.length, 1050);

    // The latest versions the same way (each reviewer is a key with one version so far)...
    const latest = async (query: Record<string, string>) => {
      const page = await list({ schema_name: name, page_size: "100", ...query });
      assert.equal(page.status, 200, page.raw);
      return idsIn(page.body as unknown as ListAnnotationsJson);
    };
    assert.deepEqual(await latest({ "promoted.label": "good" }), idsIn(many));
    // ...until a key's new version takes another value: its old version leaves the list.
    const newest = idsIn(many)[0] as string;
    const relabelled = await annotate({
      schema_name: name,
      payload_json: JSON.stringify({ label: "bad", reviewer: reviewerOf.get(newest) }),
      run_id: runId,
    });
    assert.equal(relabelled.status, 200, relabelled.raw);
    assert.deepEqual(await latest({ "promoted.label": "good" }), [...idsIn(many).slice(1), idsIn(next)[0]]);
    assert.deepEqual(await latest({ "promoted.label": "bad" }), [relabelled.body.event_id, bad.body.event_id]);
    assert.deepEqual(await latest({ "promoted.reviewer": reviewerOf.get(newest) as string }), [
      relabelled.body.event_id,
    ]);
  });

  it("finds latest versions of a filter value beyond the newest heads", async () => {
    const { name, runId } = await setup();
    const annotateAll = async (payloads: { label: string; reviewer: string }[]) => {
      const ids: string[] = [];
      for (let from = 0; from < payloads.length; from += 100) {
        const answers = await Promise.all(
          payloads
            .slice(from, from + 100)
            .map((p) => annotate({ schema_name: name, payload_json: JSON.stringify(p), run_id: runId })),
        );
        for (const answer of answers) {
          assert.equal(answer.status, 200, answer.raw);
          ids.push(String(answer.body.event_id));
        }
      }
      return ids;
    };
    const [x0] = await annotateAll([{ label: "bad", reviewer: "x0" }]);
    await annotateAll([{ label: "bad", reviewer: "x1" }]);
    const [x1] = await annotateAll([{ label: "good", reviewer: "x1" }]);
    // 1,100 bad heads (more versions than count as few), then more good ones than a list
    // reads before it looks further (annotation-repo.ts WALK_FIRST, FEW_MATCHES).
    await annotateAll(Array.from({ length: 1100 }, (_, i) => ({ label: "bad", reviewer: `o${i}` })));
    await annotateAll(Array.from({ length: 2000 }, (_, i) => ({ label: "good", reviewer: `g${i}` })));
    const ids = async (query: Record<string, string>) => {
      const page = await list({ schema_name: name, page_size: "100", ...query });
      assert.equal(page.status, 200, page.raw);
      return { ids: (page.body.annotations as AnnotationJson[]).map((r) => r.event_id), body: page.body };
    };
    // Few versions have the value: those still their key's head.
    assert.deepEqual((await ids({ "promoted.reviewer": "x0" })).ids, [x0]);
    assert.deepEqual((await ids({ "promoted.reviewer": "x1" })).ids, [x1]);
    assert.equal((await ids({ "promoted.reviewer": "x1", history: "true" })).ids.length, 2);
    // Many versions have it, none among the newest heads: the heads are walked on.
    const history = await ids({ "promoted.label": "bad", history: "true" });
    const latest = await ids({ "promoted.label": "bad" });
    assert.equal(latest.ids.length, 100);
    assert.deepEqual(latest.ids, history.ids);
    const next = await ids({ "promoted.label": "bad", page_token: String(latest.body.next_page_token) });
    const historyNext = await ids({
      "promoted.label": "bad",
      history: "true",
      page_token: String(history.body.next_page_token),
    });
    assert.deepEqual(next.ids, historyNext.ids);
    assert.equal(next.ids.length, 100);
    assert.equal(latest.body.superseded_count, "0");
  });

  it("annotates ranges by nanosecond bounds and by event ids", async () => {
    const { name, runId } = await setup();
    const p = '{"label":"good"}';
    const byNs = await t().request("POST", "/v1/annotations:range", {
      key: owner(),
      body: { run_id: runId, schema_name: name, payload_json: p, range_start_ns: "100", range_end_ns: "200" },
    });
    assert.equal(byNs.status, 200, byNs.raw);
    const backwards = await t().request("POST", "/v1/annotations:range", {
      key: owner(),
      body: { run_id: runId, schema_name: name, payload_json: p, range_start_ns: "300", range_end_ns: "200" },
    });
    assert.equal(backwards.status, 400);
    const both = await t().request("POST", "/v1/annotations:range", {
      key: owner(),
      body: {
        run_id: runId,
        schema_name: name,
        payload_json: p,
        range_start_ns: "1",
        range_end_ns: "2",
        range_start_event_id: newUlid(),
        range_end_event_id: newUlid(),
      },
    });
    assert.equal(both.status, 400);
    const completed = await t().request("POST", `/v1/runs/${runId}:complete`, {
      key: owner(),
      body: { status: "succeeded" },
    });
    assert.equal(completed.status, 200);
    const { rows } = await t().c.db.query<{ event_id: string; name: string; ts: string }>(
      "SELECT event_id, name, ts_wall_ns::text AS ts FROM events WHERE run_id = $1 AND kind = 'event' ORDER BY ts_wall_ns",
      [runId],
    );
    const [started, done] = rows as unknown as [{ event_id: string; ts: string }, { event_id: string; ts: string }];
    const byEvents = await t().request("POST", "/v1/annotations:range", {
      key: owner(),
      body: {
        run_id: runId,
        schema_name: name,
        payload_json: p,
        range_start_event_id: started.event_id,
        range_end_event_id: done.event_id,
      },
    });
    assert.equal(byEvents.status, 200, byEvents.raw);
    const history = await list({ run_id: runId, history: "true" });
    const row = (history.body.annotations as Record<string, string>[]).find(
      (r) => r.event_id === byEvents.body.event_id,
    );
    assert.equal(row?.range_start_ns, started.ts);
    assert.equal(row?.range_end_ns, done.ts);
    assert.equal(row?.range_start_event_id, started.event_id);
    const nsRow = (history.body.annotations as Record<string, string>[]).find((r) => r.event_id === byNs.body.event_id);
    assert.equal(nsRow?.range_start_ns, "100");
    assert.equal(nsRow?.range_end_ns, "200");
    const reversed = await t().request("POST", "/v1/annotations:range", {
      key: owner(),
      body: {
        run_id: runId,
        schema_name: name,
        payload_json: p,
        range_start_event_id: done.event_id,
        range_end_event_id: started.event_id,
      },
    });
    assert.equal(reversed.status, 400);
  });

  it("lists undecodable stored rows in skipped instead of dropping them", async () => {
    const { name, runId } = await setup();
    const good = await annotate({ schema_name: name, payload_json: '{"label":"good","reviewer":"x"}', run_id: runId });
    const broken = await annotate({
      schema_name: name,
      payload_json: '{"label":"good","reviewer":"y"}',
      run_id: runId,
    });
    await t().c.db.query("UPDATE events SET payload_text = '{not json' WHERE org_id = $1 AND event_id = $2", [
      t().orgA.id,
      broken.body.event_id,
    ]);
    const res = await list({ run_id: runId });
    assert.equal(res.status, 200);
    assert.deepEqual(
      (res.body.annotations as AnnotationJson[]).map((r) => r.event_id),
      [good.body.event_id],
    );
    assert.deepEqual(res.body.skipped, [
      { event_id: broken.body.event_id, reason: "stored payload_json is not valid JSON" },
    ]);
  });

  it("keeps organizations apart", async () => {
    const { name, runId } = await setup();
    const mine = await annotate({ schema_name: name, payload_json: '{"label":"good"}', run_id: runId });
    assert.equal(mine.status, 200);
    const otherRun = await annotate(
      { schema_name: name, payload_json: '{"label":"good"}', run_id: runId },
      t().orgB.keys.owner,
    );
    assert.equal(otherRun.status, 404);
    // A filter naming another organization's run is 404, as reading the run is.
    const theirList = await list({ run_id: runId }, t().orgB.keys.owner);
    assert.equal(theirList.status, 404, theirList.raw);
    assert.equal(theirList.body.code, "not_found");
    const sandboxKey = await t().issueKey(t().orgA, {
      sandbox: { sandboxId: `sbx-${"a".repeat(40)}`, lineagePath: `sbx-${"a".repeat(40)}` },
    });
    assert.equal((await list({ run_id: runId }, sandboxKey.key)).status, 403);
  });
});

describe("annotation routes", () => {
  it("are listed in the OpenAPI document", async () => {
    const { startTestApp } = await import("./harness.js");
    const t = await startTestApp("pglite");
    try {
      const doc = await t.request("GET", "/v1/openapi.json");
      const ops = Object.values(doc.body.paths as Record<string, Record<string, { operationId: string }>>).flatMap(
        (p) => Object.values(p).map((o) => o.operationId),
      );
      for (const op of [
        "Annotate",
        "AnnotateRange",
        "ListAnnotations",
        "RegisterAnnotationSchema",
        "GetAnnotationSchema",
        "ListAnnotationSchemas",
        "ArchiveAnnotationSchema",
      ]) {
        assert.ok(ops.includes(op), op);
      }
    } finally {
      await t.close();
    }
  });
});
