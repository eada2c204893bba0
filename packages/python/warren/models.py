"""Wire types of the Warren API, generated from docs/openapi.json by
packages/python/tools/generate.py: do not edit (a test fails when this file is stale).

64-bit integers are ``str`` (decimal strings, as on the wire): see warren.numbers.
"""

# ruff: noqa
from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, Union


class GetServiceConfigResponse(TypedDict):
    api_base_url: str
    "Base URL of this API (the /v1 routes hang off it)"
    session_plane_url: str
    "Session-plane base URL; empty when none is deployed"
    ssh_host: str
    "SSH gateway host; empty when none is deployed"
    api_version: str


class WhoAmIResponseOrganization(TypedDict):
    id: str
    slug: str


class WhoAmIResponsePrincipal(TypedDict):
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


class WhoAmIResponse(TypedDict):
    organization: WhoAmIResponseOrganization
    principal: WhoAmIResponsePrincipal


class CreateConsoleSessionResponseSession(TypedDict):
    session_id: str
    "Listed and revoked with the API keys (AdminListApiKeys)"
    expires_at: str
    created_at: str


class CreateConsoleSessionResponse(TypedDict):
    session: CreateConsoleSessionResponseSession


DeleteConsoleSessionResponse = dict[str, Any]


class GetUsageSnapshotResponseSnapshotLimitsItem(TypedDict):
    metric: str
    "Stable quota name, e.g. sandboxes.running"
    unit: str
    limit: str
    "64-bit integer as a decimal string"
    current: str
    "64-bit integer as a decimal string"
    reserved: str
    "64-bit integer as a decimal string"


class GetUsageSnapshotResponseSnapshot(TypedDict):
    limits: list[GetUsageSnapshotResponseSnapshotLimitsItem]


class GetUsageSnapshotResponse(TypedDict):
    snapshot: GetUsageSnapshotResponseSnapshot


class CreateFeedbackBody(TypedDict):
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


class CreateFeedbackResponse(TypedDict):
    id: str
    relayed: bool


class CreateProjectBody(TypedDict):
    name: str
    slug: str
    description: NotRequired[str]
    "At most 4 KiB (UTF-8 bytes)"


class CreateProjectResponseProject(TypedDict):
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
    project: CreateProjectResponseProject


class ListProjectsResponseProjectsItem(TypedDict):
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


class ListProjectsResponse(TypedDict):
    projects: list[ListProjectsResponseProjectsItem]
    next_page_token: str


class GetProjectResponseProject(TypedDict):
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


class GetProjectResponse(TypedDict):
    project: GetProjectResponseProject


