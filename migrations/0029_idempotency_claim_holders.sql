-- Each Idempotency-Key claim records the server process that holds it (issue 24 A17b), so a
-- retry after a crash takes over a claim whose holder is gone at once instead of after the
-- 5-minute abandonment window (which still applies to claims made before this migration).
-- On PostgreSQL every process keeps a row here with a heartbeat on the database clock; a
-- claim whose holder has no fresh heartbeat is abandoned. The embedded store has one process
-- per data dir (src/lib/server-lock.ts), so there a claim of any other process is abandoned.
ALTER TABLE idempotency_keys ADD COLUMN holder text;

CREATE TABLE server_instances (
  id text PRIMARY KEY,
  started_at timestamptz NOT NULL DEFAULT now(),
  heartbeat_at timestamptz NOT NULL DEFAULT now()
);
