// Placement in the create transaction (issue 25 step 4, docs/hosts.md "Placement"): read the
// hosts and what their live rows hold, order them with the pure place(), and run the chosen
// host's admission under its lock; refused, the next candidate (at most PLACEMENT_TRIES). The
// first host tried is locked waiting, the next ones only with a try-lock, so two creates
// trying hosts in opposite orders never wait on each other. With no other host ready (a
// single-host server), the create is admitted on this host exactly as before placement. The
// hosts are ranked by their allocation as this server's AllocationView holds it (at most
// ALLOCATION_VIEW_MS old; refused everywhere on a reused view, the create is ranked again fresh).
import type { StorageMeasure } from "../../drivers/runtime/interface.js";
import { AppError } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import type { Queryable } from "../../store/db.js";
import { type CandidateRow, lockCandidate, readCandidates } from "../hosts/candidates.js";
import { UNREACHABLE_AFTER_SECONDS } from "../hosts/liveness.js";
import { type HostGate, hostUnavailable } from "../hosts/membership.js";
import { type PlacementHost, place } from "../hosts/placement.js";
import type { AllocationView } from "./allocation-view.js";
import type { ComputePolicy, HostCompute } from "./compute-admission.js";
import { admitLocked } from "./host-admission.js";
import * as repo from "./repo.js";

/** Hosts whose admission one create tries at most. */
export const PLACEMENT_TRIES = 3;

export interface PlacementDeps {
  /** This server as a host; null on an `api` replica (every candidate is another host). */
  self: HostGate | null;
  /** This host's compute as measured now (its row's may be 2 s old). */
  localCompute: HostCompute | null;
  policy: ComputePolicy;
  mode: "local_first" | "spread";
  log: Logger;
  random?: () => number;
  /** Hosts never chosen (a sandbox placed again: the hosts that refused it at start). */
  exclude?: readonly string[];
  /** This server's allocation view (reused between its creates); none: read for every create. */
  view?: AllocationView | undefined;
  /** The only host the create may go to (it holds that host's warm pool member: remote-pool.ts). */
  only?: string | undefined;
}

export interface PlacedRequest {
  id: string;
  compute: repo.ResolvedResources;
  storage?: { shape: { storageClass: repo.SandboxRow["storage_class"]; workspaceCapacityGiB: number | null } };
  /** This host's measure: its own admission decides with it; its bytesOf sizes the request on any host. */
  measure?: StorageMeasure | undefined;
  image: string;
  volumes: readonly string[];
  snapshotHostId: string | null;
}

const REFUSALS = new Set(["unavailable", "unsupported_capability"]);

/** The hosts a create would try, in order, and whether the allocation they were ranked by was a reused view. */
export interface PlacementDecision {
  order: PlacementHost[];
  reused: boolean;
}

/**
 * Chooses the new sandbox's host and admits it there; returns the owner the row is written with.
 * Ranked on a reused allocation view (deps.view) and refused by every host tried, the create is
 * ranked again on a fresh read before it answers (allocation-view.ts).
 */
export async function placeAndAdmit(
  q: Queryable,
  deps: PlacementDeps,
  request: PlacedRequest,
): Promise<Pick<repo.SandboxRow, "host_id" | "host_epoch">> {
  const rows = await readCandidates(q);
  const self = deps.self;
  const selfId = self?.id ?? null;
  const excluded = new Set(deps.exclude ?? []);
  const eligible = eligibleHosts(rows, self).filter(
    (row) => !excluded.has(row.id) && (deps.only === undefined || row.id === deps.only),
  );
  // Pinned to a host that is no longer eligible: refused, so the caller can go the normal way.
  if (deps.only !== undefined && !eligible.length) throw noHost();
  // Placed again: only the hosts that did not refuse it (none left: the caller fails it).
  if (excluded.size > 0 && !eligible.length) throw noHost();
  if (!eligible.some((row) => row.id !== selfId)) {
    // No other host: this one, as before placement (host_unavailable when it cannot act).
    if (!self || !selfId) throw noHost();
    if (!self.canAct()) throw hostUnavailable();
    if (!eligible.length) throw noHost();
    await repo.lockHostAdmission(q, selfId);
    await admitLocked(q, admissionDeps(deps, deps.localCompute), onHost(request, selfId, undefined));
    const owner = self.owner();
    return { host_id: owner.hostId, host_epoch: owner.epoch };
  }
  const first = await decidePlacement(q, deps, request, eligible);
  try {
    return await admitInOrder(q, deps, request, first.order);
  } catch (error) {
    if (!first.reused || !isRefusal(error)) throw error;
    return admitInOrder(q, deps, request, (await decidePlacement(q, deps, request, eligible, true)).order);
  }
}

