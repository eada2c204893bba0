-- Secret egress (docs/secret-egress.md). A sandbox's secret bindings, admitted at create
-- ({name, secret_id, delivery, dest_host, subject_kind, subject_id}): the egress gateway
-- injects the bound secret's current value for its exact dest_host, resolving it again at
-- every request.
ALTER TABLE sandboxes ADD COLUMN secret_bindings jsonb NOT NULL DEFAULT '[]';

-- The deployment's egress CA: one row, created by the first server that needs it (the
-- insert that loses the race reads the winner's), so every server process presents leaf
-- certificates under the same CA. The private key (PKCS#8) is sealed under the master key
-- like the secrets' data keys, and re-wrapped when the master key rotates.
CREATE TABLE egress_ca (
  id text PRIMARY KEY,
  certificate_pem text NOT NULL,
  master_key_id text NOT NULL,
  wrapped_key bytea NOT NULL,
  created_at timestamptz NOT NULL,
  rewrapped_at timestamptz
);
