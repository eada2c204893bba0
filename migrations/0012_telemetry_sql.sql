-- Telemetry SQL, layer 2 (docs/telemetry-sql.md): whatever the gateway (layer 1) lets
-- through runs as warren_telemetry_reader, a NOLOGIN role that may read only the views of
-- schema telemetry_sql. The views belong to warren_telemetry_views, a second NOLOGIN role
-- that is neither superuser nor owner of the base tables, so the row-level security of the
-- base tables applies to every read through them: a row is visible only when its org_id is
-- the organization the server set with SET LOCAL warren.telemetry_org in the query's READ
-- ONLY transaction. Nothing a query can call may change that setting or the role: EXECUTE
-- on set_config is revoked from PUBLIC (a superuser must do it; see the end of this file).
--
-- Roles are global to a PostgreSQL cluster, so they are created once and shared by every
-- Warren database of the cluster. A non-superuser database owner needs CREATEROLE here.
DO $$
BEGIN
  BEGIN
    CREATE ROLE warren_telemetry_views NOLOGIN NOINHERIT;
  EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
  END;
  BEGIN
    CREATE ROLE warren_telemetry_reader NOLOGIN NOINHERIT;
  EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
  END;
  -- SET LOCAL ROLE needs membership; ALTER VIEW ... OWNER TO needs it too.
  IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    EXECUTE format('GRANT warren_telemetry_reader TO %I', current_user);
    EXECUTE format('GRANT warren_telemetry_views TO %I', current_user);
  END IF;
END
$$;

CREATE SCHEMA telemetry_sql;

-- Hidden columns (org_id, the promoted slots) are here for the rewriter's filter and the
-- annotation-schema relations; the published column lists are in src/modules/telemetry/sql/catalog.ts.
CREATE VIEW telemetry_sql.runs AS
  SELECT org_id, id, project_id, label, parent_run_id, root_run_id, lineage_path, depth, status,
         started_at, ended_at, execute_as_workload
    FROM public.runs;

CREATE VIEW telemetry_sql.events AS
  SELECT org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns,
         to_timestamp(ts_wall_ns / 1000000000.0) AS ts, name, kind, principal, payload, schema_name
    FROM public.events;

CREATE VIEW telemetry_sql.annotations AS
  SELECT org_id, event_id, run_id, project_id, lineage_path, schema_name, schema_version, ts_wall_ns,
         to_timestamp(ts_wall_ns / 1000000000.0) AS ts, principal, target_event_id, range_start_ns,
         range_end_ns, range_start_event_id, range_end_event_id, payload, payload_text AS payload_json,
         p1, p2, p3, p4, p5, p6, p7, p8
    FROM public.events
   WHERE kind = 'annotation';

CREATE VIEW telemetry_sql.sandboxes AS
  SELECT org_id, id, project_id, name, state, desired_state, image, image_digest, lineage_path,
         storage_class, placement_class, network_access, run_id, snapshot_id, metadata,
         created_at, updated_at, finished_at
    FROM public.sandboxes;

CREATE VIEW telemetry_sql.snapshots AS
  SELECT org_id, id, project_id, source_sandbox_id, parent_snapshot_id, run_id, name, image,
         lineage_path, state, durability, size_bytes, created_at, sealed_at
    FROM public.sandbox_snapshots;

-- A new owner needs CREATE on the schema unless a superuser runs this; it is taken back below.
GRANT CREATE ON SCHEMA telemetry_sql TO warren_telemetry_views;
ALTER VIEW telemetry_sql.runs OWNER TO warren_telemetry_views;
ALTER VIEW telemetry_sql.events OWNER TO warren_telemetry_views;
ALTER VIEW telemetry_sql.annotations OWNER TO warren_telemetry_views;
ALTER VIEW telemetry_sql.sandboxes OWNER TO warren_telemetry_views;
ALTER VIEW telemetry_sql.snapshots OWNER TO warren_telemetry_views;
REVOKE CREATE ON SCHEMA telemetry_sql FROM warren_telemetry_views;

GRANT SELECT ON public.runs, public.events, public.sandboxes, public.sandbox_snapshots TO warren_telemetry_views;
GRANT USAGE ON SCHEMA telemetry_sql TO warren_telemetry_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA telemetry_sql TO warren_telemetry_reader;

-- Row-level security on what the views read. FORCE also binds the tables' owner; the app
-- itself (any role but the two telemetry roles) keeps every row through warren_app.
ALTER TABLE public.runs ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE public.events ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE public.sandboxes ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE public.sandbox_snapshots ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY telemetry_org ON public.runs FOR SELECT TO warren_telemetry_views
  USING (org_id = current_setting('warren.telemetry_org', true));
CREATE POLICY telemetry_org ON public.events FOR SELECT TO warren_telemetry_views
  USING (org_id = current_setting('warren.telemetry_org', true));
CREATE POLICY telemetry_org ON public.sandboxes FOR SELECT TO warren_telemetry_views
  USING (org_id = current_setting('warren.telemetry_org', true));
CREATE POLICY telemetry_org ON public.sandbox_snapshots FOR SELECT TO warren_telemetry_views
  USING (org_id = current_setting('warren.telemetry_org', true));

CREATE POLICY warren_app ON public.runs FOR ALL TO PUBLIC
  USING (current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader'))
  WITH CHECK (current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader'));
CREATE POLICY warren_app ON public.events FOR ALL TO PUBLIC
  USING (current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader'))
  WITH CHECK (current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader'));
CREATE POLICY warren_app ON public.sandboxes FOR ALL TO PUBLIC
  USING (current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader'))
  WITH CHECK (current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader'));
CREATE POLICY warren_app ON public.sandbox_snapshots FOR ALL TO PUBLIC
  USING (current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader'))
  WITH CHECK (current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader'));

-- A query could otherwise call set_config('warren.telemetry_org', ...) or
-- set_config('role', <the session user>, ...) before a later part of itself reads. Only a
-- superuser may revoke this; without it the server runs telemetry SQL on reader logins (it
-- checks has_function_privilege at its first query; migration 0026, docs/telemetry-sql.md).
DO $$
BEGIN
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC;
  ELSE
    -- (Text updated with migration 0026: the server now uses reader logins instead of refusing.)
    RAISE WARNING 'any role may call set_config: telemetry SQL will run on reader logins (docs/telemetry-sql.md) unless a superuser runs: REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC';
  END IF;
END
$$;

-- Saved data views (contract 2.8): one row per live name; a delete frees the name.
CREATE TABLE data_views (
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name text NOT NULL,
  description text NOT NULL DEFAULT '',
  spec jsonb NOT NULL,
  spec_version integer NOT NULL CHECK (spec_version >= 1),
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (org_id, name)
);
