// A Warren database whose owner is not a superuser (a role with CREATEROLE, as on a managed
// PostgreSQL), migrated, with one event of org A named "visible-a" and one of org B carrying
// MARKER: the setting of the layer-2 tests of telemetry SQL on reader logins.
import { createHash, randomBytes } from "node:crypto";
import pg from "pg";
import type { Db } from "../../src/store/db.js";
import { migrate } from "../../src/store/migrate.js";
import { openPostgres } from "../../src/store/postgres.js";
import { adminUrl } from "../harness.js";
import { MARKER } from "./telemetry-corpus.js";

export interface OwnerDb {
  /** The owner's store (2 connections). */
  db: Db;
  owner: string;
  database: string;
  ownerUrl: string;
  superUrl: string;
  /** A superuser connection to the cluster. */
  admin: pg.Client;
  /** The prefix of the reader logins made for this database (reader-logins.ts). */
  loginPrefix: string;
  /** Drops whatever is left: reader logins, the database, the owner. */
  close(): Promise<void>;
}

export async function openOwnerDb(tag: string, orgA: string, orgB: string): Promise<OwnerDb> {
  const suffix = randomBytes(5).toString("hex");
  const owner = `warren_${tag}_owner_${suffix}`;
  const database = `t_${tag}_${suffix}`;
  const loginPrefix = `warren_tq_${createHash("sha256").update(database).digest("hex").slice(0, 8)}_`;
  const superUrl = await adminUrl();
  const admin = new pg.Client({ connectionString: superUrl });
  await admin.connect();
  await admin.query(`CREATE ROLE ${owner} LOGIN CREATEROLE NOSUPERUSER`);
  await admin.query(`CREATE DATABASE ${database} OWNER ${owner}`);
  const url = new URL(superUrl);
  url.username = owner;
  url.pathname = `/${database}`;
  const ownerUrl = url.toString();
  const db = await openPostgres(ownerUrl, 2);
  await migrate(db);
  for (const [org, name] of [
    [orgA, "visible-a"],
    [orgB, MARKER],
  ]) {
    await db.query(
      `INSERT INTO events (org_id, event_id, project_id, ts_wall_ns, name, payload)
       VALUES ($1, $2, 'prj_x', $3, $4, $5::jsonb)`,
      [org, `ev-${org}`, String(Date.now() * 1e6), name, JSON.stringify({ m: name })],
    );
  }
  return {
    db,
    owner,
    database,
    ownerUrl,
    superUrl,
    admin,
    loginPrefix,
    close: async () => {
      await db.close();
      const { rows } = await admin
        .query<{ name: string }>("SELECT rolname AS name FROM pg_roles WHERE starts_with(rolname, $1)", [loginPrefix])
        .catch(() => ({ rows: [] as { name: string }[] }));
      for (const { name } of rows) await admin.query(`DROP ROLE IF EXISTS "${name}"`);
      await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await admin.query(`DROP ROLE IF EXISTS ${owner}`);
      await admin.end();
    },
  };
}
