// One rule for list filters (docs/api-decisions.md "List filters"): a filter naming a
// resource the caller's organization cannot see (another organization's, or none at all) is
// 404 not_found, as a direct read of it is, on every list route; never an empty 200.
import assert from "node:assert/strict";
import { it } from "node:test";
import type { RunJson } from "../src/modules/runs/schemas.js";
import { forEachStore } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";

forEachStore(
  "list filters",
  (t) => {
    /** Org B's project, run, annotation event and schema, which org A must not see through a filter. */
    const theirs = async () => {
      const key = t().orgB.keys.owner;
      const schemaName = `theirs-${Math.random().toString(36).slice(2, 8)}`;
      const schema = await t().request("POST", "/v1/annotation-schemas", {
        key,
        body: { name: schemaName, json_schema: JSON.stringify({ type: "object" }) },
      });
      assert.equal(schema.status, 200, schema.raw);
      const run = await t().request("POST", "/v1/runs", { key, body: { label: "theirs" } });
      const runId = (run.body.run as RunJson).id;
      const note = await t().request("POST", "/v1/annotations", {
        key,
        body: { schema_name: schemaName, run_id: runId, payload_json: "{}" },
      });
      assert.equal(note.status, 200, note.raw);
      return { projectId: t().orgB.defaultProjectId, runId, eventId: String(note.body.event_id), schemaName };
    };

    it("ListRuns answers 404 for another organization's or an unknown project_id or parent_run_id", async () => {
      const other = await theirs();
      const key = t().orgA.keys.owner;
      for (const query of [
        { project_id: other.projectId },
        { parent_run_id: other.runId },
        { project_id: "prj_unknown" },
        { parent_run_id: "run_unknown" },
      ] as Record<string, string>[]) {
        assertError(await t().request("GET", "/v1/runs", { key, query }), 404, "not_found");
      }
      const own = await t().request("GET", "/v1/runs", { key, query: { project_id: t().orgA.defaultProjectId } });
      assert.equal(own.status, 200, own.raw);
    });

    it("ListAnnotations answers 404 for another organization's run, project, event or schema", async () => {
      const other = await theirs();
      const key = t().orgA.keys.owner;
      for (const query of [
        { run_id: other.runId },
        { project_id: other.projectId },
        { target_event_id: other.eventId },
        { schema_name: other.schemaName },
        { run_id: "run_unknown" },
      ] as Record<string, string>[]) {
        assertError(await t().request("GET", "/v1/annotations", { key, query }), 404, "not_found");
      }
      // Org B still sees its own with the same filters.
      const mine = await t().request("GET", "/v1/annotations", {
        key: t().orgB.keys.owner,
        query: { run_id: other.runId, schema_name: other.schemaName, target_event_id: other.eventId },
      });
      assert.equal(mine.status, 200, mine.raw);
    });

    it("ListSandboxes answers 404 in the flat envelope for another organization's project_id", async () => {
      const res = await t().request("GET", "/v1/sandboxes", {
        key: t().orgA.keys.owner,
        query: { project_id: t().orgB.defaultProjectId },
      });
      assertError(res, 404, "not_found");
      assert.deepEqual(Object.keys(res.body).sort(), ["code", "message", "request_id"]);
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);
