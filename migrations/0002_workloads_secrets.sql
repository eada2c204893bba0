-- Workload identities with launch ACLs and cloud federation registrations; write-only
-- sandbox secrets encrypted under per-organization data keys, their versions and grants.

CREATE TABLE workloads (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name text NOT NULL,
  description text NOT NULL DEFAULT '',
  launch_policy text NOT NULL DEFAULT 'WORKLOAD_LAUNCH_POLICY_MEMBERS'
    CHECK (launch_policy IN ('WORKLOAD_LAUNCH_POLICY_MEMBERS', 'WORKLOAD_LAUNCH_POLICY_RESTRICTED')),
  -- [{kind, principal_id}], meaningful only for RESTRICTED.
  launchers jsonb NOT NULL DEFAULT '[]'::jsonb,
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  UNIQUE (org_id, name)
);

CREATE TABLE workload_federations (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  workload_id text NOT NULL REFERENCES workloads (id) ON DELETE CASCADE,
  cloud text NOT NULL CHECK (cloud IN ('aws', 'gcp', 'azure')),
  audience text NOT NULL,
  descriptor jsonb NOT NULL,
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  removed_at timestamptz
);
CREATE INDEX workload_federations_workload ON workload_federations (workload_id, created_at, id);

-- One data key per organization, wrapped (AES-256-GCM) by a master key from config.
CREATE TABLE secret_data_keys (
  id text PRIMARY KEY,
  org_id text NOT NULL UNIQUE REFERENCES organizations (id) ON DELETE CASCADE,
  master_key_id text NOT NULL,
  wrapped_key bytea NOT NULL,
  created_at timestamptz NOT NULL,
  rewrapped_at timestamptz
);

CREATE TABLE sandbox_secrets (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name text NOT NULL,
  delivery text NOT NULL,
  dest_host text NOT NULL DEFAULT '',
  current_version integer NOT NULL DEFAULT 1,
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  rotated_at timestamptz,
  expires_at timestamptz,
  revoked_at timestamptz,
  UNIQUE (org_id, name)
);
CREATE INDEX sandbox_secrets_page ON sandbox_secrets (org_id, created_at DESC, id DESC);

-- Every version keeps its own nonce; the AAD binds organization, secret id and version.
CREATE TABLE sandbox_secret_versions (
  secret_id text NOT NULL REFERENCES sandbox_secrets (id) ON DELETE CASCADE,
  version integer NOT NULL,
  data_key_id text NOT NULL REFERENCES secret_data_keys (id),
  nonce bytea NOT NULL,
  ciphertext bytea NOT NULL,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (secret_id, version)
);

CREATE TABLE sandbox_secret_grants (
  secret_id text NOT NULL REFERENCES sandbox_secrets (id) ON DELETE CASCADE,
  subject_kind text NOT NULL,
  subject_id text NOT NULL,
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  PRIMARY KEY (secret_id, subject_kind, subject_id)
);
