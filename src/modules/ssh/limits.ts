// Bounds on the SSH gateway's authentication (pure, so it is tested without sockets): failed
// password attempts per client address in a sliding window. A client past the limit is
// refused without its password being looked at until its oldest failure leaves the window.

export interface FailureLimiterOptions {
  /** Failures allowed per address within windowMs. */
  maxFailures: number;
  windowMs: number;
  /** Addresses tracked at once; past it the oldest entry is dropped (the map never grows unbounded). */
  maxAddresses: number;
}

export const DEFAULT_FAILURE_LIMITS: FailureLimiterOptions = {
  maxFailures: 10,
  windowMs: 60_000,
  maxAddresses: 10_000,
};

export class FailureLimiter {
  /** Failure times per address, oldest first; a Map keeps insertion order for eviction. */
  private readonly failures = new Map<string, number[]>();

  constructor(private readonly options: FailureLimiterOptions = DEFAULT_FAILURE_LIMITS) {}

  /** Whether `address` may try a credential at `nowMs`. */
  allowed(address: string, nowMs: number): boolean {
    const times = this.recent(address, nowMs);
    return times.length < this.options.maxFailures;
  }

  recordFailure(address: string, nowMs: number): void {
    const times = this.recent(address, nowMs);
    times.push(nowMs);
    this.failures.delete(address);
    this.failures.set(address, times);
    if (this.failures.size > this.options.maxAddresses) {
      const oldest = this.failures.keys().next().value;
      if (oldest !== undefined) this.failures.delete(oldest);
    }
  }

  /** A success does not erase failures: a guesser holding one valid key gains no extra tries. */
  get trackedAddresses(): number {
    return this.failures.size;
  }

  private recent(address: string, nowMs: number): number[] {
    const times = this.failures.get(address) ?? [];
    const from = nowMs - this.options.windowMs;
    let drop = 0;
    while (drop < times.length && (times[drop] as number) <= from) drop++;
    if (drop > 0) times.splice(0, drop);
    if (times.length === 0) this.failures.delete(address);
    return times;
  }
}

/** The environment an SSH client may set (`env` requests): locale only; everything else is ignored. */
export function allowedClientEnv(name: string, value: string): boolean {
  return (
    /^(LANG|LANGUAGE|LC_[A-Z]{1,20})$/.test(name) && Buffer.byteLength(value) <= 256 && /^[\x20-\x7e]*$/.test(value)
  );
}

/** A `pty-req` terminal name as passed on in TERM: short, printable, no spaces; else a default. */
export function terminalName(term: string | undefined): string {
  return term && /^[A-Za-z0-9._+-]{1,64}$/.test(term) ? term : "xterm";
}
