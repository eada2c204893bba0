// Sandboxes: `warren.sandboxes.create(...)` returns a `Sandbox` handle (wait, exec, stop,
// wake, snapshot, update, delete, `files` (files.ts), `await using` deletes it).
import { SandboxStateError, WarrenError } from "./errors.js";
import { ExecStream, type ExecStreamOptions, streamStart } from "./exec-stream.js";
import { SandboxFiles } from "./files.js";
import { pages } from "./pagination.js";
import { SandboxProcesses } from "./processes.js";
import type { CallOptions, Transport } from "./transport.js";
import type {
  Body,
  CreateSandboxBody,
  Ok,
  Query,
  SandboxRecord,
  SandboxState,
  SnapshotRecord,
  UpdateSandboxBody,
} from "./types.js";

/** The three outcomes of an exec (contract 4.4), told apart by `kind`. */
export type ExecResult =
  | { kind: "completed"; exit: number; stdout: string; stderr: string; truncated: boolean }
  | { kind: "timed_out"; stdout: string; stderr: string; truncated: boolean }
  | { kind: "indeterminate"; stdout: string; stderr: string; truncated: boolean };

export interface ExecOptions extends CallOptions {
  timeoutSeconds?: number;
  secretEnvironment?: { secret_name: string; variable_name: string }[];
  /** Called with the command's stdout (and stderr) once it has finished (execStream streams them). */
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
}

export interface WaitOptions {
  signal?: AbortSignal;
  /** Give up after this long (default 300 s); 0: no limit. */
  timeoutSeconds?: number;
  /** Called with every state seen while waiting. */
  onState?: (state: SandboxState) => void;
  /**
   * Called with the image pull's progress (bytes of the layers) while the sandbox is
   * materializing; the wait then polls every second instead of long-polling.
   */
  onProgress?: (progress: NonNullable<SandboxRecord["progress"]>) => void;
}

export interface SnapshotOptions extends CallOptions {
  name?: string;
  waitRemote?: boolean;
  waitTimeoutSeconds?: number;
}

/** States a sandbox never leaves by itself towards running. */
const DEAD_STATES = new Set<string>(["failed", "terminated", "terminating", "quarantined"]);
const WAIT_STEP_SECONDS = 25;

export function execResult(raw: Ok<"ExecSandbox">): ExecResult {
  const base = { stdout: raw.stdout, stderr: raw.stderr, truncated: raw.truncated };
  if ("exit" in raw) return { kind: "completed", exit: raw.exit, ...base };
  if ("timeout" in raw) return { kind: "timed_out", ...base };
  return { kind: "indeterminate", ...base };
}

const path = (id: string) => `/v1/sandboxes/${encodeURIComponent(id)}`;

export class Sandbox {
  /** The record as last read (create, get, list, waitUntil and refresh update it). */
  record: SandboxRecord | undefined;
  /** The ambient run receiving this sandbox's telemetry (known after create). */
  runId: string | undefined;
  readonly files: SandboxFiles;
  /** Background processes (processes.ts): start, get by id, list. */
  readonly processes: SandboxProcesses;

  constructor(
    private readonly transport: Transport,
    readonly id: string,
    record?: SandboxRecord,
  ) {
    this.record = record;
    this.files = new SandboxFiles(transport, id);
    this.processes = new SandboxProcesses(transport, id);
  }

  get state(): SandboxState | undefined {
    return this.record?.state;
  }

  async refresh(options: CallOptions = {}): Promise<SandboxRecord> {
    const res = await this.transport.json<Ok<"GetSandbox">>("GET", path(this.id), { signal: options.signal });
    this.record = res.sandbox;
    return res.sandbox;
  }