/** The hosts a create may go to: this one when it can act and takes creates, another when ready and fresh. */
export function eligibleHosts(rows: readonly CandidateRow[], self: HostGate | null): CandidateRow[] {
  const selfId = self?.id ?? null;
  const selfActs = self?.canAct() ?? false;
  // This host knows itself whether it can act (its lease); another is judged by its row.
  return rows.filter((row) =>
    row.id === selfId
      ? selfActs && row.state !== "cordoned" && row.state !== "draining"
      : row.state === "ready" && row.heartbeat_age_seconds <= UNREACHABLE_AFTER_SECONDS,
  );
}

/**
 * The order to try the eligible hosts in (place(); when none fits by the published figures,
 * every eligible host, this one first, for their admissions to answer). The allocation summed
 * over the eligible hosts' live rows, or deps.view's when it is fresh enough (`fresh`: never).
 */
export async function decidePlacement(
  q: Queryable,
  deps: PlacementDeps,
  request: PlacedRequest,
  eligible: readonly CandidateRow[],
  fresh = false,
): Promise<PlacementDecision> {
  const selfId = deps.self?.id ?? null;
  const selfActs = deps.self?.canAct() ?? false;
  const bytesOf = (shape: Parameters<StorageMeasure["bytesOf"]>[0]) => request.measure?.bytesOf(shape) ?? 0;
  const ids = eligible.map((row) => row.id);
  const { byHost, reused } = deps.view
    ? await deps.view.of(q, ids, fresh)
    : { byHost: groupByHost(await repo.allocationByHost(q, ids)), reused: false };
  const hosts: PlacementHost[] = eligible.map((row) => {
    const allocated = { cpuMillis: 0, memoryMiB: 0, storageBytes: 0 };
    for (const a of byHost.get(row.id) ?? []) {
      allocated.cpuMillis += a.cpu;
      allocated.memoryMiB += a.memory;
      if (a.n > 0)
        allocated.storageBytes +=
          a.n * bytesOf({ storageClass: a.storage_class, workspaceCapacityGiB: a.workspace_capacity_gib });
    }
    return {
      id: row.id,
      state: row.id === selfId ? "ready" : row.state,
      heartbeatAgeSeconds: row.id === selfId ? 0 : row.heartbeat_age_seconds,
      capacity:
        row.id === selfId && deps.localCompute
          ? { ...row.capacity, cpu_millis: deps.localCompute.cpuMillis, memory_mib: deps.localCompute.memoryMiB }
          : row.capacity,
      allocated,
      images: row.images,
      warmImages: row.warm_images,
      volumes: row.volumes,
    };
  });
  const placementRequest = {
    cpuMillis: request.compute.cpu_millis,
    memoryMiB: request.compute.memory_mb,
    storageBytes: request.storage ? bytesOf(request.storage.shape) : 0,
    image: request.image,
    volumes: request.volumes,
    snapshotHostId: request.snapshotHostId,
  };
  const order = place(hosts, placementRequest, deps.random ?? Math.random, {
    policy: deps.policy,
    preferHostId: deps.mode === "local_first" && selfActs && selfId ? selfId : undefined,
  });
  // None fits by the published figures: the eligible hosts' own admissions answer (this one first).
  if (order.length) return { order, reused };
  return { order: [...hosts].sort((a, b) => Number(b.id === selfId) - Number(a.id === selfId)), reused };
}

