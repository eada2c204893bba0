-- Telemetry rows without a per-row foreign key check on their organization. Every writer
-- of events and annotation_heads already writes inside its organization (an annotate's
-- statement checks that its run or project exists in the organization, and those rows
-- keep their own foreign keys), and no API deletes an organization. The per-row check
-- ran a lookup and took a share lock on the organization's row for every event and every
-- head written: about a fifth of an annotate batch's time on PostgreSQL.
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_org_id_fkey;
ALTER TABLE annotation_heads DROP CONSTRAINT IF EXISTS annotation_heads_org_id_fkey;
