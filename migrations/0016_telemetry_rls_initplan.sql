-- Telemetry SQL, layer 2 (docs/telemetry-sql.md): the same row-level security as 0012, with
-- each policy's setting and role read once per query instead of once per row. A bare
-- current_setting(...) or current_user in a policy is a function call evaluated for every
-- row scanned (a million-row scan paid ~40% over the same query without RLS); wrapped in a
-- scalar subquery it becomes an InitPlan, computed once and compared as a constant. Who
-- may see which row is unchanged. (Numbered 0016: 0015 is taken by the volumes branch.)
ALTER POLICY telemetry_org ON public.runs USING (org_id = (SELECT current_setting('warren.telemetry_org', true)));
ALTER POLICY telemetry_org ON public.events USING (org_id = (SELECT current_setting('warren.telemetry_org', true)));
ALTER POLICY telemetry_org ON public.sandboxes USING (org_id = (SELECT current_setting('warren.telemetry_org', true)));
ALTER POLICY telemetry_org ON public.sandbox_snapshots
  USING (org_id = (SELECT current_setting('warren.telemetry_org', true)));

ALTER POLICY warren_app ON public.runs
  USING ((SELECT current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader')))
  WITH CHECK ((SELECT current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader')));
ALTER POLICY warren_app ON public.events
  USING ((SELECT current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader')))
  WITH CHECK ((SELECT current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader')));
ALTER POLICY warren_app ON public.sandboxes
  USING ((SELECT current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader')))
  WITH CHECK ((SELECT current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader')));
ALTER POLICY warren_app ON public.sandbox_snapshots
  USING ((SELECT current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader')))
  WITH CHECK ((SELECT current_user NOT IN ('warren_telemetry_views', 'warren_telemetry_reader')));
