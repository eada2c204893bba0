-- Snapshots of sandboxes, their replication to the blob store, and the chunks they share.
--
-- A snapshot row is `pending` while the host takes it, then `sealed` (durability `local`,
-- and `replicated` once every chunk and the manifest are confirmed in the blob store) or
-- `failed` with a reason. Replication is claimed with a lease so a crashed server's work is
-- taken up again.

-- The snapshot a child sandbox was restored from (null for a root made from an image).
ALTER TABLE sandboxes ADD COLUMN snapshot_id text;
CREATE INDEX sandboxes_snapshot ON sandboxes (snapshot_id) WHERE snapshot_id IS NOT NULL;

CREATE TABLE sandbox_snapshots (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  project_id text NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
  -- Kept after the source sandbox is gone (no foreign key): a snapshot outlives its source.
  source_sandbox_id text NOT NULL,
  parent_snapshot_id text,
  run_id text NOT NULL,
  name text,
  image text NOT NULL,
  image_digest text,
  lineage_path text NOT NULL,
  storage_class text NOT NULL CHECK (storage_class IN ('standard', 'durable')),
  workspace_capacity_gib integer,
  state text NOT NULL CHECK (state IN ('pending', 'sealed', 'failed')),
  durability text CHECK (durability IN ('local', 'replicated')),
  failure_code text,
  failure_message text,
  idempotency_key text,
  request_hash text NOT NULL,
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  sealed_at timestamptz,
  size_bytes bigint,
  frozen_ms integer,
  -- Replication: pending until replicated, or given up (then the snapshot stays `local`).
  replication text NOT NULL DEFAULT 'none' CHECK (replication IN ('none', 'pending', 'replicated', 'gave_up')),
  replication_lease_until timestamptz,
  replication_attempts integer NOT NULL DEFAULT 0,
  replication_error text,
  replicate_after timestamptz,
  replicated_at timestamptz,
  manifest_key text,
  chunk_count integer,
  new_chunk_count integer,
  plain_bytes bigint,
  uploaded_bytes bigint
);
CREATE INDEX sandbox_snapshots_page ON sandbox_snapshots (org_id, project_id, created_at DESC, id DESC);
CREATE INDEX sandbox_snapshots_source ON sandbox_snapshots (source_sandbox_id, created_at DESC);
CREATE INDEX sandbox_snapshots_replication ON sandbox_snapshots (replicate_after) WHERE replication = 'pending';
-- One snapshot of a sandbox at a time.
CREATE UNIQUE INDEX sandbox_snapshots_one_pending ON sandbox_snapshots (source_sandbox_id) WHERE state = 'pending';
CREATE UNIQUE INDEX sandbox_snapshots_key ON sandbox_snapshots (org_id, source_sandbox_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;

-- Chunks stored in the blob store, once per organization. A row exists while its blob is
-- stored (or being stored); the collector deletes the row and the blob in one transaction,
-- so a replication that upserts the row afterwards knows it must store the blob again.
CREATE TABLE blob_chunks (
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  digest text NOT NULL,
  stored_bytes bigint NOT NULL,
  -- Last time a replication used the chunk: the collector leaves chunks touched within its grace period.
  touched_at timestamptz NOT NULL,
  PRIMARY KEY (org_id, digest)
);
CREATE INDEX blob_chunks_touched ON blob_chunks (touched_at);

-- The chunks each replicated snapshot's manifest names.
CREATE TABLE snapshot_chunks (
  snapshot_id text NOT NULL REFERENCES sandbox_snapshots (id) ON DELETE CASCADE,
  org_id text NOT NULL,
  digest text NOT NULL,
  PRIMARY KEY (snapshot_id, digest)
);
CREATE INDEX snapshot_chunks_digest ON snapshot_chunks (org_id, digest);
