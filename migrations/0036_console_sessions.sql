-- Console sessions (issue 28, docs/api-decisions.md "Console sessions"): the browser's
-- credential, exchanged for an API key, is a row of api_keys so it is listed and revoked with
-- the keys. It acts as the key it came from (same principal, role and default project),
-- expires, and dies with that key (revoking a key revokes its sessions).
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
ALTER TABLE api_keys ADD COLUMN session_of_key_id text REFERENCES api_keys (id) ON DELETE CASCADE;
CREATE INDEX api_keys_sessions ON api_keys (session_of_key_id) WHERE session_of_key_id IS NOT NULL;
