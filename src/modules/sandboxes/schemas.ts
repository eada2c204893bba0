// Wire schemas of SandboxService (contract 2.1, 4.1, 4.3 to 4.5, 8). Limits the schema can
// state are stated here; the rest (metadata value bytes, argv[0] non-empty, variant rules)
// are checked by the service with the same clear errors.
import { type Static, Type } from "@sinclair/typebox";
import { named } from "../../http/openapi.js";
import { StringMap, Timestamp } from "../../http/schemas.js";

export const SANDBOX_STATES = [
  "requested",
  "reserved",
  "materializing",
  "ready",
  "running",
  "stopped",
  "terminating",
  "failed",
  "terminated",
  "quarantined",
  "attention",
] as const;
export type SandboxState = (typeof SANDBOX_STATES)[number];

export const SANDBOX_NAME_PATTERN = "^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$";
export const SANDBOX_ID_PATTERN = "^sbx-[0-9a-f]{40}$";

const Enum = <T extends string>(values: readonly T[], description?: string) =>
  Type.Union(
    values.map((v) => Type.Literal(v)),
    description ? { description } : {},
  );

export const StateEnum = named("SandboxState", Enum(SANDBOX_STATES));
export const NetworkAccess = named("NetworkAccess", Enum(["public", "gateway_only", "none"] as const));
const Argv = Type.Array(Type.String({ maxLength: 4096 }), { minItems: 1, maxItems: 256 });
const Metadata = StringMap({
  maxEntries: 50,
  keyMaxLength: 128,
  valueMaxLength: 4096,
  description: "At most 50 entries, keys 1 to 128 characters, at most 4096 bytes of values in total",
});

const GpuSpec = named(
  "GpuSpec",
  Type.Object(
    {
      count: Type.Integer({ minimum: 0, maximum: 64, description: "Integral accelerator count" }),
      models: Type.Optional(
        Type.Array(Type.String({ maxLength: 128 }), {
          maxItems: 16,
          description: "Ordered fallback list of models; empty accepts any advertised model",
        }),
      ),
    },
    { additionalProperties: false },
  ),
);

export const ResourceSpec = named(
  "ResourceSpec",
  Type.Object(
    {
      memory_mb: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_048_576 })),
      cpu_millis: Type.Optional(Type.Integer({ minimum: 50, maximum: 128_000 })),
      gpus: Type.Optional(GpuSpec),
    },
    { additionalProperties: false },
  ),
);

const SandboxSecretBinding = named(
  "SandboxSecretBinding",
  Type.Object(
    { name: Type.String({ minLength: 1, maxLength: 128, description: "A registered secret's name" }) },
    { additionalProperties: false },
  ),
);
const SharedFilesystemMountRequest = named(
  "SandboxSharedFilesystemMountRequest",
  Type.Object(
    {
      filesystem_id: Type.String({ maxLength: 128 }),
      subdirectory: Type.String({ maxLength: 1024 }),
      target_path: Type.String({ maxLength: 1024 }),
    },
    { additionalProperties: false },
  ),
);
const SandboxVolumeMount = named(
  "SandboxVolumeMount",
  Type.Object(
    { volume_id: Type.String({ maxLength: 128 }), target_path: Type.String({ maxLength: 1024 }) },
    { additionalProperties: false },
  ),
);

