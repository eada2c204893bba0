-- Telemetry SQL (docs/telemetry-sql.md): a time predicate on the published `ts` column becomes
-- an index range scan. `ts` was the expression to_timestamp(ts_wall_ns / 1e9) in the views;
-- an expression index on it serves a query on the base table, but not one through the views:
-- under row-level security a caller's condition may become an index condition only when every
-- function it applies to a column is LEAKPROOF, and to_timestamp and numeric division are not
-- (they can raise an error that reveals a value). So `ts` becomes a stored generated column
-- (same expression, same values, computed once per write) and the views expose the column
-- itself; `ts >= ...` is then a leakproof timestamptz comparison on a column. The index
-- includes `name`, so grouping an organization's recent events by name is an index-only scan.
--
-- Adding a stored generated column rewrites the table under an exclusive lock: about 7 s per
-- million events on PostgreSQL and 90 s on PGlite on the development machine.
ALTER TABLE events ADD COLUMN ts timestamptz GENERATED ALWAYS AS (to_timestamp(ts_wall_ns / 1000000000.0)) STORED;

CREATE INDEX events_org_ts ON events (org_id, ts) INCLUDE (name);

CREATE OR REPLACE VIEW telemetry_sql.events AS
  SELECT org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, ts, name, kind, principal, payload,
         schema_name
    FROM public.events;

CREATE OR REPLACE VIEW telemetry_sql.annotations AS
  SELECT org_id, event_id, run_id, project_id, lineage_path, schema_name, schema_version, ts_wall_ns, ts,
         principal, target_event_id, range_start_ns, range_end_ns, range_start_event_id, range_end_event_id,
         payload, payload_text AS payload_json, p1, p2, p3, p4, p5, p6, p7, p8
    FROM public.events
   WHERE kind = 'annotation';
