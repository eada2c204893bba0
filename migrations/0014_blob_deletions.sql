-- Blob-store prefixes to delete (a deleted snapshot's manifests), written in the same
-- transaction as the deletion of what they belonged to and removed once the objects are
-- gone: a crash between the two leaves a row the collector finishes, never a stray object.
CREATE TABLE blob_deletions (
  prefix text PRIMARY KEY,
  org_id text NOT NULL,
  requested_at timestamptz NOT NULL
);
