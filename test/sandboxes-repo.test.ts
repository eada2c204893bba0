// The sandbox repo's lifecycle SQL against the pure lifecycle: the sweep's `dueIds` selects
// exactly the records `isDue` names, and the host claim admits one change at a time.
import assert from "node:assert/strict";
import { it } from "node:test";
import {
  holdsCompute,
  holdsStorage,
  isDue,
  type LifecycleRecord,
  STATES,
  type StoredState,
} from "../src/modules/sandboxes/lifecycle.js";
import * as repo from "../src/modules/sandboxes/repo.js";
import { newSandboxId } from "../src/modules/sandboxes/service.js";
import type { Queryable } from "../src/store/db.js";
import { forEachStore, type TestApp } from "./harness.js";

const NOW = new Date("2026-11-23T12:00:00.000Z");
const RETENTION_SECONDS = 3600;
const HOST = "h_repo00000000000000000001";
const at = (offsetSeconds: number) => new Date(NOW.getTime() + offsetSeconds * 1000);
const WHENS = [null, at(-1), at(1)];

function* records(): Generator<LifecycleRecord> {
  for (const state of Object.keys(STATES) as StoredState[])
    for (const desired_state of ["running", "stopped", "deleted"] as const)
      for (const quarantined of [false, true])
        for (const state_deadline of WHENS)
          for (const expires_at of WHENS)
            for (const idle_deadline of WHENS)
              for (const finished_at of [null, at(-10), at(-RETENTION_SECONDS - 1)]) {
                yield { state, desired_state, quarantined, state_deadline, expires_at, idle_deadline, finished_at };
              }
}

async function insert(
  q: Queryable,
  t: TestApp,
  record: LifecycleRecord,
  resources = { memory_mb: 128, cpu_millis: 500 },
): Promise<string> {
  const id = newSandboxId();
  await repo.insertSandbox(q, {
    ...record,
    id,
    org_id: t.orgA.id,
    project_id: t.orgA.defaultProjectId,
    name: null,
    image: "test/busybox:latest",
    workload_image: "test/busybox:latest",
    image_digest: null,
    storage_class: "standard",
    placement_class: "standard",
    network_access: "none",
    lineage_path: id,
    metadata: {},
    command: null,
    ports: [],
    resources,
    workspace_capacity_gib: null,
    idle_timeout_seconds: null,
    state_reason_code: null,
    state_reason_message: null,
    run_id: "run-none",
    credential_key_id: null,
    created_by: "",
    created_by_kind: "",
    created_by_key_id: "",
    created_at: NOW,
    updated_at: NOW,
    last_activity_at: null,
    last_activity_source: null,
    snapshot_id: null,
    volumes: [],
    secret_bindings: [],
    host_id: HOST,
    host_epoch: 1,
  });
  return id;
}

