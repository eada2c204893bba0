-- Placement's cache hints (issue 25 step 4, docs/hosts.md "Placement"): what a host publishes
-- with its heartbeat beside its capacity, each list bounded by the host (64 entries): image
-- references in its layer cache, images it holds warm pool members of, volumes in its cache.
-- Hints only: a stale or empty list makes a placement less local, never wrong (the chosen
-- host's admission decides). What a host has allocated is never stored: it is summed from
-- its live sandbox rows.
ALTER TABLE hosts ADD COLUMN images text[] NOT NULL DEFAULT '{}';
ALTER TABLE hosts ADD COLUMN warm_images text[] NOT NULL DEFAULT '{}';
ALTER TABLE hosts ADD COLUMN volumes text[] NOT NULL DEFAULT '{}';
