-- Telemetry SQL, layer 2 (docs/telemetry-sql.md): pg_logical_emit_message(false, ...) writes a
-- message to the WAL at once, not as part of the transaction, and PostgreSQL allows it in a
-- READ ONLY transaction. Every role may call it, so a query that layer 1 let through by mistake
-- could write past its rollback: WAL growth (PGlite has no checkpointer; the reopen replays it)
-- and messages any logical decoding consumer of the database would read. As with set_config
-- (0012), only a superuser may revoke it from PUBLIC; as another user this does nothing.
DO $$
DECLARE
  fn regprocedure;
BEGIN
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    FOR fn IN
      SELECT p.oid::regprocedure FROM pg_proc p
       WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
    LOOP
      EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', fn);
    END LOOP;
  END IF;
END
$$;
