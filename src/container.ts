// Composition root: the one place that picks drivers (store, relay, clock) and wires the
// services and routes together.
import { mkdir, readFile } from "node:fs/promises";
import type { Config } from "./config.js";
import { ReconcileQueue } from "./controllers/reconcile-queue.js";
import { PIDS_PER_SANDBOX_FLOOR } from "./controllers/sandbox-reconciler.js";
import { FsBlobStore } from "./drivers/blobs/fs.js";
import { BLOB_SIGNING_KEY_LABEL, openBlobStore } from "./drivers/blobs/index.js";
import type { BlobStore } from "./drivers/blobs/interface.js";
import type { RuntimeDriver, SandboxProcesses } from "./drivers/runtime/interface.js";
import { LocalRuntimeDriver } from "./drivers/runtime/local/driver.js";
import { PooledRuntime, poolSupported } from "./drivers/runtime/local/pool.js";
import { API_VERSION, buildHttp } from "./http/app.js";
import { IdempotencyStore } from "./http/idempotency.js";
import { startInternalApi } from "./http/internal/server.js";
import type { App } from "./http/types.js";
import { type Clock, systemClock } from "./lib/clock.js";
import type { Logger } from "./lib/logger.js";
import { projectFile } from "./lib/paths.js";
import { makeDirPrivate } from "./lib/private-dir.js";
import { Tracing } from "./lib/tracing.js";
import { registerAdminRoutes } from "./modules/admin/routes.js";
import { AdminService } from "./modules/admin/service.js";
import { AnnotationService } from "./modules/annotations/annotation-service.js";
import { registerAnnotationRoutes } from "./modules/annotations/routes.js";
import { AnnotationSchemaService } from "./modules/annotations/schema-service.js";
import { registerBlobRoutes } from "./modules/blobs/routes.js";
import { SignedBlobService } from "./modules/blobs/service.js";
import { registerConsoleAssets } from "./modules/console/asset-routes.js";
import { registerConsoleSessionRoutes } from "./modules/console/session-routes.js";
import { EgressCa } from "./modules/egress/ca.js";
import { callerDirectory } from "./modules/egress/callers.js";
import { EgressGateway } from "./modules/egress/gateway.js";
import { EventLedger } from "./modules/egress/ledger.js";
import { SecretEgress } from "./modules/egress/secret-egress.js";
import { EgressAllowlistService } from "./modules/egress/service.js";
import { registerFeedbackRoutes } from "./modules/feedback/routes.js";
import { type FeedbackRelay, FeedbackService, webhookRelay } from "./modules/feedback/service.js";
import { registerFileRoutes } from "./modules/files/routes.js";
import { FileService } from "./modules/files/service.js";
import { HostDirectory } from "./modules/hosts/directory.js";
import { openGrantSigner } from "./modules/hosts/grants.js";
import { HostMembership, hostIdOf } from "./modules/hosts/membership.js";
import { NodeApi, ownerOperations } from "./modules/hosts/node-api.js";
import { HOST_HINT_LIMIT, type HostCapacity } from "./modules/hosts/repo.js";
import { publishInternalUrl } from "./modules/hosts/route-repo.js";
import { HostRouter } from "./modules/hosts/router.js";
import { registerIdentityRoutes } from "./modules/identity/routes.js";
import { IdentityService } from "./modules/identity/service.js";
import { registerMetaRoutes } from "./modules/meta/routes.js";
import { registerSystemRoutes } from "./modules/meta/system-routes.js";
import { WarrenMetrics } from "./modules/metrics/registry.js";
import { countSandboxesByState } from "./modules/metrics/repo.js";
import { registerMetricsRoutes } from "./modules/metrics/routes.js";
import { MetricsService } from "./modules/metrics/service.js";
import { registerOtlpRoutes } from "./modules/otlp/routes.js";
import { OtlpService } from "./modules/otlp/service.js";
import { registerProcessRoutes } from "./modules/processes/routes.js";
import { ProcessService } from "./modules/processes/service.js";
import { registerProjectRoutes } from "./modules/projects/routes.js";
import { ProjectService } from "./modules/projects/service.js";
import { registerRunRoutes } from "./modules/runs/routes.js";
import { RunService } from "./modules/runs/service.js";
import { type ExecResponse, ExecService } from "./modules/sandboxes/exec-service.js";
import { ExecStreamService } from "./modules/sandboxes/exec-stream.js";
import { ExecsInFlight } from "./modules/sandboxes/execs-in-flight.js";
import { admitPoolMember } from "./modules/sandboxes/host-admission.js";
import { registerSandboxRoutes } from "./modules/sandboxes/routes.js";
import { newSandboxId, type SandboxLinks, SandboxService } from "./modules/sandboxes/service.js";
import { registerExecStreamRoute, StreamSockets } from "./modules/sandboxes/stream-routes.js";
import { SandboxTransitions } from "./modules/sandboxes/transitions.js";
import { rewrapDeploymentKeys } from "./modules/secrets/deployment-keys.js";
import { Keyring } from "./modules/secrets/keyring.js";
import { registerSecretRoutes } from "./modules/secrets/routes.js";
import { SecretService } from "./modules/secrets/service.js";
import { storeOwnerPlanes } from "./modules/sessions/owner-plane.js";
import { registerSessionRoutes } from "./modules/sessions/routes.js";
import { SessionService } from "./modules/sessions/service.js";
import { SESSION_TOKEN_KEY_LABEL, SessionTokenSigner } from "./modules/sessions/tokens.js";
import { registerSnapshotRoutes } from "./modules/snapshots/routes.js";
import { ReplicationRelay, SnapshotService } from "./modules/snapshots/service.js";
import { openHostKey } from "./modules/ssh/host-key.js";
import { TailHub } from "./modules/tail/hub.js";
import { registerTailRoutes } from "./modules/tail/routes.js";
import { TailService } from "./modules/tail/service.js";
import { TelemetryReplica } from "./modules/telemetry/replica.js";
import { registerTelemetryRoutes } from "./modules/telemetry/routes.js";
import { type TelemetryViewOptions, TelemetryViewService } from "./modules/telemetry/service.js";
import { registerUsageRoutes } from "./modules/usage/routes.js";
import { QuotaService } from "./modules/usage/service.js";
import { VolumeCache } from "./modules/volumes/cache.js";
import { pinnedVersions } from "./modules/volumes/gc-repo.js";
import { registerVolumeRoutes } from "./modules/volumes/routes.js";
import { VolumeService } from "./modules/volumes/service.js";
import { registerWorkloadRoutes } from "./modules/workloads/routes.js";
import { WorkloadService } from "./modules/workloads/service.js";
import type { Db } from "./store/db.js";
import { DeferringDb } from "./store/deferred-writes.js";
import { migrate } from "./store/migrate.js";
import { openPglite, type PgliteDb } from "./store/pglite.js";
import { openPostgres } from "./store/postgres.js";

