// Serializes work per sandbox: a kick runs the worker for that id unless it runs already, in
// which case one more pass follows. The service kicks it on writes; the reconciler is its
// worker. Created before both, so neither needs the other to exist first.
import type { ReconcileTrigger } from "../modules/sandboxes/service.js";

export class ReconcileQueue implements ReconcileTrigger {
  private readonly chains = new Map<string, Promise<void>>();
  private readonly again = new Set<string>();
  /** When each id waiting for a pass was first kicked (performance.now()), for the lag metric. */
  private readonly kickedAt = new Map<string, number>();
  private lagObserver: ((seconds: number) => void) | null = null;
  private worker: ((id: string) => Promise<void>) | null = null;
  private stopped = false;

  /** Work starts with the first kick after this; kicks before it are dropped (the start adopts every live sandbox). */
  setWorker(worker: (id: string) => Promise<void>): void {
    this.worker = worker;
  }

  /** Called with how long each pass waited between its kick and its start (reconcile lag). */
  observeLag(observer: (seconds: number) => void): void {
    this.lagObserver = observer;
  }

  kick(id: string): void {
    if (this.stopped || !this.worker) return;
    if (this.lagObserver && !this.kickedAt.has(id)) this.kickedAt.set(id, performance.now());
    if (this.chains.has(id)) {
      this.again.add(id);
      return;
    }
    const work = this.worker;
    const run = async () => {
      do {
        this.again.delete(id);
        const kicked = this.kickedAt.get(id);
        if (kicked !== undefined) {
          this.kickedAt.delete(id);
          this.lagObserver?.((performance.now() - kicked) / 1000);
        }
        // The worker logs its own failures; one must never wedge this id's chain.
        await work(id).catch(() => undefined);
      } while (this.again.has(id) && !this.stopped);
      this.chains.delete(id);
    };
    this.chains.set(id, run());
  }

  /** Resolves when no work is running or queued (tests and benchmarks). */
  async idle(): Promise<void> {
    while (this.chains.size > 0) await Promise.allSettled([...this.chains.values()]);
  }

  /** No new work; resolves when the running work has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.idle();
  }
}
