// Telemetry SQL layer 2 when Warren's database user is not a superuser (PostgreSQL only: PGlite
// always runs as one), as on a managed PostgreSQL. The migrations must apply as such an owner
// (with CREATEROLE). Any role may then call set_config, so a reader entered with SET LOCAL ROLE
// on Warren's own connection can go back to Warren's user (set_config('role', <session user>))
// and read every table: these tests show that escape, then that the server runs telemetry SQL
// on reader logins instead (connections whose session user is a role of its own holding only
// the reader's grants), where layer 2 holds alone. After a superuser's REVOKE of set_config,
// Warren's own connections are used again (docs/telemetry-sql.md, "When layer 2 holds").
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { systemClock } from "../src/lib/clock.js";
import type { Credential } from "../src/modules/identity/credential.js";
import { ReaderLogins, scramVerifier } from "../src/modules/telemetry/reader-logins.js";
import * as repo from "../src/modules/telemetry/repo.js";
import { TelemetryViewService } from "../src/modules/telemetry/service.js";
import type { Db } from "../src/store/db.js";
import { type OwnerDb, openOwnerDb } from "./support/owner-db.js";
import { MARKER } from "./support/telemetry-corpus.js";

const LAYER2 = { statementTimeoutMs: 5000, workMemKiB: 4096, fetchRows: 1000 };
const ORG_A = "org_owner_test_a";
const ORG_B = "org_owner_test_b";

/** Runs unrewritten text as the reader bound to ORG_A: the rows as JSON, or "refused: <message>". */
const asReader = (session: repo.ReaderSession, text: string) =>
  repo.runAsReader(session, ORG_A, text, [], LAYER2).then(
    (r) => JSON.stringify(r.rows),
    (e: Error) => `refused: ${e.message}`,
  );

/** Statements that try to leave the organization through the setting it was once bound by. */
const SETTING_ESCAPES = [
  `SELECT set_config('warren.telemetry_org', '${ORG_B}', true), (SELECT string_agg(name, ',') FROM events)`,
  `WITH x AS MATERIALIZED (SELECT set_config('warren.telemetry_org', '${ORG_B}', false)) SELECT e.name FROM x, events e`,
  `SELECT set_config('warren.telemetry_org', '${ORG_B}', true), query_to_xml('select name from events', true, false, '')::text`,
];

/** Going back to the session user, then reading the base table. */
const roleEscape = (owner: string) =>
  `SELECT pg_catalog.set_config('role', '${owner}', true), query_to_xml('select name from public.events', true, false, '')::text`;

const CREDENTIAL = { orgId: ORG_A, sandbox: null } as unknown as Credential;

