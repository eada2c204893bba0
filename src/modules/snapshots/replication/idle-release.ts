// When a long-lived thread lets go of the memory it keeps between jobs (the replication
// worker's pack buffers and read windows): never while a job runs, and `idleMs` after the
// last one ended unless another starts meanwhile.
export class IdleRelease {
  private running = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly idleMs: number,
    private readonly release: () => void,
  ) {}

  /** A job starts: nothing is let go while it runs. */
  started(): void {
    this.running++;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** A job ended (however): once none runs, the memory goes after `idleMs`. */
  ended(): void {
    if (this.running === 0) throw new Error("a job ended that never started");
    if (--this.running > 0) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.release();
    }, this.idleMs);
    this.timer.unref();
  }
}
