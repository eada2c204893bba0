-- The run tail's resumable cursor (src/modules/tail/, ARCHITECTURE.md "Run tail").
-- Event ids and times are minted before their transaction commits, so concurrent writers
-- commit them out of order and a cursor over them could skip a row committed late. Each row
-- instead records the top-level transaction that wrote it (txid) and an insertion number
-- (seq). A reader delivers only rows of transactions older than its snapshot's xmin (every
-- transaction below that horizon has finished, so no row can still appear below it), in
-- (txid, seq) order; the cursor is the (txid, seq) of the last row delivered.
ALTER TABLE events
  ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  ADD COLUMN seq bigserial;

CREATE INDEX events_tail ON events (org_id, run_id, txid, seq) WHERE run_id IS NOT NULL;

-- Wakes the tails of each run a statement wrote to. NOTIFY is delivered at commit (never
-- for a rolled-back write), once per run and transaction: PostgreSQL folds identical
-- notifications of one transaction. Tails still poll slowly, so a lost notification (a
-- listener reconnecting) delays an event, never drops it.
CREATE FUNCTION events_notify_tail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('warren_events', r.run_id)
     FROM (SELECT DISTINCT run_id FROM new_rows WHERE run_id IS NOT NULL) r;
  RETURN NULL;
END $$;

CREATE TRIGGER events_notify_tail AFTER INSERT ON events
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION events_notify_tail();
