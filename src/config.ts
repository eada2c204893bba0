// The only reader of process.env: one schema of settings with documented defaults.
// Everything else receives the parsed Config.
import { isIPv4 } from "node:net";
import path from "node:path";
import { parseEgressHosts } from "./modules/egress/policy.js";

export interface QuotaDefaults {
  "sandboxes.running": number;
  "sandboxes.total": number;
  "sandboxes.workspace_capacity_gib": number;
  "projects.total": number;
  "snapshots.total": number;
}

export interface SandboxDefaults {
  /** Image of a create that names none. */
  defaultImage: string;
  memoryMiB: number;
  cpuMillis: number;
  pids: number;
  /** 0: no expiry unless the create asks for one. */
  ttlSeconds: number;
  /** 0: idle stopping disabled unless the create asks for it. */
  idleTimeoutSeconds: number;
  workspaceCapacityGiB: number;
  /** How long failed and terminated rows stay readable. */
  retentionSeconds: number;
  /**
   * How often a wait_state long poll re-reads its sandbox when no change notice woke it
   * (milliseconds). Notices come from this server's writes and, through the events table's
   * notifications, from every other server's: the re-read only covers a gap in them.
   */
  waitPollMs: number;
  execTimeoutSeconds: number;
  execOutputCapBytes: number;
  /** Registries (host[:port]) spoken to over plain HTTP besides loopback ones. */
  insecureRegistries: string[];
  imageTagTtlSeconds: number;
  /** Where the local runtime keeps images, bundles and workspaces; default <dataDir>/runtime. */
  runtimeRoot: string;
  /**
   * Started sandboxes of the default shape kept ready per network mode (none, public), so a
   * create of that shape skips `runc run`; 0 turns the pool off (local runtime only).
   */
  poolSize: number;
  /**
   * Images besides the default one the pool keeps warm: the ones this host's creates (of the
   * default resources and standard storage) used most recently; 0 pools the default image only.
   */
  poolRecentImages: number;
  /** Members kept per recent image and network mode it was created in. */
  poolRecentSize: number;
  /**
   * Pool members in all (the default image's first, then the recent images', most recent
   * first): bounds the storage the pool reserves. Default 2 x poolSize + 4.
   */
  poolMaxMembers: number;
  /** Size of every sandbox's root layer filesystem (changes to `/`), whole GiB. */
  rootLayerGiB: number;
  /** Size of a standard sandbox's /workspace filesystem, whole GiB. */
  standardWorkspaceGiB: number;
  /** Size of the local runtime's XFS storage pool (a sparse file); null: the size of the filesystem holding the runtime root. */
  storagePoolGiB: number | null;
  /** Host space (whole GiB) the storage admission never promises to sandboxes. */
  storageReserveGiB: number;
  /**
   * How many times what the host can back (free space minus the reserve) the sandboxes'
   * filesystem sizes may add up to: 1 promises nothing the host cannot back.
   */
  storageOvercommit: number;
  /** A blank image template no create has used for this long is removed from the pool. */
  storageTemplateIdleSeconds: number;
  /**
   * How many times the host's memory (and CPUs) the memory_mb (and cpu_millis) of running
   * sandboxes may add up to (modules/sandboxes/compute-admission.ts); 1 promises nothing the
   * host cannot back. One sandbox never gets more than the host has.
   */
  memoryOvercommit: number;
  cpuOvercommit: number;
  /**
   * Which host a create goes to (WARREN_PLACEMENT, docs/hosts.md "Placement"): `local_first`
   * (default while exec and sessions are not routed to the owner) the server the create came
   * through while it is a candidate, else another host by placement; `spread` every create by
   * placement's best-of-K over all candidates.
   */
  placement: "local_first" | "spread";
  /** Sandboxes run in a user namespace of their own (the kernel's per-user counts are theirs). */
  userNamespaces: boolean;
  /**
   * The host uids owning the sandboxes' user namespaces (WARREN_SANDBOX_UID_RANGE, `first-last`;
   * default 1073741824-2147483647). Servers on one machine claim uids machine-wide under
   * /run/warren, so they may share a range; servers that do not share /run need disjoint ones.
   */
  userNamespaceUids: { first: number; count: number };
  /**
   * Sandboxes' ids 0..65535 map to a host block of 65536 of their own (WARREN_SANDBOX_ID_MAPPING,
   * default false; needs userNamespaces): root inside is an unprivileged host uid
   * (src/drivers/runtime/local/id-mapping.ts).
   */
  idMapping: boolean;
  /**
   * The blocks of 65536 host ids mapped sandboxes draw from (WARREN_SANDBOX_ID_MAPPING_RANGE,
   * `first-last`; default 2147483648-4294901759), claimed machine-wide like the owner uids.
   */
  idMappingBlocks: { first: number; count: number };
}

export interface SnapshotSettings {
  /** Keep a snapshot's host copy after replication; false drops it (restores then rebuild from the blob store). */
  keepLocalCopies: boolean;
  /** Seconds between collections of chunks no snapshot references. */
  gcIntervalSeconds: number;
  /** A chunk a replication touched within this many seconds is never collected. */
  gcGraceSeconds: number;
}