  /**
   * Long-polls GetSandbox until the sandbox is in `state`. Throws SandboxStateError when it
   * reaches a state it will not leave towards `state` (failed, terminated, ...).
   */
  async waitUntil(state: SandboxState, options: WaitOptions = {}): Promise<SandboxRecord> {
    const limitMs = (options.timeoutSeconds ?? 300) * 1000;
    const deadline = limitMs > 0 ? Date.now() + limitMs : Number.POSITIVE_INFINITY;
    let last: string | undefined;
    for (;;) {
      const left = Math.ceil((deadline - Date.now()) / 1000);
      const polling =
        options.onProgress && (last === undefined || last === "materializing") && state !== "materializing";
      const step = Math.max(1, Math.min(polling ? 1 : WAIT_STEP_SECONDS, left));
      const res = await this.transport.json<Ok<"GetSandbox">>("GET", path(this.id), {
        query: { wait_state: state, wait_timeout_seconds: step },
        signal: options.signal,
      });
      this.record = res.sandbox;
      const seen = res.sandbox.state;
      if (seen !== last) options.onState?.(seen);
      if (res.sandbox.progress) options.onProgress?.(res.sandbox.progress);
      last = seen;
      if (seen === state) return res.sandbox;
      if (DEAD_STATES.has(seen) && !DEAD_STATES.has(state)) {
        const reason = res.sandbox.state_reason;
        throw new SandboxStateError(
          this.id,
          seen,
          `sandbox ${this.id} is ${seen}${reason ? `: ${reason.code}: ${reason.message}` : ""}`,
          reason,
        );
      }
      if (Date.now() >= deadline) {
        throw new SandboxStateError(
          this.id,
          seen,
          `sandbox ${this.id} is still ${seen} after ${limitMs / 1000} s`,
          undefined,
          "sandbox_wait_timeout",
        );
      }
    }
  }

  /** Runs `cmd` (argv, not a shell line) and returns its outcome; one Idempotency-Key covers every retry. */
  async exec(cmd: string[], options: ExecOptions = {}): Promise<ExecResult> {
    const body: Body<"ExecSandbox"> = { cmd };
    if (options.timeoutSeconds !== undefined) body.timeout_seconds = options.timeoutSeconds;
    if (options.secretEnvironment) body.secret_environment = options.secretEnvironment;
    const raw = await this.transport.json<Ok<"ExecSandbox">>("POST", `${path(this.id)}:exec`, {
      body,
      signal: options.signal,
      idempotencyKey: options.idempotencyKey,
    });
    const result = execResult(raw);
    if (result.stdout) options.onStdout?.(result.stdout);
    if (result.stderr) options.onStderr?.(result.stderr);
    return result;
  }

  /**
   * Runs `cmd` over the streaming exec (a WebSocket): output as it comes, stdin, an optional
   * terminal; `wait()` gives the end. Not retried: a stream that broke may have run.
   */
  execStream(cmd: string[], options: ExecStreamOptions = {}): ExecStream {
    const url = this.transport.url(`${path(this.id)}/exec/stream`).replace(/^http/, "ws");
    const open = this.transport.openSocket;
    if (!open) throw new WarrenError("this client has no WebSocket (pass openSocket to new Warren())");
    return new ExecStream(open, url, this.transport.apiKey, streamStart(cmd, options), options);
  }

  async update(body: UpdateSandboxBody, options: CallOptions = {}): Promise<Ok<"UpdateSandbox">> {
    return this.transport.json("PATCH", path(this.id), { body, ...options });
  }

  /** Asks for `stopped`; `wait` (default true) waits until it is. */
  async stop(options: CallOptions & { wait?: boolean } = {}): Promise<void> {
    await this.update({ state: "stopped" }, options);
    if (options.wait !== false) await this.waitUntil("stopped", { signal: options.signal as AbortSignal });
  }

  /** Asks for `running` again; `wait` (default true) waits until it is. */
  async wake(options: CallOptions & { wait?: boolean } = {}): Promise<void> {
    await this.update({ state: "running" }, options);
    if (options.wait !== false) await this.waitUntil("running", { signal: options.signal as AbortSignal });
  }

  async snapshot(options: SnapshotOptions = {}): Promise<Ok<"CreateSandboxSnapshot">> {
    const body: Body<"CreateSandboxSnapshot"> = {};
    if (options.name !== undefined) body.name = options.name;
    if (options.waitRemote !== undefined) body.wait_remote = options.waitRemote;
    if (options.waitTimeoutSeconds !== undefined) body.wait_timeout_seconds = options.waitTimeoutSeconds;
    return this.transport.json("POST", `${path(this.id)}:snapshot`, {
      body,
      signal: options.signal,
      idempotencyKey: options.idempotencyKey,
    });
  }

  /** A short-lived token that logs in to the SSH gateway as this sandbox (the SSH password). */
  async sshToken(options: CallOptions & { ttlSeconds?: number } = {}): Promise<Ok<"IssueSshToken">> {
    const body: Body<"IssueSshToken"> = {};
    if (options.ttlSeconds !== undefined) body.ttl_seconds = options.ttlSeconds;
    return this.transport.json("POST", `${path(this.id)}:issueSshToken`, { body, signal: options.signal });
  }

