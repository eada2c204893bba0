-- Telemetry SQL, layer 2 (docs/telemetry-sql.md): the organization a query may read is bound
-- by a row the query cannot write, instead of by the setting warren.telemetry_org.
--
-- Any role may call set_config unless a superuser revokes it, so a setting-keyed policy held
-- on its own only after that REVOKE, which a managed PostgreSQL (no superuser) never allows.
-- Now the server inserts (its backend's pid, the organization) into telemetry_bindings inside
-- the query's transaction, before making the transaction READ ONLY; the transaction always
-- rolls back, so no binding is ever committed. A query, being read-only from then on, cannot
-- add or change a binding, and nothing it sets changes which row the policy finds.
--
-- The row is keyed on pg_backend_pid(): a backend runs one transaction at a time, and the
-- function is parallel restricted (evaluated once, in the leader, as an InitPlan), where the
-- transaction-id functions are parallel unsafe and would rule out parallel plans.
CREATE TABLE telemetry_bindings (
  pid integer PRIMARY KEY,
  org_id text NOT NULL
);
-- "Never committed" is the database's rule too: a transaction that inserted a binding fails
-- at COMMIT. (A committed binding would hold its pid's organization for whatever that
-- backend, or a later one with the same pid, ran next; on PGlite, whose backend pid never
-- changes, it would also make every later binding a duplicate key.)
CREATE FUNCTION telemetry_binding_uncommittable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'a telemetry binding is never committed (docs/telemetry-sql.md)';
END
$$;
CREATE CONSTRAINT TRIGGER telemetry_bindings_never_commit AFTER INSERT ON telemetry_bindings
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION telemetry_binding_uncommittable();

-- The views' owner reads the binding (the policies' subquery runs with its privileges); the
-- reader writes its own before it turns read-only (docs/telemetry-sql.md, "Reader logins").
GRANT SELECT ON telemetry_bindings TO warren_telemetry_views;
GRANT INSERT ON telemetry_bindings TO warren_telemetry_reader;

ALTER POLICY telemetry_org ON public.runs
  USING (org_id = ANY (ARRAY[(SELECT b.org_id FROM public.telemetry_bindings b WHERE b.pid = pg_backend_pid())]));
ALTER POLICY telemetry_org ON public.events
  USING (org_id = ANY (ARRAY[(SELECT b.org_id FROM public.telemetry_bindings b WHERE b.pid = pg_backend_pid())]));
ALTER POLICY telemetry_org ON public.sandboxes
  USING (org_id = ANY (ARRAY[(SELECT b.org_id FROM public.telemetry_bindings b WHERE b.pid = pg_backend_pid())]));
ALTER POLICY telemetry_org ON public.sandbox_snapshots
  USING (org_id = ANY (ARRAY[(SELECT b.org_id FROM public.telemetry_bindings b WHERE b.pid = pg_backend_pid())]));