/** The S3 blob store's settings (WARREN_BLOB_STORE=s3). */
export interface S3Settings {
  bucket: string;
  /** An S3-compatible server's URL; empty for AWS. */
  endpoint: string;
  region: string;
  /** Static credentials; both empty: the AWS SDK's default provider chain. */
  accessKeyId: string;
  secretAccessKey: string;
  forcePathStyle: boolean;
  /** Prefix of every key in the bucket; empty for none. */
  prefix: string;
}

export interface BlobSettings {
  /** Where snapshots (and volumes) replicate to: `<dataDir>/blobs` or an S3 bucket. */
  store: "fs" | "s3";
  /** Largest body a presigned PUT to Warren's own blob route may carry (fs store). */
  maxPutBytes: number;
  s3: S3Settings;
}

/** Volumes (src/modules/volumes/): pushes and the host's cache of mounted versions. */
export interface VolumeSettings {
  /** How long a push (its manifest URL, its blob upload URLs) stays open, seconds. */
  pushTtlSeconds: number;
  /** Largest manifest a push may upload (StartVolumePush's max_manifest_bytes). */
  maxManifestBytes: number;
  /** Where mounted versions are materialized, one directory per version: default <dataDir>/volume-cache. */
  cacheDir: string;
  /** Seconds between passes of the volume collector (unreferenced blobs, unpinned cache entries). */
  gcIntervalSeconds: number;
  /** How long a verified blob no version references is kept after it was last used (at least the push TTL). */
  gcGraceSeconds: number;
  /** Files (and so host inodes, directories aside) a version may hold: what mounting it costs the host. */
  maxFiles: number;
  /**
   * What one organization's versions may cost in the host's volume cache: bytes copied there
   * and files plus directories (docs/volumes.md "Mounts"); a mount past it evicts the
   * organization's unused versions, else fails with `volume_cache_exhausted`.
   */
  cacheBudget: { bytes: number; inodes: number };
}

/** The run tail (src/modules/tail/). */
export interface TailSettings {
  /** Milliseconds between heartbeat comments on a stream, which also re-check the run. */
  heartbeatMs: number;
  /** Milliseconds between checks of every open tail while notifications are unavailable. */
  fallbackPollMs: number;
  /** Open tail streams per organization on this server; past it a new one is 429. */
  maxStreamsPerOrg: number;
  /** Open tail streams on this server. */
  maxStreamsPerServer: number;
  /** Payload bytes one read of a tail takes from the store (a larger event is read alone). */
  pageBytes: number;
  /** Payload bytes an organization's tails may hold read but not yet written to their sockets. */
  maxBufferedBytesPerOrg: number;
}

/** OTLP trace ingest, POST /v1/traces (src/modules/otlp/). */
export interface OtlpSettings {
  /** Bytes of a request body as sent (compressed or not); past it the request is 413. */
  maxBodyBytes: number;
  /** Bytes of a body once decompressed; past it the request is 413. */
  maxDecodedBytes: number;
  /** Spans one request may hold. */
  maxSpans: number;
  /** Attribute values, array elements, span events and links one request may hold together. */
  maxValues: number;
  /** Requests this server reads, decodes and stores at once; more are 503 with Retry-After (OTLP retries them). */
  maxConcurrentRequests: number;
}

/** Secret egress (src/modules/egress/, docs/secret-egress.md). */
export interface SecretEgressSettings {
  /** The host MODEL_GATEWAY secrets are injected for (WARREN_MODEL_GATEWAY_HOST); empty: such bindings are 422. */
  modelGatewayHost: string;
}

/** Prometheus metrics (GET /metrics, docs/metrics.md). */
export interface MetricsSettings {
  /**
   * A bearer token that may scrape GET /metrics besides an owner key of the operator
   * organization (WARREN_METRICS_TOKEN); empty: only such a key. Never logged.
   */
  token: string;
  /** Seconds the sandboxes-by-state gauge reuses its count from the store. */
  stateCacheSeconds: number;
}

/**
 * OpenTelemetry traces (src/lib/tracing.ts) from the standard OTEL_* variables; off unless
 * OTEL_TRACES_EXPORTER is `otlp` (or an OTLP endpoint is set and the exporter is not `none`).
 */
export interface TracingSettings {
  enabled: boolean;
  /** Full URL of the OTLP/HTTP traces endpoint (`<OTEL_EXPORTER_OTLP_ENDPOINT>/v1/traces`). */
  url: string;
  /** Headers sent with every export (OTEL_EXPORTER_OTLP_[TRACES_]HEADERS); never put into spans or logs. */
  headers: Record<string, string>;
  serviceName: string;
  /** Fraction of root spans kept (OTEL_TRACES_SAMPLER_ARG with a ratio sampler); 1 keeps all. */
  sampleRatio: number;
  /** Milliseconds between batch exports (OTEL_BSP_SCHEDULE_DELAY). */
  exportDelayMs: number;
}

