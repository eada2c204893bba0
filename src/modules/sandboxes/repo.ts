import type { Queryable } from "../../store/db.js";
import { eventInsert, type NewEvent } from "../events/repo.js";
import type { SecretBinding } from "../secrets/service.js";
import type { StoredState } from "./lifecycle.js";

export type DesiredState = "running" | "stopped" | "deleted";

export interface ResolvedResources {
  memory_mb: number;
  cpu_millis: number;
}

export interface SandboxRow {
  id: string;
  org_id: string;
  project_id: string;
  name: string | null;
  image: string;
  workload_image: string;
  image_digest: string | null;
  storage_class: "standard" | "durable";
  placement_class: "standard" | "non_preemptible";
  network_access: "public" | "gateway_only" | "none";
  lineage_path: string;
  metadata: Record<string, string>;
  command: string[] | null;
  ports: number[];
  resources: ResolvedResources;
  workspace_capacity_gib: number | null;
  idle_timeout_seconds: number | null;
  expires_at: Date | null;
  desired_state: DesiredState;
  state: StoredState;
  state_reason_code: string | null;
  state_reason_message: string | null;
  state_deadline: Date | null;
  quarantined: boolean;
  run_id: string;
  credential_key_id: string | null;
  created_by: string;
  created_by_kind: string;
  created_by_key_id: string;
  created_at: Date;
  updated_at: Date;
  last_activity_at: Date | null;
  last_activity_source: "exec" | "session" | "update" | null;
  idle_deadline: Date | null;
  finished_at: Date | null;
  /** The snapshot a child was restored from; null for a root made from an image. */
  snapshot_id: string | null;
  /** Volumes pinned at admission (SandboxPinnedVolume). */
  volumes: PinnedVolumeRow[];
  /** Secrets bound at admission (SECRET_EGRESS and MODEL_GATEWAY delivery), injected by the egress gateway. */
  secret_bindings: SecretBindingRow[];
  /** The host that owns it (runs it, reconciles it) and that host's epoch: host-scoped writes name both. */
  host_id: string | null;
  host_epoch: number | null;
}

/** A secret bound at admission (SecretBinding of the secrets module). */
export type SecretBindingRow = SecretBinding;

export interface PinnedVolumeRow {
  volume_id: string;
  version: string;
  target_path: string;
  name: string;
}

const C = `id, org_id, project_id, name, image, workload_image, image_digest, storage_class, placement_class,
  network_access, lineage_path, metadata, command, ports, resources, workspace_capacity_gib, idle_timeout_seconds,
  expires_at, desired_state, state, state_reason_code, state_reason_message, state_deadline, quarantined, run_id,
  credential_key_id, created_by, created_by_kind, created_by_key_id, created_at, updated_at, last_activity_at,
  last_activity_source, idle_deadline, finished_at, snapshot_id, volumes, secret_bindings, host_id, host_epoch`;

export async function insertSandbox(q: Queryable, s: SandboxRow): Promise<boolean> {
  const { rows } = await q.query(
    `INSERT INTO sandboxes (${C}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13::jsonb,
       $14::jsonb, $15::jsonb, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32,
       $33, $34, $35, $36, $37::jsonb, $38::jsonb, $39, $40)
     ON CONFLICT DO NOTHING RETURNING id`,
    [
      s.id,
      s.org_id,
      s.project_id,
      s.name,
      s.image,
      s.workload_image,
      s.image_digest,
      s.storage_class,
      s.placement_class,
      s.network_access,
      s.lineage_path,
      JSON.stringify(s.metadata),
      s.command === null ? null : JSON.stringify(s.command),
      JSON.stringify(s.ports),
      JSON.stringify(s.resources),
      s.workspace_capacity_gib,
      s.idle_timeout_seconds,
      s.expires_at,
      s.desired_state,
      s.state,
      s.state_reason_code,
      s.state_reason_message,
      s.state_deadline,
      s.quarantined,
      s.run_id,
      s.credential_key_id,
      s.created_by,
      s.created_by_kind,
      s.created_by_key_id,
      s.created_at,
      s.updated_at,
      s.last_activity_at,
      s.last_activity_source,
      s.idle_deadline,
      s.finished_at,
      s.snapshot_id,
      JSON.stringify(s.volumes),
      JSON.stringify(s.secret_bindings),
      s.host_id,
      s.host_epoch,
    ],
  );
  return rows.length > 0;
}

