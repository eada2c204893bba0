// The router of many-hosts routing (docs/hosts.md "Routing"): what acts on a sandbox's host
// (exec, sessions, snapshot, workspace growth, network switch) asks `runtimeOf(sandbox)`. When
// this server is the owner it answers this server's own runtime, in-process (a single host
// never goes through a socket); otherwise a client of the owner's internal API (node-client.ts)
// that signs a grant per request. An owner that is not routable (no internal API published,
// not ready, another epoch than the row's, unreachable) answers 503 `host_unavailable`.
import { Agent } from "node:http";
import type { RuntimeDriver } from "../../drivers/runtime/interface.js";
import type { Logger } from "../../lib/logger.js";
import type { Queryable } from "../../store/db.js";
import type { GrantSigner } from "./grants.js";
import { type HostGate, hostUnavailable } from "./membership.js";
import { NodeClient } from "./node-client.js";
import { routeTargetOf } from "./route-repo.js";

/** The part of a sandbox runtime that crosses the wire (besides exec and snapshot, which route whole). */
export type RoutedRuntime = Pick<RuntimeDriver, "openSession" | "growWorkspace" | "setNetwork">;

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

export class HostRouter {
  /** Keep-alive connections to the other hosts' internal APIs (a routed exec costs no handshake). */
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 16 });

  constructor(
    private readonly db: Queryable,
    private readonly host: HostGate | null,
    private readonly runtime: RuntimeDriver | null,
    private readonly grants: GrantSigner,
    private readonly log: Logger,
    /** The sandbox row by id (SandboxService.rowForHost), for runtimeOfId. */
    private readonly sandboxOf: (id: string) => Promise<RoutedSandbox | null> = async () => null,
  ) {}

  /** Whether this server owns the sandbox (its operations run in-process). */
  ownsHere(row: Pick<RoutedSandbox, "host_id">): boolean {
    return this.host !== null && row.host_id === this.host.id;
  }

  /**
   * The runtime of the sandbox's owner: this server's (when it is the owner and may act),
   * else a client of the owner's internal API; otherwise 503 host_unavailable. `q` is the
   * transaction the caller holds, if any (the hosts row is read on it).
   */
  async runtimeOf(row: RoutedSandbox, q: Queryable = this.db): Promise<Route> {
    if (this.ownsHere(row)) {
      if (!this.runtime || !this.host?.canAct()) throw hostUnavailable();
      return { runtime: this.runtime, remote: null };
    }
    if (!row.host_id || row.host_epoch === null) throw hostUnavailable();
    const target = await routeTargetOf(q, row.host_id);
    if (!target?.internal_url || !ROUTABLE_STATES.has(target.state) || target.epoch !== row.host_epoch) {
      throw hostUnavailable();
    }
    const remote = new NodeClient({
      baseUrl: target.internal_url,
      hostId: target.id,
      epoch: target.epoch,
      orgId: row.org_id,
      sandboxId: row.id,
      grants: this.grants,
      agent: this.agent,
      log: this.log,
    });
    return { runtime: remote, remote };
  }

  /** runtimeOf for a sandbox named by id only (the SSH gateway's sessions and forwards); unknown: host_unavailable. */
  async runtimeOfId(sandboxId: string): Promise<Route> {
    const row = await this.sandboxOf(sandboxId);
    if (!row) throw hostUnavailable();
    return this.runtimeOf(row);
  }

  close(): void {
    this.agent.destroy();
  }
}
