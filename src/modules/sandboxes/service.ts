// SandboxService: the API side of sandboxes. Mutations write the desired state and return
// `requested` at once; the reconciler (controllers/sandbox-reconciler.ts) drives the runtime
// towards it and records what it observes. Exec is exec-service.ts.
import { randomBytes } from "node:crypto";
import type { SandboxDefaults } from "../../config.js";
import type { HostCapacity, HostStorage, SandboxIdPool, SandboxRuntime } from "../../drivers/runtime/interface.js";
import type { Clock } from "../../lib/clock.js";
import { AppError, notFound } from "../../lib/errors.js";
import type { Logger } from "../../lib/logger.js";
import { decodeCursor, encodeCursor } from "../../lib/page-token.js";
import type { Db, Queryable } from "../../store/db.js";
import { hostStateReader } from "../hosts/edges.js";
import { notifyOwner } from "../hosts/kicks.js";
import { type HostGate, hostUnavailable } from "../hosts/membership.js";
import type { HostRouter, Route } from "../hosts/router.js";
import { type Credential, requireOrgScoped } from "../identity/credential.js";
import type { ProjectService } from "../projects/service.js";
import type { RunService } from "../runs/service.js";
import type { QuotaService } from "../usage/service.js";
import { checkMountTargets } from "../volumes/mounts.js";
import { AllocationView } from "./allocation-view.js";
import type { ExecsInFlight } from "./execs-in-flight.js";
import { admitOnHost, type HostAdmissionRequest, refuseBeyondHost } from "./host-admission.js";
import { applyHostChange, HOST_CLAIM_SECONDS, type HostChange } from "./host-changes.js";
import { isPlacementRefusal, placeAndAdmit } from "./host-placement.js";
import { canStillReach, isFinished, STABLE_STATES, stateDeadline } from "./lifecycle.js";
import { localRuntime } from "./local-runtime.js";
import { RemoteWarmPools } from "./remote-pool.js";
import * as repo from "./repo.js";
import type { CreateSandboxBody, SandboxJson, SandboxState, UpdateSandboxBody } from "./schemas.js";
import type { SandboxTransitions } from "./transitions.js";
import {
  checkArgv,
  checkImageReference,
  checkMetadata,
  checkPorts,
  isVisible,
  receiptView,
  restoredCapacity,
  SANDBOX_ID,
  sandboxView,
} from "./view.js";

const unsupported = (message: string) => new AppError("unsupported_capability", message);

export function newSandboxId(): string {
  return `sbx-${randomBytes(20).toString("hex")}`;
}

/** What sandboxes need of snapshots (SnapshotService; set once both exist). */
export interface SnapshotSource {
  forRestore(
    q: Queryable,
    cred: Credential,
    snapshotId: string,
  ): Promise<{
    id: string;
    image: string;
    lineagePath: string;
    workspaceCapacityGiB: number | null;
    volumes: repo.PinnedVolumeRow[];
    /** The host that took it (placement prefers it: its local copy is there). */
    hostId: string | null;
  }>;
  hasUndurable(q: Queryable, sandboxId: string): Promise<boolean>;
}

/** What sandboxes need of volumes (VolumeService): the current version of each, pinned. */
export interface VolumeSource {
  pin(
    q: Queryable,
    cred: Credential,
    mounts: { volume_id: string; target_path: string }[],
  ): Promise<repo.PinnedVolumeRow[]>;
}

/** Admits a create's secret bindings (the secrets module, with the deployment's model-gateway host). */
export interface SecretBinder {
  bind(cred: Credential, names: string[]): Promise<repo.SecretBindingRow[]>;
}

/** A sandbox's stored row, as other modules see it (they reach it through this service). */
export type SandboxRecord = repo.SandboxRow;

/** The session plane's side of a sandbox's view: its `endpoints` (implemented by modules/sessions). */
export interface EndpointSource {
  endpointsOf(row: SandboxRecord): Promise<{ port: number; url: string }[]>;
}

/** What the reconciler is told: which sandbox to look at now. */
/** What the sandbox service knows of the SSH gateway (modules/ssh/index.ts). */
export interface SshGatewayLink {
  endpoint: { host: string; port: number };
  hasOpenSession(sandboxId: string): boolean;
}

export interface ReconcileTrigger {
  kick(id: string): void;
}

/** A wait woken by an event of the sandbox's run re-reads the row at most this often (waitFor). */
const RUN_EVENT_REREAD_MS = 200;

/** Calls `wake` after each commit, on any server, that wrote events of the run (the tail hub). */
export interface RunEventSource {
  subscribe(runId: string, wake: () => void): () => void;
}

/**
 * The collaborators built after the sandbox service (most of them take it): the composition
 * root (container.ts) fills them in once they exist, before anything serves; null where the
 * deployment has none.
 */
