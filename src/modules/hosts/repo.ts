// The hosts registry's SQL (migration 0030, docs/hosts.md). Every time in it is the
// database's now(): hosts' clocks never decide whether a heartbeat is fresh.
import type { Db, Queryable } from "../../store/db.js";

export const HOST_STATES = ["joining", "ready", "draining", "cordoned", "unreachable", "dead"] as const;
export type HostState = (typeof HOST_STATES)[number];

/** What a host offers, reported with its heartbeat (placement reads it). */
export interface HostCapacity {
  cpu_millis?: number;
  memory_mib?: number;
  storage_bytes?: number;
}

/** Most entries a host publishes in each cache hint list (migration 0031). */
export const HOST_HINT_LIMIT = 64;

/** Cache locality hints a host publishes with its heartbeat (placement scores them). */
export interface HostCacheHints {
  /** Image references in its layer cache. */
  images: string[];
  /** Images it holds warm pool members of. */
  warmImages: string[];
  /** Volume ids in its volume cache. */
  volumes: string[];
}

export const NO_HINTS: HostCacheHints = { images: [], warmImages: [], volumes: [] };

const bounded = (list: readonly string[]): string[] => [...new Set(list)].slice(0, HOST_HINT_LIMIT);

export interface HostRow {
  id: string;
  role: string;
  state: HostState;
  /** An integer column: 2^31 re-joins are out of reach. */
  epoch: number;
  address: string | null;
  plane_address: string | null;
  ssh_address: string | null;
  capacity: HostCapacity;
  images: string[];
  warm_images: string[];
  volumes: string[];
  joined_at: Date;
  heartbeat_at: Date;
  state_changed_at: Date;
  /** What an operator asked (draining, cordoned); null: nothing. Liveness never clears it. */
  operator_state: OperatorState | null;
  /** Warm pool members the host reported with its last heartbeat. */
  pool_members: number;
}

export const OPERATOR_STATES = ["draining", "cordoned"] as const;
export type OperatorState = (typeof OPERATOR_STATES)[number];

export interface JoinInput {
  id: string;
  role: string;
  address: string | null;
  planeAddress: string | null;
  sshAddress: string | null;
  capacity: HostCapacity;
  hints?: HostCacheHints;
}

export interface JoinResult {
  host: HostRow;
  /** Rows from before the registry (host_id NULL) this join took: sandboxes, execs, snapshots. */
  adopted: { sandboxes: number; execs: number; snapshots: number };
}

const C = `id, role, state, epoch, address, plane_address, ssh_address, capacity, images, warm_images, volumes,
  joined_at, heartbeat_at, state_changed_at, operator_state, pool_members`;

// Joins are serialized (two hosts joining an upgraded store at once must not both adopt).
const JOIN_LOCK_KEY = 7_310_420_025;

/**
 * Registers the host, or re-registers it with its epoch bumped: a new epoch fences whatever
 * process held the old one (a previous run of this host, or this host before it was declared
 * dead). Every sandbox the host owns moves to the new epoch in the same transaction, so its own
 * conditional writes go on and the old epoch's do not. The first host of a store that no
 * other host ever joined adopts the rows from before the registry.
 */
