// The execs (and routed sessions) running in this process, by id: a retry with the same key
// waits for the outcome, and an idle stop waits for the sandbox's execs. Shared by the exec
// service, which registers them, and the sandbox service, which answers the reconciler's
// idle check, so neither imports the other.
// `Outcome` is the exec service's answer (ExecResponse), a parameter so this file imports neither.
export class ExecsInFlight<Outcome = unknown> {
  private readonly running = new Map<string, { sandboxId: string; running: Promise<Outcome> }>();
  private readonly perSandbox = new Map<string, number>();

  ids(): string[] {
    return [...this.running.keys()];
  }

  /** Whether an exec of this process runs in the sandbox. */
  has(sandboxId: string): boolean {
    return (this.perSandbox.get(sandboxId) ?? 0) > 0;
  }

  get(execId: string): Promise<Outcome> | undefined {
    return this.running.get(execId)?.running;
  }

  /** Registers an exec before its command is handed to the driver; ended() after its end is recorded. */
  began(execId: string, sandboxId: string, running: Promise<Outcome>): void {
    this.running.set(execId, { sandboxId, running });
    this.perSandbox.set(sandboxId, (this.perSandbox.get(sandboxId) ?? 0) + 1);
  }

  ended(execId: string): void {
    const entry = this.running.get(execId);
    if (!entry) return;
    this.running.delete(execId);
    const left = (this.perSandbox.get(entry.sandboxId) ?? 1) - 1;
    if (left > 0) this.perSandbox.set(entry.sandboxId, left);
    else this.perSandbox.delete(entry.sandboxId);
  }
}