/** The egress gateway (src/modules/egress/, docs/egress.md). */
export interface EgressSettings {
  /** The gateway's TCP port on the host (WARREN_EGRESS_GATEWAY_PORT, default 8091; 0 picks a free one). */
  gatewayPort: number;
  /** The virtual address sandboxes reach it at, port 80 (WARREN_GATEWAY_ADDRESS, default 169.254.213.1). */
  gatewayAddress: string;
  /** Names the gateway resolves to these IPv4 addresses instead of DNS (WARREN_EGRESS_HOSTS "name=ipv4,..."). */
  hosts: Map<string, string>;
  /** Extra PEM CAs trusted for upstream TLS besides the system store (WARREN_EGRESS_EXTRA_CA_FILE). */
  extraCaFile: string;
}

/**
 * What this process is in a deployment (docs/hosts.md "Roles"): `all` (default) the API and a
 * host in one process, as `make run`; `api` the API, the session-plane and SSH edges and the
 * deployment-wide jobs, with no runtime and never a host; `node` a host (runtime, reconciler,
 * warm pool, its own plane and SSH listeners) that also serves /v1 but runs no deployment-wide
 * collectors.
 */
export const ROLES = ["all", "api", "node"] as const;
export type Role = (typeof ROLES)[number];

export interface Config {
  /** WARREN_ROLE: all (default), api or node. */
  role: Role;
  /**
   * The address (IP or name, no port) other servers of the deployment reach this host's
   * listeners at (WARREN_ADVERTISE_HOST): its plane and SSH addresses in its hosts row are
   * `<this>:<bound port>` (advertisedAddress). Empty: each listener's own host, or for a
   * wildcard one WARREN_LISTEN's host, or 127.0.0.1.
   */
  advertiseHost: string;
  listenHost: string;
  listenPort: number;
  dataDir: string;
  /** PostgreSQL connection string; when empty the embedded PGlite store in dataDir is used. */
  databaseUrl: string;
  bootstrapApiKey: string;
  bootstrapOrgSlug: string;
  logLevel: string;
  /**
   * Milliseconds a shutdown (SIGTERM, SIGINT) may take: open streams are ended at once and
   * connections still open after half of it are cut; past it the process exits with 1.
   */
  shutdownTimeoutMs: number;
  /** Bytes of log lines held for a stdout reader that falls behind; past it lines are dropped (and counted). */
  logQueueBytes: number;
  /** Client-visible sibling service URLs (GetServiceConfig). */
  publicApiUrl: string;
  /**
   * The session plane (port endpoints, src/http/session-plane.ts): its listener
   * (WARREN_SESSION_LISTEN, host:port; port 0 picks a free one) or null when none runs, and
   * its public base URL (WARREN_SESSION_PLANE_URL; empty: derived from the bound address).
   */
  sessionListen: { host: string; port: number } | null;
  sessionPlaneUrl: string;
  /**
   * The deployment's SSH host (WARREN_SSH_HOST), the sandbox record's `ssh.host` and
   * GetServiceConfig's `ssh_host` through every server; and its port (WARREN_SSH_PUBLIC_PORT,
   * default: the gateway's bound port). Both name the deployment, never a process.
   */
  sshHost: string;
  sshPublicPort: number | null;
  /** Where the SSH gateway listens (WARREN_SSH_LISTEN); null: no gateway. */
  sshListen: { host: string; port: number } | null;
  /**
   * The node internal API other servers route a sandbox's exec, session, snapshot and host
   * changes through (docs/hosts.md "Routing"): its listener (WARREN_INTERNAL_LISTEN,
   * host:port, port 0 picks a free one) or null when none runs (a single host routes to
   * itself in-process), and the URL other hosts reach it at (WARREN_INTERNAL_URL; empty:
   * derived from the bound address).
   */
  internalListen: { host: string; port: number } | null;
  internalUrl: string;
  feedbackWebhookUrl: string;
  feedbackWebhookTimeoutMs: number;
  bodyLimitBytes: number;
  idempotencyRetentionHours: number;
  authCacheTtlMs: number;
  /** How long a console session (the browser's cookie, exchanged for an API key) lives. */
  consoleSessionTtlSeconds: number;
  /**
   * Embedded store only: seconds between VACUUM (ANALYZE) passes (PGlite has no
   * autovacuum). Default 600; 0 turns them off.
   */
  pgliteVacuumIntervalSeconds: number;
  quotaDefaults: QuotaDefaults;
  /** Base64 of 32 bytes wrapping the secret data keys; when empty, a key file in dataDir is used. */
  masterKey: string;
  /** Earlier master keys (base64), still accepted for unwrapping until a rotation re-wraps everything. */
  masterKeyPrevious: string[];
  sandbox: SandboxDefaults;
  snapshots: SnapshotSettings;
  blobs: BlobSettings;
  volumes: VolumeSettings;
  tail: TailSettings;
  otlp: OtlpSettings;
  secretEgress: SecretEgressSettings;
  egress: EgressSettings;
  /**
   * Telemetry SQL: the highest planner cost estimate (EXPLAIN's total cost) a query may have;
   * null: the store's default (PGlite 250,000; PostgreSQL none, its statement_timeout
   * cancels); 0: no cost guard on either store (docs/telemetry-sql.md).
   */
  telemetrySqlMaxCost: number | null;
  metrics: MetricsSettings;
  tracing: TracingSettings;
  /** Admin CLI: the server to go through (else the lock file in dataDir, else the store directly). */
  adminUrl: string;
  /** Admin CLI: an owner key of the operator organization, for going through the server. */
  adminApiKey: string;
}

