// ExecSandbox: runs a command synchronously through the runtime driver and records its
// outcome first, so an Idempotency-Key retry replays it (even across a restart) and never
// runs the command twice. Output kept for a replay is sealed under the organization's data
// key: it may hold secrets released with secret_environment.
import type { SandboxDefaults } from "../../config.js";
import { type ExecOutcome, RuntimeError, type SandboxRuntime } from "../../drivers/runtime/interface.js";
import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import { canonicalJson, sha256Hex } from "../../lib/hash.js";
import { newId } from "../../lib/ids.js";
import type { Logger } from "../../lib/logger.js";
import type { Queryable } from "../../store/db.js";
import type { DeferringDb } from "../../store/deferred-writes.js";
import type { GrantClaims } from "../hosts/grants.js";
import { type HostGate, hostUnavailable } from "../hosts/membership.js";
import { type NodeClient, NodeUnreachable } from "../hosts/node-client.js";
import { decodeExecTarget, NotOwner, type RoutedExecRequest } from "../hosts/node-wire.js";
import type { HostRouter } from "../hosts/router.js";
import type { Credential } from "../identity/credential.js";
import type { WarrenMetrics } from "../metrics/registry.js";
import type { SecretService } from "../secrets/service.js";
import type { ExecsInFlight } from "./execs-in-flight.js";
import { KnownOwners } from "./known-owners.js";
import { localRuntime } from "./local-runtime.js";
import * as repo from "./repo.js";
import { sandboxEventOf } from "./transitions.js";
import { checkArgv, isVisible, SANDBOX_ID } from "./view.js";

const ACTIVITY_HEARTBEAT_MS = 30_000;
/** How much longer than the command's timeout a routed exec waits for the owner's answer. */
const ROUTED_EXEC_SLACK_SECONDS = 60;

export interface ExecInput {
  cmd: string[];
  secret_environment?: { secret_name: string; variable_name: string }[] | undefined;
  timeout_seconds?: number | undefined;
}

export type ExecResponse =
  | { exit: number; stdout: string; stderr: string; truncated: boolean }
  | { timeout: Record<string, never>; stdout: string; stderr: string; truncated: boolean }
  | { indeterminate: Record<string, never>; stdout: string; stderr: string; truncated: boolean };

type Output = { stdout: string; stderr: string; truncated: boolean };

/** An exec's bookkeeping: its claimed record (under a key), and whether its end is written after the answer. */
interface ExecEnd {
  execId: string;
  recordId: string | null;
  afterAnswer: boolean;
}

/** What the exec service works with: the store and the router, never the sandbox service. */
export interface ExecServiceDeps {
  db: DeferringDb;
  clock: Clock;
  log: Logger;
  defaults: SandboxDefaults;
  secrets: SecretService;
  /** This server's runtime, for the execs of its own sandboxes (null: it runs none). */
  runtime: Pick<SandboxRuntime, "exec"> | null;
  /** The execs running in this process (the sandbox service's idle check reads them). */
  inFlight: ExecsInFlight<ExecResponse>;
  /** This server as a host: an exec runs only on the sandbox's own host, at its current epoch. */
  host?: HostGate | null;
  /** Routes an exec to the sandbox's owner (null: only this host's sandboxes run; others answer host_unavailable). */
  router?: HostRouter | null;
  /** An api replica (WARREN_ROLE=api): without a runtime, an exec here answers host_unavailable. */
  apiReplica?: boolean;
}

export class ExecService {
  private metrics: WarrenMetrics | null = null;
  private readonly db: DeferringDb;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly defaults: SandboxDefaults;
  private readonly secrets: SecretService;
  private readonly inFlight: ExecsInFlight<ExecResponse>;
  private readonly host: HostGate | null;
  private readonly router: HostRouter | null;
  /** Owners of other hosts' sandboxes this server routed execs to lately (routing only: known-owners.ts). */
  private readonly knownOwners = new KnownOwners();

