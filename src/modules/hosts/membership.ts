// This server's membership in the hosts registry (docs/hosts.md): its id (kept in the data
// dir), its current epoch, a heartbeat every HEARTBEAT_INTERVAL_MS, and whether it may act
// on its sandboxes now. It may not once fenced (its heartbeat matched no (id, epoch) row:
// another host declared it dead, or another process joined with its id), nor while its lease
// is not renewed: a host cut off from the store stops acting before anyone may declare it
// dead (the dead grace is longer than the lease).
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { AppError } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import type { Db } from "../../store/db.js";
import * as repo from "./repo.js";

export const HEARTBEAT_INTERVAL_MS = 2_000;
/** A host that has not renewed its heartbeat for this long stops acting on its own. */
export const SELF_FENCE_LEASE_MS = 10_000;
const HOST_ID_FILE = "host-id";
const HOST_RETRY_AFTER_SECONDS = 2;
const HOST_ID = /^h_[0-9a-f]{24}$/;

/**
 * 503 `host_unavailable` (docs/api-decisions.md): the sandbox's host cannot act on it here
 * now; nothing was done, and a retry (through its owner) may succeed.
 */
export function hostUnavailable(message = "the sandbox's host is not available here now; retry shortly"): AppError {
  return new AppError("host_unavailable", message, { retryAfterSeconds: HOST_RETRY_AFTER_SECONDS });
}

/** The (host, epoch) a host-scoped write is conditional on. */
export interface HostOwner {
  hostId: string;
  epoch: number;
}

/** What the host-scoped code needs of the membership: who owns, and whether it may act. */
export interface HostGate {
  readonly id: string;
  owner(): HostOwner;
  canAct(): boolean;
  /** The state an operator gave the host as last read (draining and cordoned take no creates); absent: ready. */
  state?(): repo.HostState | null;
}

/**
 * Whether a lease renewed by a heartbeat sent at `renewSentAt` still holds at `now` (both
 * on this process's monotonic clock). Measured from the send, not the answer: the database
 * stamped heartbeat_at no earlier, so the lease ends no later than others' view of it.
 */
export function leaseHeld(renewSentAt: number | null, now: number, leaseMs: number): boolean {
  return renewSentAt !== null && now - renewSentAt < leaseMs;
}

/** The host id of this data dir, made on the first start (`h_` and 24 hex digits). */
export async function hostIdOf(dataDir: string): Promise<string> {
  const file = path.join(dataDir, HOST_ID_FILE);
  const existing = await readFile(file, "utf8").then(
    (text) => text.trim(),
    () => null,
  );
  if (existing && HOST_ID.test(existing)) return existing;
  if (existing !== null) throw new Error(`${file} does not hold a host id; remove it to make a new one`);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const id = `h_${randomBytes(12).toString("hex")}`;
  const partial = `${file}.${process.pid}`;
  await writeFile(partial, `${id}\n`, { mode: 0o600 });
  await rename(partial, file);
  return id;
}

export interface MembershipOptions {
  id: string;
  role: string;
  address?: string | null;
  planeAddress?: string | null;
  sshAddress?: string | null;
  /** What the host offers, read at the join and at every heartbeat (a failure publishes nothing new: `{}`). */
  capacity?: () => repo.HostCapacity | Promise<repo.HostCapacity>;
  /** Placement's cache hints, read with the capacity (bounded by the repo to HOST_HINT_LIMIT each). */
  hints?: () => repo.HostCacheHints | Promise<repo.HostCacheHints>;
  /** Its warm pool members now (reported, so the admin list can tell a drained host). */
  poolMembers?: () => number;
  heartbeatIntervalMs?: number;
  leaseMs?: number;
  /** The monotonic clock the lease is measured on (tests move it). */
  monotonicNow?: () => number;
}

