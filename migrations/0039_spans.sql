-- OpenTelemetry spans (src/modules/otlp/, docs/api-decisions.md "OpenTelemetry ingest"). A span
-- is a telemetry event of its run (kind 'span', name 'span'): the run tail streams it, an
-- annotation may target it, DeleteProject removes it, and its event id (derived from the trace
-- and span ids) makes a resent span a conflict that writes nothing. The payload holds the span
-- as received (attributes, span events, links, resource, scope); the columns below are what
-- SQL filters and joins on, and the typed values of the GenAI conventions.
ALTER TABLE events
  ADD COLUMN trace_id text,
  ADD COLUMN span_id text,
  ADD COLUMN parent_span_id text,
  ADD COLUMN span_kind text,
  ADD COLUMN status_code text,
  ADD COLUMN end_ns bigint,
  ADD COLUMN span_type text,
  ADD COLUMN gen_ai_operation text,
  ADD COLUMN gen_ai_system text,
  ADD COLUMN model text,
  ADD COLUMN input_tokens bigint,
  ADD COLUMN output_tokens bigint,
  ADD COLUMN total_tokens bigint,
  ADD COLUMN cost_usd double precision,
  ADD COLUMN input text,
  ADD COLUMN output text,
  ADD COLUMN user_id text,
  ADD COLUMN session_id text,
  ADD COLUMN tags jsonb;

CREATE INDEX events_spans_trace ON events (org_id, trace_id, span_id) WHERE kind = 'span';

-- One row per trace an organization has sent: the run its spans go to unless a span names
-- one, and the trace-level values (user, session, tags) its spans inherit in the spans view.
CREATE TABLE otlp_traces (
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  trace_id text NOT NULL,
  -- Deferred: the row is written before the run a new trace gets, in the same transaction.
  run_id text NOT NULL REFERENCES runs (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
  user_id text,
  session_id text,
  tags jsonb,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (org_id, trace_id)
);
CREATE INDEX otlp_traces_run ON otlp_traces (run_id);

CREATE VIEW telemetry_sql.spans AS
  SELECT e.org_id, e.event_id, e.run_id, e.project_id, e.lineage_path, e.trace_id, e.span_id,
         e.parent_span_id, e.payload->>'name' AS name, e.span_kind AS kind, e.status_code,
         e.payload->'status'->>'message' AS status_message, e.ts_wall_ns AS start_ns, e.end_ns,
         e.ts AS start_time, to_timestamp(e.end_ns / 1000000000.0) AS end_time,
         (e.end_ns - e.ts_wall_ns) / 1000000.0 AS duration_ms,
         e.payload->'resource'->'attributes'->>'service.name' AS service_name,
         e.payload->'scope'->>'name' AS scope_name, e.span_type, e.gen_ai_operation, e.gen_ai_system, e.model,
         e.input_tokens, e.output_tokens, e.total_tokens, e.cost_usd, e.input, e.output,
         COALESCE(e.user_id, t.user_id) AS user_id, COALESCE(e.session_id, t.session_id) AS session_id,
         COALESCE(e.tags, t.tags) AS tags, e.payload->'attributes' AS attributes, e.payload->'events' AS span_events,
         e.payload->'links' AS links, e.payload->'resource'->'attributes' AS resource_attributes
    FROM public.events e
    LEFT JOIN public.otlp_traces t ON t.org_id = e.org_id AND t.trace_id = e.trace_id
   WHERE e.kind = 'span';

GRANT CREATE ON SCHEMA telemetry_sql TO warren_telemetry_views;
ALTER VIEW telemetry_sql.spans OWNER TO warren_telemetry_views;
REVOKE CREATE ON SCHEMA telemetry_sql FROM warren_telemetry_views;
GRANT SELECT ON public.otlp_traces TO warren_telemetry_views;
GRANT SELECT ON telemetry_sql.spans TO warren_telemetry_reader;

-- The same two policies as the other tables under the views (migrations 0025, 0026).
ALTER TABLE public.otlp_traces ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY telemetry_org ON public.otlp_traces FOR SELECT TO warren_telemetry_views
  USING (org_id = ANY (ARRAY[(SELECT b.org_id FROM public.telemetry_bindings b WHERE b.pid = pg_backend_pid())]));
CREATE POLICY warren_app ON public.otlp_traces FOR ALL TO CURRENT_USER USING (true) WITH CHECK (true);
