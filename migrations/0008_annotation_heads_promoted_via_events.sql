-- Latest-version lists filtered on promoted fields find their candidates through the GIN
-- index on events (migration 0007) instead of a b-tree per slot on annotation_heads. Every
-- new version of a key rewrites its head row (the head's time changes, so the update cannot
-- be HOT), and each rewrite put a fresh entry into every slot index that row had a value
-- in: with three promoted fields that was three of the seven index entries each annotate
-- made on annotation_heads, and about a quarter of PostgreSQL's time per annotate over a
-- 1,000,000-annotation history. The lists look the values up in the GIN index first (few
-- matching versions: kept while they are their key's head) and otherwise walk the schema's
-- heads newest first (annotation_heads_schema).
DROP INDEX IF EXISTS annotation_heads_p1, annotation_heads_p2, annotation_heads_p3, annotation_heads_p4,
  annotation_heads_p5, annotation_heads_p6, annotation_heads_p7, annotation_heads_p8;
