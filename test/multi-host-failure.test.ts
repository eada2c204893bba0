// Host failure with real processes (issue 25's "Why" and step 6): two hosts
// (test/support/multi-host.ts) over one PostgreSQL and one S3 bucket. A snapshot is replicated by
// its own host alone; a host killed with -9 is declared dead and a restore of its sandbox's
// replicated snapshot runs on the other host; a dead host that comes back removes what it no
// longer owns; a partitioned host declared dead is fenced when it heals (no sandbox has two owners).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { eventually } from "./support/eventually.js";
import { type Host, type MultiHost, startMultiHost } from "./support/multi-host.js";
import type { ShownSandbox } from "./support/server-process.js";

/** Longer than the sweeper's dead grace (60 s) plus its 2 s period, on a loaded machine. */
const DEAD_WITHIN_MS = 240_000;

describe("host failure across two hosts [postgres, s3]", () => {
  let cluster: MultiHost | undefined;
  let hosts: [Host, Host];

  before(async () => {
    cluster = await startMultiHost("failure", { hosts: 2 });
    hosts = cluster.hosts as [Host, Host];
  });

  after(async () => {
    await cluster?.cleanup();
  });

  /** The host whose runc runs `id`, and the other one (placement may choose either). */
  const ownerOf = async (id: string): Promise<{ owner: Host; other: Host }> => {
    const [first, second] = hosts;
    const onFirst = (await first.containers()).some((c) => c.id === id && c.status === "running");
    const onSecond = (await second.containers()).some((c) => c.id === id && c.status === "running");
    assert.ok(onFirst !== onSecond, `exactly one host runs ${id} (first: ${onFirst}, second: ${onSecond})`);
    return onFirst ? { owner: first, other: second } : { owner: second, other: first };
  };

  const stateOf = async (host: Host, id: string) => {
    const sandbox = await host.sandbox(id);
    return sandbox.state_reason ? `${sandbox.state}/${sandbox.state_reason.code}` : sandbox.state;
  };

  const hostLost = (host: Host, id: string) =>
    eventually(
      `${id} to be failed/host_lost through ${host.name}`,
      async () => (await stateOf(host, id)) === "failed/host_lost",
      DEAD_WITHIN_MS,
    );

  const stdoutOf = async (host: Host, id: string, cmd: string[]) => {
    const res = await host.exec(id, cmd);
    assert.equal(res.status, 200, res.raw);
    assert.equal(res.body.exit, 0, res.raw);
    return res.body.stdout as string;
  };

  it("a snapshot is replicated by its own host only; after kill -9 of that host, a restore runs on the other", async () => {
    const [first] = hosts;
    const id = await first.createSandbox();
    await first.waitFor(id, "running");
    const { owner, other } = await ownerOf(id);
    await stdoutOf(owner, id, ["sh", "-c", "echo kept-across-hosts > /workspace/marker"]);

    // Taken through the owner without waiting: its replicator uploads it. The other host's
    // replicator runs its passes meanwhile and must never claim it (it has no local copy).
    const taken = await owner.api("POST", `/v1/sandboxes/${id}:snapshot`, {});
    assert.equal(taken.status, 200, taken.raw);
    const snapshotId = taken.body.snapshot_id as string;
    await eventually(
      `${snapshotId} to be replicated`,
      async () => {
        const res = await other.api("GET", "/v1/snapshots?page_size=100");
        assert.equal(res.status, 200, res.raw);
        const snapshot = (res.body.snapshots as { id: string; durability: string }[]).find((s) => s.id === snapshotId);
        assert.ok(snapshot, `${snapshotId} stays listed: ${res.raw}`);
        return snapshot.durability === "replicated";
      },
      180_000,
    );

    await owner.kill("SIGKILL");
    // Unreachable first: the sandbox keeps its state while its host may come back.
    assert.equal(await stateOf(other, id), "running");
    await hostLost(other, id);

    const restored = await other.createSandbox({ snapshot_id: snapshotId });
    await other.waitFor(restored, "running", 180_000);
    assert.ok(
      (await other.containers()).some((c) => c.id === restored && c.status === "running"),
      "the restore runs on the surviving host",
    );
    assert.equal(await stdoutOf(other, restored, ["cat", "/workspace/marker"]), "kept-across-hosts\n");

    // The dead host comes back: a new epoch, and it removes the container of its host_lost sandbox.
    await owner.start();
    await eventually(
      `${owner.name} to remove the container of ${id}`,
      async () => !(await owner.containers()).some((c) => c.id === id),
      120_000,
    );
    assert.equal(await stateOf(owner, id), "failed/host_lost");
    assert.equal(await stateOf(owner, restored), "running");
  });

  it("a partitioned host declared dead is fenced when it heals: it removes the container, and nothing has two owners", async () => {
    const [first] = hosts;
    const id = await first.createSandbox();
    await first.waitFor(id, "running");
    const { owner, other } = await ownerOf(id);
    const epochOf = async () => {
      const rows = await cluster?.query<{ host_epoch: string }>("SELECT host_epoch FROM sandboxes WHERE id = $1", [id]);
      assert.ok(rows?.[0], `a row for ${id}`);
      return Number(rows[0].host_epoch);
    };
    const epochBefore = await epochOf();

    await owner.partition();
    try {
      await hostLost(other, id);
      // Cut off, the owner cannot know: its container still runs (a partition kills nothing by itself).
      assert.ok((await owner.containers()).some((c) => c.id === id));
    } finally {
      await owner.heal();
    }
    assert.ok((await epochOf()) > epochBefore, "declaring the host dead moved its rows to a new epoch");
    // Healed, its heartbeat matches no row: fenced, it re-joins and removes what it no longer owns.
    await eventually(
      `${owner.name} to remove the container of ${id} after it healed`,
      async () => !(await owner.containers()).some((c) => c.id === id),
      120_000,
    );
    const shown: ShownSandbox = await owner.sandbox(id);
    assert.equal(shown.state, "failed", JSON.stringify(shown));
    assert.equal(shown.state_reason?.code, "host_lost");
    // It serves again: a new sandbox through it runs.
    const fresh = await owner.createSandbox();
    await owner.waitFor(fresh, "running", 180_000);
    const placed = await ownerOf(fresh);
    assert.equal(await stdoutOf(placed.owner, fresh, ["echo", "back"]), "back\n");
  });
});