class UpdateProjectBody(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"
    name: NotRequired[str]
    description: NotRequired[str]
    "At most 4 KiB (UTF-8 bytes)"


class UpdateProjectResponseProject(TypedDict):
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


class UpdateProjectResponse(TypedDict):
    project: UpdateProjectResponseProject


class DeleteProjectResponse(TypedDict):
    api_keys_deleted: str
    "64-bit integer as a decimal string"
    runs_deleted: str
    "64-bit integer as a decimal string"
    secrets_deleted: str
    "64-bit integer as a decimal string"
    volumes_deleted: str
    "64-bit integer as a decimal string"


class StartRunBody(TypedDict):
    project_id: NotRequired[str]
    "Omit for the default project"
    label: NotRequired[str]
    parent_run_id: NotRequired[str]
    "Empty starts a new tree root"
    execute_as_workload: NotRequired[str]
    "Registered workload name; empty runs as the caller"


class StartRunResponseRun(TypedDict):
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


class StartRunResponse(TypedDict):
    run: StartRunResponseRun


class ListRunsResponseRunsItem(TypedDict):
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


class ListRunsResponse(TypedDict):
    runs: list[ListRunsResponseRunsItem]
    next_page_token: str


class CompleteRunBody(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"
    status: Literal["succeeded", "failed", "canceled"]


class CompleteRunResponseRun(TypedDict):
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
    run: CompleteRunResponseRun


class GetRunResponseRun(TypedDict):
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


class GetRunResponse(TypedDict):
    run: GetRunResponseRun


class CreateWorkloadBody(TypedDict):
    name: str
    description: NotRequired[str]


class CreateWorkloadResponseWorkloadLaunchAclLaunchersItem(TypedDict):
    kind: str
    "\"user\" (or empty): a member by user id; \"service_account\": a key id"
    principal_id: str


class CreateWorkloadResponseWorkloadLaunchAcl(TypedDict):
    policy: Literal["WORKLOAD_LAUNCH_POLICY_UNSPECIFIED", "WORKLOAD_LAUNCH_POLICY_MEMBERS", "WORKLOAD_LAUNCH_POLICY_RESTRICTED"]
    launchers: list[CreateWorkloadResponseWorkloadLaunchAclLaunchersItem]


class CreateWorkloadResponseWorkloadFederationConfigsItemDescriptor(TypedDict):
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


class CreateWorkloadResponseWorkloadFederationConfigsItem(TypedDict):
    id: str
    workload_id: str
    cloud: Literal["aws", "gcp", "azure"]
    audience: str
    "Provider-canonical audience derived by the server"
    descriptor: CreateWorkloadResponseWorkloadFederationConfigsItemDescriptor
    "Only the selected cloud's fields may be set"
    created_by: str
    created_at: str


class CreateWorkloadResponseWorkload(TypedDict):
    id: str
    name: str
    description: str
    launch_acl: CreateWorkloadResponseWorkloadLaunchAcl
    federation_configs: list[CreateWorkloadResponseWorkloadFederationConfigsItem]
    created_by: str
    created_at: str
    updated_at: str


class CreateWorkloadResponse(TypedDict):
    workload: CreateWorkloadResponseWorkload


class ListWorkloadsResponseWorkloadsItemLaunchAclLaunchersItem(TypedDict):
    kind: str
    "\"user\" (or empty): a member by user id; \"service_account\": a key id"
    principal_id: str


class ListWorkloadsResponseWorkloadsItemLaunchAcl(TypedDict):
    policy: Literal["WORKLOAD_LAUNCH_POLICY_UNSPECIFIED", "WORKLOAD_LAUNCH_POLICY_MEMBERS", "WORKLOAD_LAUNCH_POLICY_RESTRICTED"]
    launchers: list[ListWorkloadsResponseWorkloadsItemLaunchAclLaunchersItem]


class ListWorkloadsResponseWorkloadsItemFederationConfigsItemDescriptor(TypedDict):
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


class ListWorkloadsResponseWorkloadsItemFederationConfigsItem(TypedDict):
    id: str
    workload_id: str
    cloud: Literal["aws", "gcp", "azure"]
    audience: str
    "Provider-canonical audience derived by the server"
    descriptor: ListWorkloadsResponseWorkloadsItemFederationConfigsItemDescriptor
    "Only the selected cloud's fields may be set"
    created_by: str
    created_at: str


class ListWorkloadsResponseWorkloadsItem(TypedDict):
    id: str
    name: str
    description: str
    launch_acl: ListWorkloadsResponseWorkloadsItemLaunchAcl
    federation_configs: list[ListWorkloadsResponseWorkloadsItemFederationConfigsItem]
    created_by: str
    created_at: str
    updated_at: str


class ListWorkloadsResponse(TypedDict):
    workloads: list[ListWorkloadsResponseWorkloadsItem]
    next_page_token: str


class GetWorkloadResponseWorkloadLaunchAclLaunchersItem(TypedDict):
    kind: str
    "\"user\" (or empty): a member by user id; \"service_account\": a key id"
    principal_id: str


class GetWorkloadResponseWorkloadLaunchAcl(TypedDict):
    policy: Literal["WORKLOAD_LAUNCH_POLICY_UNSPECIFIED", "WORKLOAD_LAUNCH_POLICY_MEMBERS", "WORKLOAD_LAUNCH_POLICY_RESTRICTED"]
    launchers: list[GetWorkloadResponseWorkloadLaunchAclLaunchersItem]


class GetWorkloadResponseWorkloadFederationConfigsItemDescriptor(TypedDict):
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


class GetWorkloadResponseWorkloadFederationConfigsItem(TypedDict):
    id: str
    workload_id: str
    cloud: Literal["aws", "gcp", "azure"]
    audience: str
    "Provider-canonical audience derived by the server"
    descriptor: GetWorkloadResponseWorkloadFederationConfigsItemDescriptor
    "Only the selected cloud's fields may be set"
    created_by: str
    created_at: str


class GetWorkloadResponseWorkload(TypedDict):
    id: str
    name: str
    description: str
    launch_acl: GetWorkloadResponseWorkloadLaunchAcl
    federation_configs: list[GetWorkloadResponseWorkloadFederationConfigsItem]
    created_by: str
    created_at: str
    updated_at: str


class GetWorkloadResponse(TypedDict):
    workload: GetWorkloadResponseWorkload


DeleteWorkloadResponse = dict[str, Any]


class SetWorkloadLaunchAclBodyAclLaunchersItem(TypedDict):
    kind: NotRequired[str]
    principal_id: str


class SetWorkloadLaunchAclBodyAcl(TypedDict):
    policy: Literal["WORKLOAD_LAUNCH_POLICY_UNSPECIFIED", "WORKLOAD_LAUNCH_POLICY_MEMBERS", "WORKLOAD_LAUNCH_POLICY_RESTRICTED"]
    launchers: NotRequired[list[SetWorkloadLaunchAclBodyAclLaunchersItem]]


class SetWorkloadLaunchAclBody(TypedDict):
    name: NotRequired[str]
    "When present, must equal the path name"
    acl: SetWorkloadLaunchAclBodyAcl


class SetWorkloadLaunchAclResponseWorkloadLaunchAclLaunchersItem(TypedDict):
    kind: str
    "\"user\" (or empty): a member by user id; \"service_account\": a key id"
    principal_id: str


class SetWorkloadLaunchAclResponseWorkloadLaunchAcl(TypedDict):
    policy: Literal["WORKLOAD_LAUNCH_POLICY_UNSPECIFIED", "WORKLOAD_LAUNCH_POLICY_MEMBERS", "WORKLOAD_LAUNCH_POLICY_RESTRICTED"]
    launchers: list[SetWorkloadLaunchAclResponseWorkloadLaunchAclLaunchersItem]


class SetWorkloadLaunchAclResponseWorkloadFederationConfigsItemDescriptor(TypedDict):
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


class SetWorkloadLaunchAclResponseWorkloadFederationConfigsItem(TypedDict):
    id: str
    workload_id: str
    cloud: Literal["aws", "gcp", "azure"]
    audience: str
    "Provider-canonical audience derived by the server"
    descriptor: SetWorkloadLaunchAclResponseWorkloadFederationConfigsItemDescriptor
    "Only the selected cloud's fields may be set"
    created_by: str
    created_at: str


class SetWorkloadLaunchAclResponseWorkload(TypedDict):
    id: str
    name: str
    description: str
    launch_acl: SetWorkloadLaunchAclResponseWorkloadLaunchAcl
    federation_configs: list[SetWorkloadLaunchAclResponseWorkloadFederationConfigsItem]
    created_by: str
    created_at: str
    updated_at: str


class SetWorkloadLaunchAclResponse(TypedDict):
    workload: SetWorkloadLaunchAclResponseWorkload


class AddWorkloadFederationBodyDescriptor(TypedDict):
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


class AddWorkloadFederationBody(TypedDict):
    name: NotRequired[str]
    "When present, must equal the path name"
    cloud: Literal["aws", "gcp", "azure"]
    descriptor: AddWorkloadFederationBodyDescriptor
    "Only the selected cloud's fields may be set"


class AddWorkloadFederationResponseFederationConfigDescriptor(TypedDict):
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


class AddWorkloadFederationResponseFederationConfig(TypedDict):
    id: str
    workload_id: str
    cloud: Literal["aws", "gcp", "azure"]
    audience: str
    "Provider-canonical audience derived by the server"
    descriptor: AddWorkloadFederationResponseFederationConfigDescriptor
    "Only the selected cloud's fields may be set"
    created_by: str
    created_at: str


class AddWorkloadFederationResponse(TypedDict):
    federation_config: AddWorkloadFederationResponseFederationConfig


class ListWorkloadFederationResponseFederationConfigsItemDescriptor(TypedDict):
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


class ListWorkloadFederationResponseFederationConfigsItem(TypedDict):
    id: str
    workload_id: str
    cloud: Literal["aws", "gcp", "azure"]
    audience: str
    "Provider-canonical audience derived by the server"
    descriptor: ListWorkloadFederationResponseFederationConfigsItemDescriptor
    "Only the selected cloud's fields may be set"
    created_by: str
    created_at: str


class ListWorkloadFederationResponse(TypedDict):
    federation_configs: list[ListWorkloadFederationResponseFederationConfigsItem]


RemoveWorkloadFederationResponse = dict[str, Any]


class CreateSandboxSecretBody(TypedDict):
    name: str
    value: str
    "Write-only; never returned"
    delivery: NotRequired[Literal["SANDBOX_SECRET_DELIVERY_UNSPECIFIED", "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS", "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY", "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT"]]
    dest_host: NotRequired[str]
    expires_at: NotRequired[str]


class CreateSandboxSecretResponseSecret(TypedDict):
    "Metadata only: the value is never returned"
    id: str
    name: str
    delivery: Literal["SANDBOX_SECRET_DELIVERY_UNSPECIFIED", "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS", "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY", "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT"]
    dest_host: str
    "Exact public HTTPS host; empty for sandbox-environment delivery"
    current_version: int
    created_by: str
    created_at: str
    rotated_at: NotRequired[str]
    expires_at: NotRequired[str]
    revoked_at: NotRequired[str]


class CreateSandboxSecretResponse(TypedDict):
    secret: CreateSandboxSecretResponseSecret
    "Metadata only: the value is never returned"


class ListSandboxSecretsResponseSecretsItem(TypedDict):
    "Metadata only: the value is never returned"
    id: str
    name: str
    delivery: Literal["SANDBOX_SECRET_DELIVERY_UNSPECIFIED", "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS", "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY", "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT"]
    dest_host: str
    "Exact public HTTPS host; empty for sandbox-environment delivery"
    current_version: int
    created_by: str
    created_at: str
    rotated_at: NotRequired[str]
    expires_at: NotRequired[str]
    revoked_at: NotRequired[str]


class ListSandboxSecretsResponse(TypedDict):
    secrets: list[ListSandboxSecretsResponseSecretsItem]
    next_page_token: str


class GrantSandboxSecretBody(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"
    subject_kind: Literal["SANDBOX_SECRET_GRANT_SUBJECT_KIND_UNSPECIFIED", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_SERVICE_ACCOUNT", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_WORKLOAD"]
    subject_id: str


class GrantSandboxSecretResponseGrant(TypedDict):
    secret_id: str
    subject_kind: Literal["SANDBOX_SECRET_GRANT_SUBJECT_KIND_UNSPECIFIED", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_SERVICE_ACCOUNT", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_WORKLOAD"]
    subject_id: str


class GrantSandboxSecretResponse(TypedDict):
    grant: GrantSandboxSecretResponseGrant


class ListSandboxSecretGrantsResponseGrantsItem(TypedDict):
    secret_id: str
    subject_kind: Literal["SANDBOX_SECRET_GRANT_SUBJECT_KIND_UNSPECIFIED", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_USER", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_SERVICE_ACCOUNT", "SANDBOX_SECRET_GRANT_SUBJECT_KIND_WORKLOAD"]
    subject_id: str


class ListSandboxSecretGrantsResponse(TypedDict):
    grants: list[ListSandboxSecretGrantsResponseGrantsItem]


UngrantSandboxSecretResponse = dict[str, Any]


class RotateSandboxSecretBody(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"
    value: str
    "Write-only; never returned"


class RotateSandboxSecretResponseSecret(TypedDict):
    "Metadata only: the value is never returned"
    id: str
    name: str
    delivery: Literal["SANDBOX_SECRET_DELIVERY_UNSPECIFIED", "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS", "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY", "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT"]
    dest_host: str
    "Exact public HTTPS host; empty for sandbox-environment delivery"
    current_version: int
    created_by: str
    created_at: str
    rotated_at: NotRequired[str]
    expires_at: NotRequired[str]
    revoked_at: NotRequired[str]


class RotateSandboxSecretResponse(TypedDict):
    secret: RotateSandboxSecretResponseSecret
    "Metadata only: the value is never returned"


class RevokeSandboxSecretBody(TypedDict):
    id: NotRequired[str]
    "When present, must equal the path id"


class RevokeSandboxSecretResponseSecret(TypedDict):
    "Metadata only: the value is never returned"
    id: str
    name: str
    delivery: Literal["SANDBOX_SECRET_DELIVERY_UNSPECIFIED", "SANDBOX_SECRET_DELIVERY_SECRET_EGRESS", "SANDBOX_SECRET_DELIVERY_MODEL_GATEWAY", "SANDBOX_SECRET_DELIVERY_SANDBOX_ENVIRONMENT"]
    dest_host: str
    "Exact public HTTPS host; empty for sandbox-environment delivery"
    current_version: int
    created_by: str
    created_at: str
    rotated_at: NotRequired[str]
    expires_at: NotRequired[str]
    revoked_at: NotRequired[str]


class RevokeSandboxSecretResponse(TypedDict):
    secret: RevokeSandboxSecretResponseSecret
    "Metadata only: the value is never returned"


class RegisterAnnotationSchemaBodyPromotedFieldsItem(TypedDict):
    field: str
    identity: NotRequired[bool]
    bloom: NotRequired[bool]


class RegisterAnnotationSchemaBody(TypedDict):
    name: str
    description: NotRequired[str]
    json_schema: str
    promoted_fields: NotRequired[list[RegisterAnnotationSchemaBodyPromotedFieldsItem]]


class RegisterAnnotationSchemaResponseSchemaPromotedFieldsItem(TypedDict):
    field: str
    identity: bool
    bloom: bool
    slot: str
    "Indexed column assigned by the server; stable for the schema name"


class RegisterAnnotationSchemaResponseSchema(TypedDict):
    id: str
    name: str
    version: str
    "Monotonic per organization and name, from 1 (decimal string)"
    description: str
    json_schema: str
    "JSON Schema draft 2020-12 document"
    promoted_fields: list[RegisterAnnotationSchemaResponseSchemaPromotedFieldsItem]
    created_at: str
    archived_at: NotRequired[str]


class RegisterAnnotationSchemaResponse(TypedDict):
    schema: RegisterAnnotationSchemaResponseSchema


class ListAnnotationSchemasResponseSchemasItemPromotedFieldsItem(TypedDict):
    field: str
    identity: bool
    bloom: bool
    slot: str
    "Indexed column assigned by the server; stable for the schema name"


class ListAnnotationSchemasResponseSchemasItem(TypedDict):
    id: str
    name: str
    version: str
    "Monotonic per organization and name, from 1 (decimal string)"
    description: str
    json_schema: str
    "JSON Schema draft 2020-12 document"
    promoted_fields: list[ListAnnotationSchemasResponseSchemasItemPromotedFieldsItem]
    created_at: str
    archived_at: NotRequired[str]


class ListAnnotationSchemasResponse(TypedDict):
    schemas: list[ListAnnotationSchemasResponseSchemasItem]


class GetAnnotationSchemaResponseSchemaPromotedFieldsItem(TypedDict):
    field: str
    identity: bool
    bloom: bool
    slot: str
    "Indexed column assigned by the server; stable for the schema name"


class GetAnnotationSchemaResponseSchema(TypedDict):
    id: str
    name: str
    version: str
    "Monotonic per organization and name, from 1 (decimal string)"
    description: str
    json_schema: str
    "JSON Schema draft 2020-12 document"
    promoted_fields: list[GetAnnotationSchemaResponseSchemaPromotedFieldsItem]
    created_at: str
    archived_at: NotRequired[str]


class GetAnnotationSchemaResponse(TypedDict):
    schema: GetAnnotationSchemaResponseSchema


class ArchiveAnnotationSchemaBody(TypedDict):
    name: NotRequired[str]
    version: NotRequired[str]
    "Decimal string; 0 or omitted means the latest live version"


class ArchiveAnnotationSchemaResponseSchemaPromotedFieldsItem(TypedDict):
    field: str
    identity: bool
    bloom: bool
    slot: str
    "Indexed column assigned by the server; stable for the schema name"


class ArchiveAnnotationSchemaResponseSchema(TypedDict):
    id: str
    name: str
    version: str
    "Monotonic per organization and name, from 1 (decimal string)"
    description: str
    json_schema: str
    "JSON Schema draft 2020-12 document"
    promoted_fields: list[ArchiveAnnotationSchemaResponseSchemaPromotedFieldsItem]
    created_at: str
    archived_at: NotRequired[str]


class ArchiveAnnotationSchemaResponse(TypedDict):
    schema: ArchiveAnnotationSchemaResponseSchema


class AnnotateBody(TypedDict):
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


class ListAnnotationsResponseAnnotationsItem(TypedDict):
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


class ListAnnotationsResponseSkippedItem(TypedDict):
    event_id: str
    reason: str


class ListAnnotationsResponse(TypedDict):
    annotations: list[ListAnnotationsResponseAnnotationsItem]
    skipped: list[ListAnnotationsResponseSkippedItem]
    superseded_count: str
    "Stored versions hidden behind the rows of this page"
    next_page_token: str


class AnnotateRangeBody(TypedDict):
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


class PutDataViewBodySpecParamsItem(TypedDict):
    name: str
    "Bound as $n, n its 1-based place in params"
    type: Literal["text", "bigint", "double precision", "numeric", "boolean", "timestamptz", "jsonb"]
    "The SQL type the value is cast to"


class PutDataViewBodySpec(TypedDict):
    type: Literal["sql.v1"]
    "The tag of the spec format"
    sql: str
    "One SELECT over the published relations"
    params: NotRequired[list[PutDataViewBodySpecParamsItem]]
    render: NotRequired[dict[str, Any]]
    "Opaque render config, stored as sent"


class PutDataViewBody(TypedDict):
    name: NotRequired[str]
    "When present, equal to the path name"
    description: NotRequired[str]
    spec: PutDataViewBodySpec


class PutDataViewResponseViewSpecParamsItem(TypedDict):
    name: str
    "Bound as $n, n its 1-based place in params"
    type: Literal["text", "bigint", "double precision", "numeric", "boolean", "timestamptz", "jsonb"]
    "The SQL type the value is cast to"


class PutDataViewResponseViewSpec(TypedDict):
    type: Literal["sql.v1"]
    "The tag of the spec format"
    sql: str
    "One SELECT over the published relations"
    params: NotRequired[list[PutDataViewResponseViewSpecParamsItem]]
    render: NotRequired[dict[str, Any]]
    "Opaque render config, stored as sent"


class PutDataViewResponseView(TypedDict):
    name: str
    description: str
    spec: PutDataViewResponseViewSpec
    spec_version: int
    "Bumped on each upsert"
    created_at: str
    updated_at: str


class PutDataViewResponse(TypedDict):
    view: PutDataViewResponseView


DeleteDataViewResponse = dict[str, Any]


class ListDataViewsResponseViewsItemSpecParamsItem(TypedDict):
    name: str
    "Bound as $n, n its 1-based place in params"
    type: Literal["text", "bigint", "double precision", "numeric", "boolean", "timestamptz", "jsonb"]
    "The SQL type the value is cast to"


class ListDataViewsResponseViewsItemSpec(TypedDict):
    type: Literal["sql.v1"]
    "The tag of the spec format"
    sql: str
    "One SELECT over the published relations"
    params: NotRequired[list[ListDataViewsResponseViewsItemSpecParamsItem]]
    render: NotRequired[dict[str, Any]]
    "Opaque render config, stored as sent"


class ListDataViewsResponseViewsItem(TypedDict):
    name: str
    description: str
    spec: ListDataViewsResponseViewsItemSpec
    spec_version: int
    "Bumped on each upsert"
    created_at: str
    updated_at: str


class ListDataViewsResponse(TypedDict):
    views: list[ListDataViewsResponseViewsItem]


class RunDataViewBody(TypedDict):
    params: NotRequired[dict[str, Union[str, float, bool, None]]]
    "Values of the view's declared params by name; a missing one is null"
    limit: NotRequired[int]
    "Row cap (default 1000)"


class RunDataViewResponseColumnsItem(TypedDict):
    name: str
    type: str
    "PostgreSQL type name (format_type)"


class RunDataViewResponse(TypedDict):
    columns: list[RunDataViewResponseColumnsItem]
    rows: list[list[Any]]
    "Rows as arrays in column order"
    row_count: int
    truncated: bool
    "True when a row or byte cap cut the result"
    truncated_reason: NotRequired[Literal["row_limit", "byte_limit"]]
    spec_version: NotRequired[int]
    "The view version that ran (RunDataView)"


class RunTelemetrySqlBody(TypedDict):
    sql: str
    limit: NotRequired[int]
    "Row cap (default 100)"


class RunTelemetrySqlResponseColumnsItem(TypedDict):
    name: str
    type: str
    "PostgreSQL type name (format_type)"


class RunTelemetrySqlResponse(TypedDict):
    columns: list[RunTelemetrySqlResponseColumnsItem]
    rows: list[list[Any]]
    "Rows as arrays in column order"
    row_count: int
    truncated: bool
    "True when a row or byte cap cut the result"
    truncated_reason: NotRequired[Literal["row_limit", "byte_limit"]]
    spec_version: NotRequired[int]
    "The view version that ran (RunDataView)"


class CreateSandboxBodyResourcesGpus(TypedDict):
    count: int
    models: NotRequired[list[str]]


class CreateSandboxBodyResources(TypedDict):
    memory_mb: NotRequired[int]
    cpu_millis: NotRequired[int]
    gpus: NotRequired[CreateSandboxBodyResourcesGpus]


class CreateSandboxBodySecretsItem(TypedDict):
    name: str


class CreateSandboxBodySharedFilesystemsItem(TypedDict):
    filesystem_id: str
    subdirectory: str
    target_path: str


class CreateSandboxBodyVolumesItem(TypedDict):
    volume_id: str
    target_path: str


class CreateSandboxBody(TypedDict):
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
    network_access: NotRequired[Literal["public", "gateway_only", "none"]]
    placement_class: NotRequired[Literal["standard", "non_preemptible"]]
    ports: NotRequired[list[int]]
    resources: NotRequired[CreateSandboxBodyResources]
    secrets: NotRequired[list[CreateSandboxBodySecretsItem]]
    shared_filesystems: NotRequired[list[CreateSandboxBodySharedFilesystemsItem]]
    storage_class: NotRequired[Literal["standard", "durable"]]
    ttl_seconds: NotRequired[int]
    volumes: NotRequired[list[CreateSandboxBodyVolumesItem]]
    workspace_capacity_gib: NotRequired[int]


class CreateSandboxResponse(TypedDict):
    id: str
    request_state: Literal["requested"]
    run_id: str


class ListSandboxesResponseSandboxesItemEndpointsItem(TypedDict):
    port: int
    url: str


class ListSandboxesResponseSandboxesItemVolumesItem(TypedDict):
    volume_id: str
    version: str
    target_path: str
    name: NotRequired[str]


class ListSandboxesResponseSandboxesItemSsh(TypedDict):
    host: str
    port: int
    user: str


class ListSandboxesResponseSandboxesItemStateReason(TypedDict):
    code: str
    message: str


class ListSandboxesResponseSandboxesItemProgress(TypedDict):
    phase: Literal["pulling_image"]
    bytes_done: int
    bytes_total: int


class ListSandboxesResponseSandboxesItemResourcesGpus(TypedDict):
    count: int
    models: NotRequired[list[str]]


class ListSandboxesResponseSandboxesItemResources(TypedDict):
    memory_mb: NotRequired[int]
    cpu_millis: NotRequired[int]
    gpus: NotRequired[ListSandboxesResponseSandboxesItemResourcesGpus]


class ListSandboxesResponseSandboxesItemLastActivity(TypedDict):
    at: str
    source: Literal["exec", "session", "update"]


class ListSandboxesResponseSandboxesItemSharedFilesystemsItem(TypedDict):
    filesystem_id: str
    subdirectory: str
    target_path: str


class ListSandboxesResponseSandboxesItem(TypedDict):
    id: str
    state: Literal["requested", "reserved", "materializing", "ready", "running", "stopped", "terminating", "failed", "terminated", "quarantined", "attention"]
    image: NotRequired[str]
    "Root sandboxes only"
    snapshot_id: NotRequired[str]
    "Child sandboxes only"
    storage_class: Literal["standard", "durable"]
    placement_class: Literal["standard", "non_preemptible"]
    endpoints: list[ListSandboxesResponseSandboxesItemEndpointsItem]
    lineage_path: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    volumes: list[ListSandboxesResponseSandboxesItemVolumesItem]
    workload_image: str
    network_access: Literal["public", "gateway_only", "none"]
    ports: list[int]
    "The ports asked for at create; endpoints shows those served now"
    expires_at: NotRequired[str]
    ssh: NotRequired[ListSandboxesResponseSandboxesItemSsh]
    state_reason: NotRequired[ListSandboxesResponseSandboxesItemStateReason]
    progress: NotRequired[ListSandboxesResponseSandboxesItemProgress]
    name: NotRequired[str]
    resources: NotRequired[ListSandboxesResponseSandboxesItemResources]
    created_by: NotRequired[str]
    last_activity: NotRequired[ListSandboxesResponseSandboxesItemLastActivity]
    workspace_capacity_gib: NotRequired[int]
    idle_timeout_seconds: NotRequired[int]
    idle_deadline: NotRequired[str]
    host_state: NotRequired[Literal["ready", "draining", "cordoned", "unreachable", "dead"]]
    "State of the host that runs a live sandbox (docs/hosts.md): unreachable while its host is silent (exec, SSH and endpoints answer 503 host_unavailable; the sandbox keeps its last state), dead once it was given up. Omitted on finished sandboxes and those without a host"
    shared_filesystems: NotRequired[list[ListSandboxesResponseSandboxesItemSharedFilesystemsItem]]


class ListSandboxesResponse(TypedDict):
    sandboxes: list[ListSandboxesResponseSandboxesItem]
    next_page_token: str


class GetSandboxResponseSandboxEndpointsItem(TypedDict):
    port: int
    url: str


class GetSandboxResponseSandboxVolumesItem(TypedDict):
    volume_id: str
    version: str
    target_path: str
    name: NotRequired[str]


class GetSandboxResponseSandboxSsh(TypedDict):
    host: str
    port: int
    user: str


class GetSandboxResponseSandboxStateReason(TypedDict):
    code: str
    message: str


class GetSandboxResponseSandboxProgress(TypedDict):
    phase: Literal["pulling_image"]
    bytes_done: int
    bytes_total: int


class GetSandboxResponseSandboxResourcesGpus(TypedDict):
    count: int
    models: NotRequired[list[str]]


class GetSandboxResponseSandboxResources(TypedDict):
    memory_mb: NotRequired[int]
    cpu_millis: NotRequired[int]
    gpus: NotRequired[GetSandboxResponseSandboxResourcesGpus]


class GetSandboxResponseSandboxLastActivity(TypedDict):
    at: str
    source: Literal["exec", "session", "update"]


class GetSandboxResponseSandboxSharedFilesystemsItem(TypedDict):
    filesystem_id: str
    subdirectory: str
    target_path: str


class GetSandboxResponseSandbox(TypedDict):
    id: str
    state: Literal["requested", "reserved", "materializing", "ready", "running", "stopped", "terminating", "failed", "terminated", "quarantined", "attention"]
    image: NotRequired[str]
    "Root sandboxes only"
    snapshot_id: NotRequired[str]
    "Child sandboxes only"
    storage_class: Literal["standard", "durable"]
    placement_class: Literal["standard", "non_preemptible"]
    endpoints: list[GetSandboxResponseSandboxEndpointsItem]
    lineage_path: str
    metadata: dict[str, str]
    created_at: str
    updated_at: str
    volumes: list[GetSandboxResponseSandboxVolumesItem]
    workload_image: str
    network_access: Literal["public", "gateway_only", "none"]
    ports: list[int]
    "The ports asked for at create; endpoints shows those served now"
    expires_at: NotRequired[str]
    ssh: NotRequired[GetSandboxResponseSandboxSsh]
    state_reason: NotRequired[GetSandboxResponseSandboxStateReason]
    progress: NotRequired[GetSandboxResponseSandboxProgress]
    name: NotRequired[str]
    resources: NotRequired[GetSandboxResponseSandboxResources]
    created_by: NotRequired[str]
    last_activity: NotRequired[GetSandboxResponseSandboxLastActivity]
    workspace_capacity_gib: NotRequired[int]
    idle_timeout_seconds: NotRequired[int]
    idle_deadline: NotRequired[str]
    host_state: NotRequired[Literal["ready", "draining", "cordoned", "unreachable", "dead"]]
    "State of the host that runs a live sandbox (docs/hosts.md): unreachable while its host is silent (exec, SSH and endpoints answer 503 host_unavailable; the sandbox keeps its last state), dead once it was given up. Omitted on finished sandboxes and those without a host"
    shared_filesystems: NotRequired[list[GetSandboxResponseSandboxSharedFilesystemsItem]]


class GetSandboxResponse(TypedDict):
    sandbox: GetSandboxResponseSandbox


class UpdateSandboxBody(TypedDict):
    state: NotRequired[Literal["running", "stopped"]]
    idle_timeout_seconds: NotRequired[int]
    ttl_seconds: NotRequired[int]
    metadata: NotRequired[dict[str, str]]
    "At most 50 entries, keys 1 to 128 characters, at most 4096 bytes of values in total"
    workspace_capacity_gib: NotRequired[int]
    network_access: NotRequired[Literal["public", "gateway_only", "none"]]


class UpdateSandboxResponseNetworkAccessReceiptPoliciesItem(TypedDict):
    policy_name: str
    policy_endpoint_name: str
    policy_endpoint_uid: str
    policy_endpoint_resource_version: str


class UpdateSandboxResponseNetworkAccessReceipt(TypedDict):
    network_access: str
    pod_uid: str
    pod_resource_version: str
    policies: list[UpdateSandboxResponseNetworkAccessReceiptPoliciesItem]


class UpdateSandboxResponse(TypedDict):
    id: str
    request_state: Literal["requested"]
    network_access_receipt: NotRequired[UpdateSandboxResponseNetworkAccessReceipt]


class DeleteSandboxResponse(TypedDict):
    id: str
    request_state: Literal["requested"]


class ExecSandboxBodySecretEnvironmentItem(TypedDict):
    secret_name: str
    variable_name: str


class ExecSandboxBody(TypedDict):
    cmd: list[str]
    secret_environment: NotRequired[list[ExecSandboxBodySecretEnvironmentItem]]
    timeout_seconds: NotRequired[int]


class ExecSandboxResponseVariant1(TypedDict):
    exit: int
    stdout: str
    stderr: str
    truncated: bool


class ExecSandboxResponseVariant2(TypedDict):
    timeout: dict[str, Any]
    stdout: str
    stderr: str
    truncated: bool


class ExecSandboxResponseVariant3(TypedDict):
    indeterminate: dict[str, Any]
    stdout: str
    stderr: str
    truncated: bool


ExecSandboxResponse = Union[ExecSandboxResponseVariant1, ExecSandboxResponseVariant2, ExecSandboxResponseVariant3]


WriteSandboxFileResponse = Any


StatSandboxFileResponse = Any


class ListSandboxFilesResponse(TypedDict):
    path: str
    entries: list[Any]
    truncated: bool


class MakeSandboxDirectoryBody(TypedDict):
    path: str
    "Absolute path inside the sandbox (at most 4096 bytes; no NUL, no . or .. segment)"
    mode: NotRequired[str]
    "Octal permission bits, e.g. 644 or 0755"


MakeSandboxDirectoryResponse = Any


class RemoveSandboxFileBody(TypedDict):
    path: str
    "Absolute path inside the sandbox (at most 4096 bytes; no NUL, no . or .. segment)"
    recursive: NotRequired[bool]


RenameSandboxFileBody = TypedDict("RenameSandboxFileBody", {"from": str, "to": str, "overwrite": NotRequired[bool]})


RenameSandboxFileResponse = Any


class CreateSandboxSnapshotBody(TypedDict):
    name: NotRequired[str]
    wait_remote: NotRequired[bool]
    "Answer once the snapshot is replicated, or at wait_timeout_seconds"
    wait_timeout_seconds: NotRequired[int]
    "How long wait_remote waits (default 25)"


class CreateSandboxSnapshotResponse(TypedDict):
    snapshot_id: str
    durability: Literal["local", "replicated"]
    "Strongest durability confirmed: local once sealed on the host, replicated once in the blob store"


class ListSandboxSnapshotsResponseSnapshotsItem(TypedDict):
    id: str
    created_at: str
    durability: Literal["local", "replicated"]
    "Strongest durability confirmed: local once sealed on the host, replicated once in the blob store"
    image: str
    "Workload image of the lineage, inherited by children"
    lineage_path: str
    "The source sandbox's lineage_path"
    source_sandbox_id: str
    name: NotRequired[str]
    parent_snapshot_id: NotRequired[str]
    "Snapshot the source sandbox was restored from; omitted for an image-created root"


class ListSandboxSnapshotsResponseEdgesItem(TypedDict):
    "A parent lineage edge: snapshot_id's source was restored from parent"
    snapshot_id: str
    parent_snapshot_id: str


class ListSandboxSnapshotsResponse(TypedDict):
    snapshots: list[ListSandboxSnapshotsResponseSnapshotsItem]
    edges: list[ListSandboxSnapshotsResponseEdgesItem]
    "Parent edges of the snapshots on this page"
    next_page_token: str


DeleteSandboxSnapshotResponse = dict[str, Any]


class AdminCreateOrganizationBody(TypedDict):
    slug: str
    name: NotRequired[str]


class AdminCreateOrganizationResponseOrganization(TypedDict):
    id: str
    slug: str
    name: str
    is_operator: NotRequired[bool]
    default_project_id: NotRequired[str]
    created_at: str


class AdminCreateOrganizationResponse(TypedDict):
    organization: AdminCreateOrganizationResponseOrganization


class AdminListOrganizationsResponseOrganizationsItem(TypedDict):
    id: str
    slug: str
    name: str
    is_operator: NotRequired[bool]
    default_project_id: NotRequired[str]
    created_at: str


class AdminListOrganizationsResponse(TypedDict):
    organizations: list[AdminListOrganizationsResponseOrganizationsItem]


class AdminCreateApiKeyBody(TypedDict):
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


class AdminCreateApiKeyResponse(TypedDict):
    key_id: str
    key_name: str
    principal_id: str
    org_id: str
    api_key: str
    "The secret; shown only in this response"


class AdminListApiKeysResponseApiKeysItem(TypedDict):
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
    api_keys: list[AdminListApiKeysResponseApiKeysItem]


AdminRevokeApiKeyResponse = dict[str, Any]


class AdminRotateMasterKeyResponse(TypedDict):
    master_key_id: str
    data_keys_rewrapped: int


class AdminQuarantineSandboxBody(TypedDict):
    reason: NotRequired[str]


AdminQuarantineSandboxResponse = dict[str, Any]


class AdminReleaseSandboxBody(TypedDict):
    reason: NotRequired[str]


AdminReleaseSandboxResponse = dict[str, Any]


class AdminListHostsResponseHostsItemCapacity(TypedDict):
    cpu_millis: NotRequired[int]
    memory_mib: NotRequired[int]
    storage_bytes: NotRequired[int]


class AdminListHostsResponseHostsItem(TypedDict):
    id: str
    role: str
    state: Literal["joining", "ready", "draining", "cordoned", "unreachable", "dead"]
    operator_state: Union[Literal["draining"], Literal["cordoned"], None]
    "What an operator asked (null: nothing); kept while the host is unreachable or dead, and taken again when it returns"
    epoch: int
    address: Union[str, None]
    plane_address: Union[str, None]
    ssh_address: Union[str, None]
    capacity: AdminListHostsResponseHostsItemCapacity
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


class AdminListHostsResponse(TypedDict):
    hosts: list[AdminListHostsResponseHostsItem]


class AdminDrainHostResponseHostCapacity(TypedDict):
    cpu_millis: NotRequired[int]
    memory_mib: NotRequired[int]
    storage_bytes: NotRequired[int]


class AdminDrainHostResponseHost(TypedDict):
    id: str
    role: str
    state: Literal["joining", "ready", "draining", "cordoned", "unreachable", "dead"]
    operator_state: Union[Literal["draining"], Literal["cordoned"], None]
    "What an operator asked (null: nothing); kept while the host is unreachable or dead, and taken again when it returns"
    epoch: int
    address: Union[str, None]
    plane_address: Union[str, None]
    ssh_address: Union[str, None]
    capacity: AdminDrainHostResponseHostCapacity
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


class AdminDrainHostResponse(TypedDict):
    host: AdminDrainHostResponseHost


class AdminCordonHostResponseHostCapacity(TypedDict):
    cpu_millis: NotRequired[int]
    memory_mib: NotRequired[int]
    storage_bytes: NotRequired[int]


class AdminCordonHostResponseHost(TypedDict):
    id: str
    role: str
    state: Literal["joining", "ready", "draining", "cordoned", "unreachable", "dead"]
    operator_state: Union[Literal["draining"], Literal["cordoned"], None]
    "What an operator asked (null: nothing); kept while the host is unreachable or dead, and taken again when it returns"
    epoch: int
    address: Union[str, None]
    plane_address: Union[str, None]
    ssh_address: Union[str, None]
    capacity: AdminCordonHostResponseHostCapacity
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
    host: AdminCordonHostResponseHost


class AdminUncordonHostResponseHostCapacity(TypedDict):
    cpu_millis: NotRequired[int]
    memory_mib: NotRequired[int]
    storage_bytes: NotRequired[int]


class AdminUncordonHostResponseHost(TypedDict):
    id: str
    role: str
    state: Literal["joining", "ready", "draining", "cordoned", "unreachable", "dead"]
    operator_state: Union[Literal["draining"], Literal["cordoned"], None]
    "What an operator asked (null: nothing); kept while the host is unreachable or dead, and taken again when it returns"
    epoch: int
    address: Union[str, None]
    plane_address: Union[str, None]
    ssh_address: Union[str, None]
    capacity: AdminUncordonHostResponseHostCapacity
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


class AdminUncordonHostResponse(TypedDict):
    host: AdminUncordonHostResponseHost


class AdminSetQuotaBody(TypedDict):
    limit: Union[int, None]


class AdminSetQuotaResponseSnapshotLimitsItem(TypedDict):
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
    limits: list[AdminSetQuotaResponseSnapshotLimitsItem]


class AdminSetQuotaResponse(TypedDict):
    snapshot: AdminSetQuotaResponseSnapshot


class AdminGetEgressAllowlistResponse(TypedDict):
    organization_id: str
    hosts: list[str]
    "Exact lowercase host names and *.domain wildcards, sorted; empty: only the hosts of bound secrets"


class AdminSetEgressAllowlistBody(TypedDict):
    hosts: list[str]
    "The whole list (it replaces the current one)"


class AdminSetEgressAllowlistResponse(TypedDict):
    organization_id: str
    hosts: list[str]
    "Exact lowercase host names and *.domain wildcards, sorted; empty: only the hosts of bound secrets"


class CreateVolumeBody(TypedDict):
    name: str
    "Unique in the project"
    project_id: NotRequired[str]
    "Default: the credential's project"
    quota_bytes: str
    "Decimal string, at most 2 TiB; a cap, not an allocation"
    description: NotRequired[str]
    "At most 4 KiB (UTF-8 bytes)"


class CreateVolumeResponseVolume(TypedDict):
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
    volume: CreateVolumeResponseVolume


class ListVolumesResponseVolumesItem(TypedDict):
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


class ListVolumesResponse(TypedDict):
    volumes: list[ListVolumesResponseVolumesItem]
    next_page_token: str


class GetVolumeResponseVolume(TypedDict):
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


class GetVolumeResponse(TypedDict):
    volume: GetVolumeResponseVolume


DeleteVolumeResponse = dict[str, Any]


class StartVolumePushBody(TypedDict):
    volume_id: NotRequired[str]
    "When present, must equal the path id"


class StartVolumePushResponse(TypedDict):
    push_id: str
    manifest_upload_url: str
    expires_in_seconds: int
    max_manifest_bytes: str
    "64-bit integer as a decimal string"


class RequestVolumeBlobUploadsBodyBlobsItem(TypedDict):
    digest: str
    size_bytes: str
    "Decimal string; verified against the stored bytes"


class RequestVolumeBlobUploadsBody(TypedDict):
    push_id: NotRequired[str]
    "When present, must equal the path's push_id"
    blobs: list[RequestVolumeBlobUploadsBodyBlobsItem]


class RequestVolumeBlobUploadsResponseUploadsItem(TypedDict):
    digest: str
    present: bool
    "True when the blob is stored and verified: skip its upload"
    upload_url: str
    "Presigned PUT of this one blob; empty when present"


class RequestVolumeBlobUploadsResponse(TypedDict):
    uploads: list[RequestVolumeBlobUploadsResponseUploadsItem]


class PublishVolumeVersionBody(TypedDict):
    push_id: NotRequired[str]
    "When present, must equal the path's push_id"


class PublishVolumeVersionResponseVersion(TypedDict):
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
    version: PublishVolumeVersionResponseVersion


class IssueSshTokenBody(TypedDict):
    ttl_seconds: NotRequired[int]
    "Lifetime of the token; default 900"


class IssueSshTokenResponse(TypedDict):
    token: str
    "The password for the SSH gateway (user: the sandbox id)"
    user: str
    "The SSH user: the sandbox id"
    expires_at: str


class IssueEndpointTokenBody(TypedDict):
    ttl_seconds: NotRequired[int]
    "Lifetime of the token; default 900"


class IssueEndpointTokenResponse(TypedDict):
    token: str
    "Pass as Authorization: Bearer, the warren_token query parameter, or the cookie"
    url: str
    "The endpoint's URL with the token as warren_token (a GET moves it to a cookie)"
    expires_at: str


UploadSandboxArchiveResponse = Any


SandboxRecord = GetSandboxResponseSandbox
SnapshotRecord = ListSandboxSnapshotsResponseSnapshotsItem
CreateSandboxResult = CreateSandboxResponse
SnapshotResult = CreateSandboxSnapshotResponse
Project = GetProjectResponseProject
Run = GetRunResponseRun
Volume = GetVolumeResponseVolume
Workload = GetWorkloadResponseWorkload
Secret = CreateSandboxSecretResponseSecret
AnnotationSchema = GetAnnotationSchemaResponseSchema
WhoAmI = WhoAmIResponse
UsageSnapshot = GetUsageSnapshotResponseSnapshot
SqlResult = RunTelemetrySqlResponse

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
}
