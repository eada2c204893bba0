// The real server (src/main.ts as `make run` bundles it) as a child process on the embedded
// store (PGlite in its data dir), for the crash tests: started, killed (SIGKILL is the crash)
// and started again on the same data dir and runtime root; plus a JSON client of its API.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { buildServerBundle, bundleFiles, PROJECT_DIR } from "../../scripts/server-bundle.js";
import { sweepRoot } from "../../src/drivers/runtime/local/sweep.js";
import { type RuntimeFixture, startRuntimeFixture } from "../../src/drivers/runtime/local/test-support.js";
import { freePort } from "./ports.js";

export type Json = Record<string, unknown>;

export interface ShownSandbox {
  id: string;
  state: string;
  state_reason?: { code: string; message: string };
  host_state?: string;
}

export interface Reply {
  status: number;
  body: Json;
  raw: string;
}

import { eventually } from "./eventually.js";

export { eventually, sleep } from "./eventually.js";

/** PIDs of live processes whose command line names `needle` (shims and runc calls of a root). */
export async function processesMentioning(needle: string): Promise<string[]> {
  const found: string[] = [];
  for (const pid of await readdir("/proc")) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    if (cmdline.includes(needle)) found.push(`${pid}: ${cmdline.replaceAll("\0", " ").trim()}`);
  }
  return found;
}

export interface ServerProcessOptions {
  dataDir: string;
  runtimeRoot: string;
  apiKey: string;
  /** Further WARREN_* settings. */
  env?: Record<string, string>;
  /** How long start() waits for /readyz (default 120 s). */
  readyTimeoutMs?: number;
  /** A command the server is started under, which execs it (e.g. `prlimit --nofile=1024:1024 --`). */
  launcher?: string[];
}

/** The server under test. build() once, then start() and stop() it as often as the test needs. */
export class ServerProcess {
  private child: ChildProcess | null = null;
  private bundle = "";
  port = 0;
  /** What the current (or last) process wrote to stdout and stderr. */
  log = "";

  constructor(private readonly options: ServerProcessOptions) {}

