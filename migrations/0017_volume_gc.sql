-- Volume garbage collection (src/modules/volumes/collector.ts): verified blobs no version
-- references are removed after a grace period.

-- When a push or a publish last used the blob: a publish touches every blob it references
-- in its transaction, so the collector (which deletes only rows untouched since its cutoff,
-- under the row lock) either waits for that publish and leaves the blob, or deletes it first
-- and the publish sees it gone.
ALTER TABLE volume_blobs ADD COLUMN touched_at timestamptz;
UPDATE volume_blobs SET touched_at = verified_at;
ALTER TABLE volume_blobs ALTER COLUMN touched_at SET NOT NULL;
CREATE INDEX volume_blobs_touched ON volume_blobs (touched_at);

-- A deleted volume's references outlive it while a sandbox or snapshot pins one of its
-- versions (a restore must still find the blobs): no cascade, the organization named here.
ALTER TABLE volume_blob_refs ADD COLUMN org_id text;
UPDATE volume_blob_refs r SET org_id = v.org_id FROM volumes v WHERE v.id = r.volume_id;
ALTER TABLE volume_blob_refs ALTER COLUMN org_id SET NOT NULL;
ALTER TABLE volume_blob_refs DROP CONSTRAINT volume_blob_refs_volume_id_fkey;
CREATE INDEX volume_blob_refs_digest ON volume_blob_refs (org_id, digest);

-- Deleted volumes whose references the collector still has to release.
CREATE TABLE volume_tombstones (
  volume_id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  deleted_at timestamptz NOT NULL
);
