// How a sandbox's life ends, on real runc sandboxes (issue 24, section C): a first process
// that exits leaves its exit code in state_reason; deleting a sandbox completes the run its
// create started; UpdateSandbox refuses network_access none while the sandbox has ports, as
// create does.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { SandboxReconciler } from "../src/controllers/sandbox-reconciler.js";
import { type RuntimeFixture, startRuntimeFixture } from "../src/drivers/runtime/local/test-support.js";
import type { SandboxJson } from "../src/modules/sandboxes/schemas.js";
import { STORE_KINDS, type TestApp } from "./harness.js";
import { startRuntimeApp } from "./support/runtime-app.js";

type Json = Record<string, unknown>;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function eventually<T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

describe("sandbox ends", { concurrency: STORE_KINDS.length }, () => {
  for (const store of STORE_KINDS) {
    describe(`sandbox ends [${store}]`, () => {
      let fixture: RuntimeFixture;
      let t: TestApp;
      let reconciler: SandboxReconciler;
      const owner = () => t.orgA.keys.owner;
      const cleanupIds: string[] = [];

      before(async () => {
        fixture = await startRuntimeFixture(`exit-${store}`);
        ({ t, reconciler } = await startRuntimeApp(store, fixture));
      });

      after(async () => {
        for (const id of cleanupIds) {
          await t?.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() }).catch(() => undefined);
        }
        await reconciler?.idle();
        await reconciler?.stop();
        await t?.close();
        await fixture?.cleanup();
      });

      const createId = async (body: Json) => {
        const res = await t.request("POST", "/v1/sandboxes", { key: owner(), body });
        assert.equal(res.status, 200, res.raw);
        const id = res.body.id as string;
        cleanupIds.push(id);
        return { id, runId: res.body.run_id as string };
      };
      const sandboxOf = async (id: string) => {
        const res = await t.request("GET", `/v1/sandboxes/${id}`, { key: owner() });
        assert.equal(res.status, 200, res.raw);
        return res.body.sandbox as SandboxJson;
      };
      const waitFor = async (id: string, state: string) =>
        eventually(`sandbox ${id} ${state}`, async () => {
          const sandbox = await sandboxOf(id);
          return sandbox.state === state ? sandbox : null;
        });
      const runOf = async (runId: string) => {
        const res = await t.request("GET", `/v1/runs/${runId}`, { key: owner() });
        assert.equal(res.status, 200, res.raw);
        return res.body.run as { status: string; ended_at?: string };
      };

      it("a first process that exits stops the sandbox with its exit code in state_reason", async () => {
        const { id } = await createId({ command: ["sh", "-c", "exit 3"], network_access: "none" });
        const stopped = await waitFor(id, "stopped");
        assert.equal(stopped.state_reason?.code, "process_exited", JSON.stringify(stopped));
        assert.match(stopped.state_reason?.message ?? "", /\bcode 3\b/);
      });

      it("deleting a sandbox completes the run its create started", async () => {
        const { id, runId } = await createId({ command: ["sleep", "3600"], network_access: "none" });
        await waitFor(id, "running");
        assert.equal((await runOf(runId)).status, "running");
        const del = await t.request("DELETE", `/v1/sandboxes/${id}`, { key: owner() });
        assert.equal(del.status, 202, del.raw);
        const run = await eventually("the run completed", async () => {
          const run = await runOf(runId);
          return run.status !== "running" ? run : null;
        });
        assert.equal(run.status, "succeeded");
        assert.ok(run.ended_at, "the run has an end time");
        const { rows } = await t.c.db.query<{ payload: { status: string } }>(
          "SELECT payload FROM events WHERE run_id = $1 AND name = 'run.completed'",
          [runId],
        );
        assert.deepEqual(
          rows.map((row) => row.payload.status),
          ["succeeded"],
        );
      });

      it("refuses switching network_access to none while the sandbox has ports", async () => {
        const { id } = await createId({ command: ["sleep", "3600"], network_access: "public", ports: [8080] });
        await waitFor(id, "running");
        const res = await t.request("PATCH", `/v1/sandboxes/${id}`, { key: owner(), body: { network_access: "none" } });
        assert.equal(res.status, 400, res.raw);
        assert.equal(res.body.code, "invalid_argument", res.raw);
        assert.match(String(res.body.message), /ports need a network/);
        const sandbox = await sandboxOf(id);
        assert.equal(sandbox.network_access, "public");
      });
    });
  }
});