type Env = Record<string, string | undefined>;

export class ConfigError extends Error {}

function intSetting(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}`);
  return value;
}

function choiceSetting<T extends string>(env: Env, name: string, choices: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!(choices as readonly string[]).includes(raw))
    throw new ConfigError(`${name} must be one of ${choices.join(", ")}`);
  return raw as T;
}

function boolSetting(env: Env, name: string, fallback: boolean): boolean {
  const raw = (env[name] ?? "").toLowerCase();
  if (raw === "") return fallback;
  if (["1", "true", "yes"].includes(raw)) return true;
  if (["0", "false", "no"].includes(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got "${env[name]}"`);
}

function secretEgressSettings(env: Env): SecretEgressSettings {
  const modelGatewayHost = (env.WARREN_MODEL_GATEWAY_HOST || "").toLowerCase();
  const label = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
  if (modelGatewayHost && !new RegExp(`^(?=.{1,253}$)${label}(?:\\.${label})+$`).test(modelGatewayHost)) {
    throw new ConfigError("WARREN_MODEL_GATEWAY_HOST must be a host name (no scheme, port or path)");
  }
  return { modelGatewayHost };
}

function blobSettings(env: Env): BlobSettings {
  const store = env.WARREN_BLOB_STORE || "fs";
  if (store !== "fs" && store !== "s3") throw new ConfigError(`WARREN_BLOB_STORE must be fs or s3, got "${store}"`);
  const s3: S3Settings = {
    bucket: env.WARREN_S3_BUCKET || "",
    endpoint: env.WARREN_S3_ENDPOINT || "",
    region: env.WARREN_S3_REGION || "us-east-1",
    accessKeyId: env.WARREN_S3_ACCESS_KEY_ID || "",
    secretAccessKey: env.WARREN_S3_SECRET_ACCESS_KEY || "",
    forcePathStyle: boolSetting(env, "WARREN_S3_FORCE_PATH_STYLE", false),
    prefix: env.WARREN_S3_PREFIX || "",
  };
  if (store === "s3") {
    if (!s3.bucket) throw new ConfigError("WARREN_BLOB_STORE=s3 needs WARREN_S3_BUCKET");
    if (!s3.accessKeyId !== !s3.secretAccessKey) {
      throw new ConfigError("set both WARREN_S3_ACCESS_KEY_ID and WARREN_S3_SECRET_ACCESS_KEY, or neither");
    }
    if (s3.endpoint && !/^https?:\/\/[^/]/.test(s3.endpoint)) {
      throw new ConfigError("WARREN_S3_ENDPOINT must be an http:// or https:// URL");
    }
  }
  return {
    store,
    maxPutBytes: intSetting(env, "WARREN_BLOB_MAX_PUT_BYTES", 256 * 1_048_576, 1, 64 * 1024 * 1_048_576),
    s3,
  };
}

/** `k1=v1,k2=v2` with percent-encoded values, as the OTLP header variables are written. */
function otlpHeaders(raw: string, name: string): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const pair of raw.split(",")) {
    if (pair.trim() === "") continue;
    const at = pair.indexOf("=");
    if (at <= 0) throw new ConfigError(`${name} must be key=value pairs separated by commas`);
    try {
      headers[decodeURIComponent(pair.slice(0, at).trim())] = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      throw new ConfigError(`${name} holds a value that is not valid percent-encoding`);
    }
  }
  return headers;
}

function tracingSettings(env: Env): TracingSettings {
  const exporter = (env.OTEL_TRACES_EXPORTER || "").trim().toLowerCase();
  const tracesEndpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || "";
  const baseEndpoint = env.OTEL_EXPORTER_OTLP_ENDPOINT || "";
  if (exporter !== "" && exporter !== "otlp" && exporter !== "none") {
    throw new ConfigError(`OTEL_TRACES_EXPORTER must be otlp or none, got "${exporter}"`);
  }
  const enabled = exporter === "otlp" || (exporter === "" && (tracesEndpoint !== "" || baseEndpoint !== ""));
  // Spans are sent as OTLP/HTTP JSON, which OTLP/HTTP receivers take on the same path as
  // protobuf; gRPC is not spoken (docs/metrics.md).
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || "http/json";
  if (enabled && protocol !== "http/json" && protocol !== "http/protobuf") {
    throw new ConfigError(`OTEL_EXPORTER_OTLP_PROTOCOL: only OTLP over HTTP is supported, got "${protocol}"`);
  }
  // The signal-specific endpoint is used as is; the base one gets the signal's path (OTLP spec).
  const url = tracesEndpoint || `${(baseEndpoint || "http://localhost:4318").replace(/\/+$/, "")}/v1/traces`;
  if (enabled && !/^https?:\/\/[^/]/.test(url))
    throw new ConfigError("the OTLP endpoint must be an http:// or https:// URL");
  const sampler = env.OTEL_TRACES_SAMPLER || "parentbased_always_on";
  let sampleRatio = 1;
  if (sampler === "always_off" || sampler === "parentbased_always_off") sampleRatio = 0;
  else if (sampler === "traceidratio" || sampler === "parentbased_traceidratio") {
    const ratio = Number(env.OTEL_TRACES_SAMPLER_ARG ?? "1");
    if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) {
      throw new ConfigError("OTEL_TRACES_SAMPLER_ARG must be a ratio between 0 and 1");
    }
    sampleRatio = ratio;
  } else if (sampler !== "always_on" && sampler !== "parentbased_always_on") {
    throw new ConfigError(`OTEL_TRACES_SAMPLER "${sampler}" is not supported`);
  }
  return {
    enabled: enabled && env.OTEL_SDK_DISABLED !== "true",
    url,
    headers: {
      ...otlpHeaders(env.OTEL_EXPORTER_OTLP_HEADERS || "", "OTEL_EXPORTER_OTLP_HEADERS"),
      ...otlpHeaders(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS || "", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
    },
    serviceName: env.OTEL_SERVICE_NAME || "warren",
    sampleRatio,
    exportDelayMs: intSetting(env, "OTEL_BSP_SCHEDULE_DELAY", 5000, 0, 600_000),
  };
}

