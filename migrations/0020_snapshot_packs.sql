-- Packs: snapshot chunks stored many to one blob-store object (~16 MiB), so a replication
-- pays one put per pack instead of one per chunk. Manifests still name chunks by digest
-- only; where a chunk lies is this index's business (and each pack's own, see
-- src/modules/snapshots/replication/pack.ts), so packs can be rewritten without touching
-- a manifest.

-- Where a chunk lies: in the pack `pack_key` at `pack_offset`, `stored_bytes` long (its
-- stored length, as before); a chunk stored before packs has no pack (its own object at
-- `<prefix>/chunks/<2 hex>/<hex>`). A row names a pack only once that pack is stored.
ALTER TABLE blob_chunks ADD COLUMN pack_key text;
ALTER TABLE blob_chunks ADD COLUMN pack_offset bigint;
CREATE INDEX blob_chunks_pack ON blob_chunks (pack_key) WHERE pack_key IS NOT NULL;

-- Every pack a replication or a repack stores, recorded before its put: a crash between
-- the two leaves a row with no chunk pointing at it, which the collector deletes with its
-- object after the grace period. `deleting` is committed before the object is deleted, so
-- no chunk row is pointed at a pack that may be gone.
CREATE TABLE blob_packs (
  key text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  -- The chunk bytes it holds (its index and trailer not counted) and how many.
  chunk_bytes bigint NOT NULL,
  chunk_count integer NOT NULL,
  created_at timestamptz NOT NULL,
  -- Last time it was written or chunks were moved off it: the collector leaves it alone within its grace period.
  touched_at timestamptz NOT NULL,
  deleting boolean NOT NULL DEFAULT false
);
CREATE INDEX blob_packs_touched ON blob_packs (touched_at);
