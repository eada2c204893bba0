// What other modules read of the hosts registry at their edges: where a host's session plane
// listens for the other servers, and the hosts' states (shown on sandbox records). The hosts module's face for it (its repo
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

/**
 * The hosts' states by id, read at most once a second per reader (a sandbox record shows its
 * owner's; a host judged unreachable shows within the sweeper's period plus this).
 */
export function hostStateReader(q: Queryable, maxAgeMs = 1000): () => Promise<Map<string, repo.HostState>> {
  let cached: { at: number; states: Promise<Map<string, repo.HostState>> } | null = null;
  return () => {
    const now = performance.now();
    if (!cached || now - cached.at > maxAgeMs) {
      const states = repo.hostStates(q).catch(() => new Map<string, repo.HostState>());
      cached = { at: now, states };
    }
    return cached.states;
  };
}
