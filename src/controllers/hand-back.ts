// The owner's side of placing a sandbox again on its refusal (issue 25 step 5, docs/hosts.md
// "Placement"): when this host's materialize step is refused by its own admission (its pool
// cannot back the sandbox) and the pure policy (modules/sandboxes/replacement.ts) allows it,
// what this host made of the sandbox is removed first (nothing runs without a row naming its
// host), then one transaction, conditional on this host's (host_id, epoch), records the
// refusal, places the sandbox on a host that has not refused it and kicks the new owner.
// False: the caller fails the sandbox as on one host.
import type { RuntimeDriver } from "../drivers/runtime/interface.js";
import type { Clock } from "../lib/clock.js";
import { AppError } from "../lib/errors.js";
import type { Logger } from "../lib/logger.js";
import { readCandidates } from "../modules/hosts/candidates.js";
import { notifyOwner } from "../modules/hosts/kicks.js";
import { UNREACHABLE_AFTER_SECONDS } from "../modules/hosts/liveness.js";
import type { HostGate } from "../modules/hosts/membership.js";
import type { IdentityService } from "../modules/identity/service.js";
import type { ComputePolicy } from "../modules/sandboxes/compute-admission.js";
import { placeAndAdmit } from "../modules/sandboxes/host-placement.js";
import { stateDeadline } from "../modules/sandboxes/lifecycle.js";
import { holdForHandBack, moveToHost, refusedHostsOf } from "../modules/sandboxes/refusal-repo.js";
import { decideRefusal } from "../modules/sandboxes/replacement.js";
import type * as repo from "../modules/sandboxes/repo.js";
import { appendSandboxEvent, ownedBy, type SandboxTransitions } from "../modules/sandboxes/transitions.js";
import type { Db } from "../store/db.js";

export interface HandBackDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  driver: Pick<RuntimeDriver, "destroy" | "servedFromPool" | "measureStorage">;
  identity: IdentityService;
  transitions: SandboxTransitions;
  /** The host handing the sandbox back (its id and epoch: the fence of the transaction). */
  host: HostGate;
  placement: { policy: ComputePolicy; mode: "local_first" | "spread" };
}

/** Errors placement answers when no host that has not refused the sandbox can take it. */
const NO_PLACE = new Set(["host_unavailable", "unavailable", "unsupported_capability"]);

/** Hands a refused sandbox back to placement; true when another host now owns it. */
export async function handBack(deps: HandBackDeps, row: repo.SandboxRow, code: string): Promise<boolean> {
  const self = deps.host;
  const policyOf = (refusedHosts: readonly string[], localOnlySnapshot: boolean) =>
    decideRefusal({
      state: row.state,
      desiredState: row.desired_state,
      quarantined: row.quarantined,
      code,
      hostId: row.host_id,
      refusedHosts,
      servedFromPool: deps.driver.servedFromPool?.(row.id) ?? false,
      localOnlySnapshot,
    });
  // Cheap checks first, so a single host (`make run`) fails the sandbox exactly as before.
  const first = policyOf([], false);
  if (first.kind !== "replace") return false;
  const refusedBefore = await refusedHostsOf(deps.db, row.id);
  if (!(await anotherHost(deps.db, [self.id, ...refusedBefore]))) return false;
  // Nothing of it may stay here once the row names another host; a failed cleanup is the
  // caller's `attention`.
  try {
    await deps.driver.destroy(row.id);
  } catch (error) {
    deps.log.warn({ sandbox_id: row.id, err: (error as Error).message }, "refused sandbox not cleaned up: not moved");
    return false;
  }
  await deps.identity.revokeSandboxKeys(row.id);
  const measure = await deps.driver.measureStorage?.();
  const moved = await deps.db.tx(async (q) => {
    const held = await holdForHandBack(q, row.id);
    if (!held || !ownedBy(held.row, self.owner()) || held.row.state !== row.state) return null;
    if (held.row.desired_state === "deleted" || held.row.quarantined) return null;
    const localOnly = !!held.snapshot && held.snapshot.durability !== "replicated";
    const verdict = policyOf(held.refusedHosts, localOnly);
    if (verdict.kind !== "replace") {
      deps.log.info({ sandbox_id: row.id, why: verdict.why }, "refused sandbox not placed again");
      return null;
    }
    let owner: Pick<repo.SandboxRow, "host_id" | "host_epoch">;
    try {
      owner = await placeAndAdmit(
        q,
        {
          self,
          localCompute: null,
          policy: deps.placement.policy,
          mode: deps.placement.mode,
          log: deps.log,
          exclude: verdict.refusedHosts,
        },
        {
          id: row.id,
          compute: row.resources,
          ...(measure
            ? {
                storage: {
                  shape: { storageClass: row.storage_class, workspaceCapacityGiB: row.workspace_capacity_gib },
                },
              }
            : {}),
          measure,
          image: row.image,
          volumes: row.volumes.map((v) => v.version),
          snapshotHostId: held.snapshot?.hostId ?? null,
        },
      );
    } catch (error) {
      // No host that has not refused it can take it: it fails with its own reason.
      if (error instanceof AppError && NO_PLACE.has(error.code)) return null;
      throw error;
    }
    const now = deps.clock.now();
    await moveToHost(q, row.id, owner, verdict.refusedHosts, stateDeadline("materializing", now), now);
    await appendSandboxEvent(q, deps.clock, held.row, "sandbox.placement_refused", {
      reason: code,
      placement: verdict.refusedHosts.length,
    });
    if (owner.host_id) await notifyOwner(q, owner.host_id, row.id);
    return owner;
  });
  if (!moved) return false;
  deps.transitions.notify(row.id);
  deps.log.info({ sandbox_id: row.id, code, to_host: moved.host_id }, "refused sandbox placed on another host");
  return true;
}

/** Whether a host not in `excluded` could be chosen now (ready, heartbeating): none, and nothing is moved. */
async function anotherHost(db: Db, excluded: readonly string[]): Promise<boolean> {
  const rows = await readCandidates(db);
  return rows.some(
    (r) => !excluded.includes(r.id) && r.state === "ready" && r.heartbeat_age_seconds <= UNREACHABLE_AFTER_SECONDS,
  );
}