  /** Bundles the server into its own file (beside make run's) and picks a port. */
  async build(name: string): Promise<void> {
    this.port = await freePort();
    this.bundle = await buildServerBundle(path.join(PROJECT_DIR, "build", `${name}-${process.pid}.mjs`));
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Starts the server; `extraEnv` adds to (or overrides) the options' settings for this process only. */
  async start(extraEnv: Record<string, string> = {}, readyTimeoutMs = 240_000): Promise<void> {
    this.log = "";
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      DATABASE_URL: "",
      WARREN_DATA_DIR: this.options.dataDir,
      WARREN_RUNTIME_ROOT: this.options.runtimeRoot,
      WARREN_LISTEN: `127.0.0.1:${this.port}`,
      WARREN_BOOTSTRAP_API_KEY: this.options.apiKey,
      WARREN_LOG_LEVEL: "warn",
      ...this.options.env,
      ...extraEnv,
    };
    delete env.NODE_TEST_CONTEXT;
    const [command, ...args] = [
      ...(this.options.launcher ?? []),
      process.execPath,
      "--enable-source-maps",
      this.bundle,
    ];
    const child = spawn(command as string, args, {
      cwd: PROJECT_DIR,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child = child;
    child.stdout?.on("data", (chunk) => {
      this.log += String(chunk);
    });
    child.stderr?.on("data", (chunk) => {
      this.log += String(chunk);
    });
    let exited = false;
    child.once("exit", () => {
      exited = true;
    });
    const outcome = await eventually(
      "the server to be ready",
      async () => {
        // An exit ends the wait at once (a throw here would only count as "not yet").
        if (exited) return "exited";
        const res = await fetch(`http://127.0.0.1:${this.port}/readyz`);
        return res.status === 200 && "ready";
      },
      // PGlite's first start (initdb and migrations) takes seconds, minutes on a loaded host.
      this.options.readyTimeoutMs ?? readyTimeoutMs,
    ).catch((error: Error) => {
      throw new Error(`${error.message}\n${this.log}`);
    });
    if (outcome === "exited") throw new Error(`the server exited at start:\n${this.log}`);
  }

  /**
   * Stops reading the process's stdout (a log collector that hangs): once the socket's
   * buffers are full, every write the server makes to stdout would block or fail.
   */
  stallStdout(): void {
    const stdout = this.child?.stdout;
    if (!stdout) return;
    stdout.removeAllListeners("data");
    stdout.pause();
  }

  /** Resolves with the exit code (null: killed by a signal), or "running" after `timeoutMs`. */
  async exitWithin(timeoutMs: number): Promise<number | null | "running"> {
    const child = this.child;
    if (!child) return null;
    if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve("running"), timeoutMs);
      child.once("exit", (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
  }

  /** Sends `signal` without waiting for the exit (see exitWithin). */
  signal(signal: NodeJS.Signals): void {
    this.child?.kill(signal);
  }

  /** Signals the process and resolves with its exit code once it is gone (null when killed by a signal). */
  async stop(signal: NodeJS.Signals): Promise<number | null> {
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return null;
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    child.kill(signal);
    return exited;
  }

  /** Kills the process (if it runs) and removes the bundle. */
  async dispose(): Promise<void> {
    await this.stop("SIGKILL");
    if (this.bundle) await Promise.all(bundleFiles(this.bundle).map((file) => rm(file, { force: true })));
  }

  /** One request; a server that does not answer within `timeoutMs` fails it (a hang is a failure). */
  /** GetSandbox (with `query`, e.g. a wait); anything but 200 fails the test. */
  async sandbox(id: string, query = ""): Promise<ShownSandbox> {
    const res = await this.api("GET", `/v1/sandboxes/${id}${query}`);
    assert.equal(res.status, 200, res.raw);
    return res.body.sandbox as ShownSandbox;
  }

  /** Waits (long poll) until the sandbox shows `state`; fails the test otherwise. */
  async waitFor(id: string, state: string): Promise<ShownSandbox> {
    const sandbox = await this.sandbox(id, `?wait_state=${state}&wait_timeout_seconds=25`);
    assert.equal(sandbox.state, state, JSON.stringify(sandbox));
    return sandbox;
  }

  async api(
    method: string,
    url: string,
    body?: unknown,
    headers: Record<string, string> = {},
    timeoutMs = 90_000,
  ): Promise<Reply> {
    const { headers: _, ...reply } = await apiRequest(`http://127.0.0.1:${this.port}`, this.options.apiKey, {
      method,
      url,
      body,
      headers,
      timeoutMs,
    });
    return reply;
  }
}

/** What a crash test runs on: the test registry, a runtime root, a data dir and the server. */
export interface CrashRig {
  fixture: RuntimeFixture;
  root: string;
  dataDir: string;
  server: ServerProcess;
  /** Kills the server and removes everything (runs in after hooks, whatever failed). */
  cleanup(): Promise<void>;
}

/** Starts the registry, makes the root and data dir and builds the server (`env(busybox reference)` adds settings). */
export async function startCrashRig(
  name: string,
  apiKey: string,
  env: (busyboxRef: string) => Record<string, string>,
  serverOptions: Pick<ServerProcessOptions, "launcher"> = {},
): Promise<CrashRig> {
  const fixture = await startRuntimeFixture(`${name}-registry`);
  const root = await mkdtemp(path.join(os.tmpdir(), `warren-runtime-${name}-`));
  // sweepStaleTestState() removes the root if this process dies without its after hook.
  await writeFile(path.join(root, "owner.pid"), String(process.pid));
  const dataDir = await mkdtemp(path.join(os.tmpdir(), `warren-${name}-data-`));
  const server = new ServerProcess({
    dataDir,
    runtimeRoot: root,
    apiKey,
    env: env(fixture.busyboxRef),
    ...serverOptions,
  });
  const cleanup = async () => {
    await server.dispose();
    // A driver opened on the server's root destroys whatever a failure left behind.
    const report = await sweepRoot(root).catch((error: Error) => ({ errors: [error.message] }));
    if (report.errors.length > 0) process.stderr.write(`${name} sweep: ${report.errors.join("; ")}\n`);
    await rm(dataDir, { recursive: true, force: true });
    await fixture.cleanup();
  };
  try {
    await server.build(`warren-${name}-test`);
  } catch (error) {
    await cleanup();
    throw error;
  }
  return { fixture, root, dataDir, server, cleanup };
}

/** One JSON request to a Warren API at `base` with `apiKey` (headers may name another credential). */
export async function apiRequest(
  base: string,
  apiKey: string,
  request: { method: string; url: string; body?: unknown; headers: Record<string, string>; timeoutMs: number },
): Promise<Reply & { headers: Headers }> {
  const { method, url, body, headers, timeoutMs } = request;
  const res = await fetch(`${base}${url}`, {
    method,
    signal: AbortSignal.timeout(timeoutMs),
    headers: {
      authorization: `Bearer ${apiKey}`,
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const raw = await res.text();
  let parsed: Json = {};
  try {
    parsed = raw ? (JSON.parse(raw) as Json) : {};
  } catch {
    parsed = {};
  }
  return { status: res.status, body: parsed, raw, headers: res.headers };
}