export async function joinHost(db: Db, input: JoinInput): Promise<JoinResult> {
  return db.tx(async (q) => {
    await q.query("SELECT pg_advisory_xact_lock($1)", [JOIN_LOCK_KEY]);
    const { rows } = await q.query<HostRow>(
      `INSERT INTO hosts (id, role, state, epoch, address, plane_address, ssh_address, capacity, images, warm_images, volumes)
       VALUES ($1, $2, 'ready', 1, $3, $4, $5, $6::jsonb, $7::text[], $8::text[], $9::text[])
       ON CONFLICT (id) DO UPDATE SET epoch = hosts.epoch + 1, role = $2,
         state = COALESCE(hosts.operator_state, 'ready'),
         state_changed_at = CASE WHEN hosts.state = COALESCE(hosts.operator_state, 'ready') THEN hosts.state_changed_at
           ELSE now() END,
         address = $3, plane_address = $4, ssh_address = $5, capacity = $6::jsonb,
         images = $7::text[], warm_images = $8::text[], volumes = $9::text[], joined_at = now(), heartbeat_at = now()
       RETURNING ${C}`,
      [
        input.id,
        input.role,
        input.address,
        input.planeAddress,
        input.sshAddress,
        JSON.stringify(input.capacity),
        ...hintParams(input.hints ?? NO_HINTS),
      ],
    );
    const host = rows[0] as HostRow;
    const others = await q.query<{ n: string }>("SELECT count(*)::text AS n FROM hosts WHERE id <> $1", [input.id]);
    const adopted = { sandboxes: 0, execs: 0, snapshots: 0 };
    if (Number(others.rows[0]?.n ?? 0) === 0) {
      adopted.sandboxes = await adopt(q, "sandboxes", input.id);
      adopted.execs = await adopt(q, "sandbox_execs", input.id);
      adopted.snapshots = await adopt(q, "sandbox_snapshots", input.id);
    }
    // The sandboxes go on under the new epoch. Execs and snapshots keep the epoch of the process
    // that ran or took them: the start-up pass resolves those of earlier epochs.
    await q.query("UPDATE sandboxes SET host_epoch = $2 WHERE host_id = $1 AND host_epoch IS DISTINCT FROM $2", [
      input.id,
      host.epoch,
    ]);
    return { host, adopted };
  });
}

async function adopt(q: Queryable, table: string, hostId: string): Promise<number> {
  const { rows } = await q.query<{ n: string }>(
    `WITH adopted AS (UPDATE ${table} SET host_id = $1 WHERE host_id IS NULL RETURNING 1)
     SELECT count(*)::text AS n FROM adopted`,
    [hostId],
  );
  return Number(rows[0]?.n ?? 0);
}

function hintParams(hints: HostCacheHints): [string[], string[], string[]] {
  return [bounded(hints.images), bounded(hints.warmImages), bounded(hints.volumes)];
}

/** What a host reports with each heartbeat. */
export interface HeartbeatReport {
  capacity: HostCapacity;
  hints?: HostCacheHints;
  poolMembers: number;
}

/**
 * Renews the host's heartbeat (and what it reports: capacity, cache hints, pool members) while
 * its epoch is current; an `unreachable` host that renews is `ready` again (or what an operator
 * asked of it: draining, cordoned). Returns the host's state, which an operator may have changed
 * since the last beat; null: no row has this (id, epoch), the host is fenced.
 */
export async function renewHeartbeat(
  q: Queryable,
  id: string,
  epoch: number,
  report: HeartbeatReport,
): Promise<HostState | null> {
  const { rows } = await q.query<{ state: HostState }>(
    `UPDATE hosts SET heartbeat_at = now(), capacity = $3::jsonb, pool_members = $4,
            images = $5::text[], warm_images = $6::text[], volumes = $7::text[],
            state = CASE WHEN state = 'unreachable' THEN COALESCE(operator_state, 'ready') ELSE state END,
            state_changed_at = CASE WHEN state = 'unreachable' THEN now() ELSE state_changed_at END
      WHERE id = $1 AND epoch = $2 RETURNING state`,
    [id, epoch, JSON.stringify(report.capacity), report.poolMembers, ...hintParams(report.hints ?? NO_HINTS)],
  );
  return rows[0]?.state ?? null;
}

/**
 * Records what an operator asks of a host (draining, cordoned; null: nothing, back to ready).
 * A live host takes the state at once; an unreachable or dead one keeps its liveness state
 * and takes the asked one when it renews or re-joins. Null: no such host.
 */
export async function setOperatorState(q: Queryable, id: string, asked: OperatorState | null): Promise<HostRow | null> {
  const { rows } = await q.query<HostRow>(
    `UPDATE hosts SET operator_state = $2,
            state = CASE WHEN state IN ('ready', 'draining', 'cordoned') THEN COALESCE($2, 'ready') ELSE state END,
            state_changed_at = CASE WHEN state IN ('ready', 'draining', 'cordoned') AND state <> COALESCE($2, 'ready')
              THEN now() ELSE state_changed_at END
      WHERE id = $1 RETURNING ${C}`,
    [id, asked],
  );
  return rows[0] ?? null;
}

/** A host row with what the admin list shows beside it (counted from the store). */
export interface HostSummary extends HostRow {
  heartbeat_age_seconds: number;
  live_sandboxes: number;
  pending_replications: number;
}

