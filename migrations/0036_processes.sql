-- Background processes of sandboxes (issue 26, docs/api-decisions.md "Processes"): every
-- process the exec agent of a sandbox keeps has a row here, written by the sandbox's owner
-- host under its (host, epoch) fence. `starting` is written before the agent is asked, so
-- nothing runs without a row; at start-up the owner re-adopts its running rows (the agent,
-- by boot id and serial) or marks them lost, never silently.
CREATE TABLE sandbox_processes (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  sandbox_id text NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
  host_id text NOT NULL,
  host_epoch bigint NOT NULL,
  -- The boot id of the exec agent that keeps it, and its number there ('' and 0 while starting).
  agent_id text NOT NULL DEFAULT '',
  agent_serial bigint NOT NULL DEFAULT 0,
  pid integer,
  argv jsonb NOT NULL,
  cwd text,
  pty jsonb,
  stdin boolean NOT NULL,
  state text NOT NULL CHECK (state IN ('starting', 'running', 'exited', 'lost')),
  exit_code integer,
  -- exited | killed | timeout | sandbox_stopped | lost
  end_reason text,
  -- Whether the agent still keeps its output (released when the sandbox keeps too many).
  output_kept boolean NOT NULL DEFAULT true,
  timeout_seconds integer,
  deadline timestamptz,
  created_at timestamptz NOT NULL,
  started_at timestamptz,
  ended_at timestamptz
);
CREATE INDEX sandbox_processes_list ON sandbox_processes (sandbox_id, created_at DESC, id DESC);
CREATE INDEX sandbox_processes_live ON sandbox_processes (host_id) WHERE state IN ('starting', 'running');