export interface Container {
  config: Config;
  log: Logger;
  db: Db;
  clock: Clock;
  identity: IdentityService;
  projects: ProjectService;
  runs: RunService;
  workloads: WorkloadService;
  secrets: SecretService;
  annotationSchemas: AnnotationSchemaService;
  annotations: AnnotationService;
  sandboxes: SandboxService;
  /** The sandbox service's collaborators built after it; the SSH gateway's is set once it listens. */
  sandboxLinks: SandboxLinks;
  sandboxTransitions: SandboxTransitions;
  reconcileQueue: ReconcileQueue;
  execs: ExecService;
  /** The streaming exec (GET /v1/sandboxes/{id}/exec/stream) and its open WebSockets. */
  execStreams: ExecStreamService;
  /** Background processes of sandboxes (docs/api-decisions.md "Processes"), kept by their agents. */
  processes: ProcessService;
  streamSockets: StreamSockets;
  /** The file API of sandboxes (sessions in the sandbox, routed to its owner). */
  files: FileService;
  runtime: RuntimeDriver | null;
  /** This server as a host of the registry (docs/hosts.md); null without a runtime (it runs no sandboxes). */
  host: HostMembership | null;
  /** Where a sandbox's exec, session, snapshot and host changes go: this runtime, or the owner's internal API. */
  router: HostRouter;
  /** This host's side of the internal API (served when WARREN_INTERNAL_LISTEN is set); null without a host. */
  nodeApi: NodeApi | null;
  feedback: FeedbackService;
  telemetryViews: TelemetryViewService;
  quotas: QuotaService;
  admin: AdminService;
  idempotency: IdempotencyStore;
  /** Where snapshots (and volumes) replicate to; closed with the app. */
  blobs: BlobStore;
  /** The route side of the fs store's presigned URLs; null with S3, whose URLs S3 serves. */
  signedBlobs: SignedBlobService | null;
  snapshots: SnapshotService;
  /** Kicks the snapshot replicator (controllers/) once it runs. */
  snapshotReplication: ReplicationRelay;
  /** Run tails (server-sent events); the hub holds this process's notification listener. */
  tails: TailService;
  tailHub: TailHub;
  otlp: OtlpService;
  volumes: VolumeService;
  /** This host's materialized volume versions, mounted read-only into sandboxes. */
  volumeCache: VolumeCache;
  /** The deployment's SSH host key (OpenSSH format), from the store: the same for every process on one database. */
  sshHostKey(): Promise<string>;
  /** The deployment's egress CA (every sandbox trusts it; secret egress signs its leaves). */
  egressCa: EgressCa;
  /** Egress ledger entries as telemetry events in the sandboxes' ambient runs. */
  egressLedger: EventLedger;
  /** What the egress gateway hands a CONNECT to a host with a bound secret. */
  secretEgress: SecretEgress;
  /** Port endpoints: the rules of the session plane (src/http/session-plane.ts serves it). */
  sessions: SessionService;
  /** Prometheus instruments (docs/metrics.md); the controllers record into them too. */
  metrics: WarrenMetrics;
  /** GET /metrics: who may scrape, and the scrape. */
  metricsAccess: MetricsService;
  /** OpenTelemetry traces when the OTEL_* settings turn them on; null otherwise. Shut down with the app. */
  tracing: Tracing | null;
  /** Organization egress allowlists (what gateway_only sandboxes reach besides their secrets' hosts). */
  egressAllowlist: EgressAllowlistService;
  /** The egress gateway sandboxes reach at the virtual address; null without a runtime. Closed by main/tests. */
  egress: EgressGateway | null;
}

