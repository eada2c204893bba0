-- The hosts registry (issue 25, docs/hosts.md): every server that runs sandboxes registers
-- itself as a host with an id kept in its data dir. Its epoch is bumped on every (re)join
-- and when another host declares it dead; heartbeat_at is the DATABASE's now(), never a host
-- clock. A host renews with UPDATE ... WHERE id AND epoch: no row means it was fenced.
CREATE TABLE hosts (
  id text PRIMARY KEY,
  role text NOT NULL DEFAULT 'all',
  state text NOT NULL CHECK (state IN ('joining', 'ready', 'draining', 'cordoned', 'unreachable', 'dead')),
  epoch integer NOT NULL,
  address text,
  plane_address text,
  ssh_address text,
  capacity jsonb NOT NULL DEFAULT '{}'::jsonb,
  joined_at timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now(),
  state_changed_at timestamptz NOT NULL DEFAULT now()
);

-- The owner of each sandbox, keyed exec record and snapshot, with the owner's epoch when it
-- took it: a host-scoped write names both. NULL: a row from before this migration, adopted
-- by the first host that joins a store no other host has joined.
ALTER TABLE sandboxes ADD COLUMN host_id text;
ALTER TABLE sandboxes ADD COLUMN host_epoch integer;
ALTER TABLE sandbox_execs ADD COLUMN host_id text;
ALTER TABLE sandbox_execs ADD COLUMN host_epoch integer;
ALTER TABLE sandbox_snapshots ADD COLUMN host_id text;
ALTER TABLE sandbox_snapshots ADD COLUMN host_epoch integer;

-- The reconciler's start-up and sweep queries read one host's live sandboxes.
CREATE INDEX sandboxes_live_by_host ON sandboxes (host_id) WHERE state NOT IN ('terminated', 'failed');
