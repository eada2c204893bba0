-- Sandboxes: the desired state written by the API, the observed state written by the
-- reconciler, and exec outcome records (so an Idempotency-Key retry replays, never re-runs).

CREATE TABLE sandboxes (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
  name text,
  image text NOT NULL,
  workload_image text NOT NULL,
  image_digest text,
  storage_class text NOT NULL CHECK (storage_class IN ('standard', 'durable')),
  placement_class text NOT NULL CHECK (placement_class IN ('standard', 'non_preemptible')),
  network_access text NOT NULL CHECK (network_access IN ('public', 'gateway_only', 'none')),
  lineage_path text NOT NULL,
  metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
  command jsonb,
  ports jsonb NOT NULL DEFAULT '[]'::jsonb,
  resources jsonb NOT NULL,
  workspace_capacity_gib integer,
  idle_timeout_seconds integer,
  expires_at timestamptz,
  -- What the API asked for: running, stopped or deleted.
  desired_state text NOT NULL CHECK (desired_state IN ('running', 'stopped', 'deleted')),
  -- What the reconciler observed.
  state text NOT NULL,
  state_reason_code text,
  state_reason_message text,
  -- A transitional state not left by this time ends in failed.
  state_deadline timestamptz,
  quarantined boolean NOT NULL DEFAULT false,
  run_id text NOT NULL,
  credential_key_id text,
  created_by text NOT NULL DEFAULT '',
  -- The creator's credential, for the sandbox-scoped key and secret grants (user id or key id).
  created_by_kind text NOT NULL DEFAULT '',
  created_by_key_id text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  last_activity_at timestamptz,
  last_activity_source text,
  idle_deadline timestamptz,
  finished_at timestamptz
);
CREATE INDEX sandboxes_page ON sandboxes (org_id, project_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_org_page ON sandboxes (org_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_live ON sandboxes (state) WHERE state NOT IN ('terminated');
-- Names are unique among a project's sandboxes that have not finished deleting.
CREATE UNIQUE INDEX sandboxes_name ON sandboxes (project_id, name) WHERE name IS NOT NULL AND state <> 'terminated';

CREATE TABLE sandbox_execs (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  sandbox_id text NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  idempotency_key text,
  request_hash text NOT NULL,
  -- running, then completed | timeout | indeterminate (spawn failures are not recorded as run)
  outcome text NOT NULL,
  message text,
  exit_code integer,
  stdout bytea,
  stderr bytea,
  truncated boolean NOT NULL DEFAULT false,
  started_at timestamptz NOT NULL,
  finished_at timestamptz
);
CREATE UNIQUE INDEX sandbox_execs_key ON sandbox_execs (org_id, sandbox_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX sandbox_execs_running ON sandbox_execs (outcome) WHERE outcome = 'running';
CREATE INDEX api_keys_sandbox ON api_keys (sandbox_id) WHERE sandbox_id IS NOT NULL;