export async function getSandbox(q: Queryable, id: string, forUpdate = false): Promise<SandboxRow | null> {
  const { rows } = await q.query<SandboxRow>(
    `SELECT ${C} FROM sandboxes WHERE id = $1${forUpdate ? " FOR UPDATE" : ""}`,
    [id],
  );
  return rows[0] ?? null;
}

/** What an exec reads of its sandbox: its access and state checks, the secret grants' subject, its event's run. */
export type ExecTarget = Pick<
  SandboxRow,
  | "id"
  | "org_id"
  | "project_id"
  | "run_id"
  | "lineage_path"
  | "state"
  | "desired_state"
  | "quarantined"
  | "finished_at"
  | "created_by"
  | "created_by_kind"
  | "created_by_key_id"
  | "host_id"
  | "host_epoch"
>;

/** getSandbox narrowed to ExecTarget: every exec reads it, and a third of the columns cost a third as much. */
export async function getExecTarget(q: Queryable, id: string): Promise<ExecTarget | null> {
  const { rows } = await q.query<ExecTarget>(
    `SELECT id, org_id, project_id, run_id, lineage_path, state, desired_state, quarantined, finished_at, created_by,
            created_by_kind, created_by_key_id, host_id, host_epoch FROM sandboxes WHERE id = $1`,
    [id],
  );
  return rows[0] ?? null;
}

export async function findByName(q: Queryable, projectId: string, name: string): Promise<SandboxRow | null> {
  const { rows } = await q.query<SandboxRow>(
    `SELECT ${C} FROM sandboxes WHERE project_id = $1 AND name = $2 ORDER BY (state = 'terminated'), created_at DESC LIMIT 1`,
    [projectId, name],
  );
  return rows[0] ?? null;
}

export async function listSandboxes(
  q: Queryable,
  orgId: string,
  projectId: string,
  name: string | undefined,
  after: { at: Date; id: string } | null,
  limit: number,
  visibleAfter: Date,
): Promise<SandboxRow[]> {
  const { rows } = await q.query<SandboxRow>(
    `SELECT ${C} FROM sandboxes
      WHERE org_id = $1 AND project_id = $2 AND ($3::text IS NULL OR name = $3::text)
        AND (finished_at IS NULL OR finished_at > $4)
        AND ($5::timestamptz IS NULL OR (created_at, id) < ($5::timestamptz, $6::text))
      ORDER BY created_at DESC, id DESC LIMIT $7`,
    [orgId, projectId, name ?? null, visibleAfter, after?.at ?? null, after?.id ?? "", limit],
  );
  return rows;
}

/** Applies a partial update and returns the new row. */
export async function updateSandbox(
  q: Queryable,
  id: string,
  change: Partial<Omit<SandboxRow, "id" | "org_id">>,
): Promise<SandboxRow> {
  const sets: string[] = [];
  const params: unknown[] = [id];
  for (const [column, value] of Object.entries(change)) {
    const json = column === "metadata" || column === "command" || column === "ports" || column === "resources";
    params.push(json && value !== null ? JSON.stringify(value) : value);
    sets.push(`${column} = $${params.length}${json ? "::jsonb" : ""}`);
  }
  const { rows } = await q.query<SandboxRow>(
    `UPDATE sandboxes SET ${sets.join(", ")} WHERE id = $1 RETURNING ${C}`,
    params,
  );
  return rows[0] as SandboxRow;
}

/**
 * Claims the sandbox's host state for one change until `until`; false when another change
 * holds an unexpired claim. Call with the row locked.
 */