export interface ContainerOverrides {
  /** An already-open store (tests share one in-memory PGlite or a throwaway database). */
  db?: Db;
  clock?: Clock;
  feedbackRelay?: FeedbackRelay;
  /** The sandbox runtime; null runs without one (sandbox routes answer 503). */
  runtime?: RuntimeDriver | null;
  /** Master keys for secrets; tests use an ephemeral keyring instead of the data dir's key file. */
  keyring?: Keyring;
  /** The blob store; tests give one in a temp dir (or on s3rver) instead of `<dataDir>/blobs`. */
  blobs?: BlobStore;
  /** Node.js process metrics in GET /metrics (default on; tests that start many servers turn them off). */
  processMetrics?: boolean;
  /**
   * The egress gateway the given runtime was opened with (its port is a driver option, so a
   * test starts it first); bound to this container's services. Without it a given runtime
   * runs with no gateway.
   */
  egressGateway?: EgressGateway | null;
  /** Telemetry SQL's caps and timeouts (tests whose queries must not meet a deadline on a loaded machine). */
  telemetryLimits?: TelemetryViewOptions["limits"];
  /** The host id instead of the data dir's (tests that run several hosts on one store in one process). */
  hostId?: string;
}

/** The telemetry replica of an embedded store, in memory for a memory store (tests), else beside its data directory (`pglite-telemetry`). */
async function telemetryReplica(db: Db, store: PgliteDb): Promise<TelemetryReplica> {
  await TelemetryReplica.forgetEarlier(db);
  return new TelemetryReplica({ db, source: store, dataDir: store.dataDir ? `${store.dataDir}-telemetry` : null });
}

export async function openStore(config: Config): Promise<Db> {
  if (config.databaseUrl) return openPostgres(config.databaseUrl);
  // Repairs what an older version or a permissive umask left readable; PGlite's own files
  // stay private from here on (pglite-private-fs.ts).
  // The blob store keeps its own tree private (FsBlobStore.open); walking it would cost a
  // stat per object at every start. The volume cache's entries are read-only trees that
  // sandboxes read (0444/0555), some of them hard links to blob files: not made 0600.
  await makeDirPrivate(config.dataDir, [
    config.sandbox.runtimeRoot,
    `${config.dataDir}/blobs`,
    config.volumes.cacheDir,
  ]);
  // PGlite makes its own directory with the umask's mode on a first start.
  await makeDirPrivate(`${config.dataDir}/pglite`);
  return openPglite(`${config.dataDir}/pglite`);
}

