"""Wire types of the Warren API, generated from docs/openapi.json by
packages/python/tools/generate.py: do not edit (a test fails when this file is stale).

64-bit integers are ``str`` (decimal strings, as on the wire): see warren.numbers.
"""

# ruff: noqa
from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, Union


WorkloadCloud = Literal["aws", "gcp", "azure"]


class WorkloadFederationDescriptor(TypedDict):
    "Only the selected cloud's fields may be set"
    role_arn: NotRequired[str]
    "aws: IAM role ARN (required)"
    region: NotRequired[str]
    "aws: region; empty means us-east-1"
    project_id: NotRequired[str]
    "gcp: project id (required)"
    project_number: NotRequired[str]
    "gcp: project number (required)"
    pool_id: NotRequired[str]
    "gcp: workload identity pool id (required)"
    provider_id: NotRequired[str]
    "gcp: pool provider id (required)"
    service_account_email: NotRequired[str]
    "gcp: service account to impersonate (optional)"
    application_id: NotRequired[str]
    "azure: Entra application (client) id (required)"
    entra_tenant_id: NotRequired[str]
    "azure: Entra tenant id (required)"


class AddWorkloadFederationRequest(TypedDict):
    name: NotRequired[str]
    "When present, must equal the path name"
    cloud: WorkloadCloud
    descriptor: WorkloadFederationDescriptor


class WorkloadFederationConfig(TypedDict):
    id: str
    workload_id: str
    cloud: WorkloadCloud
    audience: str
    "Provider-canonical audience derived by the server"
    descriptor: WorkloadFederationDescriptor
    created_by: str
    created_at: str


class AddWorkloadFederationResponse(TypedDict):
    federation_config: WorkloadFederationConfig


class HostCapacity(TypedDict):
    cpu_millis: NotRequired[int]
    memory_mib: NotRequired[int]
    storage_bytes: NotRequired[int]


class Host(TypedDict):
    id: str
    role: str
    state: Literal["joining", "ready", "draining", "cordoned", "unreachable", "dead"]
    operator_state: Union[Literal["draining"], Literal["cordoned"], None]
    "What an operator asked (null: nothing); kept while the host is unreachable or dead, and taken again when it returns"
    epoch: int
    address: Union[str, None]
    plane_address: Union[str, None]
    ssh_address: Union[str, None]
    capacity: HostCapacity
    joined_at: str
    heartbeat_at: str
    heartbeat_age_seconds: float
    "By the database's clock"
    state_changed_at: str
    live_sandboxes: int
    "Its sandboxes not terminated or failed"
    pool_members: int
    "Warm pool members, as of its last heartbeat"
    pending_replications: int
    "Its snapshots whose replication to the blob store is pending"
    drained: bool
    "Draining, with no warm pool member and no pending replication left (its sandboxes stay)"
    collection_leader: bool
    "Whether this host's server holds the lease of blob and volume collection now"


class AdminCordonHostResponse(TypedDict):
    host: Host


class AdminCreateApiKeyRequest(TypedDict):
    organization: str
    "Organization id or slug"
    name: str
    kind: NotRequired[Literal["user", "service_account", "workload"]]
    role: NotRequired[Literal["owner", "admin", "member"]]
    email: NotRequired[str]
    workload_name: NotRequired[str]
    principal_id: NotRequired[str]
    project_id: NotRequired[str]
    "Default project of the key"


class AdminCreateOrganizationRequest(TypedDict):
    slug: str
    name: NotRequired[str]


class Organization(TypedDict):
    id: str
    slug: str
    name: str
    is_operator: NotRequired[bool]
    default_project_id: NotRequired[str]
    created_at: str


class AdminCreateOrganizationResponse(TypedDict):
    organization: Organization


class AdminDrainHostResponse(TypedDict):
    host: Host


class ApiKeyInfo(TypedDict):
    key_id: str
    key_name: str
    principal_id: str
    kind: str
    role: str
    email: str
    workload_name: str
    project_id: str
    created_at: str
    revoked_at: str
    "Empty while the key is live"
    expires_at: str
    "A console session's expiry; empty for an API key (keys do not expire)"
    session_of_key_id: str
    "A console session: the API key it was exchanged for (and acts as); empty for an API key"


class AdminListApiKeysResponse(TypedDict):
    api_keys: list[ApiKeyInfo]


class AdminListHostsResponse(TypedDict):
    hosts: list[Host]


class AdminListOrganizationsResponse(TypedDict):
    organizations: list[Organization]


class AdminQuarantineSandboxRequest(TypedDict):
    reason: NotRequired[str]


AdminQuarantineSandboxResponse = dict[str, Any]


class AdminReleaseSandboxRequest(TypedDict):
    reason: NotRequired[str]


AdminReleaseSandboxResponse = dict[str, Any]


AdminRevokeApiKeyResponse = dict[str, Any]


class AdminRotateMasterKeyResponse(TypedDict):
    master_key_id: str
    data_keys_rewrapped: int


class AdminSetEgressAllowlistRequest(TypedDict):
    hosts: list[str]
    "The whole list (it replaces the current one)"


class AdminSetQuotaRequest(TypedDict):
    limit: Union[int, None]


class QuotaLimit(TypedDict):
    metric: str
    "Stable quota name, e.g. sandboxes.running"
    unit: str
    limit: str
    "64-bit integer as a decimal string"
    current: str
    "64-bit integer as a decimal string"
    reserved: str
    "64-bit integer as a decimal string"


class AdminSetQuotaResponseSnapshot(TypedDict):
    limits: list[QuotaLimit]


class AdminSetQuotaResponse(TypedDict):
    snapshot: AdminSetQuotaResponseSnapshot


class AdminUncordonHostResponse(TypedDict):
    host: Host


class AnnotateRangeRequest(TypedDict):
    run_id: str
    schema_name: str
    payload_json: str
    "A JSON object as a string"
    event_id: NotRequired[str]
    "26-character ULID"
    range_start_ns: NotRequired[str]
    "Wall-clock nanoseconds as a decimal string"
    range_end_ns: NotRequired[str]
    "Wall-clock nanoseconds as a decimal string"
    range_start_event_id: NotRequired[str]
    "26-character ULID"
    range_end_event_id: NotRequired[str]
    "26-character ULID"


class AnnotateRangeResponse(TypedDict):
    event_id: str


