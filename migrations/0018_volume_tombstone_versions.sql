-- The versions a deleted volume had, so the collector can remove their manifests once no
-- volume (live or deleted and still pinned) has a version of the same digest.
ALTER TABLE volume_tombstones ADD COLUMN version_digests text[] NOT NULL DEFAULT '{}';