export interface SandboxLinks {
  snapshots: SnapshotSource | null;
  volumes: VolumeSource | null;
  /** The session plane's endpoints (modules/sessions). */
  endpoints: EndpointSource | null;
  /** The SSH gateway of this process, once it listens (modules/ssh/index.ts): running sandboxes then carry `ssh`, and an open session holds off an idle stop. */
  ssh: SshGatewayLink | null;
}

/** What the sandbox service needs of this server's own runtime. */
type LocalRuntime = Pick<SandboxRuntime, "growWorkspace" | "setNetwork"> &
  Pick<HostStorage, "measureStorage"> &
  Pick<HostCapacity, "hostCompute">;

/** Everything the sandbox service works with, in one object (no setters). */
export interface SandboxServiceDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  defaults: SandboxDefaults;
  /** This server's runtime (null: it runs no sandboxes), with the host facets create and growth admit against. */
  runtime: LocalRuntime | null;
  projects: ProjectService;
  runs: RunService;
  quotas: QuotaService;
  transitions: SandboxTransitions;
  trigger: ReconcileTrigger;
  /** The local driver's warm pool, whose members a create of their shape takes. */
  pool?: SandboxIdPool | null;
  /** This server as a host (the owner of what is created through it until placement chooses one). */
  host?: HostGate | null;
  /** The execs and routed sessions running in this process (exec-service.ts registers them). */
  execs: Pick<ExecsInFlight, "has" | "ids">;
  /** Where a host change (growth, network switch) of a sandbox another host owns is sent (docs/hosts.md "Routing"). */
  router?: HostRouter | null;
  /** Turns on `secrets` bindings at create (the egress gateway injects them); without it they are 422. */
  secretBinder?: SecretBinder | null;
  /** Wakes long polls on the events of a sandbox's run, whichever server wrote them (the tail hub). */
  runEvents?: RunEventSource | null;
  /**
   * This server is an `api` replica (WARREN_ROLE=api): it runs no sandboxes, and what needs a
   * runtime of its own (a create until placement chooses a host in it) answers 503 `host_unavailable`.
   */
  apiReplica?: boolean;
  links: SandboxLinks;
}

export class SandboxService {
  private readonly db: Db;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly defaults: SandboxDefaults;
  private readonly driver: LocalRuntime | null;
  private readonly projects: ProjectService;
  private readonly runs: RunService;
  private readonly quotas: QuotaService;
  private readonly transitions: SandboxTransitions;
  private readonly trigger: ReconcileTrigger;
  private readonly pool: SandboxIdPool | null;
  private readonly host: HostGate | null;
  private readonly execs: Pick<ExecsInFlight, "has" | "ids">;
  private readonly router: HostRouter | null;
  private readonly secretBinder: SecretBinder | null;
  private readonly runEvents: RunEventSource | null;
  private readonly apiReplica: boolean;
  private readonly links: SandboxLinks;
  /** The hosts' allocation placement ranks by, reused between this server's creates (allocation-view.ts). */
  private readonly allocationView = new AllocationView();
  private readonly remotePools: RemoteWarmPools | null;
  /**
   * How far the image pull of each sandbox this process is materializing has come, set by
   * the reconciler; kept in memory only (no store write per chunk), read with the sandbox.
   */
  private readonly materializeProgress = new Map<string, NonNullable<SandboxJson["progress"]>>();

  constructor(deps: SandboxServiceDeps) {
    this.db = deps.db;
    this.clock = deps.clock;
    this.log = deps.log;
    this.defaults = deps.defaults;
    this.driver = deps.runtime;
    this.projects = deps.projects;
    this.runs = deps.runs;
    this.quotas = deps.quotas;
    this.transitions = deps.transitions;
    this.trigger = deps.trigger;
    this.pool = deps.pool ?? null;
    this.host = deps.host ?? null;
    this.execs = deps.execs;
    this.router = deps.router ?? null;
    this.secretBinder = deps.secretBinder ?? null;
    this.runEvents = deps.runEvents ?? null;
    this.apiReplica = deps.apiReplica ?? false;
    // Another host's warm pool serves a create when this server's cannot: always for an api
    // replica (it has none), under spread placement for a host (local_first keeps creates here).
    this.remotePools =
      this.router && (this.apiReplica || deps.defaults.placement === "spread")
        ? new RemoteWarmPools(deps.db, this.router, this.host)
        : null;
    this.links = deps.links;
    const quotas = deps.quotas;
    quotas.registerMeter("sandboxes.running", (q, orgId) => repo.countRunning(q, orgId));
    quotas.registerMeter("sandboxes.total", (q, orgId) => repo.countTotal(q, orgId));
    quotas.registerMeter("sandboxes.workspace_capacity_gib", (q, orgId) => repo.sumWorkspaceGiB(q, orgId));
  }

  /** A sandbox's secret bindings and organization, for the egress gateway (which checks the org). */
  async secretBindingsOf(id: string): Promise<{ orgId: string; bindings: repo.SecretBindingRow[] } | null> {
    const row = SANDBOX_ID.test(id) ? await repo.getSecretBindings(this.db, id) : null;
    return row ? { orgId: row.org_id, bindings: row.secret_bindings } : null;
  }