  constructor(private readonly deps: ExecServiceDeps) {
    this.db = deps.db;
    this.clock = deps.clock;
    this.log = deps.log;
    this.defaults = deps.defaults;
    this.secrets = deps.secrets;
    this.inFlight = deps.inFlight;
    this.host = deps.host ?? null;
    this.router = deps.router ?? null;
  }

  /** Exec durations and outcomes go to these metrics (GET /metrics). */
  useMetrics(metrics: WarrenMetrics): void {
    this.metrics = metrics;
  }

  async exec(
    cred: Credential,
    id: string,
    input: ExecInput,
    idempotencyKey: string | undefined,
  ): Promise<ExecResponse> {
    checkArgv("cmd", input.cmd);
    if (!idempotencyKey && !input.secret_environment?.length) {
      const answer = await this.execOnKnownOwner(cred, id, input);
      if (answer) return answer;
    }
    const row = await this.loadTarget(cred, id);
    if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
    // The caller's own grants, before anything else: a replay of an exec that released a
    // secret returns its output, so it needs the grant as much as a new exec does.
    const env = await this.secrets.releaseForExec(cred, input.secret_environment ?? []);
    const requestHash = idempotencyKey ? sha256Hex(canonicalJson(input)) : "";
    if (idempotencyKey) {
      const replay = await this.replayExec(cred.orgId, row.id, idempotencyKey, requestHash, row);
      if (replay) return replay;
    }
    this.checkRunning(row);
    // Run by the sandbox's owner: here, or routed to its internal API (docs/hosts.md "Routing").
    // A non-owner never spawns and never records: the owner claims the key and records the outcome.
    const route = this.router ? await this.router.runtimeOf(row) : null;
    if (route?.remote) {
      if (row.host_id && row.host_epoch !== null)
        this.knownOwners.remember(row.id, { orgId: row.org_id, hostId: row.host_id, epoch: row.host_epoch });
      return this.execRouted(route.remote, row, input, env, idempotencyKey, requestHash);
    }
    return this.execHere(cred.orgId, row, input, env, idempotencyKey, requestHash);
  }

  /**
   * The sandbox a streaming exec may open (exec-stream.ts): ExecSandbox's checks of the
   * credential, the quarantine and the state, with no Idempotency-Key (a stream is not replayed).
   */
  async streamTarget(cred: Credential, id: string): Promise<repo.ExecTarget> {
    const row = await this.loadTarget(cred, id);
    if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
    this.checkRunning(row);
    return row;
  }

  /**
   * The owner's side of an exec routed to it (node-api.ts): the same checks on the row as
   * read now, then the exec as if it came in here. The caller's grants were checked (and its
   * secrets released) by the server it came through; the grant names the organization.
   */
  async execForRoute(claims: GrantClaims, request: RoutedExecRequest): Promise<ExecResponse> {
    const row = this.routedTarget(claims, request) ?? (await repo.getExecTarget(this.db, claims.sandboxId));
    if (!row || row.org_id !== claims.orgId) throw new AppError("not_found", "sandbox not found");
    // Routed here on what the routing server remembered of the owner (or on a row since moved):
    // it reads the row and routes again (nothing ran).
    if (row.host_id !== this.host?.id) throw new NotOwner();
    if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
    const input: ExecInput = { cmd: request.cmd, timeout_seconds: request.timeout_seconds };
    checkArgv("cmd", input.cmd);
    const key = request.idempotency_key;
    if (key) {
      const replay = await this.replayExec(row.org_id, row.id, key, request.request_hash);
      if (replay) return replay;
    }
    this.checkRunning(row);
    return this.execHere(row.org_id, row, input, request.env ?? {}, key, request.request_hash);
  }

