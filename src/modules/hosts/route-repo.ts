// The SQL of routing to a sandbox's owner (migration 0032, docs/hosts.md "Routing"): where a
// host's internal API is, and whether the host may be routed to at all.
import type { Queryable } from "../../store/db.js";

export interface RouteTarget {
  id: string;
  state: string;
  epoch: number;
  internal_url: string | null;
}

/** Publishes this host's internal API, only under its current epoch (a fenced process publishes nothing). */
export async function publishInternalUrl(q: Queryable, hostId: string, epoch: number, url: string | null) {
  await q.query("UPDATE hosts SET internal_url = $3 WHERE id = $1 AND epoch = $2", [hostId, epoch, url]);
}

export async function routeTargetOf(q: Queryable, hostId: string): Promise<RouteTarget | null> {
  const { rows } = await q.query<RouteTarget>("SELECT id, state, epoch, internal_url FROM hosts WHERE id = $1", [
    hostId,
  ]);
  return rows[0] ?? null;
}