  /** The reconciler's report of a materializing sandbox's image pull; null when it is over. */
  reportProgress(id: string, progress: { bytesDone: number; bytesTotal: number } | null): void {
    if (!progress) this.materializeProgress.delete(id);
    else {
      this.materializeProgress.set(id, {
        phase: "pulling_image",
        bytes_done: progress.bytesDone,
        bytes_total: progress.bytesTotal,
      });
    }
  }

  private hostStatesOf: (() => Promise<Map<string, string>>) | null = null;
  private hostStates(): Promise<Map<string, string>> {
    this.hostStatesOf ??= hostStateReader(this.db);
    return this.hostStatesOf();
  }

  /** The wire view with the endpoints that serve now (the session plane's, when one runs). */
  private async view(row: repo.SandboxRow): Promise<SandboxJson> {
    const view = sandboxView(
      row,
      this.links.endpoints ? await this.links.endpoints.endpointsOf(row) : [],
      this.links.ssh?.endpoint ?? null,
    );
    const progress = row.state === "materializing" ? this.materializeProgress.get(row.id) : undefined;
    if (progress) view.progress = { ...progress };
    if (row.host_id && !isFinished(row.state)) {
      const state = (await this.hostStates()).get(row.host_id);
      if (state && state !== "joining") view.host_state = state as NonNullable<SandboxJson["host_state"]>;
    }
    return view;
  }

  /**
   * The sandbox a session-plane request names, whoever asks (the plane checks the
   * credential's organization against it); null when unknown or past retention.
   */
  async sessionTarget(id: string): Promise<repo.SandboxRow | null> {
    const row = SANDBOX_ID.test(id) ? await repo.getSandbox(this.db, id) : null;
    return row && this.visible(row) ? row : null;
  }

  private volumeSource(): VolumeSource {
    if (!this.links.volumes) throw new AppError("unavailable", "volumes are not available", { retryAfterSeconds: 30 });
    return this.links.volumes;
  }

  private snapshotSource(): SnapshotSource {
    if (!this.links.snapshots)
      throw new AppError("unavailable", "snapshots are not available", { retryAfterSeconds: 30 });
    return this.links.snapshots;
  }

  /** Emits `<sandbox id>` whenever this process changes a sandbox. */
  get changes() {
    return this.transitions.changes;
  }

  execsInFlightIds(): string[] {
    return this.execs.ids();
  }

  /** Whether an exec or an SSH session of this process runs in the sandbox (the reconciler's idle check). */
  hasExecInFlight(sandboxId: string): boolean {
    return this.execs.has(sandboxId) || (this.links.ssh?.hasOpenSession(sandboxId) ?? false);
  }

  /** This server's own runtime (for its own sandboxes), or the refusal of a server without one. */
  private runtime(): LocalRuntime {
    return localRuntime(this.driver, this.apiReplica);
  }

  private visible(row: Pick<repo.SandboxRow, "finished_at">): boolean {
    return isVisible(row, this.clock.now(), this.defaults.retentionSeconds);
  }

  /** The sandbox a credential may see, or not_found (another org, another sandbox for a confined key, past retention). */
  async load(q: Queryable, cred: Credential, id: string, forUpdate = false): Promise<repo.SandboxRow> {
    const row = SANDBOX_ID.test(id) ? await repo.getSandbox(q, id, forUpdate) : null;
    if (!row || row.org_id !== cred.orgId || !this.visible(row)) throw notFound("sandbox");
    if (cred.sandbox && cred.sandbox.sandboxId !== row.id) throw notFound("sandbox");
    return row;
  }

  /**
   * load() for an exec: the same checks, on the columns an exec needs. Read from the store
   * every time (no cache): a quarantine or stop written through any server is seen at once.
   */
  async loadExecTarget(cred: Credential, id: string): Promise<repo.ExecTarget> {
    const row = SANDBOX_ID.test(id) ? await repo.getExecTarget(this.db, id) : null;
    if (!row || row.org_id !== cred.orgId || !this.visible(row)) throw notFound("sandbox");
    if (cred.sandbox && cred.sandbox.sandboxId !== row.id) throw notFound("sandbox");
    return row;
  }

  private async resolveRef(cred: Credential, ref: string, projectId: string | undefined): Promise<repo.SandboxRow> {
    if (SANDBOX_ID.test(ref)) return this.load(this.db, cred, ref);
    if (cred.sandbox) throw notFound("sandbox");
    const project = await this.projects.resolve(this.db, cred, projectId);
    const row = await repo.findByName(this.db, project.id, ref);
    if (!row || !this.visible(row)) throw notFound("sandbox");
    return row;
  }

