// What placement in another module's create transaction reads of the hosts registry: the
// hosts with their liveness, capacity and cache hints, and the row lock that keeps a chosen
// remote host from being declared dead before the create commits. The hosts module's face
// for it (its repo stays its own).
import type { Queryable } from "../../store/db.js";
import * as repo from "./repo.js";

export type CandidateRow = repo.PlacementHostRow;

/** Every host with what placement scores (heartbeat age by the database's clock). */
export function readCandidates(q: Queryable): Promise<CandidateRow[]> {
  return repo.placementHosts(q);
}

/** Locks a host's row for the rest of the transaction; null when it is gone. */
export function lockCandidate(q: Queryable, id: string): Promise<{ state: repo.HostState; epoch: number } | null> {
  return repo.lockHostForPlacement(q, id);
}