  /** A short-lived token that opens one port endpoint of this sandbox (header, query or cookie). */
  async endpointToken(
    port: number,
    options: CallOptions & { ttlSeconds?: number } = {},
  ): Promise<Ok<"IssueEndpointToken">> {
    const body: Body<"IssueEndpointToken"> = {};
    if (options.ttlSeconds !== undefined) body.ttl_seconds = options.ttlSeconds;
    return this.transport.json("POST", `${path(this.id)}/endpoints/${port}:token`, { body, signal: options.signal });
  }

  /** Deletes the sandbox (asynchronous on the server: it reads `terminating` until it is gone). */
  async delete(options: CallOptions = {}): Promise<void> {
    await this.transport.json("DELETE", path(this.id), options);
  }

  /** `await using sbx = await warren.sandboxes.create(...)` deletes it at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete();
    } catch (error) {
      if ((error as { code?: string }).code !== "not_found") throw error;
    }
  }
}

export interface CreateOptions extends CallOptions {
  /** Wait until the sandbox is running (default true); `onState` sees the states on the way. */
  wait?: boolean;
  onState?: (state: SandboxState) => void;
  /** See WaitOptions.onProgress. */
  onProgress?: WaitOptions["onProgress"];
  waitTimeoutSeconds?: number;
}

export class Sandboxes {
  constructor(private readonly transport: Transport) {}

  /** Creates a sandbox and (unless `wait: false`) waits until it is running. */
  async create(body: CreateSandboxBody = {}, options: CreateOptions = {}): Promise<Sandbox> {
    const created = await this.transport.json<Ok<"CreateSandbox">>("POST", "/v1/sandboxes", {
      body,
      signal: options.signal,
      idempotencyKey: options.idempotencyKey,
    });
    const sandbox = new Sandbox(this.transport, created.id);
    sandbox.runId = created.run_id;
    if (options.wait === false) await sandbox.refresh({ signal: options.signal });
    else
      await sandbox.waitUntil("running", {
        ...(options.signal ? { signal: options.signal } : {}),
        ...(options.onState ? { onState: options.onState } : {}),
        ...(options.onProgress ? { onProgress: options.onProgress } : {}),
        ...(options.waitTimeoutSeconds !== undefined ? { timeoutSeconds: options.waitTimeoutSeconds } : {}),
      });
    return sandbox;
  }

  /** Restores `snapshotId` into a new sandbox (durable storage by default, as the contract says). */
  async fromSnapshot(
    snapshotId: string,
    body: Omit<CreateSandboxBody, "snapshot_id" | "image"> = {},
    options: CreateOptions = {},
  ): Promise<Sandbox> {
    return this.create({ ...body, snapshot_id: snapshotId } as CreateSandboxBody, options);
  }

  /** A sandbox by id, or by name within the credential's project. */
  async get(idOrName: string, options: CallOptions = {}): Promise<Sandbox> {
    const res = await this.transport.json<Ok<"GetSandbox">>("GET", path(idOrName), { signal: options.signal });
    return new Sandbox(this.transport, res.sandbox.id, res.sandbox);
  }

  /** Every sandbox, newest first, fetching pages as the iteration goes. */
  async *list(query: Omit<Query<"ListSandboxes">, "page_token"> = {}, options: CallOptions = {}) {
    for await (const record of pages<Ok<"ListSandboxes">, SandboxRecord>(
      this.transport,
      "/v1/sandboxes",
      query,
      (page) => page.sandboxes,
      options.signal,
    )) {
      yield new Sandbox(this.transport, record.id, record);
    }
  }
}

export class Snapshots {
  constructor(private readonly transport: Transport) {}

  list(query: Omit<Query<"ListSandboxSnapshots">, "page_token"> = {}, options: CallOptions = {}) {
    return pages<Ok<"ListSandboxSnapshots">, SnapshotRecord>(
      this.transport,
      "/v1/snapshots",
      query,
      (page) => page.snapshots,
      options.signal,
    );
  }

  async delete(id: string, options: CallOptions = {}): Promise<void> {
    await this.transport.json("DELETE", `/v1/snapshots/${encodeURIComponent(id)}`, options);
  }
}
