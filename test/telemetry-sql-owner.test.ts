// Telemetry SQL layer 2 when Warren's database user is not a superuser (PostgreSQL only: PGlite
// always runs as one). The migrations must apply as such an owner (with CREATEROLE), and
// docs/telemetry-sql.md says exactly when layer 2 then holds on its own: only once a superuser
// has revoked EXECUTE on set_config, because the reader could otherwise undo both the
// organization binding and its own role (set_config('role', <session user>)). Until then the
// server refuses telemetry SQL (503), which these tests show is needed.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { systemClock } from "../src/lib/clock.js";
import type { Credential } from "../src/modules/identity/credential.js";
import * as repo from "../src/modules/telemetry/repo.js";
import { TelemetryViewService } from "../src/modules/telemetry/service.js";
import type { Db } from "../src/store/db.js";
import { migrate } from "../src/store/migrate.js";
import { openPostgres } from "../src/store/postgres.js";
import { adminUrl } from "./harness.js";
import { MARKER } from "./support/telemetry-corpus.js";

const LAYER2 = { statementTimeoutMs: 5000, workMemKiB: 4096, fetchRows: 1000 };
const ORG_A = "org_owner_test_a";
const ORG_B = "org_owner_test_b";

/** Runs unrewritten text as the reader bound to ORG_A: the rows as JSON, or "refused: <message>". */
const asReader = (db: Db, text: string) =>
  repo.runAsReader(db, ORG_A, text, [], LAYER2).then(
    (r) => JSON.stringify(r.rows),
    (e: Error) => `refused: ${e.message}`,
  );

/** Statements that would leave the organization (or the role) if set_config were callable. */
function escapes(owner: string): string[] {
  return [
    `SELECT set_config('warren.telemetry_org', '${ORG_B}', true), (SELECT string_agg(name, ',') FROM events)`,
    `WITH x AS MATERIALIZED (SELECT set_config('warren.telemetry_org', '${ORG_B}', false)) SELECT e.name FROM x, events e`,
    `SELECT pg_catalog.set_config('role', '${owner}', true), query_to_xml('select name from public.events', true, false, '')::text`,
    `SELECT set_config('warren.telemetry_org', '${ORG_B}', true), query_to_xml('select name from events', true, false, '')::text`,
  ];
}

