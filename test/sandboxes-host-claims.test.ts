// Workspace growth and network switches run their host tools outside any store transaction:
// while one is under way other requests are served, a second host change is refused, and a
// refused growth gives its claimed capacity back. The runtime here is a stand-in whose host
// calls wait on the test (the real growth and switch are covered by sandboxes-lifecycle).
import assert from "node:assert/strict";
import { it } from "node:test";
import { type RuntimeDriver, RuntimeError } from "../src/drivers/runtime/interface.js";
import * as repo from "../src/modules/sandboxes/repo.js";
import { forEachStore, type TestApp } from "./harness.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";

/** Host calls that wait until the test lets them finish (or fail). */
class GatedHost {
  calls: string[] = [];
  private release: ((outcome: Error | null) => void) | null = null;

  readonly driver: RuntimeDriver = new Proxy(API_ONLY_RUNTIME, {
    get: (target, property) => {
      if (property === "growWorkspace" || property === "setNetwork") {
        return (id: string, value: unknown) => this.call(`${String(property)} ${id} ${String(value)}`);
      }
      return target[property as keyof RuntimeDriver];
    },
  });

  private call(what: string): Promise<never> {
    this.calls.push(what);
    return new Promise((resolve, reject) => {
      this.release = (outcome) => (outcome ? reject(outcome) : resolve(receipt as never));
    });
  }

  finish(outcome: Error | null = null): void {
    assert.ok(this.release, "a host call is waiting");
    this.release(outcome);
    this.release = null;
  }

  async waitForCall(count: number): Promise<void> {
    for (const deadline = Date.now() + 30_000; this.calls.length < count && Date.now() < deadline; )
      await new Promise((r) => setTimeout(r, 10));
    assert.equal(this.calls.length, count);
  }
}

const receipt = { mode: "none", namespace: { name: "ns", path: "/run/netns/ns", inode: 1 }, rules: [] };
const host = new GatedHost();

forEachStore(
  "sandbox host changes outside transactions",
  (t) => {
    const owner = () => t().orgA.keys.owner;

    async function stableDurable(app: TestApp): Promise<string> {
      const res = await app.request("POST", "/v1/sandboxes", {
        key: owner(),
        body: { storage_class: "durable", workspace_capacity_gib: 1 },
      });
      assert.equal(res.status, 200, res.raw);
      const id = res.body.id as string;
      await repo.updateSandbox(app.c.db, id, { state: "stopped", desired_state: "stopped", state_deadline: null });
      return id;
    }

    // A regression (host I/O under the row lock) would block the read below: the timeout fails it.
    it("serves other requests while a growth runs, refuses a second host change, then records it", {
      timeout: 20_000,
    }, async () => {
      const app = t();
      const id = await stableDurable(app);
      const growing = app.request("PATCH", `/v1/sandboxes/${id}`, {
        key: owner(),
        body: { workspace_capacity_gib: 3 },
      });
      await host.waitForCall(host.calls.length + 1);

      const read = await app.request("GET", `/v1/sandboxes/${id}`, { key: owner() });
      assert.equal(read.status, 200, read.raw);
      assert.equal((read.body.sandbox as { workspace_capacity_gib: number }).workspace_capacity_gib, 3, "claimed");
      const metadata = await app.request("PATCH", `/v1/sandboxes/${id}`, {
        key: owner(),
        body: { metadata: { a: "b" } },
      });
      assert.equal(metadata.status, 200, metadata.raw);
      const second = await app.request("PATCH", `/v1/sandboxes/${id}`, {
        key: owner(),
        body: { network_access: "none" },
      });
      assert.equal(second.status, 409, second.raw);
      assert.equal(second.body.code, "operation_conflict");

      host.finish();
      const grown = await growing;
      assert.equal(grown.status, 200, grown.raw);
      const row = await repo.getSandbox(app.c.db, id);
      assert.equal(row?.workspace_capacity_gib, 3);
      assert.deepEqual(row?.metadata, { a: "b" });
      assert.equal(await repo.claimHost(app.c.db, id, new Date(), new Date(Date.now() + 1000)), true, "released");
      await repo.releaseHost(app.c.db, id, {});
    });

    it("gives the claimed capacity back when the host refuses the growth", { timeout: 20_000 }, async () => {
      const app = t();
      const id = await stableDurable(app);
      const growing = app.request("PATCH", `/v1/sandboxes/${id}`, {
        key: owner(),
        body: { workspace_capacity_gib: 5 },
      });
      await host.waitForCall(host.calls.length + 1);
      host.finish(new RuntimeError("host_failure", "resize2fs said no"));
      const refused = await growing;
      assert.equal(refused.status, 503, refused.raw);
      assert.equal(refused.body.code, "unavailable");
      assert.ok(!refused.raw.includes("resize2fs"), "the driver's words stay in the log");
      const row = await repo.getSandbox(app.c.db, id);
      assert.equal(row?.workspace_capacity_gib, 1);
      const again = app.request("PATCH", `/v1/sandboxes/${id}`, { key: owner(), body: { network_access: "none" } });
      await host.waitForCall(host.calls.length + 1);
      host.finish();
      assert.equal((await again).status, 200, "the claim was released");
      assert.equal((await repo.getSandbox(app.c.db, id))?.network_access, "none", "the switch is recorded");
    });
  },
  { overrides: { runtime: host.driver } },
);