describe("telemetry SQL layer 2 with a non-superuser database owner (PostgreSQL)", () => {
  const suffix = randomBytes(5).toString("hex");
  let setup: OwnerDb | null = null;
  let owner = "";
  let database = "";
  /** The prefix of the reader logins made for this database (reader-logins.ts). */
  let loginPrefix = "";
  let superUrl = "";
  let ownerUrl = "";
  let db: Db;
  let admin: pg.Client;

  const loginRoles = async () =>
    (
      await admin.query<{ name: string; connlimit: number; reader: boolean; super: boolean }>(
        `SELECT rolname AS name, rolconnlimit AS connlimit, rolsuper AS super,
                pg_has_role(rolname, 'warren_telemetry_reader', 'USAGE') AS reader
           FROM pg_roles WHERE starts_with(rolname, $1) ORDER BY rolname`,
        [loginPrefix],
      )
    ).rows;

  before(async () => {
    setup = await openOwnerDb("owner", ORG_A, ORG_B);
    ({ db, admin, owner, database, loginPrefix, superUrl, ownerUrl } = setup);
  });

  // Whatever a failed test left: its reader logins, the database, the owner.
  after(() => setup?.close());

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

  it("without the superuser's REVOKE, the reader on Warren's own connection escapes through set_config('role'); the setting no longer binds anything", async () => {
    assert.equal(await repo.readerCanSetConfig(db), true);
    assert.ok((await asReader(db, roleEscape(owner))).includes(MARKER), "the role escape is real");
    for (const text of SETTING_ESCAPES) {
      const outcome = await asReader(db, text);
      assert.ok(!outcome.includes(MARKER), `${text} leaked: ${outcome}`);
    }
  });

  it("so the server runs telemetry SQL on reader logins: one role per connection, only the reader's grants, dropped at close", async () => {
    const service = new TelemetryViewService(db, systemClock(), {
      maxCost: 0,
      readerLogins: { connectionString: ownerUrl, size: 3 },
    });
    try {
      const answer = await service.runSql(CREDENTIAL, "SELECT name FROM events", 10);
      assert.deepEqual(answer.rows, [["visible-a"]]);
      const roles = await loginRoles();
      assert.equal(roles.length, 3);
      for (const role of roles)
        assert.deepEqual({ ...role, name: "" }, { name: "", connlimit: 1, reader: true, super: false });
      // The caller's text goes through layer 1 too; the role escape is refused there.
      const refused = await service.runSql(CREDENTIAL, roleEscape(owner), 10).catch((e: { code?: string }) => e);
      assert.equal((refused as { code?: string }).code, "invalid_argument");
    } finally {
      await service.close();
    }
    assert.deepEqual(await loginRoles(), []);
  });

  it("a reader login's password is sent as the SCRAM-SHA-256 verifier PostgreSQL itself computes", async () => {
    const role = `warren_scram_${suffix}`;
    await admin.query(`SET password_encryption = 'scram-sha-256'`);
    await admin.query(`CREATE ROLE ${role} PASSWORD 'correct horse battery staple'`);
    try {
      const { rows } = await admin.query<{ stored: string }>(
        "SELECT rolpassword AS stored FROM pg_authid WHERE rolname = $1",
        [role],
      );
      const stored = String(rows[0]?.stored);
      const salt = Buffer.from(stored.split("$")[1]?.split(":")[1] ?? "", "base64");
      assert.equal(salt.length, 16, stored);
      assert.equal(scramVerifier("correct horse battery staple", salt), stored);
    } finally {
      await admin.query(`DROP ROLE ${role}`);
    }
  });

  it("layer 2 alone on reader logins: unrewritten escapes are refused or see only the bound organization", async () => {
    const logins = await ReaderLogins.open(db, ownerUrl, 2);
    try {
      for (const text of [
        roleEscape(owner),
        "SELECT pg_catalog.set_config('role', 'warren_telemetry_views', true), query_to_xml('select name from public.events', true, false, '')::text",
        "SELECT * FROM public.events",
        "SELECT * FROM public.telemetry_bindings",
        "SELECT * FROM pg_authid",
        "RESET ROLE",
        "SELECT 1) AS q; RESET ROLE; SELECT * FROM public.events; SELECT (1",
      ]) {
        const outcome = await asReader(logins, text);
        assert.ok(outcome.startsWith("refused"), `${text} ran: ${outcome}`);
      }
      for (const text of SETTING_ESCAPES) {
        const outcome = await asReader(logins, text);
        assert.ok(!outcome.includes(MARKER), `${text} leaked: ${outcome}`);
      }
      assert.deepEqual(JSON.parse(await asReader(logins, "SELECT name FROM events")), [["visible-a"]]);
      const b = await repo.runAsReader(logins, ORG_B, "SELECT name FROM events", [], LAYER2);
      assert.deepEqual(b.rows, [[MARKER]], "org B's own query sees its rows");
      // Nothing stays on a login's connection: no session-level advisory lock either.
      assert.match(await asReader(logins, "SELECT pg_advisory_lock(424244)"), /^\[/);
      // The error comes at run time (random() is not folded by the planner), after the lock.
      const failed = await asReader(logins, "SELECT pg_advisory_lock(424245), 1 / (random() * 0)::int");
      assert.match(failed, /^refused: division by zero/);
      const locks = await admin.query(
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid IN (424244, 424245)",
      );
      assert.equal(locks.rowCount, 0);
    } finally {
      await logins.close();
    }
  });

  it("a reader login cannot read another login's query text in pg_stat_activity", async () => {
    const logins = await ReaderLogins.open(db, ownerUrl, 2);
    try {
      const sleeper = repo.runAsReader(logins, ORG_B, "SELECT pg_sleep(1.5), 'zz_sleeper_text'", [], LAYER2);
      // The sleeper is running: a superuser sees its text.
      let seen = false;
      // (An idle backend still shows its last query, so "seen" holds once it has started.)
      for (const deadline = Date.now() + 30_000; !seen && Date.now() < deadline; ) {
        const { rows } = await admin.query("SELECT 1 FROM pg_stat_activity WHERE query LIKE '%zz_sleeper' || '_text%'");
        seen = rows.length > 0;
        if (!seen) await new Promise((resolve) => setTimeout(resolve, 10));
      }
      assert.ok(seen, "the sleeper's query was running");
      const observed = await repo.runAsReader(
        logins,
        ORG_A,
        "SELECT count(*) AS others, string_agg(coalesce(query, ''), ' | ') AS texts FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
        [],
        LAYER2,
      );
      const [others, texts] = observed.rows[0] ?? [];
      assert.ok(Number(others) > 0, "other backends are listed");
      assert.ok(!String(texts).includes("zz_sleeper"), `another login's query text was visible: ${texts}`);
      await sleeper;
    } finally {
      await logins.close();
    }
  });

  it("logins of a process that died are dropped by the next one once an hour old; if logins cannot be made, 503", async () => {
    const old = Math.floor(Date.now() / 1000 - 7200).toString(36);
    const fresh = Math.floor(Date.now() / 1000).toString(36);
    await db.query(`CREATE ROLE "${loginPrefix}${old}_dead_0" LOGIN`);
    await db.query(`CREATE ROLE "${loginPrefix}${fresh}_busy_0" LOGIN`);
    const logins = await ReaderLogins.open(db, ownerUrl, 1);
    const names = (await loginRoles()).map((r) => r.name);
    assert.ok(!names.includes(`${loginPrefix}${old}_dead_0`), "the hour-old login was dropped");
    assert.ok(names.includes(`${loginPrefix}${fresh}_busy_0`), "a fresh one is kept (its process may be connecting)");
    await logins.close();
    await db.query(`DROP ROLE "${loginPrefix}${fresh}_busy_0"`);
    // Logins that cannot connect (here: nothing listens on that port) leave nothing behind.
    const closed = new URL(ownerUrl);
    closed.port = "1";
    const service = new TelemetryViewService(db, systemClock(), {
      maxCost: 0,
      readerLogins: { connectionString: closed.toString() },
    });
    const refused = await service.runSql(CREDENTIAL, "SELECT name FROM events", 10).catch((e) => e);
    assert.equal(refused?.code, "unavailable");
    assert.match(String(refused?.message), /reader logins failed/);
    // The cause stays in the server's log: no host, port or role name in the answer.
    assert.doesNotMatch(String(refused?.message), /ECONNREFUSED|127\.0\.0\.1|warren_tq_[0-9a-f]/);
    assert.match(String(refused?.cause), /ECONNREFUSED/);
    assert.deepEqual(await loginRoles(), []);
    // Without a connection string for logins (an embedded configuration), it is refused too.
    const bare = new TelemetryViewService(db, systemClock(), { maxCost: 0 });
    const off = await bare.runSql(CREDENTIAL, "SELECT name FROM events", 10).catch((e) => e);
    assert.equal(off?.code, "unavailable");
    assert.match(String(off?.message), /REVOKE EXECUTE ON FUNCTION pg_catalog\.set_config/);
  });

  it("after a superuser's REVOKE, Warren's own connections hold layer 2 alone, and no logins are made", async () => {
    const url = new URL(superUrl);
    url.pathname = `/${database}`;
    const inDb = new pg.Client({ connectionString: url.toString() });
    await inDb.connect();
    await inDb.query("REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC");
    await inDb.end();
    assert.equal(await repo.readerCanSetConfig(db), false);
    for (const text of [roleEscape(owner), ...SETTING_ESCAPES]) {
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
    const service = new TelemetryViewService(db, systemClock(), {
      maxCost: 0,
      readerLogins: { connectionString: ownerUrl },
    });
    const answer = await service.runSql(CREDENTIAL, "SELECT name FROM events", 10);
    assert.deepEqual(answer.rows, [["visible-a"]]);
    assert.deepEqual(await loginRoles(), []);
    await service.close();
  });
});
