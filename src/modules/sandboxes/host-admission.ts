// Admission against the host as a reservation (issue 24 A9 and A17e; docs/api-decisions.md
// "Host admission is a reservation"). A create, a wake or a growth takes the host's
// admission lock inside its transaction, counts what the store's live rows reserve (memory
// and CPU of every sandbox that is to run or runs; storage of every sandbox not finished,
// requested and materializing ones included), decides with the pure checks
// (compute-admission.ts, the driver's StorageMeasure) and, admitted, writes its row before
// the lock is released: the next admission counts it. Nothing is counted apart from the rows,
// so a sandbox that stops, fails or terminates gives its share back by its state alone.
// The host is measured (statfs, image sizes) before the transaction: no I/O under the lock.
import { RuntimeError, type StorageDecision, type StorageMeasure } from "../../drivers/runtime/interface.js";
import { AppError } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import type { Queryable } from "../../store/db.js";
import { type ComputePolicy, decideCompute, type HostCompute } from "./compute-admission.js";
import { storageRefusal } from "./host-changes.js";
import * as repo from "./repo.js";

export interface HostAdmissionRequest {
  /** Memory and CPU the sandbox is to run with (a create, a wake). */
  compute?: repo.ResolvedResources;
  /** The images sandbox `id` is to hold in all (a create, a growth), against `measure`. */
  storage?: { id: string; bytes: number; measure: StorageMeasure };
  /**
   * The host the sandbox runs on (a create: this host; a growth: the row's owner). Only that
   * host's rows are counted, under that host's lock; null without a hosts registry (every row).
   */
  hostId: string | null;
}

/** The storage each live row reserves, by sandbox id (pure). */
export function storageReserved(
  rows: readonly Pick<repo.SandboxRow, "id" | "storage_class" | "workspace_capacity_gib">[],
  measure: Pick<StorageMeasure, "bytesOf">,
): Map<string, number> {
  const reserved = new Map<string, number>();
  for (const row of rows) {
    reserved.set(
      row.id,
      measure.bytesOf({ storageClass: row.storage_class, workspaceCapacityGiB: row.workspace_capacity_gib }),
    );
  }
  return reserved;
}

/**
 * Admits `request` on the host or throws the API's refusal: 422 `unsupported_capability`
 * beyond what the whole host has, 503 `unavailable` with Retry-After beyond what it has left.
 * Call it last in the transaction before the row is written (the lock is the last one taken,
 * after the quotas' and the row's, so no two transactions wait on each other in turn).
 */
export async function admitOnHost(
  q: Queryable,
  deps: { host: HostCompute | null; policy: ComputePolicy; log: Logger },
  request: HostAdmissionRequest,
): Promise<void> {
  if (!(request.compute && deps.host) && !request.storage) return;
  await repo.lockHostAdmission(q, request.hostId);
  await admitLocked(q, deps, request);
}

/**
 * admitOnHost's decision, with the host's admission lock already held by the caller (placement
 * takes it, waiting for the first host it tries and only trying the lock of the next ones).
 * `storage.capacityBytes` (a remote host: the creating server cannot measure its pool): the
 * bytes it published, against its rows' reservations; absent, its `measure` decides.
 */
export async function admitLocked(
  q: Queryable,
  deps: { host: HostCompute | null; policy: ComputePolicy; log: Logger },
  request: HostAdmissionRequest & { storageCapacityBytes?: number | null },
): Promise<void> {
  const compute = request.compute && deps.host ? request.compute : null;
  if (compute && deps.host) {
    const committed = await repo.committedCompute(q, request.hostId);
    const asked = { memoryMiB: compute.memory_mb, cpuMillis: compute.cpu_millis };
    const verdict = decideCompute(deps.host, committed, asked, deps.policy);
    if (!verdict.admitted) {
      deps.log.warn(
        { host: deps.host, committed, request: asked, resource: verdict.resource },
        "sandbox compute refused",
      );
      const what = verdict.resource === "memory" ? "memory" : "CPU";
      if (verdict.permanent) {
        throw new AppError("unsupported_capability", `this deployment cannot give one sandbox that much ${what}`);
      }
      throw new AppError("unavailable", `the host's ${what} is fully committed to running sandboxes; try again later`, {
        retryAfterSeconds: 30,
      });
    }
  }
  if (request.storage) {
    const { id, bytes, measure } = request.storage;
    const reserved = storageReserved(await repo.storageReservations(q, request.hostId), measure);
    if (request.storageCapacityBytes === undefined) {
      refuseStorage(measure.decide(reserved, { id, bytes }), deps.log);
    } else if (request.storageCapacityBytes !== null) {
      let held = 0;
      for (const value of reserved.values()) held += value;
      if (held + bytes > request.storageCapacityBytes) {
        const detail = `the host publishes ${request.storageCapacityBytes} bytes its pool can promise; its sandboxes reserve ${held}, this one asks ${bytes}`;
        refuseStorage({ admitted: false, permanent: bytes > request.storageCapacityBytes, detail }, deps.log);
      }
    }
  }
}

/** What admitPoolMember needs of the host's runtime (the local driver). */
export interface PoolMemberHost {
  measureStorage(): Promise<StorageMeasure>;
  reserveStorage(id: string, bytes: number): () => void;
}

/**
 * Admits a warm-pool member on this host as a create is admitted: measured first, then under
 * the host's lock beside every live row's reservation, its storage reserved in the driver
 * before the lock is released (so a create deciding next counts it). Compute is not admitted:
 * an idle member commits none (a claim makes it a row, counted from then on). Returns the
 * reservation's release; throws storage_exhausted's refusal when the host cannot back it.
 */
export async function admitPoolMember(
  db: { tx<T>(fn: (q: Queryable) => Promise<T>): Promise<T> },
  deps: { runtime: PoolMemberHost; hostId: () => string | null; log: Logger },
  id: string,
  shape: { storageClass: "standard"; workspaceCapacityGiB: null },
): Promise<() => void> {
  const measure = await deps.runtime.measureStorage();
  const bytes = measure.bytesOf(shape);
  let release: (() => void) | undefined;
  try {
    await db.tx(async (q) => {
      const hostId = deps.hostId();
      await repo.lockHostAdmission(q, hostId);
      const reserved = storageReserved(await repo.storageReservations(q, hostId), measure);
      const verdict = measure.decide(reserved, { id, bytes });
      if (!verdict.admitted) {
        throw new RuntimeError("storage_exhausted", verdict.detail, { permanent: verdict.permanent });
      }
      // Before the commit releases the lock: the next admission's decision counts it.
      release = deps.runtime.reserveStorage(id, bytes);
    });
  } catch (error) {
    release?.();
    throw error;
  }
  return release as () => void;
}

/**
 * Refuses, before any transaction or lock, storage no state of the host could back (422
 * `unsupported_capability`, ahead of the quotas, as a GPU the deployment lacks is).
 */
export function refuseBeyondHost(request: NonNullable<HostAdmissionRequest["storage"]>, log: Logger): void {
  const verdict = request.measure.decide(new Map(), { id: request.id, bytes: request.bytes });
  if (!verdict.admitted && verdict.permanent) refuseStorage(verdict, log);
}

function refuseStorage(verdict: StorageDecision, log: Logger): void {
  if (verdict.admitted) return;
  // The host's numbers go to the log; the tenant gets the verdict (storageRefusal).
  log.warn({ err: verdict.detail }, "sandbox storage refused");
  throw storageRefusal(new RuntimeError("storage_exhausted", verdict.detail, { permanent: verdict.permanent }));
}
