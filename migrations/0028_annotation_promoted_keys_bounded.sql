-- A promoted value longer than 512 bytes enters the GIN index of 0007 as the md5 of its
-- bytes, marked by U+001E in place of the value (issue 24 A15). A GIN entry is at most
-- ~2,700 bytes, and a longer value made Annotate answer 500 ("index row size ... exceeds
-- maximum 2712"). The index only finds candidates: every read compares the slot columns
-- themselves, so two values sharing a hash cost a row read, never a wrong answer.
-- promotedKey in src/modules/annotations/annotation-repo.ts builds the same keys.
DROP INDEX IF EXISTS events_annotations_promoted;

CREATE FUNCTION annotation_promoted_value(value text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN octet_length(value) > 512 THEN chr(30) || md5(value) ELSE value END;

CREATE OR REPLACE FUNCTION annotation_promoted_keys(org_id text, schema_name text, p1 text, p2 text, p3 text, p4 text, p5 text, p6 text, p7 text, p8 text)
  RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN array_remove(ARRAY[
    org_id || chr(31) || schema_name || chr(31) || '1' || chr(31) || annotation_promoted_value(p1),
    org_id || chr(31) || schema_name || chr(31) || '2' || chr(31) || annotation_promoted_value(p2),
    org_id || chr(31) || schema_name || chr(31) || '3' || chr(31) || annotation_promoted_value(p3),
    org_id || chr(31) || schema_name || chr(31) || '4' || chr(31) || annotation_promoted_value(p4),
    org_id || chr(31) || schema_name || chr(31) || '5' || chr(31) || annotation_promoted_value(p5),
    org_id || chr(31) || schema_name || chr(31) || '6' || chr(31) || annotation_promoted_value(p6),
    org_id || chr(31) || schema_name || chr(31) || '7' || chr(31) || annotation_promoted_value(p7),
    org_id || chr(31) || schema_name || chr(31) || '8' || chr(31) || annotation_promoted_value(p8)
  ], NULL);

CREATE INDEX events_annotations_promoted ON events
  USING gin (annotation_promoted_keys(org_id, schema_name, p1, p2, p3, p4, p5, p6, p7, p8)) WITH (gin_pending_list_limit = 1024)
  WHERE kind = 'annotation';
