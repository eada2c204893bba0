// Spread placement across real processes (docs/hosts.md "Placement"): three hosts of
// test/support/multi-host.ts with WARREN_PLACEMENT=spread; creates sent through one server land
// on more than one host, each runs in its owner's runc and in no other's. Every wait for
// `running` goes through the server the create was sent to, whose long poll re-reads only every
// 10 minutes here (WARREN_SANDBOX_WAIT_POLL_MS): a wait for a sandbox another host runs ends
// only because the owner's write woke it (the events' notifications), not by a re-read.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { eventually } from "./support/eventually.js";
import { type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";

const CREATES = 9;
/** Long polls a wait may take; each is 25 s, the contract's most. */
const MAX_POLLS = 12;
/** A wait woken by the owner's write ends within this of it (a notification and one read). */
const WOKEN_WITHIN_MS = 15_000;

describe("spread placement across hosts [postgres, s3]", () => {
  let cluster: MultiHost | undefined;
  let hosts: Host[] = [];
  let hostIds: string[] = [];

  before(async () => {
    cluster = await startMultiHost("spread", {
      hosts: 3,
      env: { WARREN_PLACEMENT: "spread", WARREN_SANDBOX_WAIT_POLL_MS: "600000" },
    });
    hosts = cluster.hosts;
    hostIds = await Promise.all(
      hosts.map(async (h) => (await readFile(path.join(h.dataDir, "host-id"), "utf8")).trim()),
    );
  });

  after(async () => {
    await cluster?.cleanup();
  });

  const ownerOf = async (id: string): Promise<Host> => {
    const rows = await (cluster as MultiHost).query<{ host_id: string }>(
      "SELECT host_id FROM sandboxes WHERE id = $1",
      [id],
    );
    const owner = hosts[hostIds.indexOf(rows[0]?.host_id ?? "")];
    assert.ok(owner, `${id} has a host of the deployment: ${JSON.stringify(rows)}`);
    return owner;
  };

  /** When the owner wrote the sandbox's move to `running` (its event's wall clock, this machine's). */
  const ranAt = async (id: string): Promise<number> => {
    const rows = await (cluster as MultiHost).query<{ ns: string }>(
      `SELECT max(e.ts_wall_ns)::text AS ns FROM events e JOIN sandboxes s ON s.run_id = e.run_id
        WHERE s.id = $1 AND e.name = 'sandbox.state_changed' AND e.payload->>'to' = 'running'`,
      [id],
    );
    assert.ok(rows[0]?.ns, `${id} has a state change to running`);
    return Number(BigInt(rows[0].ns) / 1_000_000n);
  };

  /**
   * Waits for `running` through `via` with long polls only. For a sandbox another host runs,
   * the poll must end soon after the owner wrote `running` (woken), not at its deadline's
   * re-read: a poll re-reading only every 10 minutes ends then at most 25 s later.
   */
  const runningThrough = async (via: Host, id: string) => {
    for (let poll = 0; ; poll++) {
      assert.ok(poll < MAX_POLLS, `${id} running within ${MAX_POLLS} polls of 25 s`);
      const seen = await via.sandbox(id, "?wait_state=running&wait_timeout_seconds=25");
      const returned = Date.now();
      assert.notEqual(seen.state, "failed", JSON.stringify(seen));
      if (seen.state !== "running") continue;
      const owner = await ownerOf(id);
      if (owner === via) return;
      const late = returned - (await ranAt(id));
      assert.ok(
        late < WOKEN_WITHIN_MS,
        `${via.name}'s wait for ${id} ended ${late} ms after ${owner.name} ran it: not woken by the owner's write`,
      );
      return;
    }
  };

  const deleteAll = async (ids: string[]) => {
    for (const id of ids) {
      const res = await (hosts[0] as Host).api("DELETE", `/v1/sandboxes/${id}`);
      assert.ok([200, 202].includes(res.status), res.raw);
    }
    await eventually(
      "every host to have no container left",
      async () => {
        for (const host of hosts) if ((await host.containers()).length > 0) return false;
        return true;
      },
      300_000,
    );
  };

  it("creates through one server land on more than one host and all run there", async () => {
    const via = hosts[0] as Host;
    const ids = await Promise.all(Array.from({ length: CREATES }, () => via.createSandbox()));
    await Promise.all(ids.map((id) => runningThrough(via, id)));
    const owners = await Promise.all(ids.map(ownerOf));
    const used = new Set(owners.map((h) => h.name));
    assert.ok(used.size > 1, `${CREATES} spread creates through ${via.name} all landed on ${[...used].join(", ")}`);
    for (const host of hosts) {
      const containers = new Set((await host.containers()).map((c) => c.id));
      for (const [i, id] of ids.entries()) {
        assert.equal(containers.has(id), owners[i] === host, `${id} (owner ${owners[i]?.name}) in ${host.name}'s runc`);
      }
    }
    await deleteAll(ids);
  });

  it("a create through a cordoned server runs on another host, and the wait through it ends when it runs", async () => {
    const via = hosts[0] as Host;
    const cordon = await via.api("POST", `/v1/admin/hosts/${hostIds[0]}:cordon`);
    assert.equal(cordon.status, 200, cordon.raw);
    try {
      const ids = await Promise.all([via.createSandbox(), via.createSandbox()]);
      await Promise.all(ids.map((id) => runningThrough(via, id)));
      for (const id of ids) assert.notEqual(await ownerOf(id), via, `${id} placed off the cordoned ${via.name}`);
      await deleteAll(ids);
    } finally {
      const uncordon = await via.api("POST", `/v1/admin/hosts/${hostIds[0]}:uncordon`);
      assert.equal(uncordon.status, 200, uncordon.raw);
    }
  });
});