export async function claimHost(q: Queryable, id: string, now: Date, until: Date): Promise<boolean> {
  const { rows } = await q.query(
    `UPDATE sandboxes SET host_claim_until = $3 WHERE id = $1 AND (host_claim_until IS NULL OR host_claim_until < $2)
     RETURNING id`,
    [id, now, until],
  );
  return rows.length > 0;
}

/**
 * Ends a host claim and records its result: the network mode applied, or, when a growth
 * failed, the capacity claimed for it given back (unless a later change moved it).
 */
export async function releaseHost(
  q: Queryable,
  id: string,
  result: { network_access?: SandboxRow["network_access"]; revertCapacity?: { from: number; to: number } },
): Promise<void> {
  await q.query(
    `UPDATE sandboxes SET host_claim_until = NULL, network_access = COALESCE($2, network_access),
            workspace_capacity_gib = CASE WHEN $3::int IS NOT NULL AND workspace_capacity_gib = $4::int
                                          THEN $3::int ELSE workspace_capacity_gib END
      WHERE id = $1`,
    [id, result.network_access ?? null, result.revertCapacity?.from ?? null, result.revertCapacity?.to ?? null],
  );
}

/** Records activity in one statement; with an idle timeout, the idle deadline moves to `at` + timeout. */
export async function touchSandbox(q: Queryable, id: string, at: Date, source: string): Promise<void> {
  await q.query(
    `UPDATE sandboxes SET last_activity_at = $2, last_activity_source = $3,
            idle_deadline = $2::timestamptz + idle_timeout_seconds * interval '1 second' WHERE id = $1`,
    [id, at, source],
  );
}

/** The host's sandboxes its reconciler still has work or watch duty for (no other host's). */
export async function liveIds(q: Queryable, hostId: string): Promise<string[]> {
  const { rows } = await q.query<{ id: string }>(
    "SELECT id FROM sandboxes WHERE host_id = $1 AND state NOT IN ('terminated', 'failed')",
    [hostId],
  );
  return rows.map((row) => row.id);
}

/**
 * The host's sandboxes that may hold state on it: a container of its runtime that none names
 * is removed. A failed sandbox holds none (its failure removed it, or it is `attention`),
 * unless it failed while its host was cut off (`host_lost`): then it is removed too.
 */
export async function knownIds(q: Queryable, hostId: string): Promise<Set<string>> {
  const { rows } = await q.query<{ id: string }>(
    "SELECT id FROM sandboxes WHERE host_id = $1 AND state NOT IN ('terminated', 'failed')",
    [hostId],
  );
  return new Set(rows.map((row) => row.id));
}

/**
 * Sandboxes time has made due at `now` (`isDue` of lifecycle.ts, in SQL): a deadline passed,
 * the expiry, the idle deadline of a running one, the end of a finished one's retention.
 * `overdue`: its state's deadline passed (a step running against it is given up). Only the
 * sandboxes of `hostId`: every host sweeps its own.
 */
export async function dueIds(
  q: Queryable,
  now: Date,
  retentionSeconds: number,
  hostId: string,
): Promise<{ id: string; state: string; overdue: boolean }[]> {
  const { rows } = await q.query<{ id: string; state: string; overdue: boolean }>(
    `SELECT id, state, (state_deadline IS NOT NULL AND state_deadline < $1) AS overdue FROM sandboxes
      WHERE host_id = $3 AND ((state IN ('terminated', 'failed') AND finished_at < $2)
         OR (state NOT IN ('terminated', 'failed') AND NOT quarantined AND (
              (state_deadline IS NOT NULL AND state_deadline < $1)
              OR (expires_at IS NOT NULL AND expires_at < $1 AND desired_state <> 'deleted'
                  AND state NOT IN ('terminating', 'attention'))
              OR (state = 'running' AND idle_deadline IS NOT NULL AND idle_deadline < $1))))`,
    [now, new Date(now.getTime() - retentionSeconds * 1000), hostId],
  );
  return rows;
}

