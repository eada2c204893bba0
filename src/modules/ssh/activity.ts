// SSH sessions as sandbox activity (source `session`): a sandbox with an open session or
// forward is held awake (the reconciler asks `open()`), and its last activity is written when
// the first one opens, every HEARTBEAT_MS while any is open and when the last one closes,
// at most once per MIN_TOUCH_MS per sandbox (a burst of `ssh ... true` costs one write).

export const HEARTBEAT_MS = 30_000;
export const MIN_TOUCH_MS = 5_000;

export interface ActivityClock {
  nowMs(): number;
}

interface Entry {
  open: number;
  lastTouchMs: number;
  heartbeat: NodeJS.Timeout | null;
  /** A touch owed after the throttle (the last close came too soon after a touch). */
  trailing: NodeJS.Timeout | null;
}

export class SessionActivity {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly touch: (sandboxId: string) => Promise<void>,
    private readonly onError: (sandboxId: string, error: Error) => void,
    private readonly clock: ActivityClock = { nowMs: () => Date.now() },
  ) {}

  /** Whether a session or forward of this process is open in the sandbox. */
  isOpen(sandboxId: string): boolean {
    return (this.entries.get(sandboxId)?.open ?? 0) > 0;
  }

  /** A session or forward opened; call the returned function once when it closes. */
  begin(sandboxId: string): () => void {
    let entry = this.entries.get(sandboxId);
    if (!entry) {
      entry = { open: 0, lastTouchMs: Number.NEGATIVE_INFINITY, heartbeat: null, trailing: null };
      this.entries.set(sandboxId, entry);
    }
    const held = entry;
    held.open++;
    if (held.open === 1) {
      held.heartbeat = setInterval(() => this.record(sandboxId, held, true), HEARTBEAT_MS);
      held.heartbeat.unref();
    }
    this.record(sandboxId, held, false);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      held.open--;
      if (held.open > 0) return;
      if (held.heartbeat) clearInterval(held.heartbeat);
      held.heartbeat = null;
      this.record(sandboxId, held, false);
    };
  }

  /** Stops the timers (pending trailing touches are dropped). */
  close(): void {
    for (const entry of this.entries.values()) {
      if (entry.heartbeat) clearInterval(entry.heartbeat);
      if (entry.trailing) clearTimeout(entry.trailing);
    }
    this.entries.clear();
  }

  private record(sandboxId: string, entry: Entry, force: boolean): void {
    const now = this.clock.nowMs();
    const due = entry.lastTouchMs + MIN_TOUCH_MS;
    if (!force && now < due) {
      if (!entry.trailing) {
        entry.trailing = setTimeout(() => {
          entry.trailing = null;
          this.record(sandboxId, entry, true);
        }, due - now);
        entry.trailing.unref();
      }
      return;
    }
    if (entry.trailing) clearTimeout(entry.trailing);
    entry.trailing = null;
    entry.lastTouchMs = now;
    this.touch(sandboxId).catch((error: unknown) => this.onError(sandboxId, error as Error));
    if (entry.open === 0 && !entry.heartbeat) this.entries.delete(sandboxId);
  }
}