class AnnotateRequest(TypedDict):
    schema_name: str
    payload_json: str
    "A JSON object as a string"
    event_id: NotRequired[str]
    "26-character ULID"
    run_id: NotRequired[str]
    project_id: NotRequired[str]
    target_event_id: NotRequired[str]
    "26-character ULID"


class AnnotateResponse(TypedDict):
    event_id: str


class Annotation(TypedDict):
    event_id: str
    run_id: NotRequired[str]
    project_id: str
    lineage_path: NotRequired[str]
    schema_name: str
    schema_version: NotRequired[str]
    ts_wall_ns: str
    principal: NotRequired[str]
    target_event_id: NotRequired[str]
    range_start_ns: NotRequired[str]
    range_end_ns: NotRequired[str]
    range_start_event_id: NotRequired[str]
    range_end_event_id: NotRequired[str]
    payload_json: str
    "The annotated JSON object exactly as sent"


class PromotedField(TypedDict):
    field: str
    identity: bool
    bloom: bool
    slot: str
    "Indexed column assigned by the server; stable for the schema name"


class AnnotationSchema(TypedDict):
    id: str
    name: str
    version: str
    "Monotonic per organization and name, from 1 (decimal string)"
    description: str
    json_schema: str
    "JSON Schema draft 2020-12 document"
    promoted_fields: list[PromotedField]
    created_at: str
    archived_at: NotRequired[str]


class ArchiveAnnotationSchemaRequest(TypedDict):
    name: NotRequired[str]
    version: NotRequired[str]
    "Decimal string; 0 or omitted means the latest live version"


class ArchiveAnnotationSchemaResponse(TypedDict):
    schema: AnnotationSchema