/**
 * The local runc runtime (behind the pool of default-shape sandboxes when it is on), or
 * null (with a warning) when this host cannot run sandboxes.
 */
async function openRuntime(
  config: Config,
  log: Logger,
  gateway: EgressGateway | null,
  trustedCaPem: string,
): Promise<RuntimeDriver | null> {
  try {
    const driver = await LocalRuntimeDriver.open({
      trustedCaPem,
      ...(gateway ? { gateway: { address: config.egress.gatewayAddress, port: gateway.port } } : {}),
      root: config.sandbox.runtimeRoot,
      registry: { insecureRegistries: config.sandbox.insecureRegistries },
      imageTagTtlMs: config.sandbox.imageTagTtlSeconds * 1000,
      rootLayerGiB: config.sandbox.rootLayerGiB,
      standardWorkspaceGiB: config.sandbox.standardWorkspaceGiB,
      ...(config.sandbox.storagePoolGiB !== null ? { storagePoolGiB: config.sandbox.storagePoolGiB } : {}),
      storageReserveGiB: config.sandbox.storageReserveGiB,
      storageOvercommit: config.sandbox.storageOvercommit,
      storageTemplateIdleMs: config.sandbox.storageTemplateIdleSeconds * 1000,
      userNamespaces: config.sandbox.userNamespaces,
      log,
      namespaceOwnerUids: config.sandbox.userNamespaceUids,
      idMapping: config.sandbox.idMapping,
      idMappingBlocks: config.sandbox.idMappingBlocks,
    });
    if (config.sandbox.poolSize === 0) return driver;
    if (!(await poolSupported())) {
      log.warn("no static busybox at /usr/bin/busybox: the sandbox pool is off");
      return driver;
    }
    return await PooledRuntime.open(driver, {
      size: config.sandbox.poolSize,
      recentImages: config.sandbox.poolRecentImages,
      recentSize: config.sandbox.poolRecentSize,
      maxMembers: config.sandbox.poolMaxMembers,
      image: config.sandbox.defaultImage,
      memoryMiB: config.sandbox.memoryMiB,
      cpuMillis: config.sandbox.cpuMillis,
      pids: Math.max(PIDS_PER_SANDBOX_FLOOR, config.sandbox.pids),
      newId: newSandboxId,
      log,
    });
  } catch (error) {
    log.warn({ err: (error as Error).message }, "no sandbox runtime on this host; sandbox routes answer 503");
    return null;
  }
}

/**
 * A draining host's warm pool empties and stops refilling; any other state (uncordoned,
 * cordoned) lets it fill again. The host sees the change on its next heartbeat (membership.ts).
 */
function followDraining(host: HostMembership, pool: PooledRuntime, log: Logger): void {
  const follow = (state: string) => {
    if (state !== "draining") return pool.resume();
    void pool.drain().then(
      () => log.info({ host_id: host.id }, "this host drains: its warm pool is empty"),
      (error: unknown) =>
        log.error({ host_id: host.id, err: (error as Error).message }, "draining the warm pool failed"),
    );
  };
  host.onStateChanged(follow);
  if (host.state() === "draining") follow("draining");
}

async function startGateway(config: Config, log: Logger): Promise<EgressGateway | null> {
  try {
    return await EgressGateway.start({ port: config.egress.gatewayPort, hosts: config.egress.hosts, log });
  } catch (error) {
    // Beside another Warren its port is taken: any port serves (the nat chain redirects to
    // whichever the gateway has), so take a free one and say which.
    if ((error as NodeJS.ErrnoException).code === "EADDRINUSE") {
      const gateway = await EgressGateway.start({ port: 0, hosts: config.egress.hosts, log }).catch(() => null);
      if (gateway) {
        log.warn(
          { busy_port: config.egress.gatewayPort, port: gateway.port },
          "the egress gateway's port is in use (another Warren?): it listens on a free one instead (WARREN_EGRESS_GATEWAY_PORT)",
        );
        return gateway;
      }
    }
    log.warn({ err: (error as Error).message }, "the egress gateway could not listen; sandboxes run without it");
    return null;
  }
}