  async create(
    cred: Credential,
    input: CreateSandboxBody,
    remotePool = true,
  ): Promise<{ id: string; request_state: "requested"; run_id: string }> {
    requireOrgScoped(cred, "create sandboxes");
    const fromSnapshot = input.snapshot_id !== undefined;
    if (fromSnapshot && input.image !== undefined)
      throw new AppError("invalid_argument", "set image (from image) or snapshot_id (from snapshot), not both");
    if (!fromSnapshot && input.image_override !== undefined)
      throw new AppError("invalid_argument", "image_override is valid only with snapshot_id");
    checkArgv("command", input.command);
    checkMetadata(input.metadata);
    checkImageReference("body.image", input.image);
    checkImageReference("body.image_override", input.image_override);
    checkPorts(input.ports, input.network_access ?? "public");
    if ((input.resources?.gpus?.count ?? 0) > 0) throw unsupported("this deployment cannot schedule GPUs");
    if (input.secrets?.length && !this.secretBinder)
      throw unsupported("secret bindings need the egress gateway, which this deployment does not run");
    if (input.volumes?.length) checkMountTargets(input.volumes.map((mount) => mount.target_path));
    if (input.shared_filesystems?.length)
      throw new AppError("invalid_argument", "no shared filesystems are registered in this deployment");
    // A restore is durable by default (contract 4.3).
    const storageClass = input.storage_class ?? (fromSnapshot ? "durable" : "standard");
    if (input.workspace_capacity_gib !== undefined && storageClass !== "durable") {
      throw new AppError("invalid_argument", "workspace_capacity_gib is valid only with storage_class durable");
    }
    // An api replica has no runtime of its own: placement chooses among the hosts.
    if (!this.apiReplica) this.runtime();
    // Resolved (and their values decrypted) outside the admitting transaction.
    const secretBindings =
      input.secrets?.length && this.secretBinder
        ? await this.secretBinder.bind(
            cred,
            input.secrets.map((binding) => binding.name),
          )
        : [];
    const rootCapacity =
      storageClass === "durable" && !fromSnapshot
        ? (input.workspace_capacity_gib ?? this.defaults.workspaceCapacityGiB)
        : null;
    const ttl = input.ttl_seconds ?? this.defaults.ttlSeconds;
    const idle = input.idle_timeout_seconds ?? (this.defaults.idleTimeoutSeconds || null);
    const image = input.image ?? this.defaults.defaultImage;
    const memoryMiB = input.resources?.memory_mb ?? this.defaults.memoryMiB;
    const cpuMillis = input.resources?.cpu_millis ?? this.defaults.cpuMillis;
    const network = input.network_access ?? "public";
    // A cordoned or draining host serves no create from its pool either (placement skips it).
    const hostState = this.host?.state?.() ?? null;
    const poolable = !fromSnapshot && !input.volumes?.length;
    const poolRequest = { image, memoryMiB, cpuMillis, storageClass, workspaceCapacityGiB: rootCapacity, network };
    const pooled =
      !poolable || hostState === "cordoned" || hostState === "draining" ? null : (this.pool?.take(poolRequest) ?? null);
    // None here: a member of another host's pool (remote-pool.ts), the create then placed there only.
    const remote =
      poolable && !pooled && remotePool && this.remotePools
        ? await this.remotePools.take(cred.orgId, poolRequest)
        : null;
    // A pooled sandbox holds its storage already; any other must fit what the host can back
    // (measured here, decided in the transaction against the other sandboxes' rows).
    const measure = pooled || remote || this.apiReplica ? undefined : await this.runtime().measureStorage?.();
    const id = pooled ?? remote?.id ?? newSandboxId();
    if (measure && (!fromSnapshot || input.workspace_capacity_gib !== undefined)) {
      const workspaceCapacityGiB = rootCapacity ?? input.workspace_capacity_gib ?? null;
      refuseBeyondHost({ id, bytes: measure.bytesOf({ storageClass, workspaceCapacityGiB }), measure }, this.log);
    }
    // One create of the organization at a time through this process (inOrgCreateLane).
    const result = await this.inOrgCreateLane(cred.orgId, () =>
      this.db.tx(async (q) => {
        // Taken once its turn in the lane has come: a create that waited is not born past its deadline.
        const now = this.clock.now();
        const project = await this.projects.resolve(q, cred, input.project_id);
        const source = input.snapshot_id ? await this.snapshotSource().forRestore(q, cred, input.snapshot_id) : null;
        const capacity = source ? restoredCapacity(storageClass, input.workspace_capacity_gib, source) : rootCapacity;
        // A restore pins the snapshot's versions again, then whatever the create adds.
        const added = input.volumes?.length ? await this.volumeSource().pin(q, cred, input.volumes) : [];
        const volumes = [...(source?.volumes ?? []), ...added];
        if (source?.volumes.length && added.length) checkMountTargets(volumes.map((v) => v.target_path));
        await this.quotas.admit(q, cred.orgId, "sandboxes.total", 1);
        await this.quotas.admit(q, cred.orgId, "sandboxes.running", 1);
        if (capacity) await this.quotas.admit(q, cred.orgId, "sandboxes.workspace_capacity_gib", capacity);
        const namesake = input.name ? await repo.findByName(q, project.id, input.name) : null;
        if (namesake && namesake.state !== "terminated") {
          throw new AppError("name_conflict", `a sandbox named "${input.name}" already exists in this project`);
        }
        const run = await this.runs.startIn(q, cred, { project_id: project.id, label: `sandbox ${id}` });
        // Last: the host's lock is held from here until the row is in and committed (host-admission.ts).
        // A pooled sandbox is this host's; any other is placed (host-placement.ts).
        const compute = { memory_mb: memoryMiB, cpu_millis: cpuMillis };
        let owner: Pick<repo.SandboxRow, "host_id" | "host_epoch">;
        if ((this.host || this.apiReplica) && !pooled) {
          owner = await placeAndAdmit(
            q,
            {
              self: this.host,
              localCompute: this.driver?.hostCompute?.() ?? null,
              policy: this.computePolicy(),
              mode: this.defaults.placement,
              log: this.log,
              view: this.allocationView,
              only: remote?.hostId,
            },
            {
              id,
              compute,
              ...(measure ? { storage: { shape: { storageClass, workspaceCapacityGiB: capacity } } } : {}),
              measure,
              image: source ? source.image : image,
              volumes: volumes.map((v) => v.version),
              snapshotHostId: source?.hostId ?? null,
            },
          );
        } else {
          owner = this.ownerOfNew();
          await this.admitHost(q, {
            hostId: owner.host_id,
            compute,
            ...(measure
              ? { storage: { id, bytes: measure.bytesOf({ storageClass, workspaceCapacityGiB: capacity }), measure } }
              : {}),
          });
        }
        const row: repo.SandboxRow = {
          id,
          org_id: cred.orgId,
          project_id: project.id,
          name: input.name ?? null,
          image: source ? source.image : image,
          workload_image: source ? (input.image_override ?? source.image) : image,
          image_digest: null,
          storage_class: storageClass,
          placement_class: input.placement_class ?? "standard",
          network_access: network,
          lineage_path: source ? `${source.lineagePath}.${id}` : id,
          metadata: input.metadata ?? {},
          command: input.command ?? null,
          ports: input.ports ?? [],
          resources: { memory_mb: memoryMiB, cpu_millis: cpuMillis },
          workspace_capacity_gib: capacity,
          idle_timeout_seconds: idle,
          expires_at: ttl > 0 ? new Date(now.getTime() + ttl * 1000) : null,
          desired_state: "running",
          state: "requested",
          state_reason_code: null,
          state_reason_message: null,
          state_deadline: stateDeadline("requested", now),
          quarantined: false,
          run_id: run.id,
          credential_key_id: null,
          created_by: cred.principalId,
          created_by_kind: cred.principalKind,
          created_by_key_id: cred.keyId,
          created_at: now,
          updated_at: now,
          last_activity_at: null,
          last_activity_source: null,
          idle_deadline: null,
          finished_at: null,
          snapshot_id: source?.id ?? null,
          volumes,
          secret_bindings: secretBindings,
          ...owner,
        };
        if (!(await repo.insertSandbox(q, row))) {
          throw new AppError("name_conflict", `a sandbox named "${input.name}" already exists in this project`);
        }
        return { id, request_state: "requested" as const, run_id: run.id, host_id: owner.host_id };
      }),
    ).catch((error: unknown) => {
      if (pooled) this.pool?.release(pooled);
      if (!remote) throw error;
      void remote.release();
      // The member's host refused it (its admission, or it is no longer ready): the normal way.
      if (isPlacementRefusal(error)) return null;
      throw error;
    });
    if (result === null) return this.create(cred, input, false);
    this.kickOwner({ id, host_id: result.host_id });
    return { id: result.id, request_state: result.request_state, run_id: result.run_id };
  }

