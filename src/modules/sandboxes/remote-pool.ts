// Another host's warm pool for a create through this server (docs/hosts.md "Placement"): when
// this server has no member of the create's shape (an api replica has no pool at all), a
// ready host whose heartbeat names the image among its warm ones is asked, over its internal
// API (`pool-take`), for one of its members. The member's id becomes the new sandbox's id and
// the create is admitted on that host only; the owner's reconciler then finds the member
// under that id (PooledRuntime.create) and hands it the sandbox's command, as for a create
// that came in to it. A create that then fails gives the member back (`pool-release`); one
// that never commits leaves it to the owner's hold timer (REMOTE_HOLD_MS).
import type { PoolRequest } from "../../drivers/runtime/interface.js";
import type { Queryable } from "../../store/db.js";
import { type CandidateRow, readCandidates } from "../hosts/candidates.js";
import type { HostGate } from "../hosts/membership.js";
import { POOL_TAKE_SUBJECT } from "../hosts/node-wire.js";
import type { HostRouter } from "../hosts/router.js";
import { eligibleHosts } from "./host-placement.js";

/** How long the hosts' rows (their warm hints) are reused between creates. */
const HINTS_MS = 1_000;

/** A member taken from another host for one create. */
export interface RemoteMember {
  hostId: string;
  id: string;
  /** Gives the member back (the create failed); best effort. */
  release(): Promise<void>;
}

export class RemoteWarmPools {
  private hints: { rows: CandidateRow[]; at: number } | null = null;

  constructor(
    private readonly db: Queryable,
    private readonly router: HostRouter,
    private readonly self: HostGate | null,
    private readonly now: () => number = () => performance.now(),
    private readonly random: () => number = Math.random,
  ) {}

  /** A member of another host's pool for a create of `request`'s shape, or null (the create goes the normal way). */
  async take(orgId: string, request: PoolRequest): Promise<RemoteMember | null> {
    const selfId = this.self?.id ?? null;
    const warm = eligibleHosts(await this.rows(), this.self).filter(
      (row) => row.id !== selfId && row.warm_images.includes(request.image),
    );
    if (warm.length === 0) return null;
    const host = warm[Math.floor(this.random() * warm.length)] as CandidateRow;
    const at = { org_id: orgId, host_id: host.id, host_epoch: host.epoch };
    const route = await this.router.runtimeOf({ id: POOL_TAKE_SUBJECT, ...at }).catch(() => null);
    const id = route?.remote ? await route.remote.poolTake(request) : null;
    if (!id) return null;
    return {
      hostId: host.id,
      id,
      release: async () => {
        const member = await this.router.runtimeOf({ id, ...at }).catch(() => null);
        await member?.remote?.poolRelease();
      },
    };
  }

  private async rows(): Promise<CandidateRow[]> {
    const at = this.now();
    if (this.hints && at - this.hints.at < HINTS_MS) return this.hints.rows;
    const rows = await readCandidates(this.db);
    this.hints = { rows, at };
    return rows;
  }
}
