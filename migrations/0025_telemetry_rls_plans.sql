-- Telemetry SQL, layer 2 (docs/telemetry-sql.md): the application's policy names the
-- application's role instead of excluding the telemetry roles row by row, and the
-- organization's policy compares through a one-element array. Who may see which row is
-- unchanged for the telemetry roles; see the end for the application's side.
--
-- Until now `warren_app` applied TO PUBLIC with `current_user NOT IN (<the telemetry roles>)`.
-- PUBLIC includes warren_telemetry_views, so every read through the views had two permissive
-- policies, ORed: `(InitPlan) OR org_id = (InitPlan)`. An OR cannot become an index condition,
-- so a query over an organization's recent events filtered each of the index's rows (about
-- 20% slower than the same SQL without RLS over 500k rows).
--
-- Now `warren_app` applies only to the role that runs the migrations (Warren's own database
-- user; a superuser bypasses RLS anyway) and lets it see every row. The views' owner is not a
-- member of that role, so only `telemetry_org` applies to a read through a view, and the
-- planner can put it in the index condition.
--
-- The organization's policy: `org_id = ANY (ARRAY[(SELECT current_setting(...))])`, the same
-- rows as `org_id = (SELECT ...)` (NULL, when no organization is bound, matches none). The
-- gateway's own filter (layer 1) is `org_id = $1`. Both as plain equalities, the planner put
-- them in one equivalence class, used the constant for the index, and kept `(InitPlan) =
-- 'org'` as a one-time filter in a Result node above the scan, through which every row passed
-- (~10% of the 1M-event benchmark's view on PGlite). An array comparison is not merged: both
-- become index conditions of the same column, which the B-tree reconciles once, when the scan
-- starts.
--
-- Who sees which row:
-- - Warren's user, reading base tables: every row (`USING (true)`).
-- - Anyone reading a view: the rows of the organization in warren.telemetry_org, none without
--   it. This is stricter than before, when Warren's own user reading a view without SET ROLE
--   saw every organization's rows through the old `current_user NOT IN` test.
-- - Any other non-superuser role with a grant on the base tables: no rows (no policy applies).
--   Before, every such role saw every row. Warren grants the base tables to no one else; a
--   deployment whose application connects as a different non-superuser user than the one that
--   ran the migrations must make that user a member of it.
ALTER POLICY warren_app ON public.runs TO CURRENT_USER USING (true) WITH CHECK (true);
ALTER POLICY warren_app ON public.events TO CURRENT_USER USING (true) WITH CHECK (true);
ALTER POLICY warren_app ON public.sandboxes TO CURRENT_USER USING (true) WITH CHECK (true);
ALTER POLICY warren_app ON public.sandbox_snapshots TO CURRENT_USER USING (true) WITH CHECK (true);

ALTER POLICY telemetry_org ON public.runs
  USING (org_id = ANY (ARRAY[(SELECT current_setting('warren.telemetry_org', true))]));
ALTER POLICY telemetry_org ON public.events
  USING (org_id = ANY (ARRAY[(SELECT current_setting('warren.telemetry_org', true))]));
ALTER POLICY telemetry_org ON public.sandboxes
  USING (org_id = ANY (ARRAY[(SELECT current_setting('warren.telemetry_org', true))]));
ALTER POLICY telemetry_org ON public.sandbox_snapshots
  USING (org_id = ANY (ARRAY[(SELECT current_setting('warren.telemetry_org', true))]));