  /** The tail of each organization's queue of creates through this process (inOrgCreateLane). */
  private readonly orgCreateLanes = new Map<string, Promise<void>>();

  /**
   * Runs `create` after the organization's earlier creates through this process have ended.
   * A create's transaction holds the organization's quota locks from its quota check to its
   * commit, so one organization's creates are serialized by the store whatever this does;
   * queued here they wait without a connection, instead of each holding one of the pool's
   * connections blocked on the lock, which left the reconciler's writes and every read of
   * this server waiting behind a burst of creates (bench/multi-host-creates.ts).
   */
  private inOrgCreateLane<T>(orgId: string, create: () => Promise<T>): Promise<T> {
    const previous = this.orgCreateLanes.get(orgId) ?? Promise.resolve();
    const run = previous.then(create);
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.orgCreateLanes.set(orgId, tail);
    void tail.then(() => {
      if (this.orgCreateLanes.get(orgId) === tail) this.orgCreateLanes.delete(orgId);
    });
    return run;
  }

  private computePolicy() {
    return { memoryOvercommit: this.defaults.memoryOvercommit, cpuOvercommit: this.defaults.cpuOvercommit };
  }

  /** See admitOnHost (host-admission.ts); without a runtime that reports its size, compute is not admitted. */
  private admitHost(q: Queryable, request: HostAdmissionRequest): Promise<void> {
    return admitOnHost(
      q,
      {
        host: this.driver?.hostCompute?.() ?? null,
        policy: { memoryOvercommit: this.defaults.memoryOvercommit, cpuOvercommit: this.defaults.cpuOvercommit },
        log: this.log,
      },
      request,
    );
  }

