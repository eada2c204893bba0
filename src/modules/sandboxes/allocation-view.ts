// What placement ranks hosts by (host-placement.ts): each candidate host's allocation, summed
// from its live rows in one query over the candidates only, and reused by the creates this
// server places for ALLOCATION_VIEW_MS (each one it places is added to the view at once). A view
// only orders the hosts to try: the chosen host's admission counts its live rows under the
// host's lock, and a create every host tried refused on a reused view is placed again on a
// fresh one, so a view at most ALLOCATION_VIEW_MS old changes which host is tried first, never
// an answer (bench/README.md "Placement": the sum over the live rows is most of the decision).
import type { Queryable } from "../../store/db.js";
import { allocationByHost, type SandboxRow, type ShapeAllocation } from "./repo.js";

/** How long a read of the candidates' allocation is reused (a host's heartbeat is 2 s). */
export const ALLOCATION_VIEW_MS = 1_000;

export class AllocationView {
  private byHost = new Map<string, ShapeAllocation[]>();
  private readAt = Number.NEGATIVE_INFINITY;

  constructor(
    /** Milliseconds on a monotonic clock. */
    private readonly now: () => number = () => performance.now(),
    private readonly maxAgeMs = ALLOCATION_VIEW_MS,
  ) {}

  /**
   * Each of `hostIds`' shape allocations: the view's when it is younger than maxAgeMs and holds
   * every one of them (and `fresh` is not asked), otherwise read on `q` (and kept).
   */
  async of(
    q: Queryable,
    hostIds: readonly string[],
    fresh = false,
  ): Promise<{ byHost: ReadonlyMap<string, readonly ShapeAllocation[]>; reused: boolean }> {
    if (!fresh && this.now() - this.readAt < this.maxAgeMs && hostIds.every((id) => this.byHost.has(id))) {
      return { byHost: this.byHost, reused: true };
    }
    const readAt = this.now();
    const byHost = new Map<string, ShapeAllocation[]>(hostIds.map((id) => [id, []]));
    for (const row of await allocationByHost(q, hostIds)) byHost.get(row.host_id)?.push(row);
    this.byHost = byHost;
    this.readAt = readAt;
    return { byHost, reused: false };
  }

  /** A sandbox this server placed on `hostId`: counted in the view until it is read again. */
  placed(
    hostId: string,
    compute: { memory_mb: number; cpu_millis: number },
    shape: Pick<SandboxRow, "storage_class" | "workspace_capacity_gib"> | null,
  ): void {
    const rows = this.byHost.get(hostId);
    if (!rows) return;
    rows.push({
      host_id: hostId,
      storage_class: shape?.storage_class ?? "standard",
      workspace_capacity_gib: shape?.workspace_capacity_gib ?? null,
      n: shape ? 1 : 0,
      memory: compute.memory_mb,
      cpu: compute.cpu_millis,
    });
  }
}