/** Removes one finished sandbox of the owner past its retention (checked again here: it may have changed). */
export async function purgeFinishedSandbox(
  q: Queryable,
  id: string,
  finishedBefore: Date,
  owner: { hostId: string; epoch: number },
): Promise<boolean> {
  const { rows } = await q.query(
    `DELETE FROM sandboxes WHERE id = $1 AND state IN ('terminated', 'failed') AND finished_at < $2
       AND host_id = $3 AND host_epoch = $4 RETURNING id`,
    [id, finishedBefore, owner.hostId, owner.epoch],
  );
  return rows.length > 0;
}

export async function countRunning(q: Queryable, orgId: string): Promise<number> {
  const { rows } = await q.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM sandboxes WHERE org_id = $1 AND desired_state = 'running'
       AND state NOT IN ('failed', 'terminated', 'terminating', 'stopped')`,
    [orgId],
  );
  return Number(rows[0]?.n ?? 0);
}

/** The memory_mb and cpu_millis of every organization's sandboxes countRunning counts: what the host has promised. */
/**
 * Serializes host admissions (compute and storage) until the transaction ends: what one
 * admits is a live row the next one counts. One key per host (issue 25 names the host).
 */
export async function lockHostAdmission(q: Queryable, hostId: string | null): Promise<void> {
  await q.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`host-admission:${hostId ?? "local"}`]);
}

/** lockHostAdmission without waiting: false when another transaction holds it now. */
export async function tryLockHostAdmission(q: Queryable, hostId: string): Promise<boolean> {
  const { rows } = await q.query<{ locked: boolean }>("SELECT pg_try_advisory_xact_lock(hashtext($1)) AS locked", [
    `host-admission:${hostId}`,
  ]);
  return rows[0]?.locked === true;
}

/**
 * The rows a host's admission counts: its own (`host_id`), or, without a hosts registry
 * (a runtime-less server, unit tests), every row, as one host owns them all.
 */
function onHost(hostId: string | null, param: string): string {
  return hostId === null ? "TRUE" : `host_id = ${param}`;
}

/**
 * Memory and CPU reserved on the host: every sandbox that is to run (requested and
 * materializing too, and a wake not yet started) or still runs (a stop under way).
 * lifecycle.holdsCompute in SQL (test/sandboxes-repo.test.ts checks they agree).
 */
const HOLDS_COMPUTE = `((desired_state = 'running' AND state NOT IN ('failed', 'terminated', 'terminating'))
             OR state = 'running')`;

export async function committedCompute(
  q: Queryable,
  hostId: string | null,
): Promise<{ memoryMiB: number; cpuMillis: number }> {
  const { rows } = await q.query<{ memory: string; cpu: string }>(
    `SELECT COALESCE(sum((resources->>'memory_mb')::bigint), 0)::text AS memory,
            COALESCE(sum((resources->>'cpu_millis')::bigint), 0)::text AS cpu
       FROM sandboxes
      WHERE ${onHost(hostId, "$1")}
        AND ${HOLDS_COMPUTE}`,
    hostId === null ? [] : [hostId],
  );
  return { memoryMiB: Number(rows[0]?.memory ?? 0), cpuMillis: Number(rows[0]?.cpu ?? 0) };
}

/** The storage shape of every sandbox that holds (or is to hold) images on the host (lifecycle.holdsStorage). */
export async function storageReservations(
  q: Queryable,
  hostId: string | null,
): Promise<{ id: string; storage_class: SandboxRow["storage_class"]; workspace_capacity_gib: number | null }[]> {
  const { rows } = await q.query<{
    id: string;
    storage_class: SandboxRow["storage_class"];
    workspace_capacity_gib: number | null;
  }>(
    `SELECT id, storage_class, workspace_capacity_gib FROM sandboxes
      WHERE ${onHost(hostId, "$1")} AND state NOT IN ('failed', 'terminated')`,
    hostId === null ? [] : [hostId],
  );
  return rows;
}

/** What one host's live rows of one storage shape hold (allocationByHost). */
export interface ShapeAllocation {
  host_id: string;
  storage_class: SandboxRow["storage_class"];
  workspace_capacity_gib: number | null;
  n: number;
  memory: number;
  cpu: number;
}

/**
 * What the live rows of the hosts `hostIds` hold, for placement: compute as committedCompute
 * counts it, and the storage shapes as storageReservations lists them (counted per shape; the
 * caller turns a shape into bytes). One query over those hosts' live rows only.
 */
export async function allocationByHost(q: Queryable, hostIds: readonly string[]): Promise<ShapeAllocation[]> {
  if (hostIds.length === 0) return [];
  const { rows } = await q.query<{
    host_id: string;
    storage_class: SandboxRow["storage_class"];
    workspace_capacity_gib: number | null;
    n: string;
    memory: string;
    cpu: string;
  }>(
    `SELECT host_id, storage_class, workspace_capacity_gib, count(*)::text AS n,
            COALESCE(sum((resources->>'memory_mb')::bigint) FILTER (WHERE ${HOLDS_COMPUTE}), 0)::text AS memory,
            COALESCE(sum((resources->>'cpu_millis')::bigint) FILTER (WHERE ${HOLDS_COMPUTE}), 0)::text AS cpu
       FROM sandboxes
      WHERE host_id = ANY($1::text[]) AND state NOT IN ('failed', 'terminated')
      GROUP BY host_id, storage_class, workspace_capacity_gib`,
    [hostIds],
  );
  return rows.map((r) => ({ ...r, n: Number(r.n), memory: Number(r.memory), cpu: Number(r.cpu) }));
}

export async function countTotal(q: Queryable, orgId: string): Promise<number> {
  const { rows } = await q.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM sandboxes WHERE org_id = $1 AND desired_state <> 'deleted'
       AND state NOT IN ('failed', 'terminated')`,
    [orgId],
  );
  return Number(rows[0]?.n ?? 0);
}

