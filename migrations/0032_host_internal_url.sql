-- Routing to a sandbox's owner (issue 25 step 5, docs/hosts.md "Routing"): each host
-- publishes the base URL of its internal API (WARREN_INTERNAL_URL, or derived from the bound
-- WARREN_INTERNAL_LISTEN). NULL: the host serves no internal API, so no other server can
-- route to it (its sandboxes answer host_unavailable through any other server).
ALTER TABLE hosts ADD COLUMN internal_url text;