  /**
   * The row the routing server read for an unkeyed exec, when it is this sandbox's and names
   * this host (else null: the owner reads it). Reading it again here would cost a store round
   * trip and close no gap: the grant fences another epoch of this host, a live row's host_id
   * changes only with one, and a stop or quarantine written after the routing server's read
   * races this exec as it races one that came in here between the read and the spawn. A keyed
   * exec reads the row again (its claim is a write anyway).
   */
  private routedTarget(claims: GrantClaims, request: RoutedExecRequest): repo.ExecTarget | null {
    if (request.idempotency_key || !this.host) return null;
    const target = decodeExecTarget(request.target);
    if (!target || target.id !== claims.sandboxId || target.org_id !== claims.orgId) return null;
    if (target.host_id !== this.host.id || target.host_epoch !== claims.epoch) return null;
    const finishedAt = target.finished_at === null ? null : new Date(target.finished_at);
    if (finishedAt && Number.isNaN(finishedAt.getTime())) return null;
    return {
      ...target,
      state: target.state as repo.ExecTarget["state"],
      desired_state: target.desired_state as repo.ExecTarget["desired_state"],
      finished_at: finishedAt,
    };
  }

  /**
   * The sandbox a credential may exec in (SandboxService.load's checks, on the columns an exec
   * needs). Read from the store every time: a quarantine or stop written through any server is seen at once.
   */
  private async loadTarget(cred: Credential, id: string): Promise<repo.ExecTarget> {
    const row = SANDBOX_ID.test(id) ? await repo.getExecTarget(this.db, id) : null;
    if (!row || row.org_id !== cred.orgId || !isVisible(row, this.clock.now(), this.defaults.retentionSeconds))
      throw notFound("sandbox");
    if (cred.sandbox && cred.sandbox.sandboxId !== row.id) throw notFound("sandbox");
    return row;
  }

  private runtime(): Pick<SandboxRuntime, "exec"> {
    return localRuntime(this.deps.runtime, this.deps.apiReplica ?? false);
  }

  /** Whether this server is the sandbox's host and may act on it now. */
  private actsHereOn(row: Pick<repo.ExecTarget, "host_id">): boolean {
    return this.host !== null && row.host_id === this.host.id && this.host.canAct();
  }

  private checkRunning(row: repo.ExecTarget): void {
    if (row.state !== "running" || row.desired_state !== "running") {
      throw new AppError(
        "sandbox_not_running",
        `the sandbox is ${row.state}; exec needs it running (it never wakes implicitly)`,
      );
    }
  }

  /**
   * An unkeyed exec without secrets sent at once to the owner this server found for the
   * sandbox less than KNOWN_OWNER_MS ago, which reads the row and makes every check of it
   * (known-owners.ts). Null when none is known, or when the owner ran nothing (not the owner
   * any more, another epoch, not reached): the exec then goes the normal way.
   */
  private async execOnKnownOwner(cred: Credential, id: string, input: ExecInput): Promise<ExecResponse | null> {
    if (!this.router || (cred.sandbox && cred.sandbox.sandboxId !== id)) return null;
    const known = this.knownOwners.get(id, cred.orgId);
    if (!known) return null;
    const sandbox = { id, org_id: cred.orgId, host_id: known.hostId, host_epoch: known.epoch };
    const route = await this.router.runtimeOf(sandbox).catch(() => null);
    if (!route?.remote) {
      this.knownOwners.forget(id);
      return null;
    }
    try {
      return await this.sendRouted(route.remote, input, {}, undefined, "", null);
    } catch (error) {
      const ranNothing =
        error instanceof NotOwner ||
        (error instanceof NodeUnreachable && !error.sent) ||
        (error instanceof AppError && error.code === "host_unavailable");
      if (!ranNothing) return this.routedFailure(route.remote, error, undefined);
      this.knownOwners.forget(id);
      return null;
    }
  }

  /** An exec on the owner's internal API: its answer, or host_unavailable when it may retry (indeterminate when not). */
  private async execRouted(
    remote: NodeClient,
    row: repo.ExecTarget,
    input: ExecInput,
    env: Record<string, string>,
    idempotencyKey: string | undefined,
    requestHash: string,
  ): Promise<ExecResponse> {
    try {
      return await this.sendRouted(remote, input, env, idempotencyKey, requestHash, idempotencyKey ? null : row);
    } catch (error) {
      // The row moved to another host since it was read here: nothing ran, the caller retries.
      if (error instanceof NotOwner) throw hostUnavailable();
      return this.routedFailure(remote, error, idempotencyKey);
    }
  }