  /** The owner a new sandbox is written with: this host at its current epoch (docs/hosts.md). */
  private ownerOfNew(): Pick<repo.SandboxRow, "host_id" | "host_epoch"> {
    if (!this.host) return { host_id: null, host_epoch: null };
    if (!this.host.canAct()) throw hostUnavailable();
    const owner = this.host.owner();
    return { host_id: owner.hostId, host_epoch: owner.epoch };
  }

  async get(
    cred: Credential,
    ref: string,
    options: {
      projectId?: string | undefined;
      waitState?: SandboxState | undefined;
      waitTimeoutSeconds?: number | undefined;
    },
  ) {
    let row = await this.resolveRef(cred, ref, options.projectId);
    if (options.waitState && options.waitTimeoutSeconds) {
      row = await this.waitFor(cred, row, options.waitState, options.waitTimeoutSeconds);
    }
    return { sandbox: await this.view(row) };
  }

  /**
   * Long-poll: resolves when the state is observed, at once when it can no longer come (a
   * failed create waited for as running), or with the current row at the deadline.
   */
  private async waitFor(cred: Credential, initial: repo.SandboxRow, state: SandboxState, timeoutSeconds: number) {
    const shown = (row: repo.SandboxRow) => (row.quarantined ? "quarantined" : row.state);
    const settled = (row: repo.SandboxRow) =>
      shown(row) === state || !canStillReach(shown(row), row.desired_state, state);
    if (settled(initial)) return initial;
    const deadline = Date.now() + timeoutSeconds * 1000;
    // Woken by this process's writes, and by any server's state change through the events of
    // the sandbox's run (each transition writes one; the tail hub hears their notifications);
    // the re-read every waitPollMs covers a gap in those. Subscribed before the row is read
    // again, so a change between the first read and the subscription is not missed.
    // A run's events are also the tenant's own (annotations, events through the sandbox's
    // token), so a wake by one re-reads the row at most every RUN_EVENT_REREAD_MS: a stream of
    // them costs a few reads a second per wait, not one per event. This process's own writes
    // re-read at once.
    let changed = false;
    let eventWoken = false;
    let wake: (() => void) | null = null;
    const onChange = () => {
      changed = true;
      wake?.();
    };
    const onRunEvent = () => {
      eventWoken = true;
      wake?.();
    };
    this.changes.on(initial.id, onChange);
    const unsubscribe = this.runEvents?.subscribe(initial.run_id, onRunEvent);
    try {
      let row = await this.load(this.db, cred, initial.id).catch(() => initial);
      let readAt = Date.now();
      while (!settled(row) && Date.now() < deadline) {
        const eventDue = eventWoken ? readAt + RUN_EVENT_REREAD_MS : Number.POSITIVE_INFINITY;
        if (!changed && Date.now() < eventDue) {
          await new Promise<void>((resolve) => {
            let timer: NodeJS.Timeout | undefined;
            const done = () => {
              clearTimeout(timer);
              wake = null;
              resolve();
            };
            const arm = (at: number) => {
              clearTimeout(timer);
              timer = setTimeout(done, Math.max(0, at - Date.now()));
            };
            arm(Math.min(readAt + this.defaults.waitPollMs, eventDue, deadline));
            // This process's write: at once. A run event: no sooner than RUN_EVENT_REREAD_MS after the last read.
            wake = () =>
              changed
                ? done()
                : arm(Math.min(readAt + this.defaults.waitPollMs, readAt + RUN_EVENT_REREAD_MS, deadline));
          });
        }
        changed = false;
        eventWoken = false;
        wake = null;
        row = await this.load(this.db, cred, initial.id).catch(() => row);
        readAt = Date.now();
      }
      return row;
    } finally {
      this.changes.off(initial.id, onChange);
      unsubscribe?.();
    }
  }