function egressSettings(env: Env): EgressSettings {
  const gatewayAddress = env.WARREN_GATEWAY_ADDRESS || "169.254.213.1";
  if (!isIPv4(gatewayAddress) || !gatewayAddress.startsWith("169.254.")) {
    throw new ConfigError(
      `WARREN_GATEWAY_ADDRESS must be a link-local IPv4 address (169.254.x.y), got "${gatewayAddress}"`,
    );
  }
  let hosts: Map<string, string>;
  try {
    hosts = parseEgressHosts(env.WARREN_EGRESS_HOSTS || "");
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  return {
    gatewayPort: intSetting(env, "WARREN_EGRESS_GATEWAY_PORT", 8091, 0, 65535),
    gatewayAddress,
    hosts,
    extraCaFile: env.WARREN_EGRESS_EXTRA_CA_FILE ? path.resolve(env.WARREN_EGRESS_EXTRA_CA_FILE) : "",
  };
}

function uidRangeSetting(env: Env): { first: number; count: number } {
  const raw = env.WARREN_SANDBOX_UID_RANGE || "";
  if (raw === "") return { first: 2 ** 30, count: 2 ** 30 };
  const match = /^(\d{1,10})-(\d{1,10})$/.exec(raw);
  const first = Number(match?.[1]);
  const last = Number(match?.[2]);
  if (!match || first < 1 || last < first || last >= 2 ** 32 - 1) {
    throw new ConfigError(
      `WARREN_SANDBOX_UID_RANGE must be first-last, two host uids from 1 to 4294967294, got "${raw}"`,
    );
  }
  return { first, count: last - first + 1 };
}

/** WARREN_SANDBOX_ID_MAPPING_RANGE: host uids `first-last`, as blocks of 65536 from `first`. */
function idMappingBlocksSetting(env: Env): { first: number; count: number } {
  const raw = env.WARREN_SANDBOX_ID_MAPPING_RANGE || "";
  if (raw === "") return { first: 2 ** 31, count: 0x7fff };
  const match = /^(\d{1,10})-(\d{1,10})$/.exec(raw);
  const first = Number(match?.[1]);
  const last = Number(match?.[2]);
  const count = Math.floor((last - first + 1) / 65_536);
  if (!match || first < 65_536 || last < first || last >= 2 ** 32 - 1 || count < 1) {
    throw new ConfigError(
      `WARREN_SANDBOX_ID_MAPPING_RANGE must be first-last, host uids from 65536 to 4294967294 holding at least one block of 65536, got "${raw}"`,
    );
  }
  return { first, count };
}

function parseListen(raw: string, name = "WARREN_LISTEN"): { host: string; port: number } {
  const match = /^(.*):(\d{1,5})$/.exec(raw);
  if (!match) throw new ConfigError(`${name} must be host:port, got "${raw}"`);
  const port = Number(match[2]);
  if (port > 65535) throw new ConfigError(`${name} port must be at most 65535`);
  return { host: (match[1] ?? "").replace(/^\[|\]$/g, "") || "127.0.0.1", port };
}

/** The host clients reach a listener on: its own, unless it listens on every address (then the API's). */
function publicHostOf(host: string, apiHost: string): string {
  const wildcard = (h: string) => h === "0.0.0.0" || h === "::" || h === "";
  if (!wildcard(host)) return host;
  return wildcard(apiHost) ? "127.0.0.1" : apiHost;
}

function sessionPlaneUrlSetting(env: Env): string {
  const raw = env.WARREN_SESSION_PLANE_URL || "";
  if (raw === "") return "";
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`WARREN_SESSION_PLANE_URL must be an http:// or https:// URL, got "${raw}"`);
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || url.pathname !== "/" || url.search || url.hash) {
    throw new ConfigError("WARREN_SESSION_PLANE_URL must be an http:// or https:// base URL without a path");
  }
  // Endpoints are `<port>-<sandbox id>.<host>`: an IP address has no subdomains.
  if (/^[\d.]+$|^\[/.test(url.hostname)) {
    throw new ConfigError("WARREN_SESSION_PLANE_URL needs a host name (with wildcard DNS), not an IP address");
  }
  return url.origin;
}

