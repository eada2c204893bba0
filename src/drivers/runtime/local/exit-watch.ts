// Watching a sandbox run's end: the shim writes `run/exit.json` when the first process ends;
// an fs watcher on run/ turns that into the driver's exit events and wakes a stop() waiting
// for it.
import { type FSWatcher, watch } from "node:fs";
import type { ExitListener, SandboxObservation } from "../interface.js";
import type { Layout, SandboxPaths } from "./layout.js";
import { readExitRecord } from "./supervisor.js";

export class ExitWatch {
  private readonly watchers = new Map<string, FSWatcher>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly listeners = new Set<ExitListener>();
  private closed = false;

  /** `observeEnd`: what the ended run looks like (exit code, OOM, network) for the listeners. */
  constructor(
    private readonly layout: Layout,
    private readonly observeEnd: (id: string, paths: SandboxPaths) => Promise<SandboxObservation>,
  ) {}

  onExit(listener: ExitListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Watches run/ for exit.json until the current run's end is seen, then tells the listeners. */
  watch(id: string): void {
    if (this.closed || this.watchers.has(id)) return;
    const paths = this.layout.sandbox(id);
    let watcher: FSWatcher;
    try {
      watcher = watch(paths.runDir, (_event, filename) => {
        if (String(filename) === "exit.json") void check();
      });
    } catch {
      return;
    }
    watcher.on("error", () => this.unwatch(id));
    this.watchers.set(id, watcher);
    const check = async () => {
      if (this.watchers.get(id) !== watcher || !(await readExitRecord(paths))) return;
      this.unwatch(id);
      const observation = await this.observeEnd(id, paths);
      for (const resolve of this.waiters.get(id) ?? []) resolve();
      for (const listener of this.listeners) {
        try {
          listener(id, observation);
        } catch {
          // A listener's failure is its own.
        }
      }
    };
    void check();
  }

  unwatch(id: string): void {
    this.watchers.get(id)?.close();
    this.watchers.delete(id);
  }

  /** Resolves at the next end the watcher sees (watch() must be on); cancel when done waiting. */
  nextExit(id: string): { promise: Promise<void>; cancel: () => void } {
    let resolveExit: () => void = () => undefined;
    const promise = new Promise<void>((resolve) => {
      resolveExit = resolve;
    });
    const waiters = this.waiters.get(id) ?? new Set();
    waiters.add(resolveExit);
    this.waiters.set(id, waiters);
    return {
      promise,
      cancel: () => {
        waiters.delete(resolveExit);
        if (waiters.size === 0) this.waiters.delete(id);
      },
    };
  }

  close(): void {
    this.closed = true;
    for (const id of [...this.watchers.keys()]) this.unwatch(id);
  }
}
