-- Keys of the deployment rather than of an organization: the egress CA (until now its own
-- table, egress_ca) and the SSH gateway's host key. One row per key, made by the first
-- server process that needs it (the insert that loses the race reads the winner's), so every
-- process of a deployment on one database presents the same CA and the same host key. The
-- private part is sealed under the master key like the secrets' data keys (the additional
-- data names the key) and re-wrapped when the master key rotates.
CREATE TABLE deployment_keys (
  name text PRIMARY KEY,
  public_part text NOT NULL,
  master_key_id text NOT NULL,
  wrapped_key bytea NOT NULL,
  created_at timestamptz NOT NULL,
  rewrapped_at timestamptz
);

INSERT INTO deployment_keys (name, public_part, master_key_id, wrapped_key, created_at, rewrapped_at)
SELECT 'egress-ca', certificate_pem, master_key_id, wrapped_key, created_at, rewrapped_at FROM egress_ca;

DROP TABLE egress_ca;
