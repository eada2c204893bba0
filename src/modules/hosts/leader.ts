// One server of the deployment at a time runs the work that must not run twice at once over
// one store: blob and volume collection and store maintenance (docs/hosts.md). A lease row
// in the store (migration 0034), taken and renewed by the DATABASE's clock; past its expiry
// any server takes it over. The holder also measures the lease on its own monotonic clock
// from the send of the renewal that succeeded (as the self-fence lease does), so a holder cut
// off from the store stops leading before another may take over. On the embedded store one
// process owns the data dir: it is the leader, whatever the row says.
import { randomBytes } from "node:crypto";
import type { Logger } from "../../lib/logger.js";
import type { Db, Queryable } from "../../store/db.js";

/** The lease of blob and volume collection and store maintenance. */
export const COLLECTION_LEASE = "collection";
export const LEADER_LEASE_SECONDS = 15;
export const LEADER_RENEW_INTERVAL_MS = 5_000;

/** A holder names its host (or `server` without one) and this process: `<host id>/<random>`. */
export function holderName(hostId: string | null): string {
  return `${hostId ?? "server"}/${randomBytes(8).toString("hex")}`;
}

/** Takes or renews the lease for `holder`; false while another holder's lease runs. */
export async function tryLease(q: Queryable, name: string, holder: string, ttlSeconds: number): Promise<boolean> {
  const { rows } = await q.query(
    `INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))
     ON CONFLICT (name) DO UPDATE SET holder = $2, expires_at = now() + make_interval(secs => $3),
       acquired_at = CASE WHEN leases.holder = $2 THEN leases.acquired_at ELSE now() END
       WHERE leases.holder = $2 OR leases.expires_at <= now()
     RETURNING holder`,
    [name, holder, ttlSeconds],
  );
  return rows.length > 0;
}

export async function releaseLease(q: Queryable, name: string, holder: string): Promise<void> {
  await q.query("DELETE FROM leases WHERE name = $1 AND holder = $2", [name, holder]);
}

/** The host id of the lease's current holder; null when none holds it (or a server that is no host). */
export async function leaseHolder(q: Queryable, name: string): Promise<string | null> {
  const { rows } = await q.query<{ holder: string }>(
    "SELECT holder FROM leases WHERE name = $1 AND expires_at > now()",
    [name],
  );
  const host = rows[0]?.holder.split("/")[0];
  return host?.startsWith("h_") ? host : null;
}

export interface LeaderLeaseOptions {
  name?: string;
  holder: string;
  ttlSeconds?: number;
  renewIntervalMs?: number;
  /** The monotonic clock the lease is measured on locally (tests move it). */
  monotonicNow?: () => number;
}

export class LeaderLease {
  readonly name: string;
  readonly holder: string;
  private readonly ttlMs: number;
  private readonly now: () => number;
  private renewSentAt: number | null = null;
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<boolean> | null = null;
  private leading = false;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    private readonly options: LeaderLeaseOptions,
  ) {
    this.name = options.name ?? COLLECTION_LEASE;
    this.holder = options.holder;
    this.ttlMs = (options.ttlSeconds ?? LEADER_LEASE_SECONDS) * 1000;
    this.now = options.monotonicNow ?? (() => performance.now());
  }

  /** Tries at once, then renews (or tries again) every interval. */
  async start(): Promise<void> {
    if (this.timer) return;
    await this.tick().catch((error: unknown) => this.warn(error));
    this.timer = setInterval(
      () => void this.tick().catch((error: unknown) => this.warn(error)),
      this.options.renewIntervalMs ?? LEADER_RENEW_INTERVAL_MS,
    );
    this.timer.unref();
  }

  /** Whether this server may run the leader's work now. */
  isLeader(): boolean {
    if (this.db.kind !== "postgres") return true;
    return this.renewSentAt !== null && this.now() - this.renewSentAt < this.ttlMs;
  }

  /** One attempt to take or renew the lease; whether this server leads now. */
  tick(): Promise<boolean> {
    this.ticking ??= (async () => {
      const sentAt = this.now();
      const held = await tryLease(this.db, this.name, this.holder, this.ttlMs / 1000);
      // Another holder's lease runs: whatever this server held is over.
      this.renewSentAt = held ? sentAt : null;
      this.note(this.isLeader());
      return this.isLeader();
    })();
    const ticking = this.ticking;
    return ticking.finally(() => {
      if (this.ticking === ticking) this.ticking = null;
    });
  }

  /** Stops renewing; `release` (a clean stop) hands the lease over at once, else it runs out. */
  async stop(release = true): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.ticking?.catch(() => undefined);
    const held = this.renewSentAt !== null;
    this.renewSentAt = null;
    this.note(false);
    if (release && held) await releaseLease(this.db, this.name, this.holder);
  }

  private note(leading: boolean): void {
    if (leading === this.leading) return;
    this.leading = leading;
    this.log.info(
      { lease: this.name, holder: this.holder },
      leading ? "this server leads: it runs blob and volume collection" : "this server no longer leads",
    );
  }

  private warn(error: unknown): void {
    this.log.warn({ lease: this.name, err: (error as Error).message }, "the leader lease could not be renewed");
  }
}
