// Changes of a sandbox's host state that UpdateSandbox claims in its transaction and applies
// outside it (a host tool never runs while the row lock others wait on is held): workspace
// growth and a live network switch. Also how the host's storage refusals read in the API.
import {
  type NetworkApplied,
  type NetworkMode,
  RuntimeError,
  type SandboxRuntime,
} from "../../drivers/runtime/interface.js";
import { AppError } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import type { Db } from "../../store/db.js";
import * as repo from "./repo.js";

/** How long a claim on a sandbox's host state (growth, network switch) holds if its holder dies. */
export const HOST_CLAIM_SECONDS = 600;

export type HostChange = { kind: "grow"; from: number; to: number } | { kind: "network"; mode: NetworkMode };

/** Applies a claimed host change outside any transaction, then records it and ends the claim. */
export async function applyHostChange(
  deps: { db: Db; runtime: Pick<SandboxRuntime, "growWorkspace" | "setNetwork">; log: Logger },
  row: repo.SandboxRow,
  host: HostChange,
): Promise<NetworkApplied | null> {
  try {
    if (host.kind === "grow") {
      await deps.runtime.growWorkspace(row.id, host.to);
      await repo.releaseHost(deps.db, row.id, {});
      return null;
    }
    const receipt = await deps.runtime.setNetwork(row.id, host.mode);
    await repo.releaseHost(deps.db, row.id, { network_access: host.mode });
    return receipt;
  } catch (error) {
    await repo.releaseHost(deps.db, row.id, host.kind === "grow" ? { revertCapacity: host } : {});
    throw host.kind === "grow" ? growFailure(deps.log, row, error) : error;
  }
}

/** A driver refusal of workspace growth as the API's error; the driver's own words go to the log only. */
function growFailure(log: Logger, row: repo.SandboxRow, error: unknown): unknown {
  if (!(error instanceof RuntimeError)) return error;
  log.warn({ sandbox_id: row.id, code: error.code, err: error.message }, "workspace growth refused");
  if (error.code === "workspace_shrink_unsupported")
    return new AppError("workspace_shrink_unsupported", "the workspace cannot shrink");
  if (error.code === "storage_exhausted") return storageRefusal(error);
  if (row.state === "running") {
    // The driver grows a mounted filesystem only where the host lets it (CAP_SYS_RESOURCE).
    return new AppError(
      "operation_conflict",
      "this host cannot grow the workspace of a running sandbox; stop it, grow the workspace, then wake it",
    );
  }
  return new AppError("unavailable", "the workspace could not be grown; try again later", { retryAfterSeconds: 30 });
}

/**
 * What a sandbox's state_reason says of a driver failure: the driver's words, except a
 * storage refusal's, which carry the host's free space (storageRefusal's verdict instead).
 */
export function tenantFailureMessage(error: unknown): string {
  const refusal = storageRefusal(error);
  return withoutHostPaths(refusal instanceof AppError ? refusal.message : (error as Error).message);
}

/**
 * A host failure's words for a tenant (a sandbox's state_reason): every absolute path is
 * replaced by `<host path>`, since a failed mount or tool names the host's data directory
 * and other sandboxes' files. The full message stays in the server's log.
 */
export function withoutHostPaths(message: string): string {
  return message.replace(/(^|[\s'"`(=[,:])\/[^\s'"`),;:\]]*/g, "$1<host path>");
}

/**
 * The host's storage admission refusing a create or a growth (local/storage/admission.ts):
 * 503 `unavailable` while other sandboxes hold the space (it may free up), 422
 * `unsupported_capability` when even an empty host could not back it (docs/api-decisions.md).
 */
export function storageRefusal(error: unknown): unknown {
  if (!(error instanceof RuntimeError) || error.code !== "storage_exhausted") return error;
  // The driver's words (the host's free space) stay in the log: a tenant learns only the verdict.
  if (error.permanent) {
    return new AppError("unsupported_capability", "this deployment cannot back that much sandbox storage");
  }
  return new AppError("unavailable", "the host cannot back this sandbox's storage now; try again later", {
    retryAfterSeconds: 30,
  });
}