export async function sumWorkspaceGiB(q: Queryable, orgId: string): Promise<number> {
  const { rows } = await q.query<{ n: string }>(
    `SELECT COALESCE(sum(workspace_capacity_gib), 0)::text AS n FROM sandboxes WHERE org_id = $1
       AND desired_state <> 'deleted' AND state NOT IN ('failed', 'terminated')`,
    [orgId],
  );
  return Number(rows[0]?.n ?? 0);
}

export interface ExecRow {
  id: string;
  org_id: string;
  sandbox_id: string;
  idempotency_key: string | null;
  request_hash: string;
  outcome: "running" | "completed" | "timeout" | "indeterminate" | "spawn_failed" | "sandbox_stopped";
  message: string | null;
  exit_code: number | null;
  stdout: Buffer | Uint8Array | null;
  stderr: Buffer | Uint8Array | null;
  truncated: boolean;
  started_at: Date;
  finished_at: Date | null;
  /** The host running it and that host's epoch (a process of another epoch cannot be running it). */
  host_id: string | null;
  host_epoch: number | null;
}

const E =
  "id, org_id, sandbox_id, idempotency_key, request_hash, outcome, message, exit_code, stdout, stderr, truncated, started_at, finished_at, host_id, host_epoch";

export async function claimExec(
  q: Queryable,
  e: Pick<
    ExecRow,
    "id" | "org_id" | "sandbox_id" | "idempotency_key" | "request_hash" | "started_at" | "host_id" | "host_epoch"
  >,
): Promise<boolean> {
  const { rows } = await q.query(
    `INSERT INTO sandbox_execs (id, org_id, sandbox_id, idempotency_key, request_hash, outcome, started_at, host_id,
       host_epoch)
     VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8) ON CONFLICT DO NOTHING RETURNING id`,
    [e.id, e.org_id, e.sandbox_id, e.idempotency_key, e.request_hash, e.started_at, e.host_id, e.host_epoch],
  );
  return rows.length > 0;
}

