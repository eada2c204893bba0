// GetSandbox's wait_state long-poll ends as soon as the awaited state can no longer come
// (docs/api-decisions.md "Waiting for a state"): a create that failed is reported at once, not
// at the wait's deadline. And the create's own checks a newcomer met late: a malformed image
// reference and ports without a network are 400 at create; the record shows network_access and
// ports. The API-only runtime: the states are written as the reconciler would.
import assert from "node:assert/strict";
import { it } from "node:test";
import { canStillReach } from "../src/modules/sandboxes/lifecycle.js";
import { SANDBOX_STATES } from "../src/modules/sandboxes/schemas.js";
import { forEachStore } from "./harness.js";
import { assertError } from "./support/assertions.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";

const WAIT_SECONDS = 25;

it("a finished sandbox can reach no other state; a deleted one only its end; anything else may still come", () => {
  for (const awaited of SANDBOX_STATES) {
    for (const finished of ["failed", "terminated"] as const) {
      assert.equal(canStillReach(finished, "running", awaited), awaited === finished, `${finished} -> ${awaited}`);
    }
    const outward = ["terminating", "terminated", "failed", "attention"].includes(awaited);
    assert.equal(canStillReach("terminating", "deleted", awaited), outward, `terminating -> ${awaited}`);
    assert.equal(
      canStillReach("running", "deleted", awaited),
      outward || awaited === "running",
      `deleted -> ${awaited}`,
    );
    assert.equal(canStillReach("materializing", "running", awaited), true);
    assert.equal(canStillReach("quarantined", "running", awaited), true);
  }
});

forEachStore(
  "sandbox wait",
  (t) => {
    const create = async () => {
      const res = await t().request("POST", "/v1/sandboxes", { key: t().orgA.keys.owner, body: {} });
      assert.equal(res.status, 200, res.raw);
      return res.body.id as string;
    };
    const waitFor = async (id: string, state: string) => {
      const started = Date.now();
      const res = await t().request("GET", `/v1/sandboxes/${id}`, {
        key: t().orgA.keys.owner,
        query: { wait_state: state, wait_timeout_seconds: String(WAIT_SECONDS) },
      });
      assert.equal(res.status, 200, res.raw);
      return { sandbox: res.body.sandbox as Record<string, unknown>, seconds: (Date.now() - started) / 1000 };
    };

    it("refuses a malformed image reference and ports with network_access none at create, creating nothing", async () => {
      const key = t().orgA.keys.owner;
      const count = async () => (await t().c.db.query("SELECT id FROM sandboxes")).rows.length;
      const before = await count();
      for (const body of [
        { image: "Busybox:latest" },
        { image: "busybox:bad tag" },
        { image: "busybox@sha256:abc" },
        { image: " busybox" },
        { snapshot_id: "snap_x", image_override: "::nope" },
        { ports: [8080], network_access: "none" },
      ]) {
        const res = await t().request("POST", "/v1/sandboxes", { key, body });
        assertError(res, 400, "invalid_argument");
        assert.equal(Object.keys(res.body).sort().join(), "code,message,request_id", res.raw);
      }
      assert.equal(await count(), before);
    });

    it("shows network_access and ports on the record", async () => {
      const key = t().orgA.keys.owner;
      const created = await t().request("POST", "/v1/sandboxes", {
        key,
        body: { image: "registry.local:5000/team/app:1.0", network_access: "gateway_only", ports: [8080, 9000] },
      });
      assert.equal(created.status, 200, created.raw);
      const res = await t().request("GET", `/v1/sandboxes/${created.body.id}`, { key });
      const sandbox = res.body.sandbox as Record<string, unknown>;
      assert.equal(sandbox.network_access, "gateway_only");
      assert.deepEqual(sandbox.ports, [8080, 9000]);
      const plain = await t().request("GET", `/v1/sandboxes/${await create()}`, { key });
      assert.equal((plain.body.sandbox as Record<string, unknown>).network_access, "public");
      assert.deepEqual((plain.body.sandbox as Record<string, unknown>).ports, []);
    });

    it("answers a wait for running at once, with the reason, when the create has failed", async () => {
      const id = await create();
      await t().c.db.query(
        `UPDATE sandboxes SET state = 'failed', state_reason_code = 'image_unavailable',
           state_reason_message = 'image busybox:nope: not found', finished_at = now() WHERE id = $1`,
        [id],
      );
      const { sandbox, seconds } = await waitFor(id, "running");
      assert.equal(sandbox.state, "failed");
      assert.deepEqual(sandbox.state_reason, { code: "image_unavailable", message: "image busybox:nope: not found" });
      // At once, not at the deadline: half the deadline leaves room for any slow machine.
      assert.ok(seconds < WAIT_SECONDS / 2, `answered after ${seconds} s`);
    });

    it("answers a wait for running at once when the sandbox is being deleted, and waits for its end", async () => {
      const id = await create();
      await t().c.db.query("UPDATE sandboxes SET state = 'terminating', desired_state = 'deleted' WHERE id = $1", [id]);
      const running = await waitFor(id, "running");
      assert.equal(running.sandbox.state, "terminating");
      assert.ok(running.seconds < WAIT_SECONDS / 2, `answered after ${running.seconds} s`);
      const ending = waitFor(id, "terminated");
      await t().c.db.query("UPDATE sandboxes SET state = 'terminated', finished_at = now() WHERE id = $1", [id]);
      assert.equal((await ending).sandbox.state, "terminated");
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);
