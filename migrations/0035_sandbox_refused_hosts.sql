-- Placing again on a node's refusal (issue 25 step 5, docs/hosts.md "Placement"): the hosts
-- that refused a sandbox at its start and handed it back to placement, oldest first. Bounded
-- by the code (at most MAX_PLACEMENTS placements, so MAX_PLACEMENTS - 1 refusals handed
-- back); placement never chooses one of them again for this sandbox.
ALTER TABLE sandboxes ADD COLUMN refused_hosts text[] NOT NULL DEFAULT '{}';