export const CreateSandboxRequest = named(
  "CreateSandboxRequest",
  Type.Object(
    {
      image: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: 512,
          description: "From-image variant: OCI reference; omit for the platform default image",
        }),
      ),
      snapshot_id: Type.Optional(
        Type.String({ minLength: 1, maxLength: 128, description: "From-snapshot variant (required there)" }),
      ),
      image_override: Type.Optional(
        Type.String({ minLength: 1, maxLength: 512, description: "From-snapshot variant only" }),
      ),
      project_id: Type.Optional(
        Type.String({ maxLength: 64, description: "Omit for the credential's or organization's default project" }),
      ),
      command: Type.Optional(Argv),
      idle_timeout_seconds: Type.Optional(Type.Integer({ minimum: 60, maximum: 86_400 })),
      metadata: Type.Optional(Metadata),
      name: Type.Optional(Type.String({ minLength: 1, maxLength: 63, pattern: SANDBOX_NAME_PATTERN })),
      network_access: Type.Optional(NetworkAccess),
      placement_class: Type.Optional(Enum(["standard", "non_preemptible"] as const)),
      ports: Type.Optional(
        Type.Array(Type.Integer({ minimum: 1, maximum: 65_535 }), { uniqueItems: true, maxItems: 64 }),
      ),
      resources: Type.Optional(ResourceSpec),
      secrets: Type.Optional(Type.Array(SandboxSecretBinding, { maxItems: 64 })),
      shared_filesystems: Type.Optional(Type.Array(SharedFilesystemMountRequest, { maxItems: 16 })),
      storage_class: Type.Optional(Enum(["standard", "durable"] as const)),
      ttl_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 31_536_000 })),
      volumes: Type.Optional(Type.Array(SandboxVolumeMount, { maxItems: 16 })),
      workspace_capacity_gib: Type.Optional(Type.Integer({ minimum: 1, maximum: 16_384 })),
    },
    { additionalProperties: false },
  ),
);

export const UpdateSandboxRequest = named(
  "UpdateSandboxRequest",
  Type.Object(
    {
      state: Type.Optional(Enum(["running", "stopped"] as const)),
      idle_timeout_seconds: Type.Optional(Type.Integer({ minimum: 60, maximum: 86_400 })),
      ttl_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 31_536_000 })),
      metadata: Type.Optional(Metadata),
      workspace_capacity_gib: Type.Optional(Type.Integer({ minimum: 1, maximum: 16_384 })),
      network_access: Type.Optional(NetworkAccess),
    },
    { additionalProperties: false, minProperties: 1 },
  ),
);

export const SandboxExecSecretEnvironment = named(
  "SandboxExecSecretEnvironment",
  Type.Object(
    {
      secret_name: Type.String({ minLength: 1, maxLength: 128 }),
      variable_name: Type.String({ minLength: 1, maxLength: 128, pattern: "^[A-Za-z_][A-Za-z0-9_]*$" }),
    },
    { additionalProperties: false },
  ),
);

export const ExecRequest = named(
  "ExecSandboxRequest",
  Type.Object(
    {
      cmd: Argv,
      secret_environment: Type.Optional(Type.Array(SandboxExecSecretEnvironment, { maxItems: 64 })),
      timeout_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600 })),
    },
    { additionalProperties: false },
  ),
);

const Output = { stdout: Type.String(), stderr: Type.String(), truncated: Type.Boolean() };
const Marker = Type.Object({}, { additionalProperties: false });
export const ExecResponse = named(
  "ExecResult",
  Type.Union([
    named(
      "ExecCompleted",
      Type.Object(
        { exit: Type.Integer({ description: "The command's real exit code, 0 included" }), ...Output },
        { additionalProperties: false, description: "The command finished" },
      ),
    ),
    named(
      "ExecTimedOut",
      Type.Object(
        { timeout: Marker, ...Output },
        {
          additionalProperties: false,
          description: "timeout_seconds passed before the command exited: partial output",
        },
      ),
    ),
    named(
      "ExecIndeterminate",
      Type.Object(
        { indeterminate: Marker, ...Output },
        {
          additionalProperties: false,
          description:
            "Dispatched, but its outcome could not be read (it may have completed): partial output; an Idempotency-Key retry replays it",
        },
      ),
    ),
  ]),
);

