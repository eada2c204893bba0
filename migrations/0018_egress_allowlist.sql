-- The organization's egress allowlist (src/modules/egress/): host names and `*.domain`
-- wildcards a gateway_only sandbox may reach through the egress gateway, besides the hosts
-- of its bound secrets. Empty by default: gateway_only then reaches secret hosts only.
CREATE TABLE org_egress_allowlist (
  org_id text NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
  host_pattern text NOT NULL,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (org_id, host_pattern)
);
