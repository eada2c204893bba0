// The SQL of sandbox_processes (migrations/0036_processes.sql). Every write of the owner is
// conditional on its (host, epoch): a fenced host changes no process row.
import type { Queryable } from "../../store/db.js";
import type { HostOwner } from "../hosts/membership.js";

export type ProcessState = "starting" | "running" | "exited" | "lost";
export type EndReason = "exited" | "killed" | "timeout" | "sandbox_stopped" | "lost";

export interface ProcessRow {
  id: string;
  org_id: string;
  sandbox_id: string;
  host_id: string;
  host_epoch: number;
  agent_id: string;
  agent_serial: number;
  pid: number | null;
  argv: string[];
  cwd: string | null;
  pty: { rows: number; cols: number } | null;
  stdin: boolean;
  state: ProcessState;
  exit_code: number | null;
  end_reason: EndReason | null;
  output_kept: boolean;
  timeout_seconds: number | null;
  deadline: Date | null;
  created_at: Date;
  started_at: Date | null;
  ended_at: Date | null;
}

const C = `id, org_id, sandbox_id, host_id, host_epoch::float8 AS host_epoch, agent_id, agent_serial::float8 AS agent_serial,
  pid, argv, cwd, pty, stdin, state, exit_code, end_reason, output_kept, timeout_seconds, deadline, created_at,
  started_at, ended_at`;

export async function insertStarting(
  q: Queryable,
  row: Pick<
    ProcessRow,
    "id" | "org_id" | "sandbox_id" | "argv" | "cwd" | "pty" | "stdin" | "timeout_seconds" | "created_at"
  >,
  owner: HostOwner,
): Promise<void> {
  await q.query(
    `INSERT INTO sandbox_processes (id, org_id, sandbox_id, host_id, host_epoch, argv, cwd, pty, stdin, state,
       timeout_seconds, created_at)
     VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::jsonb, $9, 'starting', $10, $11)`,
    [
      row.id,
      row.org_id,
      row.sandbox_id,
      owner.hostId,
      owner.epoch,
      JSON.stringify(row.argv),
      row.cwd,
      row.pty ? JSON.stringify(row.pty) : null,
      row.stdin,
      row.timeout_seconds,
      row.created_at,
    ],
  );
}

/** starting -> running, with where the agent keeps it; false when fenced (the process must then end). */
export async function markRunning(
  q: Queryable,
  id: string,
  started: { agent: string; serial: number; pid: number; at: Date; deadline: Date | null },
  owner: HostOwner,
): Promise<boolean> {
  const { rows } = await q.query(
    `UPDATE sandbox_processes SET state = 'running', agent_id = $2, agent_serial = $3, pid = $4, started_at = $5,
       deadline = $6
     WHERE id = $1 AND state = 'starting' AND host_id = $7 AND host_epoch = $8 RETURNING id`,
    [id, started.agent, started.serial, started.pid, started.at, started.deadline, owner.hostId, owner.epoch],
  );
  return rows.length > 0;
}

/** A row that never got a process (the start failed): removed, as a failed exec leaves no record. */
export async function deleteStarting(q: Queryable, id: string, owner: HostOwner): Promise<void> {
  await q.query(
    "DELETE FROM sandbox_processes WHERE id = $1 AND state = 'starting' AND host_id = $2 AND host_epoch = $3",
    [id, owner.hostId, owner.epoch],
  );
}

/** A live process ended (or was found gone): its outcome, once. The row as it is now, or null when fenced or already ended. */
export async function markEnded(
  q: Queryable,
  id: string,
  end: { state: "exited" | "lost"; exitCode: number | null; reason: EndReason; at: Date },
  owner: HostOwner,
): Promise<ProcessRow | null> {
  const { rows } = await q.query<ProcessRow>(
    `UPDATE sandbox_processes SET state = $2, exit_code = $3, end_reason = $4, ended_at = $5
     WHERE id = $1 AND state IN ('starting', 'running') AND host_id = $6 AND host_epoch = $7 RETURNING ${C}`,
    [id, end.state, end.exitCode, end.reason, end.at, owner.hostId, owner.epoch],
  );
  return rows[0] ?? null;
}

export async function markReleased(q: Queryable, id: string, owner: HostOwner): Promise<void> {
  await q.query("UPDATE sandbox_processes SET output_kept = false WHERE id = $1 AND host_id = $2 AND host_epoch = $3", [
    id,
    owner.hostId,
    owner.epoch,
  ]);
}

export async function get(q: Queryable, sandboxId: string, id: string): Promise<ProcessRow | null> {
  const { rows } = await q.query<ProcessRow>(`SELECT ${C} FROM sandbox_processes WHERE id = $1 AND sandbox_id = $2`, [
    id,
    sandboxId,
  ]);
  return rows[0] ?? null;
}

export async function listPage(
  q: Queryable,
  sandboxId: string,
  after: { at: Date; id: string } | null,
  limit: number,
): Promise<ProcessRow[]> {
  const params: unknown[] = [sandboxId];
  let where = "sandbox_id = $1";
  if (after) {
    params.push(after.at, after.id);
    where += " AND (created_at, id) < ($2, $3)";
  }
  params.push(limit);
  const { rows } = await q.query<ProcessRow>(
    `SELECT ${C} FROM sandbox_processes WHERE ${where} ORDER BY created_at DESC, id DESC LIMIT $${params.length}`,
    params,
  );
  return rows;
}

/** Live processes of a sandbox (the per-sandbox limit counts them). */
export async function countLive(q: Queryable, sandboxId: string): Promise<number> {
  const { rows } = await q.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM sandbox_processes WHERE sandbox_id = $1 AND state IN ('starting', 'running')",
    [sandboxId],
  );
  return rows[0]?.n ?? 0;
}

/** Ended processes of a sandbox whose output the agent still keeps, oldest first. */
export async function keptEnded(q: Queryable, sandboxId: string): Promise<ProcessRow[]> {
  const { rows } = await q.query<ProcessRow>(
    `SELECT ${C} FROM sandbox_processes WHERE sandbox_id = $1 AND state IN ('exited', 'lost') AND output_kept
      ORDER BY ended_at, id`,
    [sandboxId],
  );
  return rows;
}

/**
 * This host's live rows, taken over by its current epoch (a restart joins with a new one) when
 * their sandbox is still this host's: the start-up pass then re-adopts or ends each.
 */
export async function adoptLive(q: Queryable, owner: HostOwner): Promise<ProcessRow[]> {
  await q.query(
    `UPDATE sandbox_processes p SET host_epoch = $2 FROM sandboxes s
      WHERE p.host_id = $1 AND p.host_epoch <> $2 AND p.state IN ('starting', 'running')
        AND s.id = p.sandbox_id AND s.host_id = $1`,
    [owner.hostId, owner.epoch],
  );
  const { rows } = await q.query<ProcessRow>(
    `SELECT ${C} FROM sandbox_processes WHERE host_id = $1 AND host_epoch = $2 AND state IN ('starting', 'running')`,
    [owner.hostId, owner.epoch],
  );
  return rows;
}

/** Live rows of one sandbox (for the sandbox's stop). */
export async function liveOf(q: Queryable, sandboxId: string): Promise<ProcessRow[]> {
  const { rows } = await q.query<ProcessRow>(
    `SELECT ${C} FROM sandbox_processes WHERE sandbox_id = $1 AND state IN ('starting', 'running')`,
    [sandboxId],
  );
  return rows;
}
