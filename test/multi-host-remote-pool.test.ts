// A create through a server without a warm member takes one from another host's pool
// (src/modules/sandboxes/remote-pool.ts, docs/hosts.md "Placement"): host A keeps a warm pool
// (one member per network mode), the `api` replica has none. A create through the replica of
// the pooled shape becomes A's member (the sandbox's id is the member's, A's pool counts a
// hit) and runs its own command; a create that fails after the take gives the member back
// (it goes at once, not after the owner's hold of REMOTE_HOLD_MS).
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { eventually } from "./support/eventually.js";
import { type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";

/** Creates answered from A's pool, by A's create-to-running histogram. */
async function poolHits(host: Host): Promise<number> {
  const res = await host.api("GET", "/metrics");
  assert.equal(res.status, 200, res.raw);
  let hits = 0;
  for (const match of res.raw.matchAll(/^warren_sandbox_create_to_running_seconds_count\{([^}]*)\} (\d+)/gm)) {
    if ((match[1] as string).includes('pool="hit"')) hits += Number(match[2]);
  }
  return hits;
}

describe("a warm pool member of another host", { concurrency: 1 }, () => {
  let cluster: MultiHost;
  let a: Host;
  let api: Host;
  let hostIdOfA: string;

  /** A's containers that no live sandbox row names: its pool's members. */
  const membersOfA = async (): Promise<string[]> => {
    const rows = await cluster.query<{ id: string }>(
      "SELECT id FROM sandboxes WHERE host_id = $1 AND state <> 'terminated'",
      [hostIdOfA],
    );
    const owned = new Set(rows.map((row) => row.id));
    return (await a.containers()).map((c) => c.id).filter((id) => !owned.has(id));
  };

  before(async () => {
    cluster = await startMultiHost("remote-pool", {
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
    a = await cluster.addHost({ env: { WARREN_SANDBOX_POOL_SIZE: "1" } });
    api = await cluster.addApiReplica();
    hostIdOfA = (await readFile(path.join(a.dataDir, "host-id"), "utf8")).trim();
    // A's heartbeat names the default image among its warm ones once a member is ready.
    await eventually(
      "A to publish a warm member of the default image",
      async () => {
        const [row] = await cluster.query<{ warm_images: string[] }>("SELECT warm_images FROM hosts WHERE id = $1", [
          hostIdOfA,
        ]);
        return row?.warm_images.includes(cluster.busyboxRef) ?? false;
      },
      180_000,
    );
  });

  after(async () => {
    await cluster?.cleanup();
  });

  it("a create through the api replica takes A's member: its id, A's pool hit, its own command", async () => {
    const members = await eventually("A's pool to hold its members", async () => {
      const ids = await membersOfA();
      return ids.length >= 2 && ids;
    });
    const hitsBefore = await poolHits(a);
    const id = await api.createSandbox({
      command: ["sh", "-c", "echo through-the-replica > /workspace/made; exec sleep 3600"],
      network_access: "none",
    });
    assert.ok(members.includes(id), `the sandbox ${id} is one of A's members (${members.join(", ")})`);
    await api.waitFor(id, "running");
    const made = await eventually("the sandbox's own command to have run", async () => {
      const res = await api.exec(id, ["cat", "/workspace/made"]);
      return res.status === 200 && res.body.exit === 0 && res;
    });
    assert.equal(made.body.stdout, "through-the-replica\n", made.raw);
    assert.equal(await poolHits(a), hitsBefore + 1, "A counts the create as served from its pool");
    assert.equal((await api.api("DELETE", `/v1/sandboxes/${id}`)).status, 202);
    await api.waitFor(id, "terminated");
  });

  it("a create that fails after taking A's member gives it back at once", async () => {
    const named = await api.createSandbox({ name: "only-once", network_access: "public" });
    await api.waitFor(named, "running");
    // The member of network mode none that the failing create takes.
    const before = await eventually("A's pool to be full again", async () => {
      const ids = await membersOfA();
      return ids.length >= 2 && ids;
    });
    const refused = await api.api("POST", "/v1/sandboxes", {
      name: "only-once",
      command: ["sleep", "3600"],
      network_access: "none",
    });
    assert.equal(refused.status, 409, refused.raw);
    assert.equal(refused.body.code, "name_conflict", refused.raw);
    // Given back: the taken member goes (the pool then makes another), well before the hold's 120 s.
    await eventually(
      "the taken member to be gone from A",
      async () => {
        const now = await membersOfA();
        const gone = before.filter((id) => !now.includes(id));
        return gone.length === 1 && now.length <= before.length;
      },
      60_000,
    );
    assert.equal((await api.api("DELETE", `/v1/sandboxes/${named}`)).status, 202);
    await api.waitFor(named, "terminated");
  });
});