function groupByHost(rows: readonly repo.ShapeAllocation[]): Map<string, repo.ShapeAllocation[]> {
  const byHost = new Map<string, repo.ShapeAllocation[]>();
  for (const row of rows) {
    const list = byHost.get(row.host_id);
    if (list) list.push(row);
    else byHost.set(row.host_id, [row]);
  }
  return byHost;
}

function isRefusal(error: unknown): boolean {
  return error instanceof AppError && REFUSALS.has(error.code);
}

/** A create no host admitted: every host tried refused it, or none was eligible (host_unavailable). */
export function isPlacementRefusal(error: unknown): boolean {
  return isRefusal(error) || (error instanceof AppError && error.code === "host_unavailable");
}

/** Runs the admissions of the hosts in `order` (at most PLACEMENT_TRIES); the first that admits is the owner. */
async function admitInOrder(
  q: Queryable,
  deps: PlacementDeps,
  request: PlacedRequest,
  order: readonly PlacementHost[],
): Promise<Pick<repo.SandboxRow, "host_id" | "host_epoch">> {
  const self = deps.self;
  const selfId = self?.id ?? null;
  let refusal: unknown = null;
  let tried = 0;
  for (const host of order) {
    if (tried >= PLACEMENT_TRIES) break;
    if (tried === 0) await repo.lockHostAdmission(q, host.id);
    else if (!(await repo.tryLockHostAdmission(q, host.id))) continue;
    tried++;
    const local = host.id === selfId;
    const locked = local ? null : await lockCandidate(q, host.id);
    if (!local && locked?.state !== "ready") continue;
    const compute =
      local && deps.localCompute
        ? deps.localCompute
        : host.capacity.cpu_millis !== undefined && host.capacity.memory_mib !== undefined
          ? { cpuMillis: host.capacity.cpu_millis, memoryMiB: host.capacity.memory_mib }
          : null;
    try {
      await admitLocked(
        q,
        admissionDeps(deps, compute),
        onHost(request, host.id, local ? undefined : (host.capacity.storage_bytes ?? null)),
      );
    } catch (error) {
      if (!isRefusal(error)) throw error;
      refusal ??= error;
      continue;
    }
    deps.view?.placed(
      host.id,
      request.compute,
      request.storage
        ? {
            storage_class: request.storage.shape.storageClass,
            workspace_capacity_gib: request.storage.shape.workspaceCapacityGiB,
          }
        : null,
    );
    if (local && self) {
      const owner = self.owner();
      return { host_id: owner.hostId, host_epoch: owner.epoch };
    }
    return { host_id: host.id, host_epoch: (locked as { epoch: number }).epoch };
  }
  throw refusal ?? noHost();
}

function admissionDeps(deps: PlacementDeps, host: HostCompute | null) {
  return { host, policy: deps.policy, log: deps.log };
}

function onHost(request: PlacedRequest, hostId: string, storageCapacityBytes: number | null | undefined) {
  const storage =
    request.storage && request.measure
      ? { id: request.id, bytes: request.measure.bytesOf(request.storage.shape), measure: request.measure }
      : undefined;
  return {
    hostId,
    compute: request.compute,
    ...(storage ? { storage } : {}),
    ...(storageCapacityBytes !== undefined ? { storageCapacityBytes } : {}),
  };
}

/** 503 host_unavailable: every host is cordoned, draining, unreachable or dead (docs/api-decisions.md). */
function noHost(): AppError {
  return hostUnavailable(
    "no host can take a new sandbox now (every host is cordoned, draining or unreachable); retry shortly",
  );
}
