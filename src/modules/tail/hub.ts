// One subscription to the store's event notifications per server process, fanned out to
// the open tails by run id. The events table's trigger (migration 0013) notifies the run
// ids a transaction wrote to, at its commit, from any replica. While notifications are not
// flowing (no listener yet, a lost connection) `live` is false and tails poll instead.
import type { Logger } from "../../lib/logger.js";
import type { Db } from "../../store/db.js";

export const EVENTS_CHANNEL = "warren_events";

type Wake = () => void;

export class TailHub {
  private readonly byRun = new Map<string, Set<Wake>>();
  private listening: Promise<void> | null = null;
  private unlisten: (() => Promise<void>) | null = null;
  private closed = false;
  /** Notifications are flowing: a tail may wait for one instead of polling. */
  live = false;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
  ) {}

  /** Calls `wake` after each commit that wrote events of the run; returns the unsubscribe. */
  subscribe(runId: string, wake: Wake): () => void {
    this.startListening();
    let set = this.byRun.get(runId);
    if (!set) {
      set = new Set();
      this.byRun.set(runId, set);
    }
    set.add(wake);
    return () => {
      const current = this.byRun.get(runId);
      if (!current) return;
      current.delete(wake);
      if (current.size === 0) this.byRun.delete(runId);
    };
  }

  /** Tails subscribed on this server (a disconnected client's is gone). */
  get subscriptions(): number {
    let count = 0;
    for (const set of this.byRun.values()) count += set.size;
    return count;
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.listening;
    await this.unlisten?.();
    this.unlisten = null;
  }

  private startListening() {
    if (this.listening || this.closed || !this.db.listen) return;
    this.listening = this.db
      .listen(EVENTS_CHANNEL, {
        onPayload: (runId) => {
          for (const wake of this.byRun.get(runId) ?? []) wake();
        },
        onGap: (down) => {
          this.live = !down;
          this.wakeAll();
        },
      })
      .then(
        async (unlisten) => {
          if (this.closed) return unlisten();
          this.unlisten = unlisten;
          this.live = true;
          // Whatever committed while the subscription was starting.
          this.wakeAll();
        },
        (error: unknown) => {
          // Tails keep polling; the next subscribe tries again.
          this.log.warn({ err: (error as Error).message }, "run tail: no event notifications, polling");
          this.listening = null;
        },
      );
  }

  private wakeAll() {
    for (const set of this.byRun.values()) for (const wake of set) wake();
  }
}