/** Where other servers of the deployment reach a listener of this one bound at `host`:`port` (`host:port`). */
export function advertisedAddress(
  config: Pick<Config, "advertiseHost" | "listenHost">,
  host: string,
  port: number,
): string {
  const chosen = config.advertiseHost || publicHostOf(host, config.listenHost);
  return `${chosen.includes(":") ? `[${chosen}]` : chosen}:${port}`;
}

/** WARREN_ADVERTISE_HOST: a host name or an IP address, no scheme, port or path. */
function advertiseHostSetting(env: Env): string {
  const raw = env.WARREN_ADVERTISE_HOST || "";
  if (raw === "") return "";
  if (!/^[A-Za-z0-9.-]{1,253}$/.test(raw) && !/^[0-9a-fA-F:]{2,39}$/.test(raw)) {
    throw new ConfigError(`WARREN_ADVERTISE_HOST must be a host name or an IP address (no port), got "${raw}"`);
  }
  return raw;
}

function internalUrlSetting(env: Env): string {
  const raw = env.WARREN_INTERNAL_URL || "";
  if (!raw) return "";
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`WARREN_INTERNAL_URL must be an http:// URL, got "${raw}"`);
  }
  if (url.protocol !== "http:" || (url.pathname !== "/" && url.pathname !== "") || url.search || url.username) {
    throw new ConfigError("WARREN_INTERNAL_URL must be an http:// base URL without a path");
  }
  return url.origin;
}

