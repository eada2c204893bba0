-- The edges a host publishes (issue 25, docs/hosts.md "Routing"): plane_address and
-- ssh_address name the listeners of its session plane and SSH gateway as the other servers of
-- the deployment reach them, `host:port`, written once they are bound. Until now they held
-- the public plane URL and the public SSH host, which name the deployment, not a host: those
-- values are cleared (each host writes its own at its next start) and no URL fits any more.
UPDATE hosts SET plane_address = NULL, ssh_address = NULL;
ALTER TABLE hosts ADD CONSTRAINT hosts_plane_address_form
  CHECK (plane_address IS NULL OR plane_address ~ '^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$');
ALTER TABLE hosts ADD CONSTRAINT hosts_ssh_address_form
  CHECK (ssh_address IS NULL OR ssh_address ~ '^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$');
