// Placement (issue 25 step 4, docs/hosts.md "Placement"): which host a new sandbox goes to.
// Pure: the caller reads the hosts rows (heartbeat age on the database's clock) and what each
// host has allocated (summed from its live rows, as host admission does), and runs the chosen
// host's admission under that host's lock (modules/sandboxes/host-placement.ts, in the create).

import { type ComputePolicy, decideCompute } from "../sandboxes/compute-admission.js";
import { UNREACHABLE_AFTER_SECONDS } from "./liveness.js";
import type { HostCapacity, HostState } from "./repo.js";

export interface PlacementHost {
  id: string;
  state: HostState;
  /** Seconds since its last heartbeat, by the database's clock. */
  heartbeatAgeSeconds: number;
  /** What the host reported with its heartbeat; a missing figure does not limit (its admission decides). */
  capacity: HostCapacity;
  /** What its live rows hold (memory and CPU of those to run; storage of those not finished). */
  allocated: { cpuMillis: number; memoryMiB: number; storageBytes: number };
  /** Cache hints (bounded lists the host publishes). */
  images?: readonly string[];
  warmImages?: readonly string[];
  volumes?: readonly string[];
}

export interface PlacementRequest {
  cpuMillis: number;
  memoryMiB: number;
  storageBytes: number;
  image?: string | undefined;
  volumes?: readonly string[] | undefined;
  /** A restore: the host holding the snapshot's local copy, if any. */
  snapshotHostId?: string | null | undefined;
}

export interface PlacementOptions {
  policy: ComputePolicy;
  /** How many candidates are sampled at random before the best is taken (E2B's best-of-K). */
  k?: number;
  unreachableAfterSeconds?: number;
  /**
   * `local_first` placement: this host, when it is a candidate, comes first (unless the
   * snapshot of a restore is on another candidate), the rest by score.
   */
  preferHostId?: string | undefined;
}

export const PLACEMENT_K = 3;

/** Whether `host` may take `request`: ready, fresh and with room for it. */
export function isCandidate(
  host: PlacementHost,
  request: PlacementRequest,
  options: Pick<PlacementOptions, "policy" | "unreachableAfterSeconds">,
): boolean {
  if (host.state !== "ready") return false;
  if (host.heartbeatAgeSeconds > (options.unreachableAfterSeconds ?? UNREACHABLE_AFTER_SECONDS)) return false;
  const { cpu_millis: cpu, memory_mib: memory, storage_bytes: storage } = host.capacity;
  if (cpu !== undefined && memory !== undefined) {
    const verdict = decideCompute(
      { cpuMillis: cpu, memoryMiB: memory },
      { cpuMillis: host.allocated.cpuMillis, memoryMiB: host.allocated.memoryMiB },
      { cpuMillis: request.cpuMillis, memoryMiB: request.memoryMiB },
      options.policy,
    );
    if (!verdict.admitted) return false;
  }
  if (storage !== undefined && host.allocated.storageBytes + request.storageBytes > storage) return false;
  return true;
}

/** Fraction of the host's room in use after the request, the most used of cpu, memory and storage (0..1+). */
function load(host: PlacementHost, request: PlacementRequest, policy: ComputePolicy): number {
  const parts: number[] = [];
  const { cpu_millis: cpu, memory_mib: memory, storage_bytes: storage } = host.capacity;
  if (cpu) parts.push((host.allocated.cpuMillis + request.cpuMillis) / (cpu * policy.cpuOvercommit));
  if (memory) parts.push((host.allocated.memoryMiB + request.memoryMiB) / (memory * policy.memoryOvercommit));
  if (storage) parts.push((host.allocated.storageBytes + request.storageBytes) / storage);
  return parts.length ? Math.max(...parts) : 0;
}

/** Snapshot locality > warm pool > image cache > volume cache > least allocated (a weighted sum). */
export function score(host: PlacementHost, request: PlacementRequest, policy: ComputePolicy): number {
  let s = 0;
  if (request.snapshotHostId && request.snapshotHostId === host.id) s += 1000;
  if (request.image && host.warmImages?.includes(request.image)) s += 100;
  if (request.image && host.images?.includes(request.image)) s += 10;
  const volumes = request.volumes ?? [];
  if (volumes.length && host.volumes) {
    const cached = volumes.filter((v) => host.volumes?.includes(v)).length;
    s += (5 * cached) / volumes.length;
  }
  return s + (1 - Math.min(1, load(host, request, policy)));
}

/**
 * The hosts to try, in order: the best of K sampled at random first, then every other
 * candidate by score (the caller tries the next when a host's admission refuses). Empty: no
 * host fits (the caller answers what admission answers).
 */
export function place(
  hosts: readonly PlacementHost[],
  request: PlacementRequest,
  random: () => number,
  options: PlacementOptions,
): PlacementHost[] {
  const candidates = hosts.filter((h) => isCandidate(h, request, options));
  if (candidates.length <= 1) return candidates;
  const preferred = options.preferHostId ? candidates.find((h) => h.id === options.preferHostId) : undefined;
  const snapshotElsewhere =
    !!request.snapshotHostId &&
    request.snapshotHostId !== preferred?.id &&
    candidates.some((h) => h.id === request.snapshotHostId);
  if (preferred && !snapshotElsewhere) {
    const rest = candidates
      .filter((h) => h !== preferred)
      .map((host) => ({ host, score: score(host, request, options.policy) }))
      .sort((a, b) => b.score - a.score);
    return [preferred, ...rest.map((e) => e.host)];
  }
  const scored = candidates.map((host) => ({ host, score: score(host, request, options.policy) }));
  const k = Math.min(options.k ?? PLACEMENT_K, scored.length);
  // Partial Fisher-Yates: the first k entries are a uniform sample.
  const pool = scored.slice();
  for (let i = 0; i < k; i++) {
    const j = i + Math.floor(random() * (pool.length - i));
    [pool[i], pool[j]] = [pool[j] as (typeof pool)[number], pool[i] as (typeof pool)[number]];
  }
  let best = 0;
  for (let i = 1; i < k; i++) if ((pool[i]?.score ?? 0) > (pool[best]?.score ?? 0)) best = i;
  const first = pool[best] as (typeof pool)[number];
  const rest = scored.filter((e) => e !== first).sort((a, b) => b.score - a.score);
  return [first.host, ...rest.map((e) => e.host)];
}
