-- Foundation: organizations, principals and API keys, projects, runs, the append-only
-- telemetry events table, feedback, per-organization quotas and idempotency records.

CREATE TABLE organizations (
  id text PRIMARY KEY,
  slug text NOT NULL UNIQUE,
  name text NOT NULL DEFAULT '',
  -- The operator organization (the bootstrap one) may call the /v1/admin routes.
  is_operator boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL
);

CREATE TABLE principals (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  kind text NOT NULL CHECK (kind IN ('user', 'service_account', 'workload')),
  role text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
  email text NOT NULL DEFAULT '',
  display_name text NOT NULL DEFAULT '',
  workload_name text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL
);
CREATE INDEX principals_org ON principals (org_id);

CREATE TABLE projects (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name text NOT NULL,
  slug text NOT NULL,
  description text NOT NULL DEFAULT '',
  is_default boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  created_by text NOT NULL DEFAULT '',
  last_run_at timestamptz,
  run_count bigint NOT NULL DEFAULT 0,
  version bigint NOT NULL DEFAULT 1,
  UNIQUE (org_id, slug)
);
CREATE INDEX projects_org_page ON projects (org_id, created_at DESC, id DESC);
CREATE UNIQUE INDEX projects_one_default ON projects (org_id) WHERE is_default;

CREATE TABLE api_keys (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  principal_id text NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
  name text NOT NULL DEFAULT '',
  key_hash text NOT NULL UNIQUE,
  -- Optional default project of the key (and what a cascading project delete removes).
  project_id text REFERENCES projects (id) ON DELETE CASCADE,
  -- Sandbox-scoped credentials (contract 5.6) carry their sandbox and lineage confinement.
  sandbox_id text,
  lineage_path text,
  created_at timestamptz NOT NULL,
  revoked_at timestamptz
);
CREATE INDEX api_keys_org ON api_keys (org_id, created_at DESC, id DESC);
CREATE INDEX api_keys_project ON api_keys (project_id) WHERE project_id IS NOT NULL;

CREATE TABLE runs (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
  label text NOT NULL DEFAULT '',
  parent_run_id text REFERENCES runs (id) ON DELETE CASCADE,
  root_run_id text NOT NULL,
  lineage_path text NOT NULL,
  depth integer NOT NULL DEFAULT 0,
  status text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'canceled')),
  started_at timestamptz NOT NULL,
  ended_at timestamptz,
  created_by text NOT NULL DEFAULT '',
  execute_as_workload text NOT NULL DEFAULT ''
);
CREATE INDEX runs_org_page ON runs (org_id, started_at DESC, id DESC);
CREATE INDEX runs_project_page ON runs (project_id, started_at DESC, id DESC);
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

-- Append-only telemetry: run lifecycle now; annotations, sandbox and exec events later.
CREATE TABLE events (
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  event_id text NOT NULL,
  project_id text NOT NULL,
  run_id text,
  lineage_path text NOT NULL DEFAULT '',
  ts_wall_ns bigint NOT NULL,
  name text NOT NULL,
  principal text NOT NULL DEFAULT '',
  payload jsonb NOT NULL DEFAULT '{}'::jsonb,
  PRIMARY KEY (org_id, event_id)
);
CREATE INDEX events_run ON events (org_id, run_id, ts_wall_ns) WHERE run_id IS NOT NULL;
CREATE INDEX events_project ON events (org_id, project_id, ts_wall_ns);

CREATE TABLE feedback (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  principal_id text NOT NULL DEFAULT '',
  title text NOT NULL,
  surface text NOT NULL,
  body text NOT NULL DEFAULT '',
  expected text NOT NULL DEFAULT '',
  actual text NOT NULL DEFAULT '',
  repro text NOT NULL DEFAULT '',
  severity text NOT NULL DEFAULT '',
  fingerprint text NOT NULL,
  svc_version text NOT NULL DEFAULT '',
  evidence jsonb NOT NULL DEFAULT '[]'::jsonb,
  relayed boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL,
  UNIQUE (org_id, fingerprint)
);

-- Per-organization overrides of the configured quota defaults.
CREATE TABLE org_quotas (
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  metric text NOT NULL,
  limit_value bigint NOT NULL CHECK (limit_value >= 0),
  PRIMARY KEY (org_id, metric)
);

CREATE TABLE idempotency_keys (
  org_id text NOT NULL,
  operation text NOT NULL,
  idempotency_key text NOT NULL,
  request_hash text NOT NULL,
  -- 'pending' while the first request runs; 'done' with the stored response after.
  state text NOT NULL CHECK (state IN ('pending', 'done')),
  status_code integer,
  response_body text,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (org_id, operation, idempotency_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
