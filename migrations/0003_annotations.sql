-- Typed annotations: a versioned schema registry, annotation columns on the events table
-- (annotations are telemetry events), and the latest version per supersession key.

CREATE TABLE annotation_schemas (
  id text PRIMARY KEY,
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name text NOT NULL,
  version integer NOT NULL CHECK (version >= 1),
  description text NOT NULL DEFAULT '',
  json_schema text NOT NULL,
  -- [{field, identity, bloom, slot}]
  promoted_fields jsonb NOT NULL DEFAULT '[]'::jsonb,
  created_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  archived_at timestamptz,
  UNIQUE (org_id, name, version)
);

-- Promoted-field slots, stable for the life of a schema name and never reused.
CREATE TABLE annotation_slots (
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  schema_name text NOT NULL,
  field text NOT NULL,
  slot integer NOT NULL,
  PRIMARY KEY (org_id, schema_name, field),
  UNIQUE (org_id, schema_name, slot)
);

ALTER TABLE events
  ADD COLUMN kind text NOT NULL DEFAULT 'event',
  ADD COLUMN schema_name text,
  ADD COLUMN schema_version integer,
  ADD COLUMN target_event_id text,
  ADD COLUMN range_start_ns bigint,
  ADD COLUMN range_end_ns bigint,
  ADD COLUMN range_start_event_id text,
  ADD COLUMN range_end_event_id text,
  -- The annotated JSON object exactly as sent.
  ADD COLUMN payload_text text,
  ADD COLUMN content_hash text,
  ADD COLUMN supersession_key text,
  ADD COLUMN p1 text, ADD COLUMN p2 text, ADD COLUMN p3 text, ADD COLUMN p4 text,
  ADD COLUMN p5 text, ADD COLUMN p6 text, ADD COLUMN p7 text, ADD COLUMN p8 text;

CREATE INDEX events_annotations_page ON events (org_id, ts_wall_ns DESC, event_id DESC) WHERE kind = 'annotation';
CREATE INDEX events_annotations_key ON events (org_id, supersession_key, ts_wall_ns DESC) WHERE kind = 'annotation';

-- The newest annotation of each supersession key, with how many older versions it hides.
CREATE TABLE annotation_heads (
  org_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  supersession_key text NOT NULL,
  event_id text NOT NULL,
  ts_wall_ns bigint NOT NULL,
  project_id text NOT NULL,
  run_id text,
  schema_name text NOT NULL,
  target_event_id text,
  superseded_count bigint NOT NULL DEFAULT 0,
  p1 text, p2 text, p3 text, p4 text, p5 text, p6 text, p7 text, p8 text,
  PRIMARY KEY (org_id, supersession_key)
);
CREATE INDEX annotation_heads_page ON annotation_heads (org_id, ts_wall_ns DESC, event_id DESC);
CREATE INDEX annotation_heads_run ON annotation_heads (org_id, run_id, ts_wall_ns DESC, event_id DESC);
CREATE INDEX annotation_heads_schema ON annotation_heads (org_id, schema_name, ts_wall_ns DESC, event_id DESC);

-- Equality filters on promoted (bloom) fields.
CREATE INDEX annotation_heads_p1 ON annotation_heads (org_id, schema_name, p1) WHERE p1 IS NOT NULL;
CREATE INDEX annotation_heads_p2 ON annotation_heads (org_id, schema_name, p2) WHERE p2 IS NOT NULL;
CREATE INDEX annotation_heads_p3 ON annotation_heads (org_id, schema_name, p3) WHERE p3 IS NOT NULL;
CREATE INDEX annotation_heads_p4 ON annotation_heads (org_id, schema_name, p4) WHERE p4 IS NOT NULL;
CREATE INDEX annotation_heads_p5 ON annotation_heads (org_id, schema_name, p5) WHERE p5 IS NOT NULL;
CREATE INDEX annotation_heads_p6 ON annotation_heads (org_id, schema_name, p6) WHERE p6 IS NOT NULL;
CREATE INDEX annotation_heads_p7 ON annotation_heads (org_id, schema_name, p7) WHERE p7 IS NOT NULL;
CREATE INDEX annotation_heads_p8 ON annotation_heads (org_id, schema_name, p8) WHERE p8 IS NOT NULL;
CREATE INDEX events_annotations_p1 ON events (org_id, schema_name, p1) WHERE p1 IS NOT NULL;
CREATE INDEX events_annotations_p2 ON events (org_id, schema_name, p2) WHERE p2 IS NOT NULL;
CREATE INDEX events_annotations_p3 ON events (org_id, schema_name, p3) WHERE p3 IS NOT NULL;
CREATE INDEX events_annotations_p4 ON events (org_id, schema_name, p4) WHERE p4 IS NOT NULL;
CREATE INDEX events_annotations_p5 ON events (org_id, schema_name, p5) WHERE p5 IS NOT NULL;
CREATE INDEX events_annotations_p6 ON events (org_id, schema_name, p6) WHERE p6 IS NOT NULL;
CREATE INDEX events_annotations_p7 ON events (org_id, schema_name, p7) WHERE p7 IS NOT NULL;
CREATE INDEX events_annotations_p8 ON events (org_id, schema_name, p8) WHERE p8 IS NOT NULL;
