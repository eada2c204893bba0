// Starts host tools (mount, ip, nft, runc, the shim) from a small helper process instead of
// the server. Node forks to spawn, and a fork copies the page tables of the whole process:
// with the server's few hundred MB (PGlite, caches) that blocked the event loop for 20-40 ms
// per spawn on the 2-core host, several times per sandbox create. The helper is a plain
// Node process of ~45 MB, forked once; each spawn then costs the server one IPC message.
// When the helper cannot run, spawning falls back to this process.
import { type ChildProcess, fork } from "node:child_process";
import { projectFile } from "../../../lib/paths.js";

export interface SpawnResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

interface Reply {
  id: number;
  error?: string;
  code?: number | null;
  signal?: NodeJS.Signals | null;
  stdout?: string;
  stderr?: string;
  pid?: number;
}

interface Pending {
  resolve: (reply: Reply) => void;
  reject: (error: Error) => void;
}

const CHILD = projectFile("src/drivers/runtime/local/spawner-child.mjs");

export class SpawnerUnavailable extends Error {}

class Spawner {
  private child: ChildProcess | null = null;
  private broken = false;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();

  /** Starts the helper now (forking the server once), so later spawns do not wait for it. */
  warm(): void {
    this.ensure();
  }

  run(file: string, args: readonly string[], options: { cwd?: string; input?: string }): Promise<SpawnResult> {
    return this.request({ op: "run", file, args: [...args], ...options }).then((reply) => ({
      code: reply.code ?? null,
      signal: reply.signal ?? null,
      stdout: reply.stdout ?? "",
      stderr: reply.stderr ?? "",
    }));
  }

  /** Starts a process in its own session with no stdio, not waited for; resolves with its PID. */
  async detach(file: string, args: readonly string[], options: { cwd?: string }): Promise<number> {
    const reply = await this.request({ op: "detach", file, args: [...args], ...options });
    return reply.pid as number;
  }

  private ensure(): ChildProcess | null {
    if (this.child || this.broken) return this.child;
    let child: ChildProcess;
    try {
      child = fork(CHILD, [], {
        execArgv: [],
        serialization: "advanced",
        stdio: ["ignore", "ignore", "inherit", "ipc"],
      });
    } catch {
      this.broken = true;
      return null;
    }
    child.on("message", (reply: Reply) => {
      const waiter = this.pending.get(reply.id);
      if (!waiter) return;
      this.pending.delete(reply.id);
      this.unrefWhenIdle();
      if (reply.error !== undefined) waiter.reject(new Error(reply.error));
      else waiter.resolve(reply);
    });
    const gone = () => {
      if (this.child !== child) return;
      this.child = null;
      // Whatever was asked of it may or may not have run: the callers hear so.
      for (const waiter of this.pending.values()) waiter.reject(new Error("the spawner process ended"));
      this.pending.clear();
    };
    child.on("exit", gone);
    child.on("error", () => {
      this.broken = true;
      gone();
    });
    this.child = child;
    this.unrefWhenIdle();
    return child;
  }

  private request(message: Record<string, unknown>): Promise<Reply> {
    const child = this.ensure();
    if (!child?.connected) return Promise.reject(new SpawnerUnavailable("no spawner process"));
    const id = this.nextId++;
    return new Promise<Reply>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      child.ref();
      (child.channel as { ref?: () => void } | undefined)?.ref?.();
      child.send({ ...message, id }, (error) => {
        if (!error) return;
        this.pending.delete(id);
        this.unrefWhenIdle();
        reject(new SpawnerUnavailable(error.message));
      });
    });
  }

  /** An idle helper does not keep the server's event loop alive. */
  private unrefWhenIdle(): void {
    if (this.pending.size > 0 || !this.child) return;
    this.child.unref();
    (this.child.channel as { unref?: () => void } | undefined)?.unref?.();
  }
}

export const spawner = new Spawner();
