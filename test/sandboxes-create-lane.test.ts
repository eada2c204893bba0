// A burst of one organization's creates does not take the server's store connections
// (SandboxService.inOrgCreateLane): each create's transaction holds the organization's quota
// locks until its commit, so the creates are serialized by the store anyway; through one
// server they now queue in the process, one transaction at a time, instead of each holding
// one of the pool's ten connections blocked on the lock, which left every read and the
// reconciler's writes of that server waiting (bench/multi-host-creates.ts found it: every
// connection of every host waiting during 60 concurrent creates). PostgreSQL only: PGlite
// has one connection, which serializes every transaction whatever the lanes do.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { adminUrl, startTestApp, type TestApp } from "./harness.js";
import { eventually } from "./support/eventually.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";

/** More than the pool's connections (openPostgres: 10). */
const CREATES = 14;
const READ_WITHIN_MS = 60_000;

describe("one organization's creates through one server [postgres]", () => {
  let t: TestApp | undefined;
  let probe: pg.Client | undefined;

  before(async () => {
    t = await startTestApp("postgres", { overrides: { runtime: API_ONLY_RUNTIME } });
    // A connection of the test's own: the server's pool is what is under test.
    const { rows } = await t.c.db.query<{ name: string }>("SELECT current_database() AS name");
    const url = Object.assign(new URL(await adminUrl()), { pathname: `/${rows[0]?.name}` });
    probe = new pg.Client({ connectionString: url.toString() });
    await probe.connect();
    for (const metric of ["sandboxes.total", "sandboxes.running"]) {
      await probe.query("INSERT INTO org_quotas (org_id, metric, limit_value) VALUES ($1, $2, 1000)", [
        t.orgA.id,
        metric,
      ]);
    }
  });

  after(async () => {
    await probe?.end();
    await t?.close();
  });

  it("wait for the quota lock without holding the server's connections: a read answers meanwhile", async () => {
    const app = t as TestApp;
    const client = probe as pg.Client;
    // Another server's create holding the organization's quota lock (as one in its commit would).
    await client.query("BEGIN");
    await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`quota:${app.orgA.id}:sandboxes.total`]);
    let released = false;
    const release = async () => {
      if (released) return;
      released = true;
      await client.query("COMMIT");
    };
    try {
      const creates = Array.from({ length: CREATES }, () =>
        app.request("POST", "/v1/sandboxes", { key: app.orgA.keys.owner, body: { network_access: "none" } }),
      );
      await eventually(
        "a create waiting on the quota lock",
        async () => {
          const { rows } = await client.query<{ n: string }>(
            "SELECT count(*)::text AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
          );
          return Number(rows[0]?.n) > 0;
        },
        120_000,
      );
      let timer: NodeJS.Timeout | undefined;
      const read = await Promise.race([
        app.request("GET", "/v1/sandboxes", { key: app.orgA.keys.owner }),
        new Promise<null>((resolve) => {
          timer = setTimeout(() => resolve(null), READ_WITHIN_MS);
        }),
      ]);
      clearTimeout(timer);
      assert.ok(read, `a read answered within ${READ_WITHIN_MS} ms while the creates waited on the quota lock`);
      assert.equal(read.status, 200, read.raw);
      await release();
      for (const res of await Promise.all(creates)) assert.equal(res.status, 200, res.raw);
      const { rows } = await client.query<{ n: string }>(
        "SELECT count(*)::text AS n FROM sandboxes WHERE org_id = $1",
        [app.orgA.id],
      );
      assert.equal(Number(rows[0]?.n), CREATES, "every create wrote its row");
    } finally {
      await release();
    }
  });
});
