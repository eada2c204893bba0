// The router of many-hosts routing (docs/hosts.md "Routing"): what acts on a sandbox's host
// (exec, sessions, snapshot, workspace growth, network switch) asks `runtimeOf(sandbox)`. When
// this server is the owner it answers this server's own runtime, in-process (a single host
// never goes through a socket); otherwise a client of the owner's internal API (node-client.ts)
// that signs a grant per request. An owner that is not routable (no internal API published,
// not ready, another epoch than the row's, unreachable) answers 503 `host_unavailable`.
// A routable owner's hosts row is reused for ROUTE_CACHE_MS (bench/README.md "Exec routed"):
// the owner re-checks its epoch (the grant) and its ownership (the sandbox row) on every
// request, a cached row is used only when it names the row's epoch (otherwise it is read
// again), and a request the owner refused or that never reached it is retried once on a
// fresh read (node-client.ts, `revalidate`): nothing ran, so nothing runs twice.
import { Agent } from "node:http";
import type { SandboxRuntime } from "../../drivers/runtime/interface.js";
import type { Logger } from "../../lib/logger.js";
import type { Queryable } from "../../store/db.js";
import type { GrantSigner } from "./grants.js";
import { type HostGate, hostUnavailable } from "./membership.js";
import { NodeClient } from "./node-client.js";
import { type RouteTarget, routeTargetOf } from "./route-repo.js";

/** How long a routable owner's hosts row is reused without reading it again (a heartbeat is 2 s). */
export const ROUTE_CACHE_MS = 1_000;

/** The part of a sandbox runtime that crosses the wire (besides exec and snapshot, which route whole). */
export type RoutedRuntime = Pick<SandboxRuntime, "openSession" | "growWorkspace" | "setNetwork">;

/** Where a sandbox's host operations go: this server's runtime (remote null), or the owner's node API. */
export interface Route {
  runtime: RoutedRuntime;
  remote: NodeClient | null;
}

export interface RoutedSandbox {
  id: string;
  org_id: string;
  host_id: string | null;
  host_epoch: number | null;
}

/** Host states whose internal API is asked (draining and cordoned hosts still serve their sandboxes). */
const ROUTABLE_STATES = new Set(["ready", "draining", "cordoned"]);

type RoutableTarget = RouteTarget & { internal_url: string };

function routable(target: RouteTarget | null): target is RoutableTarget {
  return !!target?.internal_url && ROUTABLE_STATES.has(target.state);
}

export class HostRouter {
  /** Keep-alive connections to the other hosts' internal APIs (a routed exec costs no handshake). */
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 16 });
  /** Routable owners' hosts rows by host id, with when they were read (this.now's clock). */
  private readonly targets = new Map<string, { target: RoutableTarget; readAt: number }>();

  constructor(
    private readonly db: Queryable,
    private readonly host: HostGate | null,
    private readonly runtime: SandboxRuntime | null,
    private readonly grants: GrantSigner,
    private readonly log: Logger,
    /** The sandbox row by id (SandboxService.rowForHost), for runtimeOfId. */
    private readonly sandboxOf: (id: string) => Promise<RoutedSandbox | null> = async () => null,
    /** Milliseconds on a monotonic clock (the route cache's age). */
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Whether this server owns the sandbox (its operations run in-process). */
  ownsHere(row: Pick<RoutedSandbox, "host_id">): boolean {
    return this.host !== null && row.host_id === this.host.id;
  }

  /**
   * The runtime of the sandbox's owner: this server's (when it is the owner and may act),
   * else a client of the owner's internal API; otherwise 503 host_unavailable. `q` is the
   * transaction the caller holds, if any (the hosts row is then read on it, never cached).
   */
  async runtimeOf(row: RoutedSandbox, q: Queryable = this.db): Promise<Route> {
    if (this.ownsHere(row)) {
      if (!this.runtime || !this.host?.canAct()) throw hostUnavailable();
      return { runtime: this.runtime, remote: null };
    }
    const hostId = row.host_id;
    const epoch = row.host_epoch;
    if (!hostId || epoch === null) throw hostUnavailable();
    const cached = q === this.db ? this.cachedTarget(hostId, epoch) : null;
    const target = cached ?? (await this.readTarget(q, hostId));
    if (target?.epoch !== epoch) throw hostUnavailable();
    const remote = new NodeClient({
      baseUrl: target.internal_url,
      hostId: target.id,
      epoch: target.epoch,
      orgId: row.org_id,
      sandboxId: row.id,
      grants: this.grants,
      agent: this.agent,
      log: this.log,
      ...(cached ? { revalidate: () => this.revalidate(cached, epoch) } : {}),
    });
    return { runtime: remote, remote };
  }

  /** A cached routable row of the host naming `epoch`, read less than ROUTE_CACHE_MS ago. */
  private cachedTarget(hostId: string, epoch: number): RoutableTarget | null {
    const hit = this.targets.get(hostId);
    if (!hit) return null;
    if (this.now() - hit.readAt >= ROUTE_CACHE_MS) {
      this.targets.delete(hostId);
      return null;
    }
    // Another epoch than the sandbox row's (the owner re-joined since): the registry decides.
    return hit.target.epoch === epoch ? hit.target : null;
  }

  /** The host's row as it is now, null when it is not routable; cached when read outside a transaction. */
  private async readTarget(q: Queryable, hostId: string): Promise<RoutableTarget | null> {
    const readAt = this.now();
    const target = await routeTargetOf(q, hostId);
    if (!routable(target)) {
      this.targets.delete(hostId);
      return null;
    }
    if (q === this.db) this.targets.set(hostId, { target, readAt });
    return target;
  }

  /**
   * After the owner refused a grant, or could not be reached, on a cached row: the row read
   * again. What to try once more, or null when it names the same owner (the caller answers as
   * without the cache); host_unavailable when the owner is no longer routable at `epoch`.
   */
  private async revalidate(used: RoutableTarget, epoch: number): Promise<{ baseUrl: string; epoch: number } | null> {
    if (this.targets.get(used.id)?.target === used) this.targets.delete(used.id);
    const fresh = await this.readTarget(this.db, used.id);
    if (fresh?.epoch !== epoch) throw hostUnavailable();
    if (fresh.internal_url === used.internal_url) return null;
    return { baseUrl: fresh.internal_url, epoch: fresh.epoch };
  }

  /** runtimeOf for a sandbox named by id only (the SSH gateway's sessions and forwards); unknown: host_unavailable. */
  async runtimeOfId(sandboxId: string): Promise<Route> {
    const row = await this.sandboxOf(sandboxId);
    if (!row) throw hostUnavailable();
    return this.runtimeOf(row);
  }

  close(): void {
    this.targets.clear();
    this.agent.destroy();
  }
}