  /** The routed request; `target` the row read here (the owner then skips its read: routedTarget). */
  private async sendRouted(
    remote: NodeClient,
    input: ExecInput,
    env: Record<string, string>,
    idempotencyKey: string | undefined,
    requestHash: string,
    target: repo.ExecTarget | null,
  ): Promise<ExecResponse> {
    const timeoutSeconds = input.timeout_seconds ?? this.defaults.execTimeoutSeconds;
    return (await remote.exec(
      {
        cmd: input.cmd,
        env,
        timeout_seconds: input.timeout_seconds,
        idempotency_key: idempotencyKey,
        request_hash: requestHash,
        ...(target ? { target: { ...target, finished_at: target.finished_at?.toISOString() ?? null } } : {}),
      },
      (timeoutSeconds + ROUTED_EXEC_SLACK_SECONDS) * 1000,
    )) as ExecResponse;
  }

  /** A routed exec that failed: host_unavailable when the caller may retry, indeterminate when it may have run. */
  private routedFailure(remote: NodeClient, error: unknown, idempotencyKey: string | undefined): ExecResponse {
    if (!(error instanceof NodeUnreachable)) throw error;
    this.log.warn({ host_id: remote.hostId, err: error.message, sent: error.sent }, "a routed exec lost its owner");
    // Not sent, or under a key (the owner's record decides, and a retry replays it): retry.
    if (!error.sent || idempotencyKey) throw hostUnavailable();
    return { indeterminate: {}, stdout: "", stderr: "", truncated: false };
  }

  private async execHere(
    orgId: string,
    row: repo.ExecTarget,
    input: ExecInput,
    env: Record<string, string>,
    idempotencyKey: string | undefined,
    requestHash: string,
  ): Promise<ExecResponse> {
    // Never spawned by a server that does not own the sandbox, and never recorded there: the
    // same key retried through the owner runs (docs/api-decisions.md, host_unavailable).
    this.runtime();
    if (!this.host || !this.actsHereOn(row)) throw hostUnavailable();
    const owner = this.host.owner();
    const execId = newId("exe");
    const startedAt = this.clock.now();
    // Only an exec under a key is recorded before it runs: its record is what a retry replays
    // (and what a restart marks indeterminate). Without a key nothing can ask for it again,
    // and the in-flight registration below is what an idle stop looks at.
    if (
      idempotencyKey &&
      !(await repo.claimExec(this.db, {
        id: execId,
        org_id: orgId,
        sandbox_id: row.id,
        idempotency_key: idempotencyKey,
        request_hash: requestHash,
        started_at: startedAt,
        host_id: owner.hostId,
        host_epoch: owner.epoch,
      }))
    ) {
      const replay = await this.replayExec(orgId, row.id, idempotencyKey, requestHash);
      if (replay) return replay;
      throw new AppError("operation_conflict", "a concurrent exec holds this Idempotency-Key");
    }
    const end: ExecEnd = { execId, recordId: idempotencyKey ? execId : null, afterAnswer: false };
    const running = this.runExec(row, end, input, env, startedAt);
    // Registered in the tick the command goes to the driver (no reconcile runs in between)
    // and deregistered only after its end, with the activity that pushes the idle deadline
    // out, is recorded: an idle stop never sees a gap.
    this.inFlight.began(execId, row.id, running);
    try {
      return await running;
    } finally {
      if (!end.afterAnswer) this.inFlight.ended(execId);
    }
  }

