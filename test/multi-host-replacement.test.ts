// Placing again on a node's refusal (issue 25 step 5, docs/hosts.md "Placement"): two hosts
// (A, B) and an `api` replica over one PostgreSQL (test/support/multi-host.ts). A keeps its
// whole disk as its storage reserve (WARREN_STORAGE_RESERVE_GIB beyond the disk): it publishes
// no bytes its pool could promise, and its driver refuses every sandbox at start
// (storage_exhausted). The api replica cannot size a request's storage (it has no pool), so
// its placement admits a create on A by A's published capacity; A's driver then refuses it.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { hostIdOf } from "../src/modules/hosts/membership.js";
import { eventually } from "./support/eventually.js";
import { type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";

describe("multi-host: a sandbox its host refuses at start is placed again", { timeout: 1_800_000 }, () => {
  let cluster: MultiHost;
  let a: Host;
  let b: Host;
  let api: Host;
  let aId: string;
  let bId: string;

  const row = async (id: string) => {
    const rows = await cluster.query<{ host_id: string; state: string; refused_hosts: string[] }>(
      "SELECT host_id, state, refused_hosts FROM sandboxes WHERE id = $1",
      [id],
    );
    return rows[0] as { host_id: string; state: string; refused_hosts: string[] };
  };
  const events = (id: string) =>
    cluster.query<{ name: string; payload: { to?: string; reason?: string; placement?: number } }>(
      `SELECT name, payload FROM events WHERE payload->>'sandbox_id' = $1
        AND name IN ('sandbox.state_changed', 'sandbox.placement_refused') ORDER BY ts_wall_ns`,
      [id],
    );
  const imagesOf = async (hostId: string) =>
    (await cluster.query<{ images: string[] }>("SELECT images FROM hosts WHERE id = $1", [hostId]))[0]?.images ?? [];
  const hostAction = async (hostId: string, verb: "cordon" | "uncordon") => {
    const res = await a.api("POST", `/v1/admin/hosts/${hostId}:${verb}`, {});
    assert.equal(res.status, 200, res.raw);
  };

  before(async () => {
    cluster = await startMultiHost("replace", {
      hosts: 0,
      // The deployment's names, which an api replica needs (docs/hosts.md "Roles").
      env: {
        WARREN_SESSION_LISTEN: "0.0.0.0:8081",
        WARREN_SESSION_PLANE_URL: "http://plane.warren.test:8081",
        WARREN_SSH_LISTEN: "0.0.0.0:2222",
        WARREN_SSH_HOST: "ssh.warren.test",
        WARREN_SSH_PUBLIC_PORT: "22",
      },
    });
    a = await cluster.addHost({ env: { WARREN_STORAGE_RESERVE_GIB: "1000000" } });
    b = await cluster.addHost();
    api = await cluster.addApiReplica();
    aId = await hostIdOf(a.dataDir);
    bId = await hostIdOf(b.dataDir);
  });

  after(async () => {
    await cluster?.cleanup();
  });

  it("with no other host to go to, A's refusal fails the sandbox as on one host", async () => {
    await hostAction(bId, "cordon");
    try {
      const id = await api.createSandbox();
      const failed = await api.waitFor(id, "failed", 300_000);
      assert.equal(failed.state_reason?.code, "storage_exhausted");
      const stored = await row(id);
      assert.equal(stored.host_id, aId);
      assert.deepEqual(stored.refused_hosts, []);
      assert.deepEqual(
        (await events(id)).filter((e) => e.name === "sandbox.placement_refused"),
        [],
        "nothing was handed back",
      );
      assert.deepEqual(await a.containers(), []);
    } finally {
      await hostAction(bId, "uncordon");
    }
  });

  it("a create placed on A that A's pool cannot back ends running on B, A's refusal recorded, nothing left on A", async () => {
    // A pulled the image for the sandbox it refused: its cache hint makes it placement's first choice.
    await eventually("A's image hint", async () => (await imagesOf(aId)).includes(cluster.busyboxRef), 60_000);
    assert.ok(!(await imagesOf(bId)).includes(cluster.busyboxRef), "B has not pulled the image yet");
    const id = await api.createSandbox();
    const running = await api.waitFor(id, "running", 300_000);
    assert.equal(running.state, "running");
    const stored = await row(id);
    assert.equal(stored.host_id, bId);
    assert.deepEqual(stored.refused_hosts, [aId]);
    const seen = await events(id);
    const refusals = seen.filter((e) => e.name === "sandbox.placement_refused");
    assert.equal(refusals.length, 1, JSON.stringify(seen));
    assert.equal(refusals[0]?.payload.reason, "storage_exhausted");
    assert.equal(refusals[0]?.payload.placement, 1);
    assert.ok(
      !seen.some((e) => e.payload.to === "failed" || e.payload.to === "attention"),
      `never shown failed: ${JSON.stringify(seen)}`,
    );
    // Nothing of it on A; it runs on B, and an exec through the api replica reaches it there.
    assert.ok(!(await a.containers()).some((c) => c.id === id), "A has no container of it");
    assert.ok(
      (await b.containers()).some((c) => c.id === id && c.status === "running"),
      "B runs it",
    );
    const exec = await api.exec(id, ["echo", "moved"]);
    assert.equal(exec.status, 200, exec.raw);
    assert.equal((exec.body as { stdout?: string }).stdout, "moved\n");
    assert.ok([200, 202].includes((await api.api("DELETE", `/v1/sandboxes/${id}`)).status));
    await api.waitFor(id, "terminated", 300_000);
  });

  it("when every host refuses, the sandbox fails with the reason after one placement on each", async () => {
    // B now sizes every sandbox's root layer beyond any disk: its published capacity still
    // holds the request as A sizes it, its driver refuses it.
    await b.restart({ WARREN_ROOT_LAYER_GIB: "16384" });
    await eventually("A's image hint", async () => (await imagesOf(aId)).includes(cluster.busyboxRef), 60_000);
    const id = await api.createSandbox();
    const failed = await api.waitFor(id, "failed", 300_000);
    assert.equal(failed.state_reason?.code, "storage_exhausted");
    const stored = await row(id);
    // Placed on A, refused, placed on B, refused: no host left that has not refused it.
    assert.equal(stored.host_id, bId);
    assert.deepEqual(stored.refused_hosts, [aId]);
    const seen = await events(id);
    assert.equal(seen.filter((e) => e.name === "sandbox.placement_refused").length, 1, JSON.stringify(seen));
    assert.equal(seen.filter((e) => e.payload.to === "failed").length, 1, JSON.stringify(seen));
    assert.ok(!(await a.containers()).some((c) => c.id === id));
    assert.ok(!(await b.containers()).some((c) => c.id === id));
  });
});