export async function createContainer(config: Config, log: Logger, overrides: ContainerOverrides = {}) {
  // Every module gets the deferring store, so none can read past an exec's end written after its answer.
  const store = overrides.db ?? (await openStore(config));
  const db = new DeferringDb(store);
  await migrate(db);
  const clock = overrides.clock ?? systemClock();
  const quotas = new QuotaService(db, config.quotaDefaults);
  const projects = new ProjectService(db, clock, quotas);
  const identity = new IdentityService(db, clock, projects, config.authCacheTtlMs);
  const workloads = new WorkloadService(db, clock);
  const runs = new RunService(db, clock, projects, workloads);
  if (!overrides.keyring && !config.masterKey) await mkdir(config.dataDir, { recursive: true, mode: 0o700 });
  const keyring = overrides.keyring ?? (await Keyring.load(config));
  const secrets = new SecretService(db, clock, keyring);
  // Every sandbox trusts the deployment's egress CA (the local driver binds it in).
  const egressCa = await EgressCa.open(db, keyring, clock);
  secrets.onMasterKeyRotation(rewrapDeploymentKeys);
  // The gateway listens before the runtime opens: the runtime's nat chain redirects to its port.
  let egress = overrides.egressGateway ?? null;
  let runtime: RuntimeDriver | null;
  if (overrides.runtime !== undefined) runtime = overrides.runtime;
  else if (config.role === "api") {
    // An api replica never touches the machine: no runtime, egress gateway or storage pool.
    runtime = null;
  } else {
    egress = await startGateway(config, log);
    runtime = await openRuntime(config, log, egress, egressCa.certificatePem);
    if (!runtime && egress) {
      await egress.close();
      egress = null;
    }
  }
  // Set once the volume cache exists (the heartbeat reads it; the join may come first).
  let volumeHints: (() => string[]) | null = null;
  // A server with a runtime is a host: it joins the registry (a new epoch) before anything
  // acts on a sandbox, and owns the sandboxes created through it. Its plane and SSH addresses
  // are published once those listeners are bound (main.ts, publishEdges).
  const host = runtime
    ? new HostMembership(db, log, {
        id: overrides.hostId ?? (await hostIdOf(config.dataDir)),
        role: config.role,
        address: config.publicApiUrl,
        capacity: () => publishedCapacity(runtime),
        hints: () => ({
          ...(runtime?.cacheHints?.() ?? { images: [], warmImages: [] }),
          volumes: volumeHints?.() ?? [],
        }),
        poolMembers: () => (runtime instanceof PooledRuntime ? runtime.memberCount() : 0),
      })
    : null;
  await host?.join();
  if (runtime instanceof PooledRuntime) {
    const pooled = runtime;
    pooled.admitMembersWith((id, shape) =>
      admitPoolMember(db, { runtime: pooled.driver, hostId: () => host?.id ?? null, log }, id, shape),
    );
    if (host) followDraining(host, pooled, log);
  }
  // The reconciler (started with the controllers) becomes the queue's worker; the service only kicks it.
  const reconcileQueue = new ReconcileQueue();
  const sandboxTransitions = new SandboxTransitions(db, clock);
  const execsInFlight = new ExecsInFlight<ExecResponse>();
  // Routing to a sandbox's owner (docs/hosts.md "Routing"): this host's own sandboxes in-process,
  // any other host's through its internal API, with a grant signed under the deployment's key.
  const grants = await openGrantSigner(db, keyring, clock);
  const router: HostRouter = new HostRouter(db, host, runtime, grants, log, (id) => sandboxes.rowForHost(id));
  // Filled in below as each is built (the SSH gateway's once it listens: modules/ssh/index.ts).
  const sandboxLinks: SandboxLinks = { snapshots: null, volumes: null, endpoints: null, ssh: null };
  // One subscription to the events' notifications per process: run tails and wait_state long polls.
  const tailHub = new TailHub(db, log);
  const sandboxes = new SandboxService({
    db,
    clock,
    log,
    defaults: config.sandbox,
    runtime,
    projects,
    runs,
    quotas,
    transitions: sandboxTransitions,
    trigger: reconcileQueue,
    pool: runtime instanceof PooledRuntime ? runtime : null,
    host,
    execs: execsInFlight,
    router,
    runEvents: tailHub,
    secretBinder: {
      bind: (cred, names) => secrets.bindForSandbox(cred, names, config.secretEgress.modelGatewayHost),
    },
    apiReplica: config.role === "api",
    links: sandboxLinks,
  });
  const execs = new ExecService({
    db,
    clock,
    log,
    defaults: config.sandbox,
    secrets,
    runtime,
    inFlight: execsInFlight,
    host,
    router,
    apiReplica: config.role === "api",
  });
  const execStreams = new ExecStreamService({
    db,
    clock,
    log,
    defaults: config.sandbox,
    secrets,
    execs,
    router,
    inFlight: execsInFlight,
  });
  const files = new FileService({
    sandboxes,
    clock,
    log,
    defaults: config.sandbox,
    router,
    inFlight: execsInFlight as ExecsInFlight<unknown>,
  });
  const processRuntime = processRuntimeOf(runtime);
  const processes = new ProcessService({
    db,
    clock,
    log,
    defaults: config.sandbox,
    sandboxes,
    runtime: processRuntime,
    host,
    inFlight: execsInFlight as ExecsInFlight<unknown>,
  });
  if (runtime && processRuntime) {
    runtime.onExit((id) => {
      void processes
        .sandboxStopped(id)
        .catch((error: unknown) =>
          log.warn({ sandbox_id: id, err: (error as Error).message }, "could not end a stopped sandbox's processes"),
        );
    });
    // The processes the agents kept while this server was away: re-adopted, or marked lost.
    void processes
      .adopt()
      .catch((error: unknown) => log.error({ err: (error as Error).message }, "could not take over processes"));
  }
  const annotationSchemas = new AnnotationSchemaService(db, clock);
  const annotations = new AnnotationService(db, clock, projects, runs);
  const relay =
    overrides.feedbackRelay ?? webhookRelay(config.feedbackWebhookUrl, config.feedbackWebhookTimeoutMs, log);
  const feedback = new FeedbackService(db, clock, relay);
  // On the embedded store telemetry queries run on a replica in a worker thread (replica.ts).
  const replica = "dump" in store && store.kind === "pglite" ? await telemetryReplica(db, store as PgliteDb) : null;
  const telemetryViews = new TelemetryViewService(db, clock, {
    maxCost: config.telemetrySqlMaxCost,
    ...(replica ? { replica } : {}),
    ...(overrides.telemetryLimits ? { limits: overrides.telemetryLimits } : {}),
    ...(config.databaseUrl ? { readerLogins: { connectionString: config.databaseUrl } } : {}),
  });
  const egressAllowlist = new EgressAllowlistService(db, clock);
  const admin = new AdminService(identity, quotas, secrets, sandboxes, egressAllowlist, new HostDirectory(db));
  if (egress && runtime) {
    egress.bind({
      identify: callerDirectory(runtime, sandboxes),
      allowlist: (orgId) => egressAllowlist.list(orgId),
      sandboxOfCredential: async (secret) => {
        const cred = await identity.authenticate(secret).catch(() => null);
        return cred?.sandbox?.sandboxId ?? null;
      },
    });
  }
  const idempotency = new IdempotencyStore(db, clock, config.idempotencyRetentionHours);
  await idempotency.start();
  const blobs =
    overrides.blobs ?? (await openBlobStore(config, config.dataDir, keyring.deriveKey(BLOB_SIGNING_KEY_LABEL)));
  const signedBlobs = blobs instanceof FsBlobStore ? new SignedBlobService(blobs, config.blobs.maxPutBytes) : null;
  const snapshotReplication = new ReplicationRelay();
  const snapshots = new SnapshotService(
    db,
    clock,
    log,
    runtime,
    blobs,
    sandboxes,
    projects,
    config.snapshots,
    snapshotReplication,
    quotas,
    router,
    config.role === "api",
  );
  sandboxLinks.snapshots = snapshots;
  const volumes = new VolumeService(db, clock, log, blobs, projects, config.volumes);
  signedBlobs?.observeUploads(volumes.uploadObserver());
  sandboxLinks.volumes = volumes;
  projects.useVolumes(volumes);
  const volumeCache = new VolumeCache(blobs, config.volumes.cacheDir, {
    budget: config.volumes.cacheBudget,
    pinned: () => pinnedVersions(db),
  });
  volumeHints = () => volumeCache.cachedVersions(HOST_HINT_LIMIT);
  const egressLedger = new EventLedger(db, clock, log);
  const secretEgress = new SecretEgress({
    secrets,
    ca: egressCa,
    ledger: egressLedger,
    bindings: (id) => sandboxes.secretBindingsOf(id),
    clock,
    log,
    extraCaPem: config.egress.extraCaFile ? await readFile(config.egress.extraCaFile, "utf8") : "",
  });
  // The gateway hands CONNECTs to bound secrets' hosts to secret egress, and records refusals in the ledger.
  egress?.use({ interceptor: secretEgress, ledger: egressLedger });
  const tails = new TailService(db, tailHub, config.tail, runs, sandboxes);
  const otlp = new OtlpService(db, clock, runs, sandboxes);
  const sessions = new SessionService(
    identity,
    sandboxes,
    runtime,
    new SessionTokenSigner(keyring.deriveKey(SESSION_TOKEN_KEY_LABEL)),
    clock,
    log,
    config.sessionPlaneUrl,
  );
  sandboxLinks.endpoints = sessions;
  // A plane relays a request for another host's sandbox to its owner's plane (hosts rows).
  sessions.useOwnerPlanes(storeOwnerPlanes(db, () => host?.id ?? null));
  const metrics = new WarrenMetrics({
    stateCacheSeconds: config.metrics.stateCacheSeconds,
    processMetrics: overrides.processMetrics ?? true,
  });
  metrics.countSandboxStatesWith(() => countSandboxesByState(db));
  const pullBytes = runtime?.imagePullBytes?.bind(runtime);
  if (pullBytes) metrics.readPullBytesFrom(pullBytes);
  const storageReport = runtime?.storageReport?.bind(runtime);
  if (storageReport) metrics.readStorageFrom(storageReport);
  execs.useMetrics(metrics);
  annotations.useMetrics(metrics);
  telemetryViews.useMetrics(metrics);
  snapshots.useMetrics(metrics);
  const nodeApi =
    host && runtime
      ? new NodeApi(
          host,
          grants,
          ownerOperations({
            sandboxOf: (id) => sandboxes.rowForHost(id),
            host,
            runtime,
            sandboxAddress: (id) => runtime.portAddress(id),
            exec: (claims, request) => execs.execForRoute(claims, request),
            snapshot: (claims, snapshotId) => snapshots.takeForRoute(claims, snapshotId),
            sessionBegan: (sessionId, sandboxId, ended) =>
              execsInFlight.began(sessionId, sandboxId, ended as Promise<ExecResponse>),
            sessionEnded: (sessionId) => execsInFlight.ended(sessionId),
            pool: runtime instanceof PooledRuntime ? runtime : null,
          }),
        )
      : null;
  const metricsAccess = new MetricsService(metrics, identity, admin, config.metrics.token);
  const tracing = Tracing.open(config.tracing, API_VERSION);
  const container: Container = {
    config,
    log,
    db,
    clock,
    identity,
    projects,
    runs,
    workloads,
    secrets,
    annotationSchemas,
    annotations,
    sandboxes,
    sandboxLinks,
    sandboxTransitions,
    reconcileQueue,
    execs,
    execStreams,
    processes,
    streamSockets: new StreamSockets(),
    files,
    runtime,
    host,
    router,
    nodeApi,
    feedback,
    telemetryViews,
    quotas,
    admin,
    idempotency,
    blobs,
    signedBlobs,
    snapshots,
    snapshotReplication,
    tails,
    tailHub,
    otlp,
    volumes,
    volumeCache,
    sshHostKey: () => openHostKey(db, keyring, clock, config.dataDir),
    egressCa,
    egressLedger,
    secretEgress,
    sessions,
    metrics,
    metricsAccess,
    tracing,
    egressAllowlist,
    egress,
  };
  return container;
}

