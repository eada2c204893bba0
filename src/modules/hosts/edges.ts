// What the session plane of another module reads of the hosts registry: where a host's plane
// listens for the other servers, and its state. The hosts module's face for it (its repo
// stays its own).
import type { Queryable } from "../../store/db.js";
import * as repo from "./repo.js";

/** Where host `id`'s session plane listens (`host:port`) and its state; null without a row. */
export function planeOfHost(
  q: Queryable,
  id: string,
): Promise<{ state: repo.HostState; plane_address: string | null } | null> {
  return repo.planeOf(q, id);
}
