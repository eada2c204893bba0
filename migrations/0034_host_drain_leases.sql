-- Draining and cordoning (issue 25 step 7, docs/hosts.md "Draining"): what an operator asked
-- of a host is kept apart from its liveness, so a draining host that goes silent and comes
-- back (unreachable -> renewed), or is declared dead and re-joins, is draining again, not
-- ready. NULL: nothing asked (the host is ready while it heartbeats).
ALTER TABLE hosts ADD COLUMN operator_state text CHECK (operator_state IN ('draining', 'cordoned'));
UPDATE hosts SET operator_state = state WHERE state IN ('draining', 'cordoned');
-- The host's warm pool members (started, unclaimed sandboxes), reported with each heartbeat:
-- a draining host is drained once it reports none and no replication of its is pending.
ALTER TABLE hosts ADD COLUMN pool_members integer NOT NULL DEFAULT 0;

-- Leases of work one server of the deployment does at a time (blob and volume collection,
-- store maintenance): the holder renews before expires_at, by the DATABASE's clock; past it
-- any server takes the lease over.
CREATE TABLE leases (
  name text PRIMARY KEY,
  holder text NOT NULL,
  acquired_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