export async function createApp(c: Container): Promise<App> {
  const app = await buildHttp({
    log: c.log,
    bodyLimitBytes: c.config.bodyLimitBytes,
    identity: c.identity,
    idempotency: c.idempotency,
    metrics: c.metrics,
    tracing: c.tracing,
    publicApiUrl: c.config.publicApiUrl,
  });
  registerSystemRoutes(app, c.db);
  registerMetaRoutes(app, c.config, () => c.sessions.publicUrl());
  registerIdentityRoutes(app);
  registerConsoleSessionRoutes(app, c.identity, c.config.consoleSessionTtlSeconds);
  registerConsoleAssets(app, projectFile("console", "dist"));
  registerUsageRoutes(app, c.quotas);
  registerFeedbackRoutes(app, c.feedback);
  registerProjectRoutes(app, c.projects);
  registerRunRoutes(app, c.runs);
  registerWorkloadRoutes(app, c.workloads);
  registerSecretRoutes(app, c.secrets);
  registerAnnotationRoutes(app, c.annotationSchemas, c.annotations);
  registerTelemetryRoutes(app, c.telemetryViews);
  registerSandboxRoutes(app, c.sandboxes, c.execs);
  registerExecStreamRoute(app, c.execStreams, c.streamSockets);
  registerFileRoutes(app, c.files);
  registerProcessRoutes(app, c.processes);
  registerSnapshotRoutes(app, c.snapshots);
  registerAdminRoutes(app, c.admin);
  registerTailRoutes(app, c.tails);
  registerOtlpRoutes(app, c.otlp, c.config.otlp);
  registerVolumeRoutes(app, c.volumes);
  registerSessionRoutes(app, c.sessions);
  if (c.signedBlobs) registerBlobRoutes(app, c.signedBlobs);
  await serveInternalApi(app, c);
  registerMetricsRoutes(app, c.metricsAccess);
  app.addHook("onClose", () => c.blobs.close());
  app.addHook("onClose", () => c.egress?.close());
  app.addHook("onClose", () => c.annotations.close());
  app.addHook("onClose", () => c.tailHub.close());
  app.addHook("onClose", () => c.telemetryViews.close());
  app.addHook("onClose", () => c.egressLedger.close());
  app.addHook("onClose", () => c.idempotency.stop());
  app.addHook("onClose", async () => c.processes.close());
  app.addHook("onClose", () => c.host?.stop());
  app.addHook("onClose", () => c.router.close());
  app.addHook("onClose", () => {
    for (const ws of c.streamSockets.open) ws.terminate();
  });
  // Spans still buffered are sent before the process goes.
  app.addHook("onClose", () => c.tracing?.shutdown());
  // Exec ends written after their answers, before whoever closes the store after the app.
  app.addHook("onClose", () => (c.db instanceof DeferringDb ? c.db.settled() : undefined));
  await app.ready();
  return app;
}