  async list(
    cred: Credential,
    input: {
      name?: string | undefined;
      projectId?: string | undefined;
      pageSize: number;
      pageToken?: string | undefined;
    },
  ) {
    if (cred.sandbox) {
      const own = await this.load(this.db, cred, cred.sandbox.sandboxId).catch(() => null);
      const matches = own && (!input.name || own.name === input.name);
      return { sandboxes: matches ? [await this.view(own)] : [], next_page_token: "" };
    }
    const project = await this.projects.resolve(this.db, cred, input.projectId);
    const after = decodeCursor("sandboxes", input.pageToken);
    const visibleAfter = new Date(this.clock.now().getTime() - this.defaults.retentionSeconds * 1000);
    const rows = await repo.listSandboxes(
      this.db,
      cred.orgId,
      project.id,
      input.name,
      after,
      input.pageSize + 1,
      visibleAfter,
    );
    const page = rows.slice(0, input.pageSize);
    const last = page[page.length - 1];
    return {
      sandboxes: await Promise.all(page.map((row) => this.view(row))),
      next_page_token:
        rows.length > input.pageSize && last ? encodeCursor("sandboxes", { at: last.created_at, id: last.id }) : "",
    };
  }

  async update(cred: Credential, id: string, input: UpdateSandboxBody) {
    requireOrgScoped(cred, "update sandboxes");
    const fields = Object.keys(input).filter((key) => input[key as keyof UpdateSandboxBody] !== undefined);
    if (fields.length === 0) throw new AppError("invalid_argument", "name at least one field to change");
    if (input.network_access !== undefined && fields.length > 1) {
      throw new AppError("invalid_argument", "network_access must be the only field of its update");
    }
    if (input.ttl_seconds === 0) throw new AppError("invalid_argument", "ttl_seconds must be positive");
    checkMetadata(input.metadata);
    const now = this.clock.now();
    // Claim in one short transaction, change the host outside it, then record: a host tool
    // (resize2fs, ip, nft) never runs while the row lock that other requests wait on is held.
    // A growth is admitted against the host as measured now (host-admission.ts).
    const measure = input.workspace_capacity_gib !== undefined ? await this.driver?.measureStorage?.() : undefined;
    let route = null as Route | null;
    const { row, host } = await this.db.tx(async (q) => {
      const row = await this.load(q, cred, id, true);
      const onHost: HostAdmissionRequest = { hostId: row.host_id };
      if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
      if (row.desired_state === "deleted" || isFinished(row.state) || row.state === "attention") {
        throw new AppError(
          "operation_conflict",
          `the sandbox is ${row.desired_state === "deleted" ? "being deleted" : row.state}`,
        );
      }
      const change: Partial<repo.SandboxRow> = {
        updated_at: now,
        last_activity_at: now,
        last_activity_source: "update",
      };
      if (input.state !== undefined && input.state !== row.desired_state) {
        if (input.state === "running") {
          await this.quotas.admit(q, cred.orgId, "sandboxes.running", 1);
          onHost.compute = row.resources;
        }
        change.desired_state = input.state;
      }
      if (input.idle_timeout_seconds !== undefined) change.idle_timeout_seconds = input.idle_timeout_seconds;
      // An update is activity: with idle stopping on, the idle period starts again (with the new timeout).
      const idle = input.idle_timeout_seconds ?? row.idle_timeout_seconds;
      if (idle) change.idle_deadline = new Date(now.getTime() + idle * 1000);
      if (input.ttl_seconds !== undefined) change.expires_at = new Date(now.getTime() + input.ttl_seconds * 1000);
      if (input.metadata !== undefined) change.metadata = input.metadata;
      let host: HostChange | null = null;
      if (input.workspace_capacity_gib !== undefined) {
        if (row.storage_class !== "durable" || !row.workspace_capacity_gib) {
          throw new AppError("invalid_argument", "workspace_capacity_gib applies only to durable storage");
        }
        if (input.workspace_capacity_gib < row.workspace_capacity_gib) {
          throw new AppError(
            "workspace_shrink_unsupported",
            `the workspace is ${row.workspace_capacity_gib} GiB and cannot shrink`,
          );
        }
        if (input.workspace_capacity_gib > row.workspace_capacity_gib) {
          if (!STABLE_STATES.includes(row.state)) {
            throw new AppError("operation_conflict", "the workspace grows only while the sandbox is stable");
          }
          if (await this.snapshotSource().hasUndurable(q, row.id)) {
            throw new AppError(
              "operation_conflict",
              "a snapshot of this sandbox is not durable yet; the workspace grows once it resolves",
              { retryAfterSeconds: 1 },
            );
          }
          await this.quotas.admit(
            q,
            cred.orgId,
            "sandboxes.workspace_capacity_gib",
            input.workspace_capacity_gib - row.workspace_capacity_gib,
          );
          // Recorded with the claim, so the quota and the host's admission count it at once;
          // given back if the host refuses.
          change.workspace_capacity_gib = input.workspace_capacity_gib;
          if (measure) {
            const bytes = measure.bytesOf({
              storageClass: "durable",
              workspaceCapacityGiB: input.workspace_capacity_gib,
            });
            onHost.storage = { id: row.id, bytes, measure };
          }
          host = { kind: "grow", from: row.workspace_capacity_gib, to: input.workspace_capacity_gib };
        }
      }
      if (input.network_access !== undefined) {
        if (!STABLE_STATES.includes(row.state)) {
          throw new AppError(
            "operation_conflict",
            `the network can be switched once the sandbox exists (it is ${row.state})`,
          );
        }
        // The same refusal as at create: ports need a network.
        checkPorts(row.ports, input.network_access);
        host = { kind: "network", mode: input.network_access };
      }
      // The host change runs on the sandbox's own host: here, or routed to it (docs/hosts.md "Routing").
      route = host && this.router ? await this.router.runtimeOf(row, q) : null;
      if (host && !route && !this.actsHereOn(row)) throw hostUnavailable();
      // The owner's own storage admission decides a routed growth (this host's measure says nothing of it).
      if (route?.remote) delete onHost.storage;
      await this.admitHost(q, onHost);
      if (host && !(await repo.claimHost(q, row.id, now, new Date(now.getTime() + HOST_CLAIM_SECONDS * 1000)))) {
        throw new AppError(
          "operation_conflict",
          "another change of this sandbox's workspace or network is in progress",
        );
      }
      await repo.updateSandbox(q, row.id, change);
      return { row, host };
    });
    this.transitions.notify(row.id);
    const receipt = host
      ? await applyHostChange({ db: this.db, runtime: route?.runtime ?? this.runtime(), log: this.log }, row, host)
      : null;
    this.kickOwner(row);
    const response: Record<string, unknown> = { id, request_state: "requested" };
    if (receipt) response.network_access_receipt = receiptView(receipt);
    return response;
  }