forEachStore("sandbox repo lifecycle SQL", (t) => {
  it("dueIds selects exactly what isDue names, with overdue for a passed state deadline", async () => {
    const expected = new Map<string, boolean>();
    await t().c.db.tx(async (q) => {
      for (const record of records()) {
        const id = await insert(q, t(), record);
        if (isDue(record, NOW, { retentionSeconds: RETENTION_SECONDS })) {
          expected.set(id, record.state_deadline !== null && record.state_deadline < NOW);
        }
      }
    });
    // A due sandbox of another host is that host's to sweep.
    const other = await insert(t().c.db, t(), {
      state: "running",
      desired_state: "running",
      quarantined: false,
      state_deadline: null,
      expires_at: at(-1),
      idle_deadline: null,
      finished_at: null,
    });
    await t().c.db.query("UPDATE sandboxes SET host_id = 'h_other' WHERE id = $1", [other]);
    const due = await repo.dueIds(t().c.db, NOW, RETENTION_SECONDS, HOST);
    assert.ok(expected.size > 100, "the generated records include many due ones");
    assert.deepEqual(new Map(due.map((row) => [row.id, row.overdue])), expected);
    await t().c.db.query("DELETE FROM sandboxes");
  });

  it("the host's admission counts exactly what holdsCompute and holdsStorage name", async () => {
    const db = t().c.db;
    const computeIds: string[] = [];
    const storageIds = new Set<string>();
    let expected = { memoryMiB: 0, cpuMillis: 0 };
    let n = 0;
    for (const state of Object.keys(STATES) as StoredState[]) {
      for (const desired_state of ["running", "stopped", "deleted"] as const) {
        const record = { state, desired_state, quarantined: false, state_deadline: null, expires_at: null };
        // Sizes of their own, so a sum tells which rows it took.
        const resources = { memory_mb: 2 ** n, cpu_millis: 1 };
        n++;
        const id = await insert(db, t(), { ...record, idle_deadline: null, finished_at: null }, resources);
        if (holdsCompute(record)) {
          computeIds.push(id);
          expected = { memoryMiB: expected.memoryMiB + resources.memory_mb, cpuMillis: expected.cpuMillis + 1 };
        }
        if (holdsStorage(state)) storageIds.add(id);
      }
    }
    // The cases admission is about: a wake not yet started and a stop under way hold memory; a stopped sandbox does not.
    assert.ok(holdsCompute({ state: "stopped", desired_state: "running" }));
    assert.ok(holdsCompute({ state: "running", desired_state: "stopped" }));
    assert.ok(holdsCompute({ state: "requested", desired_state: "running" }));
    assert.ok(!holdsCompute({ state: "stopped", desired_state: "stopped" }));
    assert.ok(holdsStorage("stopped") && !holdsStorage("failed") && !holdsStorage("terminated"));
    // Rows of another host are that host's to admit against: they change nothing here.
    const elsewhere = await insert(
      db,
      t(),
      {
        state: "running",
        desired_state: "running",
        quarantined: false,
        state_deadline: null,
        expires_at: null,
        idle_deadline: null,
        finished_at: null,
      },
      { memory_mb: 2 ** n, cpu_millis: 1 },
    );
    await db.query("UPDATE sandboxes SET host_id = 'h_other' WHERE id = $1", [elsewhere]);
    assert.deepEqual(await repo.committedCompute(db, HOST), expected, `rows ${computeIds.length}`);
    assert.deepEqual(new Set((await repo.storageReservations(db, HOST)).map((row) => row.id)), storageIds);
    // Without a hosts registry every row is this host's.
    const all = await repo.committedCompute(db, null);
    assert.deepEqual(all, { memoryMiB: expected.memoryMiB + 2 ** n, cpuMillis: expected.cpuMillis + 1 });
    assert.ok((await repo.storageReservations(db, null)).some((row) => row.id === elsewhere));
    await db.query("DELETE FROM sandboxes");
  });

  it("a host claim admits one change until released or lapsed", async () => {
    const id = await insert(t().c.db, t(), {
      state: "running",
      desired_state: "running",
      quarantined: false,
      state_deadline: null,
      expires_at: null,
      idle_deadline: null,
      finished_at: null,
    });
    const db = t().c.db;
    assert.equal(await repo.claimHost(db, id, NOW, at(600)), true);
    assert.equal(await repo.claimHost(db, id, at(10), at(610)), false, "held");
    await repo.releaseHost(db, id, { network_access: "public" });
    assert.equal((await repo.getSandbox(db, id))?.network_access, "public");
    assert.equal(await repo.claimHost(db, id, at(20), at(620)), true, "released");
    assert.equal(await repo.claimHost(db, id, at(621), at(1200)), true, "lapsed");
    await repo.updateSandbox(db, id, { workspace_capacity_gib: 3 });
    await repo.releaseHost(db, id, { revertCapacity: { from: 1, to: 3 } });
    assert.equal((await repo.getSandbox(db, id))?.workspace_capacity_gib, 1, "a failed growth gives its capacity back");
    await repo.updateSandbox(db, id, { workspace_capacity_gib: 5 });
    await repo.releaseHost(db, id, { revertCapacity: { from: 1, to: 3 } });
    assert.equal((await repo.getSandbox(db, id))?.workspace_capacity_gib, 5, "a later change is kept");
  });
});