describe("telemetry SQL layer 2 with a non-superuser database owner (PostgreSQL)", () => {
  const suffix = randomBytes(5).toString("hex");
  const owner = `warren_owner_${suffix}`;
  const database = `t_owner_${suffix}`;
  let superUrl = "";
  let db: Db;

  before(async () => {
    superUrl = await adminUrl();
    const admin = new pg.Client({ connectionString: superUrl });
    await admin.connect();
    await admin.query(`CREATE ROLE ${owner} LOGIN CREATEROLE NOSUPERUSER`);
    await admin.query(`CREATE DATABASE ${database} OWNER ${owner}`);
    await admin.end();
    const url = new URL(superUrl);
    url.username = owner;
    url.pathname = `/${database}`;
    db = await openPostgres(url.toString(), 2);
    await migrate(db);
    for (const [org, name] of [
      [ORG_A, "visible-a"],
      [ORG_B, MARKER],
    ]) {
      await db.query(
        `INSERT INTO events (org_id, event_id, project_id, ts_wall_ns, name, payload)
         VALUES ($1, $2, 'prj_x', $3, $4, $5::jsonb)`,
        [org, `ev-${org}`, String(Date.now() * 1e6), name, JSON.stringify({ m: name })],
      );
    }
  });

  after(async () => {
    await db?.close();
    const admin = new pg.Client({ connectionString: superUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.query(`DROP ROLE IF EXISTS ${owner}`);
    await admin.end();
  });

  it("the migrations apply as a non-superuser owner, which stays a non-superuser", async () => {
    const { rows } = await db.query<{ super: boolean; views: string; ts: string }>(
      `SELECT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS super,
              (SELECT viewowner FROM pg_views WHERE schemaname = 'telemetry_sql' AND viewname = 'events') AS views,
              (SELECT count(*) FROM schema_migrations WHERE name = '0023_events_ts_index.sql')::text AS ts`,
    );
    assert.deepEqual(rows[0], { super: false, views: "warren_telemetry_views", ts: "1" });
    // The views' owner got CREATE on the schema only for the ownership change.
    const create = await db.query<{ can: boolean }>(
      "SELECT has_schema_privilege('warren_telemetry_views', 'telemetry_sql', 'CREATE') AS can",
    );
    assert.equal(create.rows[0]?.can, false);
  });

  it("the owner, not a superuser and a member of the views' role, keeps every row of the base tables and none of a view", async () => {
    // warren_app names the migrating user (0025); telemetry_org also applies to it through its
    // membership in warren_telemetry_views, but ORed with `true` the planner drops it.
    const base = await db.query<{ name: string }>("SELECT name FROM events ORDER BY name");
    assert.deepEqual(
      base.rows.map((r) => r.name),
      [MARKER, "visible-a"].sort(),
    );
    const plan = await db.query<{ "QUERY PLAN": string }>("EXPLAIN SELECT name FROM events");
    assert.doesNotMatch(plan.rows.map((r) => r["QUERY PLAN"]).join("\n"), /Filter|org_id/);
    const view = await db.query<{ n: string }>("SELECT count(*) AS n FROM telemetry_sql.events");
    assert.equal(view.rows[0]?.n, "0");
  });

  it("without the superuser's REVOKE, set_config escapes layer 2, so the server refuses telemetry SQL (503)", async () => {
    assert.equal(await repo.readerCanSetConfig(db), true);
    // The escape is real: the binding and the role are both undone by the query itself.
    for (const text of escapes(owner)) {
      assert.ok((await asReader(db, text)).includes(MARKER), `expected ${text} to escape without the REVOKE`);
    }
    const service = new TelemetryViewService(db, systemClock(), { maxCost: 0 });
    const cred = { orgId: ORG_A, sandbox: null } as unknown as Credential;
    const refused = await service.runSql(cred, "SELECT name FROM events", 10).then(
      () => null,
      (error: { code?: string; message?: string }) => error,
    );
    assert.equal(refused?.code, "unavailable");
    assert.match(String(refused?.message), /REVOKE EXECUTE ON FUNCTION pg_catalog\.set_config/);
  });

  it("after a superuser's REVOKE, layer 2 alone holds for unrewritten set_config queries", async () => {
    const url = new URL(superUrl);
    url.pathname = `/${database}`;
    const admin = new pg.Client({ connectionString: url.toString() });
    await admin.connect();
    await admin.query("REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC");
    await admin.end();
    assert.equal(await repo.readerCanSetConfig(db), false);
    for (const text of escapes(owner)) {
      const outcome = await asReader(db, text);
      assert.ok(!outcome.includes(MARKER), `${text} leaked: ${outcome}`);
      assert.match(outcome, /^refused: permission denied for function set_config/, text);
    }
    for (const text of [
      "SELECT * FROM public.events",
      "SELECT * FROM pg_authid",
      "RESET ROLE",
      "SELECT 1) AS q; RESET ROLE; SELECT * FROM public.events; SELECT (1",
    ]) {
      const outcome = await asReader(db, text);
      assert.ok(outcome.startsWith("refused"), `${text} ran: ${outcome}`);
    }
    assert.deepEqual(JSON.parse(await asReader(db, "SELECT name FROM events")), [["visible-a"]]);
    const service = new TelemetryViewService(db, systemClock(), { maxCost: 0 });
    const cred = { orgId: ORG_A, sandbox: null } as unknown as Credential;
    const answer = await service.runSql(cred, "SELECT name FROM events", 10);
    assert.deepEqual(answer.rows, [["visible-a"]]);
  });
});