export function loadConfig(env: Env = process.env): Config {
  const role = choiceSetting(env, "WARREN_ROLE", ROLES, "all");
  const listen = parseListen(env.WARREN_LISTEN || "127.0.0.1:8080");
  const hostForUrl = listen.host.includes(":") ? `[${listen.host}]` : listen.host;
  const dataDir = path.resolve(env.WARREN_DATA_DIR || "./data");
  const sshListen = env.WARREN_SSH_LISTEN ? parseListen(env.WARREN_SSH_LISTEN, "WARREN_SSH_LISTEN") : null;
  const sessionListen = env.WARREN_SESSION_LISTEN
    ? parseListen(env.WARREN_SESSION_LISTEN, "WARREN_SESSION_LISTEN")
    : null;
  // Several servers answer for one deployment: the names clients get must not depend on
  // which one answered, so a role of a many-server deployment takes them from settings.
  if (role !== "all" && sessionListen && !env.WARREN_SESSION_PLANE_URL) {
    throw new ConfigError(
      `WARREN_ROLE=${role} with WARREN_SESSION_LISTEN needs WARREN_SESSION_PLANE_URL (the deployment's)`,
    );
  }
  if (role !== "all" && sshListen && !env.WARREN_SSH_HOST) {
    throw new ConfigError(`WARREN_ROLE=${role} with WARREN_SSH_LISTEN needs WARREN_SSH_HOST (the deployment's)`);
  }
  return {
    role,
    advertiseHost: advertiseHostSetting(env),
    listenHost: listen.host,
    listenPort: listen.port,
    dataDir,
    databaseUrl: env.DATABASE_URL || "",
    bootstrapApiKey: env.WARREN_BOOTSTRAP_API_KEY || "",
    bootstrapOrgSlug: "default",
    logLevel: env.WARREN_LOG_LEVEL || "info",
    shutdownTimeoutMs: intSetting(env, "WARREN_SHUTDOWN_TIMEOUT_MS", 10_000, 100, 600_000),
    logQueueBytes: intSetting(env, "WARREN_LOG_QUEUE_BYTES", 4 * 1024 * 1024, 4096, 1024 * 1024 * 1024),
    publicApiUrl: env.WARREN_PUBLIC_API_URL || `http://${hostForUrl}:${listen.port}`,
    sessionListen,
    sessionPlaneUrl: sessionPlaneUrlSetting(env),
    sshHost: env.WARREN_SSH_HOST || (sshListen ? publicHostOf(sshListen.host, listen.host) : ""),
    sshPublicPort: env.WARREN_SSH_PUBLIC_PORT ? intSetting(env, "WARREN_SSH_PUBLIC_PORT", 22, 1, 65535) : null,
    sshListen,
    internalListen: env.WARREN_INTERNAL_LISTEN
      ? parseListen(env.WARREN_INTERNAL_LISTEN, "WARREN_INTERNAL_LISTEN")
      : null,
    internalUrl: internalUrlSetting(env),
    feedbackWebhookUrl: env.WARREN_FEEDBACK_WEBHOOK_URL || "",
    feedbackWebhookTimeoutMs: intSetting(env, "WARREN_FEEDBACK_WEBHOOK_TIMEOUT_MS", 5000, 100, 60000),
    bodyLimitBytes: intSetting(env, "WARREN_BODY_LIMIT_BYTES", 1_048_576, 1024, 64 * 1_048_576),
    idempotencyRetentionHours: intSetting(env, "WARREN_IDEMPOTENCY_RETENTION_HOURS", 24, 1, 24 * 30),
    authCacheTtlMs: intSetting(env, "WARREN_AUTH_CACHE_TTL_MS", 2000, 0, 60000),
    consoleSessionTtlSeconds: intSetting(env, "WARREN_CONSOLE_SESSION_TTL_SECONDS", 43_200, 60, 30 * 86_400),
    pgliteVacuumIntervalSeconds: intSetting(env, "WARREN_PGLITE_VACUUM_INTERVAL_SECONDS", 600, 0, 86_400),
    masterKey: env.WARREN_MASTER_KEY || "",
    masterKeyPrevious: (env.WARREN_MASTER_KEY_PREVIOUS || "").split(",").filter((key) => key.length > 0),
    sandbox: {
      defaultImage: env.WARREN_DEFAULT_IMAGE || "docker.io/library/debian:bookworm-slim",
      memoryMiB: intSetting(env, "WARREN_SANDBOX_MEMORY_MB", 512, 16, 1_048_576),
      cpuMillis: intSetting(env, "WARREN_SANDBOX_CPU_MILLIS", 1000, 50, 128_000),
      pids: intSetting(env, "WARREN_SANDBOX_PIDS", 512, 16, 1_000_000),
      ttlSeconds: intSetting(env, "WARREN_SANDBOX_TTL_SECONDS", 0, 0, 31_536_000),
      idleTimeoutSeconds: intSetting(env, "WARREN_SANDBOX_IDLE_TIMEOUT_SECONDS", 0, 0, 86_400),
      workspaceCapacityGiB: intSetting(env, "WARREN_WORKSPACE_GIB", 10, 1, 16_384),
      retentionSeconds: intSetting(env, "WARREN_SANDBOX_RETENTION_SECONDS", 3600, 0, 31_536_000),
      waitPollMs: intSetting(env, "WARREN_SANDBOX_WAIT_POLL_MS", 1000, 50, 600_000),
      execTimeoutSeconds: intSetting(env, "WARREN_EXEC_TIMEOUT_SECONDS", 300, 1, 3600),
      execOutputCapBytes: intSetting(env, "WARREN_EXEC_OUTPUT_CAP_BYTES", 1_048_576, 1024, 1_048_576),
      insecureRegistries: (env.WARREN_INSECURE_REGISTRIES || "").split(",").filter((host) => host.length > 0),
      imageTagTtlSeconds: intSetting(env, "WARREN_IMAGE_TAG_TTL_SECONDS", 10, 0, 86_400),
      runtimeRoot: path.resolve(env.WARREN_RUNTIME_ROOT || path.join(env.WARREN_DATA_DIR || "./data", "runtime")),
      poolSize: intSetting(env, "WARREN_SANDBOX_POOL_SIZE", 2, 0, 64),
      poolRecentImages: intSetting(env, "WARREN_SANDBOX_POOL_RECENT_IMAGES", 4, 0, 64),
      poolRecentSize: intSetting(env, "WARREN_SANDBOX_POOL_RECENT_SIZE", 2, 0, 16),
      // Default: the default image's members (2 per mode by default) and 4 more.
      poolMaxMembers: intSetting(
        env,
        "WARREN_SANDBOX_POOL_MAX_MEMBERS",
        2 * intSetting(env, "WARREN_SANDBOX_POOL_SIZE", 2, 0, 64) + 4,
        0,
        256,
      ),
      rootLayerGiB: intSetting(env, "WARREN_ROOT_LAYER_GIB", 10, 1, 16_384),
      standardWorkspaceGiB: intSetting(env, "WARREN_STANDARD_WORKSPACE_GIB", 10, 1, 16_384),
      storagePoolGiB: env.WARREN_STORAGE_POOL_GIB ? intSetting(env, "WARREN_STORAGE_POOL_GIB", 0, 1, 1_048_576) : null,
      storageReserveGiB: intSetting(env, "WARREN_STORAGE_RESERVE_GIB", 5, 0, 1_048_576),
      storageOvercommit: intSetting(env, "WARREN_STORAGE_OVERCOMMIT", 8, 1, 1000),
      storageTemplateIdleSeconds: intSetting(env, "WARREN_STORAGE_TEMPLATE_IDLE_SECONDS", 600, 1, 86_400),
      memoryOvercommit: intSetting(env, "WARREN_MEMORY_OVERCOMMIT", 2, 1, 1000),
      cpuOvercommit: intSetting(env, "WARREN_CPU_OVERCOMMIT", 8, 1, 1000),
      placement: choiceSetting(env, "WARREN_PLACEMENT", ["local_first", "spread"], "local_first"),
      userNamespaces: boolSetting(env, "WARREN_SANDBOX_USER_NAMESPACES", true),
      userNamespaceUids: uidRangeSetting(env),
      idMapping: boolSetting(env, "WARREN_SANDBOX_ID_MAPPING", true),
      idMappingBlocks: idMappingBlocksSetting(env),
    },
    snapshots: {
      keepLocalCopies: choiceSetting(env, "WARREN_SNAPSHOT_LOCAL_COPIES", ["keep", "drop"], "keep") === "keep",
      gcIntervalSeconds: intSetting(env, "WARREN_BLOB_GC_INTERVAL_SECONDS", 600, 1, 86_400),
      gcGraceSeconds: intSetting(env, "WARREN_BLOB_GC_GRACE_SECONDS", 3600, 0, 30 * 86_400),
    },
    blobs: blobSettings(env),
    volumes: {
      pushTtlSeconds: intSetting(env, "WARREN_VOLUME_PUSH_TTL_SECONDS", 3600, 60, 86_400),
      maxManifestBytes: intSetting(env, "WARREN_VOLUME_MAX_MANIFEST_BYTES", 64 * 1_048_576, 1024, 1024 * 1_048_576),
      cacheDir: path.resolve(env.WARREN_VOLUME_CACHE_DIR || path.join(dataDir, "volume-cache")),
      gcIntervalSeconds: intSetting(env, "WARREN_VOLUME_GC_INTERVAL_SECONDS", 600, 1, 86_400),
      gcGraceSeconds: intSetting(env, "WARREN_VOLUME_GC_GRACE_SECONDS", 2 * 3600, 0, 30 * 86_400),
      maxFiles: intSetting(env, "WARREN_VOLUME_MAX_FILES", 100_000, 1, 1_000_000),
      cacheBudget: {
        bytes: intSetting(env, "WARREN_VOLUME_CACHE_ORG_BYTES", 16 * 1024 ** 3, 1_048_576, 2 ** 50),
        inodes: intSetting(env, "WARREN_VOLUME_CACHE_ORG_INODES", 1_000_000, 1000, 100_000_000),
      },
    },
    tail: {
      heartbeatMs: intSetting(env, "WARREN_TAIL_HEARTBEAT_MS", 15_000, 10, 300_000),
      fallbackPollMs: intSetting(env, "WARREN_TAIL_FALLBACK_POLL_MS", 1000, 10, 60_000),
      maxStreamsPerOrg: intSetting(env, "WARREN_TAIL_MAX_STREAMS_PER_ORG", 500, 1, 1_000_000),
      maxStreamsPerServer: intSetting(env, "WARREN_TAIL_MAX_STREAMS", 2000, 1, 1_000_000),
      pageBytes: intSetting(env, "WARREN_TAIL_PAGE_BYTES", 1024 * 1024, 1024, 64 * 1024 * 1024),
      maxBufferedBytesPerOrg: intSetting(
        env,
        "WARREN_TAIL_MAX_BUFFERED_BYTES_PER_ORG",
        64 * 1024 * 1024,
        1024,
        2 ** 40,
      ),
    },
    otlp: {
      maxBodyBytes: intSetting(env, "WARREN_OTLP_MAX_BODY_BYTES", 8 * 1_048_576, 1024, 1024 * 1_048_576),
      maxDecodedBytes: intSetting(env, "WARREN_OTLP_MAX_DECODED_BYTES", 32 * 1_048_576, 1024, 4096 * 1_048_576),
      maxSpans: intSetting(env, "WARREN_OTLP_MAX_SPANS", 10_000, 1, 1_000_000),
      maxValues: intSetting(env, "WARREN_OTLP_MAX_VALUES", 500_000, 1, 100_000_000),
      maxConcurrentRequests: intSetting(env, "WARREN_OTLP_MAX_CONCURRENT", 8, 1, 10_000),
    },
    secretEgress: secretEgressSettings(env),
    egress: egressSettings(env),
    telemetrySqlMaxCost: env.WARREN_TELEMETRY_SQL_MAX_COST
      ? intSetting(env, "WARREN_TELEMETRY_SQL_MAX_COST", 0, 0, 1_000_000_000_000)
      : null,
    metrics: {
      token: env.WARREN_METRICS_TOKEN || "",
      stateCacheSeconds: intSetting(env, "WARREN_METRICS_STATE_CACHE_SECONDS", 5, 0, 3600),
    },
    tracing: tracingSettings(env),
    adminUrl: env.WARREN_ADMIN_URL || "",
    adminApiKey: env.WARREN_API_KEY || "",
    quotaDefaults: {
      "sandboxes.running": intSetting(env, "WARREN_QUOTA_SANDBOXES_RUNNING", 10, 0, 1_000_000),
      "sandboxes.total": intSetting(env, "WARREN_QUOTA_SANDBOXES_TOTAL", 50, 0, 1_000_000),
      "sandboxes.workspace_capacity_gib": intSetting(env, "WARREN_QUOTA_WORKSPACE_GIB", 200, 0, 1_000_000_000),
      "projects.total": intSetting(env, "WARREN_QUOTA_PROJECTS_TOTAL", 1000, 0, 1_000_000),
      "snapshots.total": intSetting(env, "WARREN_QUOTA_SNAPSHOTS_TOTAL", 100, 0, 1_000_000),
    },
  };
}