  /**
   * The answer a keyed record replays, or null when there is none to replay here: no record,
   * or (with `routable`, on a server that is not the owner) one still running on the owner,
   * whose internal API then waits for it.
   */
  private async replayExec(
    orgId: string,
    sandboxId: string,
    key: string,
    requestHash: string,
    routable?: Pick<repo.ExecTarget, "host_id">,
  ): Promise<ExecResponse | null> {
    const record = await repo.findExecByKey(this.db, orgId, sandboxId, key);
    if (!record) return null;
    if (record.request_hash !== requestHash) {
      throw new AppError("idempotency_conflict", "this Idempotency-Key was already used with a different exec request");
    }
    if (record.outcome === "running") {
      const inFlight = this.inFlight.get(record.id);
      if (inFlight) return inFlight;
      if (routable && this.router && !this.router.ownsHere(routable) && record.host_id === routable.host_id)
        return null;
      // Running on another host (or a process of this host this one may not speak for): its
      // outcome is that host's to record; the retry goes on once it has.
      if (!this.runsInThisProcess(record))
        throw hostUnavailable("the exec under this Idempotency-Key runs on another host; retry shortly");
      return { indeterminate: {}, stdout: "", stderr: "", truncated: false };
    }
    return execRecordResponse(record, await this.openOutput(record));
  }

  /** Whether a running record was claimed by this process's host epoch (so its end is this process's to write). */
  private runsInThisProcess(record: repo.ExecRow): boolean {
    if (!this.host) return false;
    const owner = this.host.owner();
    return record.host_id === owner.hostId && record.host_epoch === owner.epoch;
  }

  private async runExec(
    row: repo.ExecTarget,
    end: ExecEnd,
    input: ExecInput,
    env: Record<string, string>,
    startedAt: Date,
  ): Promise<ExecResponse> {
    const { recordId } = end;
    const driver = this.runtime();
    // A long command keeps the sandbox's activity fresh; a short one is recorded at its end.
    const heartbeat = setInterval(
      () => void repo.touchSandbox(this.db, row.id, this.clock.now(), "exec").catch(() => undefined),
      ACTIVITY_HEARTBEAT_MS,
    );
    let outcome: ExecOutcome;
    const began = performance.now();
    try {
      outcome = await driver.exec(row.id, {
        argv: input.cmd,
        env,
        timeoutSeconds: input.timeout_seconds ?? this.defaults.execTimeoutSeconds,
        maxOutputBytes: this.defaults.execOutputCapBytes,
      });
    } catch (error) {
      outcome = outcomeOfFailure(error);
    } finally {
      clearInterval(heartbeat);
    }
    this.metrics?.execEnded(outcome.kind, (performance.now() - began) / 1000);
    const finishedAt = this.clock.now();
    const durationMs = finishedAt.getTime() - startedAt.getTime();
    if (outcome.kind === "spawn_failed" || outcome.kind === "sandbox_stopped") {
      await this.recordEnd(row, finishedAt, input.cmd, { outcome: outcome.kind, duration_ms: durationMs }, end, {
        outcome: outcome.kind,
        message: outcome.kind === "spawn_failed" ? outcome.message : null,
      });
      throw execError(outcome.kind, outcome.kind === "spawn_failed" ? outcome.message : "");
    }
    if (outcome.kind === "indeterminate") {
      this.log.warn({ sandbox_id: row.id, exec_id: recordId, err: outcome.message }, "exec outcome indeterminate");
    }
    await this.recordEnd(
      row,
      finishedAt,
      input.cmd,
      {
        outcome: outcome.kind,
        ...(outcome.kind === "completed" ? { exit: outcome.exit } : {}),
        duration_ms: durationMs,
        stdout_bytes: Buffer.byteLength(outcome.stdout),
        stderr_bytes: Buffer.byteLength(outcome.stderr),
        truncated: outcome.truncated,
      },
      end,
      {
        outcome: outcome.kind,
        exit: outcome.kind === "completed" ? outcome.exit : null,
        // Only a replay (same Idempotency-Key) reads the output back: it is kept only under a key.
        ...(recordId ? await this.sealOutput(row.org_id, recordId, outcome) : {}),
        truncated: outcome.truncated,
      },
    );
    const output = { stdout: outcome.stdout, stderr: outcome.stderr, truncated: outcome.truncated };
    switch (outcome.kind) {
      case "completed":
        return { exit: outcome.exit, ...output };
      case "timeout":
        return { timeout: {}, ...output };
      case "indeterminate":
        return { indeterminate: {}, ...output };
    }
  }

