// The SQL of placing a sandbox again on its host's refusal (replacement.ts the policy,
// controllers/hand-back.ts the owner's side).
import type { Queryable } from "../../store/db.js";
import * as repo from "./repo.js";

export interface HeldForHandBack {
  row: repo.SandboxRow;
  refusedHosts: string[];
  /** The restore's snapshot: where its local copy is and whether the blob store has it. */
  snapshot: { hostId: string | null; durability: "local" | "replicated" | null } | null;
}

/** Locks the sandbox's row for the hand-back and reads what its policy needs; null when gone. */
export async function holdForHandBack(q: Queryable, id: string): Promise<HeldForHandBack | null> {
  const row = await repo.getSandbox(q, id, true);
  if (!row) return null;
  const { rows } = await q.query<{ refused_hosts: string[] }>("SELECT refused_hosts FROM sandboxes WHERE id = $1", [
    id,
  ]);
  let snapshot: HeldForHandBack["snapshot"] = null;
  if (row.snapshot_id) {
    const found = await q.query<{ host_id: string | null; durability: "local" | "replicated" | null }>(
      "SELECT host_id, durability FROM snapshots WHERE id = $1",
      [row.snapshot_id],
    );
    const s = found.rows[0];
    snapshot = s ? { hostId: s.host_id, durability: s.durability } : { hostId: null, durability: null };
  }
  return { row, refusedHosts: rows[0]?.refused_hosts ?? [], snapshot };
}

/**
 * Gives the (locked) row to its new owner: the hosts that refused it, and `materializing` again
 * under a fresh deadline (it never claims `failed` in between).
 */
export async function moveToHost(
  q: Queryable,
  id: string,
  owner: Pick<repo.SandboxRow, "host_id" | "host_epoch">,
  refusedHosts: readonly string[],
  stateDeadline: Date | null,
  now: Date,
): Promise<void> {
  await q.query(
    `UPDATE sandboxes SET host_id = $2, host_epoch = $3, refused_hosts = $4::text[], state = 'materializing',
            state_deadline = $5, credential_key_id = NULL, updated_at = $6
      WHERE id = $1`,
    [id, owner.host_id, owner.host_epoch, refusedHosts, stateDeadline, now],
  );
}

/** The hosts that refused the sandbox at start, oldest first (tests, operators). */
export async function refusedHostsOf(q: Queryable, id: string): Promise<string[]> {
  const { rows } = await q.query<{ refused_hosts: string[] }>("SELECT refused_hosts FROM sandboxes WHERE id = $1", [
    id,
  ]);
  return rows[0]?.refused_hosts ?? [];
}
