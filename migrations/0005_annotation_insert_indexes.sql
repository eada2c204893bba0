-- Annotation writes: drop the per-key index on events. No query reads it (the latest
-- version per key comes from annotation_heads; history pages use events_annotations_page
-- and the slot indexes), and it was the one index on events whose key (a SHA-256 hex
-- string) arrives in random order, so on a large history every annotate touched a random
-- leaf page of it: with 1,000,000 annotations it cost PostgreSQL a third of its write rate.
DROP INDEX IF EXISTS events_annotations_key;