export async function findExecByKey(
  q: Queryable,
  orgId: string,
  sandboxId: string,
  key: string,
): Promise<ExecRow | null> {
  const { rows } = await q.query<ExecRow>(
    `SELECT ${E} FROM sandbox_execs WHERE org_id = $1 AND sandbox_id = $2 AND idempotency_key = $3`,
    [orgId, sandboxId, key],
  );
  return rows[0] ?? null;
}

export interface ExecFinish {
  outcome: ExecRow["outcome"];
  message?: string | null;
  exit?: number | null;
  /** Kept output, sealed by the caller (exec-service.ts); stored empty when absent. */
  stdout?: Buffer;
  stderr?: Buffer;
  truncated?: boolean;
}

/**
 * An exec's end as one statement: the sandbox's activity (last_activity_at and the idle
 * deadline from `at`), the outcome of its claimed record when it has one (an exec under an
 * Idempotency-Key), and its sandbox.exec event. One statement is one commit: the event
 * cannot be lost while the rest is written, and an exec pays for one round trip.
 */
export async function recordExecEnd(
  q: Queryable,
  end: { sandboxId: string; at: Date; record: { id: string; finish: ExecFinish } | null; event: NewEvent },
): Promise<void> {
  const params: unknown[] = [end.sandboxId, end.at];
  let sql = `WITH touched AS (UPDATE sandboxes SET last_activity_at = $2, last_activity_source = 'exec',
            idle_deadline = $2::timestamptz + idle_timeout_seconds * interval '1 second' WHERE id = $1 RETURNING 1)`;
  if (end.record) {
    const { finish } = end.record;
    sql += `, finished AS (UPDATE sandbox_execs SET outcome = $4, message = $5, exit_code = $6, stdout = $7, stderr = $8,
            truncated = $9, finished_at = $2 WHERE id = $3 AND outcome = 'running' RETURNING 1)`;
    params.push(
      end.record.id,
      finish.outcome,
      finish.message ?? null,
      finish.exit ?? null,
      finish.stdout ?? Buffer.alloc(0),
      finish.stderr ?? Buffer.alloc(0),
      finish.truncated ?? false,
    );
  }
  const insert = eventInsert(end.event, params.length + 1);
  await q.query(`${sql}\n${insert.sql}`, [...params, ...insert.params]);
}

export async function deleteExec(q: Queryable, id: string): Promise<void> {
  await q.query("DELETE FROM sandbox_execs WHERE id = $1", [id]);
}

/**
 * After a restart no exec of the host's previous processes (its earlier epochs) can still be
 * read: their outcomes are indeterminate. Another host's execs are that host's.
 */
export async function markRunningExecsIndeterminate(
  q: Queryable,
  at: Date,
  owner: { hostId: string; epoch: number },
  except: string[],
): Promise<number> {
  const { rows } = await q.query<{ n: string }>(
    `WITH changed AS (UPDATE sandbox_execs SET outcome = 'indeterminate', finished_at = $1
       WHERE outcome = 'running' AND host_id = $2 AND host_epoch IS DISTINCT FROM $3 AND NOT (id = ANY($4::text[]))
       RETURNING 1) SELECT count(*)::text AS n FROM changed`,
    [at, owner.hostId, owner.epoch, except],
  );
  return Number(rows[0]?.n ?? 0);
}

/** A sandbox's secret bindings and organization (the egress gateway's question); null when unknown. */
export async function getSecretBindings(
  q: Queryable,
  id: string,
): Promise<{ org_id: string; secret_bindings: SecretBindingRow[] } | null> {
  const { rows } = await q.query<{ org_id: string; secret_bindings: SecretBindingRow[] }>(
    "SELECT org_id, secret_bindings FROM sandboxes WHERE id = $1",
    [id],
  );
  return rows[0] ?? null;
}
