// Placing a sandbox again when the host placement chose refuses it at its start (issue 25
// step 5, docs/hosts.md "Placement"): the pure policy. The owner's reconciler asks it when
// its materialize step fails; "replace" hands the row back to placement (every host that
// refused it excluded), anything else fails the sandbox as on one host.

import type { StoredState } from "./lifecycle.js";
import type { DesiredState } from "./repo.js";

/** Placements one sandbox gets at most (the first included): past them it fails. */
export const MAX_PLACEMENTS = 3;

/**
 * Failure codes of a host's own admission at start that another host could serve: its pool
 * cannot back the sandbox now (`storage_exhausted`, permanent or not: permanent is for this
 * host's pool, and placement only offers hosts whose published capacity holds the request).
 */
const REFUSAL_CODES: ReadonlySet<string> = new Set(["storage_exhausted"]);

export interface RefusalInput {
  state: StoredState;
  desiredState: DesiredState;
  quarantined: boolean;
  /** The failed step's code (the reconciler's failureCode). */
  code: string;
  /** The host that refused (the row's owner). */
  hostId: string | null;
  /** Hosts that refused it before, oldest first. */
  refusedHosts: readonly string[];
  /** Served from this host's warm pool (its state is here already): it cannot move. */
  servedFromPool: boolean;
  /** Restored from a snapshot whose only copy is on this host (not replicated): it cannot move. */
  localOnlySnapshot: boolean;
}

export type RefusalDecision =
  /** Hand it back: placement chooses a host that is none of `refusedHosts`. */
  | { kind: "replace"; refusedHosts: string[] }
  /** Fail it as on one host (`why` for the log). */
  | { kind: "fail"; why: "not_a_refusal" | "not_starting" | "cannot_move" | "placements_used" };

/** Whether a failed start is handed back to placement, and with which hosts excluded. */
export function decideRefusal(input: RefusalInput): RefusalDecision {
  if (!REFUSAL_CODES.has(input.code)) return { kind: "fail", why: "not_a_refusal" };
  if (
    (input.state !== "requested" && input.state !== "reserved" && input.state !== "materializing") ||
    input.desiredState === "deleted" ||
    input.quarantined ||
    !input.hostId
  ) {
    return { kind: "fail", why: "not_starting" };
  }
  if (input.servedFromPool || input.localOnlySnapshot) return { kind: "fail", why: "cannot_move" };
  const refusedHosts = [...input.refusedHosts.filter((id) => id !== input.hostId), input.hostId];
  // Each refusal ended one placement; the next would be placement refusedHosts.length + 1.
  if (refusedHosts.length >= MAX_PLACEMENTS) return { kind: "fail", why: "placements_used" };
  return { kind: "replace", refusedHosts };
}