const SandboxEndpoint = named(
  "SandboxEndpoint",
  Type.Object(
    {
      port: Type.Integer({ minimum: 1, maximum: 65_535, description: "Guest TCP port" }),
      url: Type.String({ description: "Authenticated session-plane URL" }),
    },
    { additionalProperties: false },
  ),
);
const SandboxPinnedVolume = named(
  "SandboxPinnedVolume",
  Type.Object(
    {
      volume_id: Type.String(),
      version: Type.String({ description: "The immutable version pinned at admission" }),
      target_path: Type.String(),
      name: Type.Optional(Type.String({ description: "The name resolved at admission; empty when none" })),
    },
    { additionalProperties: false },
  ),
);
const SandboxSshConnection = named(
  "SandboxSshConnection",
  Type.Object({ host: Type.String(), port: Type.Integer(), user: Type.String() }, { additionalProperties: false }),
);
const SandboxStateReason = named(
  "SandboxStateReason",
  Type.Object(
    { code: Type.String({ description: "snake_case" }), message: Type.String({ description: "Not for parsing" }) },
    { additionalProperties: false },
  ),
);
const SandboxProgress = named(
  "SandboxProgress",
  Type.Object(
    { phase: Type.Literal("pulling_image"), bytes_done: Type.Integer(), bytes_total: Type.Integer() },
    { additionalProperties: false, description: "How far a materializing sandbox's image pull is" },
  ),
);
const SandboxActivity = named(
  "SandboxActivity",
  Type.Object({ at: Timestamp, source: Enum(["exec", "session", "update"] as const) }, { additionalProperties: false }),
);
const SandboxSharedFilesystemMount = named(
  "SandboxSharedFilesystemMount",
  Type.Object(
    { filesystem_id: Type.String(), subdirectory: Type.String(), target_path: Type.String() },
    { additionalProperties: false },
  ),
);

export const Sandbox = named(
  "Sandbox",
  Type.Object(
    {
      id: Type.String({ pattern: SANDBOX_ID_PATTERN }),
      state: StateEnum,
      image: Type.Optional(Type.String({ description: "Root sandboxes only" })),
      snapshot_id: Type.Optional(Type.String({ description: "Child sandboxes only" })),
      storage_class: Enum(["standard", "durable"] as const),
      placement_class: Enum(["standard", "non_preemptible"] as const),
      endpoints: Type.Array(SandboxEndpoint),
      lineage_path: Type.String(),
      metadata: Type.Record(Type.String(), Type.String()),
      created_at: Timestamp,
      updated_at: Timestamp,
      volumes: Type.Array(SandboxPinnedVolume),
      workload_image: Type.String(),
      network_access: NetworkAccess,
      ports: Type.Array(Type.Integer({ minimum: 1, maximum: 65_535 }), {
        description: "The ports asked for at create; endpoints shows those served now",
      }),
      expires_at: Type.Optional(Timestamp),
      ssh: Type.Optional(SandboxSshConnection),
      state_reason: Type.Optional(SandboxStateReason),
      progress: Type.Optional(SandboxProgress),
      name: Type.Optional(Type.String()),
      resources: Type.Optional(ResourceSpec),
      created_by: Type.Optional(Type.String()),
      last_activity: Type.Optional(SandboxActivity),
      workspace_capacity_gib: Type.Optional(Type.Integer()),
      idle_timeout_seconds: Type.Optional(Type.Integer()),
      idle_deadline: Type.Optional(Timestamp),
      host_state: Type.Optional(
        Enum(
          ["ready", "draining", "cordoned", "unreachable", "dead"] as const,
          "State of the host that runs a live sandbox (docs/hosts.md): unreachable while its host is silent (exec, SSH and endpoints answer 503 host_unavailable; the sandbox keeps its last state), dead once it was given up. Omitted on finished sandboxes and those without a host",
        ),
      ),
      shared_filesystems: Type.Optional(Type.Array(SandboxSharedFilesystemMount)),
    },
    { additionalProperties: false },
  ),
);

export const RequestState = named(
  "SandboxRequestState",
  Type.Object({ id: Type.String(), request_state: Type.Literal("requested") }, { additionalProperties: false }),
);

// The wire types: services, views and tests use these, never hand-written twins.
export type CreateSandboxBody = Static<typeof CreateSandboxRequest>;
export type UpdateSandboxBody = Static<typeof UpdateSandboxRequest>;
export type ExecBody = Static<typeof ExecRequest>;
export type ExecResult = Static<typeof ExecResponse>;
export type SandboxJson = Static<typeof Sandbox>;
