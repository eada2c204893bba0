-- Volumes: immutable content-addressed versions of a file tree, pushed through presigned
-- uploads and pinned by sandboxes at admission (src/modules/volumes/).

CREATE TABLE volumes (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
  name text NOT NULL,
  description text NOT NULL DEFAULT '',
  quota_bytes bigint NOT NULL,
  -- Total size of the distinct blobs its versions reference (volume_blob_refs), kept at publish.
  used_bytes bigint NOT NULL DEFAULT 0,
  current_version_digest text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  created_by text NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX volumes_name ON volumes (project_id, name);
CREATE INDEX volumes_page ON volumes (org_id, project_id, created_at DESC, id DESC);

CREATE TABLE volume_versions (
  volume_id text NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
  version_digest text NOT NULL,
  parent_version_digest text NOT NULL,
  -- Digest of the files alone (the manifest without its parent): an unchanged re-push is a no-op.
  content_digest text NOT NULL,
  file_count bigint NOT NULL,
  size_bytes bigint NOT NULL,
  created_at timestamptz NOT NULL,
  created_by text NOT NULL DEFAULT '',
  PRIMARY KEY (volume_id, version_digest)
);

-- Blobs whose stored bytes were read back and matched their BLAKE3 digest and size, once
-- per organization: only these may be referenced by a published version.
CREATE TABLE volume_blobs (
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  digest text NOT NULL,
  size_bytes bigint NOT NULL,
  verified_at timestamptz NOT NULL,
  PRIMARY KEY (org_id, digest)
);

-- The distinct blobs a volume's versions reference (used_bytes counts each once).
CREATE TABLE volume_blob_refs (
  volume_id text NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
  digest text NOT NULL,
  size_bytes bigint NOT NULL,
  PRIMARY KEY (volume_id, digest)
);

CREATE TABLE volume_pushes (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  volume_id text NOT NULL REFERENCES volumes (id) ON DELETE CASCADE,
  -- The volume's current version when the push started: the parent of what it publishes.
  parent_version_digest text NOT NULL,
  manifest_key text NOT NULL,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL,
  created_by text NOT NULL DEFAULT '',
  published_digest text
);
CREATE INDEX volume_pushes_expiry ON volume_pushes (expires_at);

-- Blobs a push asked upload URLs for: what an expired push leaves unreferenced is removed.
CREATE TABLE volume_push_blobs (
  push_id text NOT NULL REFERENCES volume_pushes (id) ON DELETE CASCADE,
  org_id text NOT NULL,
  digest text NOT NULL,
  PRIMARY KEY (push_id, digest)
);
CREATE INDEX volume_push_blobs_digest ON volume_push_blobs (org_id, digest);

-- Pinned volumes ({volume_id, version, target_path, name}) of a sandbox, and of a snapshot
-- (copied from its source, pinned again by a restore).
ALTER TABLE sandboxes ADD COLUMN volumes jsonb NOT NULL DEFAULT '[]';
ALTER TABLE sandbox_snapshots ADD COLUMN volumes jsonb NOT NULL DEFAULT '[]';