/**
 * The node internal API (WARREN_INTERNAL_LISTEN): listens, publishes its URL in this host's
 * row (WARREN_INTERNAL_URL, else the bound address) and closes with the app. Without the
 * setting no other server can route to this host; it still routes to itself in-process.
 */
async function serveInternalApi(app: App, c: Container): Promise<void> {
  const listen = c.config.internalListen;
  if (!listen || !c.nodeApi || !c.host) return;
  const server = await startInternalApi({
    ...listen,
    api: c.nodeApi,
    bodyLimitBytes: c.config.bodyLimitBytes,
    log: c.log,
  });
  app.addHook("onClose", () => server.close());
  const owner = c.host.owner();
  await publishInternalUrl(c.db, owner.hostId, owner.epoch, c.config.internalUrl || server.boundUrl);
  c.log.info({ address: server.boundUrl }, "internal API is serving");
}

/**
 * What a host publishes of its capacity (docs/hosts.md "Placement"): its memory and CPUs, and
 * the bytes of sandbox images its pool can promise in all (what its live images promise now
 * plus what it could still back), which placement compares with the reservations of its rows.
 */
/** The runtime's background processes (the local driver's, behind the pool too), or null. */
function processRuntimeOf(runtime: RuntimeDriver | null): SandboxProcesses | null {
  const driver = runtime instanceof PooledRuntime ? runtime.driver : runtime;
  return driver && "startProcess" in driver ? (driver as unknown as SandboxProcesses) : null;
}

async function publishedCapacity(runtime: RuntimeDriver | null): Promise<HostCapacity> {
  const compute = runtime?.hostCompute?.();
  const capacity: HostCapacity = compute ? { cpu_millis: compute.cpuMillis, memory_mib: compute.memoryMiB } : {};
  const report = await runtime?.storageReport?.();
  if (report) {
    capacity.storage_bytes = report.promisedBytes + Math.max(0, report.backableBytes - report.mayStillWriteBytes);
  }
  return capacity;
}