  /**
   * The activity, the record's outcome (under a key) and the sandbox.exec event, in one
   * statement. Under a key it is written before the answer (a retry, even after a crash,
   * must find the outcome). Without one it is written just after the answer (DeferringDb:
   * no later store call of this process runs before it, and a normal shutdown waits for
   * it); the exec stays in flight until then, so an idle stop still waits for it.
   */
  private async recordEnd(
    row: repo.ExecTarget,
    at: Date,
    argv: string[],
    payload: Record<string, unknown>,
    end: ExecEnd,
    finish: repo.ExecFinish,
  ): Promise<void> {
    const write = (q: Queryable) =>
      repo.recordExecEnd(q, {
        sandboxId: row.id,
        at,
        record: end.recordId ? { id: end.recordId, finish } : null,
        event: sandboxEventOf(this.clock, row, "sandbox.exec", { argv, ...payload }),
      });
    if (end.recordId) {
      await write(this.db);
      return;
    }
    end.afterAnswer = true;
    this.db
      .defer(write)
      .catch((error: unknown) =>
        this.log.error(
          { sandbox_id: row.id, err: (error as Error).message, event: { argv, ...payload } },
          "the end of an exec (its activity and sandbox.exec event) could not be recorded",
        ),
      )
      .finally(() => this.inFlight.ended(end.execId));
  }

  private async sealOutput(orgId: string, execId: string, output: Output) {
    return {
      stdout: await this.secrets.sealData(orgId, Buffer.from(output.stdout, "utf8"), outputPurpose(execId, "stdout")),
      stderr: await this.secrets.sealData(orgId, Buffer.from(output.stderr, "utf8"), outputPurpose(execId, "stderr")),
    };
  }

  private async openOutput(record: repo.ExecRow): Promise<{ stdout: string; stderr: string }> {
    const read = async (stream: "stdout" | "stderr") => {
      const stored = record[stream];
      // Empty: no output kept (no key, or an outcome without output).
      if (!stored || stored.length === 0) return "";
      const opened = await this.secrets.openData(record.org_id, Buffer.from(stored), outputPurpose(record.id, stream));
      return opened.toString("utf8");
    };
    return { stdout: await read("stdout"), stderr: await read("stderr") };
  }
}

const outputPurpose = (execId: string, stream: "stdout" | "stderr") => `exec-output:${execId}:${stream}`;

/**
 * A driver error as an outcome. Only errors raised before anything was handed to the
 * sandbox (a malformed request, a sandbox the driver does not have) mean the command did not
 * run; any other may come after the command started, so it is indeterminate.
 */
export function outcomeOfFailure(error: unknown): ExecOutcome {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof RuntimeError && (error.code === "invalid_spec" || error.code === "not_found")) {
    return { kind: "spawn_failed", message };
  }
  return { kind: "indeterminate", stdout: "", stderr: "", truncated: false, message };
}

function execError(kind: "spawn_failed" | "sandbox_stopped", message: string): AppError {
  return kind === "spawn_failed"
    ? new AppError("spawn_failed", `the command could not be started${message ? `: ${message}` : ""}`)
    : new AppError("sandbox_stopped", "the sandbox stopped before the command ran");
}

/** The answer a record replays, given its output already opened. */
export function execRecordResponse(record: repo.ExecRow, output: { stdout: string; stderr: string }): ExecResponse {
  const withOutput = { ...output, truncated: record.truncated };
  switch (record.outcome) {
    case "completed":
      return { exit: record.exit_code ?? 0, ...withOutput };
    case "timeout":
      return { timeout: {}, ...withOutput };
    case "spawn_failed":
    case "sandbox_stopped":
      throw execError(record.outcome, record.message ?? "");
    default:
      return { indeterminate: {}, ...withOutput };
  }
}