export class HostMembership implements HostGate {
  readonly id: string;
  private epoch = 0;
  private fenced = false;
  private renewSentAt: number | null = null;
  private timer: NodeJS.Timeout | null = null;
  private beating: Promise<void> | null = null;
  private readonly fenceListeners: (() => void)[] = [];
  private readonly renewListeners: (() => void)[] = [];
  private readonly stateListeners: ((state: repo.HostState) => void)[] = [];
  private knownState: repo.HostState | null = null;
  private readonly now: () => number;
  private readonly leaseMs: number;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly options: MembershipOptions,
  ) {
    this.id = options.id;
    this.now = options.monotonicNow ?? (() => performance.now());
    this.leaseMs = options.leaseMs ?? SELF_FENCE_LEASE_MS;
  }

  /** Joins (or re-joins with a new epoch) and starts heartbeating; after a fence, a re-join. */
  async join(): Promise<repo.JoinResult> {
    const { capacity, hints } = await this.published();
    const sentAt = this.now();
    const result = await repo.joinHost(this.db, {
      id: this.id,
      role: this.options.role,
      address: this.options.address ?? null,
      planeAddress: this.options.planeAddress ?? null,
      sshAddress: this.options.sshAddress ?? null,
      capacity,
      hints,
    });
    this.epoch = result.host.epoch;
    this.fenced = false;
    this.renewSentAt = sentAt;
    const { adopted } = result;
    if (adopted.sandboxes + adopted.execs + adopted.snapshots > 0) {
      this.log.info({ host_id: this.id, ...adopted }, "adopted the rows of the store from before the hosts registry");
    }
    this.log.info({ host_id: this.id, epoch: this.epoch, state: result.host.state }, "joined the hosts registry");
    this.noteState(result.host.state);
    this.startBeating();
    return result;
  }

  owner(): HostOwner {
    return { hostId: this.id, epoch: this.epoch };
  }

  /**
   * Publishes where this host's session plane and SSH gateway listen for the other servers
   * (`host:port`, known once they are bound); kept for every later re-join.
   */
  async publishEdges(edges: { planeAddress: string | null; sshAddress: string | null }): Promise<void> {
    this.options.planeAddress = edges.planeAddress;
    this.options.sshAddress = edges.sshAddress;
    if (this.epoch === 0 || this.fenced) return;
    if (!(await repo.publishEdges(this.db, this.id, this.epoch, edges))) this.fence();
  }

  /**
   * Whether this host may act on its sandboxes now: joined, not fenced, and (on PostgreSQL,
   * where other hosts may take over) its lease renewed. The embedded store admits one
   * process per data dir, so no other host can ever declare this one dead there.
   */
  canAct(): boolean {
    if (this.epoch === 0 || this.fenced) return false;
    return this.db.kind !== "postgres" || leaseHeld(this.renewSentAt, this.now(), this.leaseMs);
  }

  isFenced(): boolean {
    return this.fenced;
  }

  /** Called once each time a heartbeat finds the epoch gone. */
  onFenced(listener: () => void): void {
    this.fenceListeners.push(listener);
  }

  /** The host's state as its row said at the last join or heartbeat (null before the join). */
  state(): repo.HostState | null {
    return this.knownState;
  }

  /**
   * Called with the new state each time the join or a heartbeat finds the row's state changed
   * (an operator drained, cordoned or uncordoned the host through any server).
   */
  onStateChanged(listener: (state: repo.HostState) => void): void {
    this.stateListeners.push(listener);
  }

  /** Called when a heartbeat renews a lease that had lapsed (work deferred meanwhile can go on). */
  onRenewedAfterLapse(listener: () => void): void {
    this.renewListeners.push(listener);
  }

  /** One heartbeat now; false when fenced. */
  async beat(): Promise<boolean> {
    if (this.fenced || this.epoch === 0) return false;
    const { capacity, hints } = await this.published();
    const epoch = this.epoch;
    const sentAt = this.now();
    const lapsed = !this.canAct();
    const state = await repo.renewHeartbeat(this.db, this.id, epoch, {
      capacity,
      hints,
      poolMembers: this.options.poolMembers?.() ?? 0,
    });
    if (epoch !== this.epoch) return true;
    if (state === null) {
      this.fence();
      return false;
    }
    this.renewSentAt = sentAt;
    if (lapsed) for (const listener of this.renewListeners) listener();
    this.noteState(state);
    return true;
  }

  private noteState(state: repo.HostState): void {
    if (state === this.knownState) return;
    const before = this.knownState;
    this.knownState = state;
    if (before !== null) this.log.info({ host_id: this.id, from: before, to: state }, "this host's state changed");
    for (const listener of this.stateListeners) {
      try {
        listener(state);
      } catch (error) {
        this.log.error({ host_id: this.id, err: (error as Error).message }, "a host state listener failed");
      }
    }
  }

  /** What the heartbeat publishes; measured before the lease's clock starts (no I/O counted in it). */
  private async published(): Promise<{ capacity: repo.HostCapacity; hints: repo.HostCacheHints }> {
    const read = async <T>(what: string, fn: (() => T | Promise<T>) | undefined, fallback: T): Promise<T> => {
      if (!fn) return fallback;
      try {
        return await fn();
      } catch (error) {
        this.log.warn({ host_id: this.id, err: (error as Error).message }, `host ${what} not measured`);
        return fallback;
      }
    };
    return {
      capacity: await read("capacity", this.options.capacity, {}),
      hints: await read("cache hints", this.options.hints, repo.NO_HINTS),
    };
  }

  private fence(): void {
    if (this.fenced) return;
    this.fenced = true;
    this.log.error(
      { host_id: this.id, epoch: this.epoch },
      "this host is fenced: its epoch is no longer current (declared dead, or joined elsewhere); it stops acting",
    );
    for (const listener of this.fenceListeners) listener();
  }

  private startBeating(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (this.beating) return;
      this.beating = this.beat()
        .then(() => undefined)
        .catch((error: unknown) =>
          this.log.warn({ host_id: this.id, err: (error as Error).message }, "host heartbeat failed"),
        )
        .finally(() => {
          this.beating = null;
        });
    }, this.options.heartbeatIntervalMs ?? HEARTBEAT_INTERVAL_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.beating;
  }
}