/** Every host (or one), with its live sandboxes and pending replications counted. */
export async function hostSummaries(q: Queryable, id?: string): Promise<HostSummary[]> {
  const { rows } = await q.query<HostSummary>(
    `SELECT ${C.split(",")
      .map((column) => `h.${column.trim()}`)
      .join(", ")},
            extract(epoch FROM now() - h.heartbeat_at)::float8 AS heartbeat_age_seconds,
            (SELECT count(*)::int FROM sandboxes s
              WHERE s.host_id = h.id AND s.state NOT IN ('terminated', 'failed')) AS live_sandboxes,
            (SELECT count(*)::int FROM sandbox_snapshots p
              WHERE p.host_id = h.id AND p.replication = 'pending') AS pending_replications
       FROM hosts h ${id === undefined ? "" : "WHERE h.id = $1"} ORDER BY h.id`,
    id === undefined ? [] : [id],
  );
  return rows;
}

export async function getHost(q: Queryable, id: string): Promise<HostRow | null> {
  const { rows } = await q.query<HostRow>(`SELECT ${C} FROM hosts WHERE id = $1`, [id]);
  return rows[0] ?? null;
}

export async function listHosts(q: Queryable): Promise<HostRow[]> {
  const { rows } = await q.query<HostRow>(`SELECT ${C} FROM hosts ORDER BY id`);
  return rows;
}

/**
 * Writes where the host's session plane and SSH gateway listen for the other servers
 * (`host:port`, migration 0033) while its epoch is current; false when it is fenced.
 */
export async function publishEdges(
  q: Queryable,
  id: string,
  epoch: number,
  edges: { planeAddress: string | null; sshAddress: string | null },
): Promise<boolean> {
  const { rows } = await q.query(
    "UPDATE hosts SET plane_address = $3, ssh_address = $4 WHERE id = $1 AND epoch = $2 RETURNING id",
    [id, epoch, edges.planeAddress, edges.sshAddress],
  );
  return rows.length > 0;
}

/** Where a host's session plane listens for the other servers, and its state; null without a row. */
export async function planeOf(
  q: Queryable,
  id: string,
): Promise<{ state: HostState; plane_address: string | null } | null> {
  const { rows } = await q.query<{ state: HostState; plane_address: string | null }>(
    "SELECT state, plane_address FROM hosts WHERE id = $1",
    [id],
  );
  return rows[0] ?? null;
}

/** A hosts row as placement reads it: the heartbeat's age on the database's clock. */
export interface PlacementHostRow {
  id: string;
  state: HostState;
  epoch: number;
  capacity: HostCapacity;
  images: string[];
  warm_images: string[];
  volumes: string[];
  heartbeat_age_seconds: number;
}

/** Every host that is not dead, for placement (the bare read bench/placement.ts measures beside place()). */
export async function placementHosts(q: Queryable): Promise<PlacementHostRow[]> {
  const { rows } = await q.query<PlacementHostRow>(
    `SELECT id, state, epoch, capacity, images, warm_images, volumes,
            EXTRACT(EPOCH FROM (now() - heartbeat_at))::float8 AS heartbeat_age_seconds
       FROM hosts WHERE state <> 'dead' ORDER BY id`,
  );
  return rows;
}

/**
 * The chosen host's row, share-locked until the create commits: a host declared dead (epoch
 * bumped, its live sandboxes failed) cannot be so between this read and the new row's commit,
 * so no row is written under an epoch the sweeper has already passed.
 */
export async function lockHostForPlacement(
  q: Queryable,
  id: string,
): Promise<{ state: HostState; epoch: number } | null> {
  const { rows } = await q.query<{ state: HostState; epoch: number }>(
    "SELECT state, epoch FROM hosts WHERE id = $1 FOR SHARE",
    [id],
  );
  return rows[0] ?? null;
}

/** Every host's state, by id (what sandbox records show of their owner). */
export async function hostStates(q: Queryable): Promise<Map<string, HostState>> {
  const { rows } = await q.query<{ id: string; state: HostState }>("SELECT id, state FROM hosts");
  return new Map(rows.map((row) => [row.id, row.state]));
}