class CompleteRunRequest(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"
    status: Literal["succeeded", "failed", "canceled"]


class Run(TypedDict):
    id: str
    project_id: str
    label: str
    parent_run_id: NotRequired[str]
    root_run_id: str
    lineage_path: str
    "Dotted run ids from the tree root to this run"
    depth: int
    "0 for a root run"
    status: Literal["running", "succeeded", "failed", "canceled"]
    started_at: str
    ended_at: NotRequired[str]
    created_by: str
    execute_as_workload: NotRequired[str]


class CompleteRunResponse(TypedDict):
    run: Run


class ConsoleSession(TypedDict):
    session_id: str
    "Listed and revoked with the API keys (AdminListApiKeys)"
    expires_at: str
    created_at: str


class CreateConsoleSessionResponse(TypedDict):
    session: ConsoleSession


class CreateFeedbackRequest(TypedDict):
    title: str
    surface: Literal["cli", "api", "web", "sandbox", "telemetry", "annotations", "docs", "other"]
    body: NotRequired[str]
    expected: NotRequired[str]
    actual: NotRequired[str]
    repro: NotRequired[str]
    severity: NotRequired[Literal["critical", "high", "medium", "low", ""]]
    "Empty for general feedback"
    fingerprint: NotRequired[str]
    svc_version: NotRequired[str]
    evidence: NotRequired[list[str]]


class CreateProjectRequest(TypedDict):
    name: str
    slug: str
    description: NotRequired[str]
    "At most 4 KiB (UTF-8 bytes)"


class Project(TypedDict):
    id: str
    name: str
    slug: str
    description: str
    created_at: str
    updated_at: str
    created_by: str
    last_run_at: NotRequired[str]
    run_count: str
    "64-bit integer as a decimal string"
    version: str
    "64-bit integer as a decimal string"
    is_default: bool
    "The organization's default project"


class CreateProjectResponse(TypedDict):
    project: Project


NetworkAccess = Literal["public", "gateway_only", "none"]


class GpuSpec(TypedDict):
    count: int
    "Integral accelerator count"
    models: NotRequired[list[str]]
    "Ordered fallback list of models; empty accepts any advertised model"


class ResourceSpec(TypedDict):
    memory_mb: NotRequired[int]
    cpu_millis: NotRequired[int]
    gpus: NotRequired[GpuSpec]


class SandboxSecretBinding(TypedDict):
    name: str
    "A registered secret's name"


class SandboxSharedFilesystemMountRequest(TypedDict):
    filesystem_id: str
    subdirectory: str
    target_path: str


class SandboxVolumeMount(TypedDict):
    volume_id: str
    target_path: str


class CreateSandboxRequest(TypedDict):
    image: NotRequired[str]
    "From-image variant: OCI reference; omit for the platform default image"
    snapshot_id: NotRequired[str]
    "From-snapshot variant (required there)"
    image_override: NotRequired[str]
    "From-snapshot variant only"
    project_id: NotRequired[str]
    "Omit for the credential's or organization's default project"
    command: NotRequired[list[str]]
    idle_timeout_seconds: NotRequired[int]
    metadata: NotRequired[dict[str, str]]
    "At most 50 entries, keys 1 to 128 characters, at most 4096 bytes of values in total"
    name: NotRequired[str]
    network_access: NotRequired[NetworkAccess]
    placement_class: NotRequired[Literal["standard", "non_preemptible"]]
    ports: NotRequired[list[int]]
    resources: NotRequired[ResourceSpec]
    secrets: NotRequired[list[SandboxSecretBinding]]
    shared_filesystems: NotRequired[list[SandboxSharedFilesystemMountRequest]]
    storage_class: NotRequired[Literal["standard", "durable"]]
    ttl_seconds: NotRequired[int]
    volumes: NotRequired[list[SandboxVolumeMount]]
    workspace_capacity_gib: NotRequired[int]


class CreateSandboxResponse(TypedDict):
    id: str
    request_state: Literal["requested"]
    run_id: str


SandboxSecretDelivery = Literal["SANDBOX_SECRET_DELIVERY_UNSPECIFIED", "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS", "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY", "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT"]


class CreateSandboxSecretRequest(TypedDict):
    name: str
    value: str
    "Write-only; never returned"
    delivery: NotRequired[SandboxSecretDelivery]
    dest_host: NotRequired[str]
    expires_at: NotRequired[str]


class SandboxSecret(TypedDict):
    "Metadata only: the value is never returned"
    id: str
    name: str
    delivery: SandboxSecretDelivery
    dest_host: str
    "Exact public HTTPS host; empty for sandbox-environment delivery"
    current_version: int
    created_by: str
    created_at: str
    rotated_at: NotRequired[str]
    expires_at: NotRequired[str]
    revoked_at: NotRequired[str]


class CreateSandboxSecretResponse(TypedDict):
    secret: SandboxSecret


class CreateSandboxSnapshotRequest(TypedDict):
    name: NotRequired[str]
    wait_remote: NotRequired[bool]
    "Answer once the snapshot is replicated, or at wait_timeout_seconds"
    wait_timeout_seconds: NotRequired[int]
    "How long wait_remote waits (default 25)"


SnapshotDurability = Literal["local", "replicated"]


class CreateSandboxSnapshotResponse(TypedDict):
    snapshot_id: str
    durability: SnapshotDurability


class CreateVolumeRequest(TypedDict):
    name: str
    "Unique in the project"
    project_id: NotRequired[str]
    "Default: the credential's project"
    quota_bytes: str
    "Decimal string, at most 2 TiB; a cap, not an allocation"
    description: NotRequired[str]
    "At most 4 KiB (UTF-8 bytes)"


class Volume(TypedDict):
    id: NotRequired[str]
    name: NotRequired[str]
    project_id: NotRequired[str]
    description: NotRequired[str]
    quota_bytes: NotRequired[str]
    "64-bit integer as a decimal string"
    used_bytes: NotRequired[str]
    "64-bit integer as a decimal string"
    current_version_digest: NotRequired[str]
    "Empty until the first publish"
    created_at: NotRequired[str]
    updated_at: NotRequired[str]
    created_by: NotRequired[str]


class CreateVolumeResponse(TypedDict):
    volume: Volume


class CreateWorkloadRequest(TypedDict):
    name: str
    description: NotRequired[str]


WorkloadLaunchPolicy = Literal["WORKLOAD_LAUNCH_POLICY_UNSPECIFIED", "WORKLOAD_LAUNCH_POLICY_MEMBERS", "WORKLOAD_LAUNCH_POLICY_RESTRICTED"]


class WorkloadLauncher(TypedDict):
    kind: str
    "\"user\" (or empty): a member by user id; \"service_account\": a key id"
    principal_id: str


class WorkloadLaunchAcl(TypedDict):
    policy: WorkloadLaunchPolicy
    launchers: list[WorkloadLauncher]
    "Meaningful only for RESTRICTED; empty otherwise"


class Workload(TypedDict):
    id: str
    name: str
    description: str
    launch_acl: WorkloadLaunchAcl
    federation_configs: list[WorkloadFederationConfig]
    created_by: str
    created_at: str
    updated_at: str


class CreateWorkloadResponse(TypedDict):
    workload: Workload


class DataViewParam(TypedDict):
    name: str
    "Bound as $n, n its 1-based place in params"
    type: Literal["text", "bigint", "double precision", "numeric", "boolean", "timestamptz", "jsonb"]
    "The SQL type the value is cast to"


class DataViewSpec(TypedDict):
    type: Literal["sql.v1"]
    "The tag of the spec format"
    sql: str
    "One SELECT over the published relations"
    params: NotRequired[list[DataViewParam]]
    render: NotRequired[dict[str, Any]]
    "Opaque render config, stored as sent"


class DataView(TypedDict):
    name: str
    description: str
    spec: DataViewSpec
    spec_version: int
    "Bumped on each upsert"
    created_at: str
    updated_at: str


DeleteConsoleSessionResponse = dict[str, Any]


DeleteDataViewResponse = dict[str, Any]


class DeleteProjectResponse(TypedDict):
    api_keys_deleted: str
    "64-bit integer as a decimal string"
    runs_deleted: str
    "64-bit integer as a decimal string"
    secrets_deleted: str
    "64-bit integer as a decimal string"
    volumes_deleted: str
    "64-bit integer as a decimal string"


DeleteSandboxSnapshotResponse = dict[str, Any]


DeleteVolumeResponse = dict[str, Any]


DeleteWorkloadResponse = dict[str, Any]


class EgressAllowlist(TypedDict):
    organization_id: str
    hosts: list[str]
    "Exact lowercase host names and *.domain wildcards, sorted; empty: only the hosts of bound secrets"


class ErrorEnvelopeDetailsQuota(TypedDict):
    metric: str
    limit: str
    "Configured limit (decimal string)"
    current: str
    "Current use (decimal string)"
    reserved: str
    "Use reserved by admissions in flight (decimal string)"
    retry_after_seconds: int


class ErrorEnvelopeDetails(TypedDict):
    quota: NotRequired[ErrorEnvelopeDetailsQuota]


class ErrorEnvelope(TypedDict):
    "Error envelope of the non-sandbox services"
    code: str
    "Stable snake_case machine code"
    message: str
    "Human text; clients must not parse it"
    details: NotRequired[ErrorEnvelopeDetails]
    request_id: NotRequired[str]
    "Correlation id (also in the x-request-id header)"


class ExecCompleted(TypedDict):
    "The command finished"
    exit: int
    "The command's real exit code, 0 included"
    stdout: str
    stderr: str
    truncated: bool


class ExecIndeterminate(TypedDict):
    "Dispatched, but its outcome could not be read (it may have completed): partial output; an Idempotency-Key retry replays it"
    indeterminate: dict[str, Any]
    stdout: str
    stderr: str
    truncated: bool


class ExecTimedOut(TypedDict):
    "timeout_seconds passed before the command exited: partial output"
    timeout: dict[str, Any]
    stdout: str
    stderr: str
    truncated: bool


ExecResult = Union[ExecCompleted, ExecTimedOut, ExecIndeterminate]


class SandboxExecSecretEnvironment(TypedDict):
    secret_name: str
    variable_name: str


class ExecSandboxRequest(TypedDict):
    cmd: list[str]
    secret_environment: NotRequired[list[SandboxExecSecretEnvironment]]
    timeout_seconds: NotRequired[int]


class ExportTracesResponsePartialSuccess(TypedDict):
    rejectedSpans: NotRequired[str]
    errorMessage: NotRequired[str]


class ExportTracesResponse(TypedDict):
    partialSuccess: NotRequired[ExportTracesResponsePartialSuccess]


class FeedbackCreated(TypedDict):
    id: str
    relayed: bool


class FileInfo(TypedDict):
    path: str
    name: str
    type: Literal["file", "directory", "symlink", "fifo", "socket", "char_device", "block_device"]
    size: str
    "Bytes, as a decimal string"
    mode: str
    "Permission bits in octal (four digits)"
    modified_at: str
    accessed_at: str
    uid: int
    gid: int
    links: int
    link_target: NotRequired[str]
    "A symlink's target, as stored (never followed)"


class FlatErrorEnvelope(TypedDict):
    "Flat error envelope of sandbox and snapshot routes"
    code: str
    "Stable snake_case machine code"
    message: str
    "Human text; clients must not parse it"
    request_id: str
    "Correlation id"


class GetAnnotationSchemaResponse(TypedDict):
    schema: AnnotationSchema


class GetProjectResponse(TypedDict):
    project: Project


class GetRunResponse(TypedDict):
    run: Run


SandboxState = Literal["requested", "reserved", "materializing", "ready", "running", "stopped", "terminating", "failed", "terminated", "quarantined", "attention"]


class SandboxEndpoint(TypedDict):
    port: int
    "Guest TCP port"
    url: str
    "Authenticated session-plane URL"


class SandboxPinnedVolume(TypedDict):
    volume_id: str
    version: str
    "The immutable version pinned at admission"
    target_path: str
    name: NotRequired[str]
    "The name resolved at admission; empty when none"


class SandboxSshConnection(TypedDict):
    host: str
    port: int
    user: str


class SandboxStateReason(TypedDict):
    code: str
    "snake_case"
    message: str
    "Not for parsing"


class SandboxProgress(TypedDict):
    "How far a materializing sandbox's image pull is"
    phase: Literal["pulling_image"]
    bytes_done: int
    bytes_total: int


class SandboxActivity(TypedDict):
    at: str
    source: Literal["exec", "session", "update"]


class SandboxSharedFilesystemMount(TypedDict):
    filesystem_id: str
    subdirectory: str
    target_path: str


class Sandbox(TypedDict):
    id: str
    state: SandboxState
    image: NotRequired[str]
    "Root sandboxes only"
    snapshot_id: NotRequired[str]
    "Child sandboxes only"
    storage_class: Literal["standard", "durable"]
    placement_class: Literal["standard", "non_preemptible"]
    endpoints: list[SandboxEndpoint]
    lineage_path: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    volumes: list[SandboxPinnedVolume]
    workload_image: str
    network_access: NetworkAccess
    ports: list[int]
    "The ports asked for at create; endpoints shows those served now"
    expires_at: NotRequired[str]
    ssh: NotRequired[SandboxSshConnection]
    state_reason: NotRequired[SandboxStateReason]
    progress: NotRequired[SandboxProgress]
    name: NotRequired[str]
    resources: NotRequired[ResourceSpec]
    created_by: NotRequired[str]
    last_activity: NotRequired[SandboxActivity]
    workspace_capacity_gib: NotRequired[int]
    idle_timeout_seconds: NotRequired[int]
    idle_deadline: NotRequired[str]
    host_state: NotRequired[Literal["ready", "draining", "cordoned", "unreachable", "dead"]]
    "State of the host that runs a live sandbox (docs/hosts.md): unreachable while its host is silent (exec, SSH and endpoints answer 503 host_unavailable; the sandbox keeps its last state), dead once it was given up. Omitted on finished sandboxes and those without a host"
    shared_filesystems: NotRequired[list[SandboxSharedFilesystemMount]]


class GetSandboxResponse(TypedDict):
    sandbox: Sandbox


class GetServiceConfigResponse(TypedDict):
    api_base_url: str
    "Base URL of this API (the /v1 routes hang off it)"
    session_plane_url: str
    "Session-plane base URL; empty when none is deployed"
    ssh_host: str
    "SSH gateway host; empty when none is deployed"
    api_version: str


class GetUsageSnapshotResponseSnapshot(TypedDict):
    limits: list[QuotaLimit]


class GetUsageSnapshotResponse(TypedDict):
    snapshot: GetUsageSnapshotResponseSnapshot


class GetVolumeResponse(TypedDict):
    volume: Volume


class GetWorkloadResponse(TypedDict):
    workload: Workload


SandboxSecretGrantSubjectKind = Literal["SANDBOX_SECRET_GRANT_SUBJECT_KIND_UNSPECIFIED", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_SERVICE_ACCOUNT", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_WORKLOAD"]


class GrantSandboxSecretRequest(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"
    subject_kind: SandboxSecretGrantSubjectKind
    subject_id: str


class SandboxSecretGrant(TypedDict):
    secret_id: str
    subject_kind: SandboxSecretGrantSubjectKind
    subject_id: str


class GrantSandboxSecretResponse(TypedDict):
    grant: SandboxSecretGrant


class IssueEndpointTokenRequest(TypedDict):
    ttl_seconds: NotRequired[int]
    "Lifetime of the token; default 900"


class IssueEndpointTokenResponse(TypedDict):
    token: str
    "Pass as Authorization: Bearer, the warren_token query parameter, or the cookie"
    url: str
    "The endpoint's URL with the token as warren_token (a GET moves it to a cookie)"
    expires_at: str


class IssueSshTokenRequest(TypedDict):
    ttl_seconds: NotRequired[int]
    "Lifetime of the token; default 900"


class IssueSshTokenResponse(TypedDict):
    token: str
    "The password for the SSH gateway (user: the sandbox id)"
    user: str
    "The SSH user: the sandbox id"
    expires_at: str


class IssuedApiKey(TypedDict):
    key_id: str
    key_name: str
    principal_id: str
    org_id: str
    api_key: str
    "The secret; shown only in this response"


class ListAnnotationSchemasResponse(TypedDict):
    schemas: list[AnnotationSchema]


class SkippedAnnotation(TypedDict):
    "A stored row that could not be decoded here, named rather than dropped"
    event_id: str
    reason: str


class ListAnnotationsResponse(TypedDict):
    annotations: list[Annotation]
    skipped: list[SkippedAnnotation]
    superseded_count: str
    "Stored versions hidden behind the rows of this page"
    next_page_token: str


class ListDataViewsResponse(TypedDict):
    views: list[DataView]


class ListProjectsResponse(TypedDict):
    projects: list[Project]
    next_page_token: str


class ListRunsResponse(TypedDict):
    runs: list[Run]
    next_page_token: str


class ListSandboxFilesResponse(TypedDict):
    path: str
    entries: list[FileInfo]
    truncated: bool


class SandboxProcessPtyVariant1(TypedDict):
    rows: int
    cols: int


class SandboxProcess(TypedDict):
    id: str
    sandbox_id: str
    state: Literal["starting", "running", "exited", "lost"]
    cmd: list[str]
    cwd: Union[str, None]
    pty: Union[SandboxProcessPtyVariant1, None]
    stdin: bool
    "Whether stdin is a pipe fed by :stdin (always with a pty)"
    pid: Union[int, None]
    "In the sandbox's PID namespace"
    exit_code: Union[int, None]
    "128 + signal when a signal ended it"
    end_reason: Union[Literal["exited"], Literal["killed"], Literal["timeout"], Literal["sandbox_stopped"], Literal["lost"], None]
    "lost: no agent kept it any more (the sandbox's agent died); its outcome is not known"
    output_kept: bool
    "Whether its output can still be read"
    timeout_seconds: Union[int, None]
    created_at: str
    started_at: Union[str, None]
    ended_at: Union[str, None]


class ListSandboxProcessesResponse(TypedDict):
    processes: list[SandboxProcess]
    next_page_token: str


class ListSandboxSecretGrantsResponse(TypedDict):
    grants: list[SandboxSecretGrant]


class ListSandboxSecretsResponse(TypedDict):
    secrets: list[SandboxSecret]
    next_page_token: str


class SandboxSnapshot(TypedDict):
    id: str
    created_at: str
    durability: SnapshotDurability
    image: str
    "Workload image of the lineage, inherited by children"
    lineage_path: str
    "The source sandbox's lineage_path"
    source_sandbox_id: str
    name: NotRequired[str]
    parent_snapshot_id: NotRequired[str]
    "Snapshot the source sandbox was restored from; omitted for an image-created root"


class SandboxSnapshotEdge(TypedDict):
    "A parent lineage edge: snapshot_id's source was restored from parent"
    snapshot_id: str
    parent_snapshot_id: str


class ListSandboxSnapshotsResponse(TypedDict):
    snapshots: list[SandboxSnapshot]
    edges: list[SandboxSnapshotEdge]
    "Parent edges of the snapshots on this page"
    next_page_token: str


class ListSandboxesResponse(TypedDict):
    sandboxes: list[Sandbox]
    next_page_token: str


class ListVolumesResponse(TypedDict):
    volumes: list[Volume]
    next_page_token: str


class ListWorkloadFederationResponse(TypedDict):
    federation_configs: list[WorkloadFederationConfig]


class ListWorkloadsResponse(TypedDict):
    workloads: list[Workload]
    next_page_token: str


class MakeSandboxDirectoryRequest(TypedDict):
    path: str
    "Absolute path inside the sandbox (at most 4096 bytes; no NUL, no . or .. segment)"
    mode: NotRequired[str]
    "Octal permission bits, e.g. 644 or 0755"


class NetworkAccessPolicy(TypedDict):
    policy_name: str
    policy_endpoint_name: str
    policy_endpoint_uid: str
    policy_endpoint_resource_version: str


class NetworkAccessReceipt(TypedDict):
    "Policy objects select the sandbox now: an observation, not proof of data-plane enforcement"
    network_access: str
    pod_uid: str
    pod_resource_version: str
    policies: list[NetworkAccessPolicy]


class OrgRef(TypedDict):
    id: str
    slug: str


class Principal(TypedDict):
    id: str
    kind: Literal["user", "service_account", "workload"]
    email: str
    "Empty for non-users"
    key_id: str
    "Empty for a browser session"
    key_name: str
    "Empty for a browser session"
    workload_name: str
    "Empty unless bound to a registered workload"


class PublishVolumeVersionRequest(TypedDict):
    push_id: NotRequired[str]
    "When present, must equal the path's push_id"


class VolumeVersion(TypedDict):
    volume_id: str
    version_digest: str
    "BLAKE3 of the stored canonical manifest: the version's identity"
    parent_version_digest: str
    "Empty for the first version"
    file_count: str
    "64-bit integer as a decimal string"
    size_bytes: str
    "64-bit integer as a decimal string"
    created_at: str
    created_by: str


class PublishVolumeVersionResponse(TypedDict):
    version: VolumeVersion


class PutDataViewRequest(TypedDict):
    name: NotRequired[str]
    "When present, equal to the path name"
    description: NotRequired[str]
    spec: DataViewSpec


class PutDataViewResponse(TypedDict):
    view: DataView


class QueryColumn(TypedDict):
    name: str
    type: str
    "PostgreSQL type name (format_type)"


class QueryResult(TypedDict):
    columns: list[QueryColumn]
    rows: list[list[Any]]
    "Rows as arrays in column order"
    row_count: int
    truncated: bool
    "True when a row or byte cap cut the result"
    truncated_reason: NotRequired[Literal["row_limit", "byte_limit"]]
    spec_version: NotRequired[int]
    "The view version that ran (RunDataView)"


class ReadSandboxProcessOutputResponseChunksItem(TypedDict):
    offset: int
    stream: Literal["stdout", "stderr"]
    data: str
    "base64"


class ReadSandboxProcessOutputResponse(TypedDict):
    offset: int
    next_offset: int
    dropped_bytes: int
    chunks: list[ReadSandboxProcessOutputResponseChunksItem]
    complete: bool
    "The process ended and every byte up to next_offset was read"
    process: SandboxProcess


class RegisterAnnotationSchemaRequestPromotedFieldsItem(TypedDict):
    field: str
    identity: NotRequired[bool]
    bloom: NotRequired[bool]


class RegisterAnnotationSchemaRequest(TypedDict):
    name: str
    description: NotRequired[str]
    json_schema: str
    promoted_fields: NotRequired[list[RegisterAnnotationSchemaRequestPromotedFieldsItem]]


class RegisterAnnotationSchemaResponse(TypedDict):
    schema: AnnotationSchema


class RemoveSandboxFileRequest(TypedDict):
    path: str
    "Absolute path inside the sandbox (at most 4096 bytes; no NUL, no . or .. segment)"
    recursive: NotRequired[bool]


RemoveWorkloadFederationResponse = dict[str, Any]


RenameSandboxFileRequest = TypedDict("RenameSandboxFileRequest", {"from": str, "to": str, "overwrite": NotRequired[bool]})


class VolumeBlobRef(TypedDict):
    digest: str
    size_bytes: str
    "Decimal string; verified against the stored bytes"


class RequestVolumeBlobUploadsRequest(TypedDict):
    push_id: NotRequired[str]
    "When present, must equal the path's push_id"
    blobs: list[VolumeBlobRef]


class VolumeBlobUpload(TypedDict):
    digest: str
    present: bool
    "True when the blob is stored and verified: skip its upload"
    upload_url: str
    "Presigned PUT of this one blob; empty when present"


class RequestVolumeBlobUploadsResponse(TypedDict):
    uploads: list[VolumeBlobUpload]


class ResizeSandboxProcessRequest(TypedDict):
    rows: int
    cols: int


class RevokeSandboxSecretRequest(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"


class RevokeSandboxSecretResponse(TypedDict):
    secret: SandboxSecret


class RotateSandboxSecretRequest(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"
    value: str
    "Write-only; never returned"


class RotateSandboxSecretResponse(TypedDict):
    secret: SandboxSecret


class RunDataViewRequest(TypedDict):
    params: NotRequired[dict[str, Union[str, float, bool, None]]]
    "Values of the view's declared params by name; a missing one is null"
    limit: NotRequired[int]
    "Row cap (default 1000)"


class RunTelemetrySqlRequest(TypedDict):
    sql: str
    limit: NotRequired[int]
    "Row cap (default 100)"


class SandboxQuotaErrorDetailsQuota(TypedDict):
    metric: str


class SandboxQuotaErrorDetails(TypedDict):
    quota: SandboxQuotaErrorDetailsQuota


class SandboxQuotaError(TypedDict):
    "Quota rejection of sandbox or snapshot admission"
    code: str
    message: str
    request_id: str
    metric: str
    "sandboxes.running, sandboxes.total or sandboxes.workspace_capacity_gib; snapshots.total on CreateSandboxSnapshot"
    limit: str
    "Configured limit for the organization (decimal string)"
    retry_after_seconds: int
    details: SandboxQuotaErrorDetails


class SandboxRequestState(TypedDict):
    id: str
    request_state: Literal["requested"]


class SetWorkloadLaunchAclRequestAclLaunchersItem(TypedDict):
    kind: NotRequired[str]
    principal_id: str


class SetWorkloadLaunchAclRequestAcl(TypedDict):
    policy: WorkloadLaunchPolicy
    launchers: NotRequired[list[SetWorkloadLaunchAclRequestAclLaunchersItem]]


class SetWorkloadLaunchAclRequest(TypedDict):
    name: NotRequired[str]
    "When present, must equal the path name"
    acl: SetWorkloadLaunchAclRequestAcl


class SetWorkloadLaunchAclResponse(TypedDict):
    workload: Workload


class SignalSandboxProcessRequest(TypedDict):
    signal: Literal["SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGCONT", "SIGSTOP", "SIGWINCH"]


class StartRunRequest(TypedDict):
    project_id: NotRequired[str]
    "Omit for the default project"
    label: NotRequired[str]
    parent_run_id: NotRequired[str]
    "Empty starts a new tree root"
    execute_as_workload: NotRequired[str]
    "Registered workload name; empty runs as the caller"


class StartRunResponse(TypedDict):
    run: Run


class StartSandboxProcessRequestPtyVariant1(TypedDict):
    rows: int
    cols: int


class StartSandboxProcessRequest(TypedDict):
    cmd: list[str]
    env: NotRequired[dict[str, str]]
    cwd: NotRequired[str]
    stdin: NotRequired[bool]
    "Give it a stdin pipe (fed by :stdin); else /dev/null"
    pty: NotRequired[Union[StartSandboxProcessRequestPtyVariant1, None]]
    timeout_seconds: NotRequired[int]


class StartVolumePushRequest(TypedDict):
    volume_id: NotRequired[str]
    "When present, must equal the path id"


class StartVolumePushResponse(TypedDict):
    push_id: str
    manifest_upload_url: str
    expires_in_seconds: int
    max_manifest_bytes: str
    "64-bit integer as a decimal string"


class StreamExecStartTtyVariant1(TypedDict):
    rows: int
    cols: int


class StreamExecStartSecretEnvironmentItem(TypedDict):
    secret_name: str
    variable_name: str


class StreamExecStart(TypedDict):
    cmd: list[str]
    env: NotRequired[dict[str, str]]
    "At most 256 entries; names [A-Za-z_][A-Za-z0-9_]* of at most 128 bytes; values at most 4096 characters"
    cwd: NotRequired[str]
    "Absolute; default the image's"
    tty: NotRequired[Union[StreamExecStartTtyVariant1, None]]
    timeout_seconds: NotRequired[int]
    "Omit: no deadline"
    secret_environment: NotRequired[list[StreamExecStartSecretEnvironmentItem]]


UngrantSandboxSecretResponse = dict[str, Any]


class UpdateProjectRequest(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"
    name: NotRequired[str]
    description: NotRequired[str]
    "At most 4 KiB (UTF-8 bytes)"


class UpdateProjectResponse(TypedDict):
    project: Project


class UpdateSandboxRequest(TypedDict):
    state: NotRequired[Literal["running", "stopped"]]
    idle_timeout_seconds: NotRequired[int]
    ttl_seconds: NotRequired[int]
    metadata: NotRequired[dict[str, str]]
    "At most 50 entries, keys 1 to 128 characters, at most 4096 bytes of values in total"
    workspace_capacity_gib: NotRequired[int]
    network_access: NotRequired[NetworkAccess]


class UpdateSandboxResponse(TypedDict):
    id: str
    request_state: Literal["requested"]
    network_access_receipt: NotRequired[NetworkAccessReceipt]


class WaitSandboxProcessRequest(TypedDict):
    timeout_seconds: NotRequired[int]


class WhoAmI(TypedDict):
    organization: OrgRef
    principal: Principal


class WriteSandboxProcessStdinRequest(TypedDict):
    data: NotRequired[str]
    "Text (UTF-8)"
    data_base64: NotRequired[str]
    "Bytes, base64"
    close: NotRequired[bool]
    "Close stdin after the data (EOF)"


class WriteSandboxProcessStdinResponse(TypedDict):
    written: int
    closed: bool


WhoAmIResponse = WhoAmI


CreateFeedbackBody = CreateFeedbackRequest


CreateFeedbackResponse = FeedbackCreated


CreateProjectBody = CreateProjectRequest


UpdateProjectBody = UpdateProjectRequest


StartRunBody = StartRunRequest


CompleteRunBody = CompleteRunRequest


CreateWorkloadBody = CreateWorkloadRequest


SetWorkloadLaunchAclBody = SetWorkloadLaunchAclRequest


AddWorkloadFederationBody = AddWorkloadFederationRequest


CreateSandboxSecretBody = CreateSandboxSecretRequest


GrantSandboxSecretBody = GrantSandboxSecretRequest


RotateSandboxSecretBody = RotateSandboxSecretRequest


RevokeSandboxSecretBody = RevokeSandboxSecretRequest


RegisterAnnotationSchemaBody = RegisterAnnotationSchemaRequest


ArchiveAnnotationSchemaBody = ArchiveAnnotationSchemaRequest


AnnotateBody = AnnotateRequest


AnnotateRangeBody = AnnotateRangeRequest


PutDataViewBody = PutDataViewRequest


RunDataViewBody = RunDataViewRequest


RunDataViewResponse = QueryResult


RunTelemetrySqlBody = RunTelemetrySqlRequest


RunTelemetrySqlResponse = QueryResult


CreateSandboxBody = CreateSandboxRequest


UpdateSandboxBody = UpdateSandboxRequest


DeleteSandboxResponse = SandboxRequestState


ExecSandboxBody = ExecSandboxRequest


ExecSandboxResponse = ExecResult


WriteSandboxFileResponse = FileInfo


StatSandboxFileResponse = FileInfo


MakeSandboxDirectoryBody = MakeSandboxDirectoryRequest


MakeSandboxDirectoryResponse = FileInfo


RemoveSandboxFileBody = RemoveSandboxFileRequest


RenameSandboxFileBody = RenameSandboxFileRequest


RenameSandboxFileResponse = FileInfo


StartSandboxProcessBody = StartSandboxProcessRequest


StartSandboxProcessResponse = SandboxProcess


GetSandboxProcessResponse = SandboxProcess


SignalSandboxProcessBody = SignalSandboxProcessRequest


SignalSandboxProcessResponse = SandboxProcess


KillSandboxProcessResponse = SandboxProcess


WriteSandboxProcessStdinBody = WriteSandboxProcessStdinRequest


ResizeSandboxProcessBody = ResizeSandboxProcessRequest


ResizeSandboxProcessResponse = SandboxProcess


WaitSandboxProcessBody = WaitSandboxProcessRequest


WaitSandboxProcessResponse = SandboxProcess


CreateSandboxSnapshotBody = CreateSandboxSnapshotRequest


AdminCreateOrganizationBody = AdminCreateOrganizationRequest


AdminCreateApiKeyBody = AdminCreateApiKeyRequest


AdminCreateApiKeyResponse = IssuedApiKey


AdminQuarantineSandboxBody = AdminQuarantineSandboxRequest


AdminReleaseSandboxBody = AdminReleaseSandboxRequest


AdminSetQuotaBody = AdminSetQuotaRequest


AdminGetEgressAllowlistResponse = EgressAllowlist


AdminSetEgressAllowlistBody = AdminSetEgressAllowlistRequest


AdminSetEgressAllowlistResponse = EgressAllowlist


CreateVolumeBody = CreateVolumeRequest


StartVolumePushBody = StartVolumePushRequest


RequestVolumeBlobUploadsBody = RequestVolumeBlobUploadsRequest


PublishVolumeVersionBody = PublishVolumeVersionRequest


IssueSshTokenBody = IssueSshTokenRequest


IssueEndpointTokenBody = IssueEndpointTokenRequest


UploadSandboxArchiveResponse = FileInfo


SandboxRecord = Sandbox
SnapshotRecord = SandboxSnapshot
CreateSandboxResult = CreateSandboxResponse
SnapshotResult = CreateSandboxSnapshotResponse
Secret = SandboxSecret
UsageSnapshot = GetUsageSnapshotResponseSnapshot
SqlResult = QueryResult

# Every operation: (method, path).
OPERATIONS: dict[str, tuple[str, str]] = {
    "GetServiceConfig": ("GET", "/v1/service-config"),
    "WhoAmI": ("GET", "/v1/whoami"),
    "CreateConsoleSession": ("POST", "/v1/console/sessions"),
    "DeleteConsoleSession": ("DELETE", "/v1/console/sessions/current"),
    "GetUsageSnapshot": ("GET", "/v1/usage"),
    "CreateFeedback": ("POST", "/v1/feedback"),
    "CreateProject": ("POST", "/v1/projects"),
    "ListProjects": ("GET", "/v1/projects"),
    "GetProject": ("GET", "/v1/projects/{id}"),
    "UpdateProject": ("PATCH", "/v1/projects/{id}"),
    "DeleteProject": ("DELETE", "/v1/projects/{id}"),
    "StartRun": ("POST", "/v1/runs"),
    "ListRuns": ("GET", "/v1/runs"),
    "CompleteRun": ("POST", "/v1/runs/{id}:complete"),
    "GetRun": ("GET", "/v1/runs/{id}"),
    "CreateWorkload": ("POST", "/v1/workloads"),
    "ListWorkloads": ("GET", "/v1/workloads"),
    "GetWorkload": ("GET", "/v1/workloads/{name}"),
    "DeleteWorkload": ("DELETE", "/v1/workloads/{name}"),
    "SetWorkloadLaunchAcl": ("PUT", "/v1/workloads/{name}/launch-acl"),
    "AddWorkloadFederation": ("POST", "/v1/workloads/{name}/federation"),
    "ListWorkloadFederation": ("GET", "/v1/workloads/{name}/federation"),
    "RemoveWorkloadFederation": ("DELETE", "/v1/workloads/{name}/federation/{federation_id}"),
    "CreateSandboxSecret": ("POST", "/v1/secrets"),
    "ListSandboxSecrets": ("GET", "/v1/secrets"),
    "GrantSandboxSecret": ("POST", "/v1/secrets/{id}/grants"),
    "ListSandboxSecretGrants": ("GET", "/v1/secrets/{id}/grants"),
    "UngrantSandboxSecret": ("DELETE", "/v1/secrets/{id}/grants/{subject_kind}/{subject_id}"),
    "RotateSandboxSecret": ("POST", "/v1/secrets/{id}:rotate"),
    "RevokeSandboxSecret": ("POST", "/v1/secrets/{id}:revoke"),
    "RegisterAnnotationSchema": ("POST", "/v1/annotation-schemas"),
    "ListAnnotationSchemas": ("GET", "/v1/annotation-schemas"),
    "GetAnnotationSchema": ("GET", "/v1/annotation-schemas/{name}"),
    "ArchiveAnnotationSchema": ("POST", "/v1/annotation-schemas/{name}:archive"),
    "Annotate": ("POST", "/v1/annotations"),
    "ListAnnotations": ("GET", "/v1/annotations"),
    "AnnotateRange": ("POST", "/v1/annotations:range"),
    "PutDataView": ("PUT", "/v1/data-views/{name}"),
    "DeleteDataView": ("DELETE", "/v1/data-views/{name}"),
    "ListDataViews": ("GET", "/v1/data-views"),
    "RunDataView": ("POST", "/v1/data-views/{name}:run"),
    "RunTelemetrySql": ("POST", "/v1/telemetry/sql"),
    "CreateSandbox": ("POST", "/v1/sandboxes"),
    "ListSandboxes": ("GET", "/v1/sandboxes"),
    "GetSandbox": ("GET", "/v1/sandboxes/{id}"),
    "UpdateSandbox": ("PATCH", "/v1/sandboxes/{id}"),
    "DeleteSandbox": ("DELETE", "/v1/sandboxes/{id}"),
    "ExecSandbox": ("POST", "/v1/sandboxes/{id}:exec"),
    "StreamExecSandbox": ("GET", "/v1/sandboxes/{id}/exec/stream"),
    "ReadSandboxFile": ("GET", "/v1/sandboxes/{id}/files"),
    "WriteSandboxFile": ("PUT", "/v1/sandboxes/{id}/files"),
    "StatSandboxFile": ("GET", "/v1/sandboxes/{id}/files:stat"),
    "ListSandboxFiles": ("GET", "/v1/sandboxes/{id}/files:list"),
    "MakeSandboxDirectory": ("POST", "/v1/sandboxes/{id}/files:mkdir"),
    "RemoveSandboxFile": ("POST", "/v1/sandboxes/{id}/files:remove"),
    "RenameSandboxFile": ("POST", "/v1/sandboxes/{id}/files:rename"),
    "WatchSandboxDirectory": ("GET", "/v1/sandboxes/{id}/files:watch"),
    "StartSandboxProcess": ("POST", "/v1/sandboxes/{id}/processes"),
    "ListSandboxProcesses": ("GET", "/v1/sandboxes/{id}/processes"),
    "GetSandboxProcess": ("GET", "/v1/sandboxes/{id}/processes/{process_id}"),
    "SignalSandboxProcess": ("POST", "/v1/sandboxes/{id}/processes/{process_id}:signal"),
    "KillSandboxProcess": ("POST", "/v1/sandboxes/{id}/processes/{process_id}:kill"),
    "WriteSandboxProcessStdin": ("POST", "/v1/sandboxes/{id}/processes/{process_id}:stdin"),
    "ResizeSandboxProcess": ("POST", "/v1/sandboxes/{id}/processes/{process_id}:resize"),
    "WaitSandboxProcess": ("POST", "/v1/sandboxes/{id}/processes/{process_id}:wait"),
    "ReadSandboxProcessOutput": ("GET", "/v1/sandboxes/{id}/processes/{process_id}/output"),
    "StreamSandboxProcessOutput": ("GET", "/v1/sandboxes/{id}/processes/{process_id}/output:stream"),
    "CreateSandboxSnapshot": ("POST", "/v1/sandboxes/{id}:snapshot"),
    "ListSandboxSnapshots": ("GET", "/v1/snapshots"),
    "DeleteSandboxSnapshot": ("DELETE", "/v1/snapshots/{id}"),
    "AdminCreateOrganization": ("POST", "/v1/admin/organizations"),
    "AdminListOrganizations": ("GET", "/v1/admin/organizations"),
    "AdminCreateApiKey": ("POST", "/v1/admin/api-keys"),
    "AdminListApiKeys": ("GET", "/v1/admin/organizations/{organization}/api-keys"),
    "AdminRevokeApiKey": ("POST", "/v1/admin/api-keys/{key_id}:revoke"),
    "AdminRotateMasterKey": ("POST", "/v1/admin/master-key:rotate"),
    "AdminQuarantineSandbox": ("POST", "/v1/admin/sandboxes/{id}:quarantine"),
    "AdminReleaseSandbox": ("POST", "/v1/admin/sandboxes/{id}:release"),
    "AdminListHosts": ("GET", "/v1/admin/hosts"),
    "AdminDrainHost": ("POST", "/v1/admin/hosts/{host_id}:drain"),
    "AdminCordonHost": ("POST", "/v1/admin/hosts/{host_id}:cordon"),
    "AdminUncordonHost": ("POST", "/v1/admin/hosts/{host_id}:uncordon"),
    "AdminSetQuota": ("PUT", "/v1/admin/organizations/{organization}/quotas/{metric}"),
    "AdminGetEgressAllowlist": ("GET", "/v1/admin/organizations/{organization}/egress-allowlist"),
    "AdminSetEgressAllowlist": ("PUT", "/v1/admin/organizations/{organization}/egress-allowlist"),
    "TailRun": ("GET", "/v1/runs/{id}/tail"),
    "CreateVolume": ("POST", "/v1/volumes"),
    "ListVolumes": ("GET", "/v1/volumes"),
    "GetVolume": ("GET", "/v1/volumes/{id}"),
    "DeleteVolume": ("DELETE", "/v1/volumes/{id}"),
    "StartVolumePush": ("POST", "/v1/volumes/{id}/pushes"),
    "RequestVolumeBlobUploads": ("POST", "/v1/volume-pushes/{push_id}/blob-uploads"),
    "PublishVolumeVersion": ("POST", "/v1/volume-pushes/{push_id}/publish"),
    "IssueSshToken": ("POST", "/v1/sandboxes/{id}:issueSshToken"),
    "IssueEndpointToken": ("POST", "/v1/sandboxes/{id}/endpoints/{port}:token"),
    "GetMetrics": ("GET", "/metrics"),
    "UploadSandboxArchive": ("POST", "/v1/sandboxes/{id}/files:upload"),
    "ExportTraces": ("POST", "/v1/traces"),
}
