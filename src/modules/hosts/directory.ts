// The operator's view of the hosts registry (GET /v1/admin/hosts, `warren admin host ...`):
// the list with what tells a drained host, and draining, cordoning and uncordoning. The
// host itself sees the change on its next heartbeat (membership.ts) and acts on it: a
// draining host's warm pool empties; placement skips every host that is not `ready`.
import { notFound } from "../../lib/errors.js";
import type { Queryable } from "../../store/db.js";
import type { HostJson } from "../admin/schemas.js";
import { COLLECTION_LEASE, leaseHolder } from "./leader.js";
import * as repo from "./repo.js";

export type HostAction = "drain" | "cordon" | "uncordon";

const ASKED: Record<HostAction, repo.OperatorState | null> = { drain: "draining", cordon: "cordoned", uncordon: null };

/** Whether a draining host has nothing left to drain: no pool member, no pending replication. */
export function isDrained(host: Pick<repo.HostSummary, "state" | "pool_members" | "pending_replications">): boolean {
  return host.state === "draining" && host.pool_members === 0 && host.pending_replications === 0;
}

export class HostDirectory {
  constructor(private readonly db: Queryable) {}

  async list(): Promise<HostJson[]> {
    const [rows, leader] = await Promise.all([repo.hostSummaries(this.db), leaseHolder(this.db, COLLECTION_LEASE)]);
    return rows.map((row) => view(row, leader));
  }

  async get(id: string): Promise<HostJson> {
    const [rows, leader] = await Promise.all([repo.hostSummaries(this.db, id), leaseHolder(this.db, COLLECTION_LEASE)]);
    const row = rows[0];
    if (!row) throw notFound("host");
    return view(row, leader);
  }

  /** Drain, cordon or uncordon (back to `ready`); not_found for an unknown host. */
  async act(id: string, action: HostAction): Promise<HostJson> {
    if (!(await repo.setOperatorState(this.db, id, ASKED[action]))) throw notFound("host");
    return this.get(id);
  }
}

function view(row: repo.HostSummary, leaderHostId: string | null): HostJson {
  return {
    id: row.id,
    role: row.role,
    state: row.state,
    operator_state: row.operator_state,
    epoch: row.epoch,
    address: row.address,
    plane_address: row.plane_address,
    ssh_address: row.ssh_address,
    capacity: row.capacity,
    joined_at: row.joined_at.toISOString(),
    heartbeat_at: row.heartbeat_at.toISOString(),
    heartbeat_age_seconds: Math.max(0, Math.round(row.heartbeat_age_seconds * 10) / 10),
    state_changed_at: row.state_changed_at.toISOString(),
    live_sandboxes: row.live_sandboxes,
    pool_members: row.pool_members,
    pending_replications: row.pending_replications,
    drained: isDrained(row),
    collection_leader: leaderHostId === row.id,
  };
}