  async delete(cred: Credential, id: string) {
    requireOrgScoped(cred, "delete sandboxes");
    const row = await this.db.tx(async (q) => {
      const row = await this.load(q, cred, id, true);
      if (row.quarantined) throw new AppError("quarantined", "the sandbox is quarantined");
      if (row.desired_state === "deleted" || row.state === "terminated") throw notFound("sandbox");
      await this.transitions.transition(row.id, "terminating", { q, change: { desired_state: "deleted" } });
      return row;
    });
    // Again once committed: the notice inside the transaction came before other readers could see it.
    this.transitions.notify(id);
    this.kickOwner(row);
    return { id, request_state: "requested" as const };
  }

  /** Records activity; with an idle timeout, pushes the idle deadline out. */
  async touch(row: Pick<repo.SandboxRow, "id">, source: "exec" | "session" | "update") {
    await repo.touchSandbox(this.db, row.id, this.clock.now(), source);
  }

  /**
   * Who a sandbox is, for the egress gateway (it knows a caller by source address): its
   * organization, project and ambient run; null when there is no such live sandbox.
   */
  async egressIdentity(id: string): Promise<{ orgId: string; projectId: string; runId: string } | null> {
    const row = await repo.getExecTarget(this.db, id);
    if (!row || isFinished(row.state) || row.desired_state === "deleted") return null;
    return { orgId: row.org_id, projectId: row.project_id, runId: row.run_id };
  }

  /** Operator action (admin CLI): quarantine or release a sandbox. */
  async setQuarantine(id: string, quarantined: boolean, reason: string) {
    const row = await this.db.tx(async (q) => {
      const row = await repo.getSandbox(q, id, true);
      if (!row) throw notFound("sandbox");
      return repo.updateSandbox(q, id, {
        quarantined,
        updated_at: this.clock.now(),
        ...(quarantined
          ? { state_reason_code: "operator_quarantine", state_reason_message: reason || "quarantined by an operator" }
          : {}),
      });
    });
    this.transitions.notify(id);
    if (!quarantined) this.kickOwner(row);
  }

  /**
   * A sandbox by id for a host's own checks (routing, the internal API: no credential, the
   * grant or the gateway already named the organization); null when there is no such row.
   */
  rowForHost(id: string): Promise<repo.SandboxRow | null> {
    return SANDBOX_ID.test(id) ? repo.getSandbox(this.db, id) : Promise.resolve(null);
  }

  /** Whether this server is the sandbox's host and may act on it now. */
  actsHereOn(row: Pick<repo.SandboxRow, "host_id">): boolean {
    return this.host !== null && row.host_id === this.host.id && this.host.canAct();
  }

  /** This server's host id; null when it runs no sandboxes. */
  localHostId(): string | null {
    return this.host?.id ?? null;
  }

  /**
   * Wakes the reconciler of the sandbox's owner: this process's queue when it is this host,
   * else a notification the owner listens for (kicks.ts). The owner's sweep and its re-read
   * after a gap catch what a lost notification missed.
   */
  private kickOwner(row: Pick<repo.SandboxRow, "id" | "host_id">): void {
    if (!row.host_id || row.host_id === this.host?.id) {
      this.trigger.kick(row.id);
      return;
    }
    notifyOwner(this.db, row.host_id, row.id).catch((error: unknown) =>
      this.log.warn(
        { sandbox_id: row.id, host_id: row.host_id, err: (error as Error).message },
        "could not kick the sandbox's host",
      ),
    );
  }
}
