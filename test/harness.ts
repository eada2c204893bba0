// Test harness: the real app on a real store (an in-memory PGlite, or a fresh database on a
// throwaway PostgreSQL cluster), two organizations with API keys of every role and kind,
// and captured logs so tests can check what was written.
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { after, before, describe } from "node:test";
import pg from "pg";
import { type Config, loadConfig } from "../src/config.js";
import { type Container, type ContainerOverrides, createApp, createContainer } from "../src/container.js";
import { FsBlobStore } from "../src/drivers/blobs/fs.js";
import type { App } from "../src/http/types.js";
import { createLogger } from "../src/lib/logger.js";
import { Keyring } from "../src/modules/secrets/keyring.js";
import type { Db } from "../src/store/db.js";
import { MIGRATIONS_DIR, migrate } from "../src/store/migrate.js";
import { openPglite } from "../src/store/pglite.js";
import { openPostgres } from "../src/store/postgres.js";
import { type PgCluster, startPgCluster } from "./support/pg-cluster.js";

export type StoreKind = "pglite" | "postgres";
export const STORE_KINDS: StoreKind[] = ["pglite", "postgres"];

// The runner (test/run.ts) starts one cluster for the whole suite and passes its URL here;
// a test file run on its own starts a cluster of its own.
let cluster: PgCluster | null = null;
let clusterUrl = process.env.WARREN_TEST_PG_URL ?? "";

/** The test cluster's superuser connection string (PostgreSQL tests that make their own roles and databases). */
export async function adminUrl(): Promise<string> {
  if (clusterUrl) return clusterUrl;
  cluster = await startPgCluster();
  clusterUrl = cluster.url;
  process.once("exit", () => cluster?.stop());
  return clusterUrl;
}

// initdb inside PGlite takes seconds; a migrated template data dir, dumped once per
// migration set into the temp dir, loads in under one.
export async function pgliteTemplate(): Promise<Blob> {
  const names = (await readdir(MIGRATIONS_DIR)).sort();
  const hash = createHash("sha256");
  for (const name of names) hash.update(name).update(await readFile(path.join(MIGRATIONS_DIR, name)));
  const file = path.join(os.tmpdir(), `warren-pglite-template-${hash.digest("hex").slice(0, 16)}.tar`);
  try {
    return new Blob([await readFile(file)]);
  } catch {
    const db = await openPglite();
    await migrate(db);
    const dump = await db.dump();
    await db.close();
    const partial = `${file}.${process.pid}`;
    await writeFile(partial, Buffer.from(await dump.arrayBuffer()));
    await rename(partial, file);
    return dump;
  }
}

export interface TestStore {
  db: Db;
  close(): Promise<void>;
}

/** pgliteDataDir: PGlite in that (empty) directory rather than in memory; the caller removes it. */
export async function openTestStore(kind: StoreKind, pgliteDataDir?: string): Promise<TestStore> {
  if (kind === "pglite") {
    const db = await openPglite(pgliteDataDir, await pgliteTemplate());
    return { db, close: () => db.close() };
  }
  const base = await adminUrl();
  const name = `t_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: base });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(base);
  url.pathname = `/${name}`;
  const db = await openPostgres(url.toString());
  return {
    db,
    close: async () => {
      await db.close();
      const dropper = new pg.Client({ connectionString: base });
      await dropper.connect();
      await dropper.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await dropper.end();
    },
  };
}

export type KeyRole = "owner" | "admin" | "member" | "service" | "workload";

export interface TestOrg {
  id: string;
  slug: string;
  defaultProjectId: string;
  keys: Record<KeyRole, string>;
  keyIds: Record<KeyRole, string>;
  principalIds: Record<KeyRole, string>;
}

export interface TestResponse {
  status: number;
  headers: Record<string, string | string[] | number | undefined>;
  body: Record<string, unknown>;
  raw: string;
}

export interface RequestOptions {
  key?: string | null;
  body?: unknown;
  headers?: Record<string, string>;
  query?: Record<string, string>;
}

export interface TestApp {
  app: App;
  c: Container;
  store: StoreKind;
  orgA: TestOrg;
  orgB: TestOrg;
  /** Every log line written so far, as text. */
  logs(): string;
  request(method: string, url: string, options?: RequestOptions): Promise<TestResponse>;
  /** Issues an extra key through the admin service (bypassing HTTP). */
  issueKey(
    org: TestOrg,
    input: {
      role?: "owner" | "admin" | "member";
      kind?: "user" | "service_account" | "workload";
      projectId?: string;
      sandbox?: { sandboxId: string; lineagePath: string };
    },
  ): Promise<{ key: string; keyId: string; principalId: string }>;
  close(): Promise<void>;
}

export interface TestAppOptions {
  config?: Partial<Config>;
  overrides?: Omit<ContainerOverrides, "db">;
  /** PGlite in this (empty) data directory instead of in memory (a statement deadline reopens it). */
  pgliteDataDir?: string;
}

async function seedOrg(c: Container, slug: string, operator: boolean): Promise<TestOrg> {
  const org = await c.identity.createOrganization({ slug, isOperator: operator });
  const specs: Record<KeyRole, Parameters<Container["identity"]["issueKey"]>[0]> = {
    owner: { orgId: org.id, kind: "user", role: "owner", email: `owner@${slug}.test`, name: "owner" },
    admin: { orgId: org.id, kind: "user", role: "admin", email: `admin@${slug}.test`, name: "admin" },
    member: { orgId: org.id, kind: "user", role: "member", email: `member@${slug}.test`, name: "member" },
    service: { orgId: org.id, kind: "service_account", role: "member", name: "ci-bot" },
    workload: { orgId: org.id, kind: "workload", role: "member", name: "agent", workloadName: "agent" },
  };
  const keys = {} as Record<KeyRole, string>;
  const keyIds = {} as Record<KeyRole, string>;
  const principalIds = {} as Record<KeyRole, string>;
  for (const [role, spec] of Object.entries(specs) as [KeyRole, (typeof specs)[KeyRole]][]) {
    const issued = await c.identity.issueKey(spec);
    keys[role] = issued.api_key;
    keyIds[role] = issued.key_id;
    principalIds[role] = issued.principal_id;
  }
  // The workload key is bound to a registered workload, as WhoAmI's workload_name requires.
  await c.workloads.create(await c.identity.authenticate(keys.owner), { name: "agent" });
  return { id: org.id, slug, defaultProjectId: org.default_project_id, keys, keyIds, principalIds };
}

export async function startTestApp(store: StoreKind, options: TestAppOptions = {}): Promise<TestApp> {
  const testStore = await openTestStore(store, options.pgliteDataDir);
  let captured = "";
  const sink = new Writable({
    write(chunk, _encoding, callback) {
      captured += chunk.toString();
      callback();
    },
  });
  const defaults = loadConfig({});
  // A free gateway port per test app (several test files run at once).
  const config: Config = {
    ...defaults,
    authCacheTtlMs: 0,
    egress: { ...defaults.egress, gatewayPort: 0 },
    ...options.config,
  };
  const log = createLogger("info", sink);
  // The blob store lives in a temp dir of its own, not in the (shared) default data dir.
  const blobDir = options.overrides?.blobs ? null : await mkdtemp(path.join(os.tmpdir(), "warren-blobs-"));
  const c = await createContainer(config, log, {
    keyring: Keyring.ephemeral(),
    ...(blobDir
      ? {
          blobs: await FsBlobStore.open({
            dir: blobDir,
            signingKey: randomBytes(32),
            publicBaseUrl: config.publicApiUrl,
          }),
        }
      : {}),
    ...options.overrides,
    db: testStore.db,
  });
  const app = await createApp(c);
  const orgA = await seedOrg(c, "org-a", true);
  const orgB = await seedOrg(c, "org-b", false);
  return {
    app,
    c,
    store,
    orgA,
    orgB,
    logs: () => captured,
    async request(method, url, opts = {}) {
      const headers: Record<string, string> = { ...opts.headers };
      if (opts.key) headers.authorization = `Bearer ${opts.key}`;
      const query = opts.query ? `?${new URLSearchParams(opts.query).toString()}` : "";
      const injected = await app.inject({
        method: method as "GET",
        url: `${url}${query}`,
        headers,
        ...(opts.body !== undefined ? { payload: opts.body as object } : {}),
      });
      let body: Record<string, unknown> = {};
      try {
        body = injected.body ? (JSON.parse(injected.body) as Record<string, unknown>) : {};
      } catch {
        body = {};
      }
      return { status: injected.statusCode, headers: injected.headers, body, raw: injected.body };
    },
    async issueKey(org, input) {
      const issued = await c.identity.issueKey({
        orgId: org.id,
        name: `extra-${randomBytes(3).toString("hex")}`,
        kind: input.kind ?? "service_account",
        role: input.role ?? "member",
        email: input.kind === "user" ? "extra@test" : undefined,
        workloadName: input.kind === "workload" ? "extra" : undefined,
        projectId: input.projectId,
        sandbox: input.sandbox,
      });
      return { key: issued.api_key, keyId: issued.key_id, principalId: issued.principal_id };
    },
    async close() {
      await app.close();
      await testStore.close();
      if (blobDir) await rm(blobDir, { recursive: true, force: true });
    },
  };
}

/**
 * Runs a suite once per store: `forEachStore("projects", (t) => { it(..., async () => t().request(...)) })`.
 * Each store gets its own app with freshly seeded organizations.
 */
export function forEachStore(name: string, suite: (t: () => TestApp) => void, options: TestAppOptions = {}): void {
  for (const store of STORE_KINDS) {
    describe(`${name} [${store}]`, () => {
      let current: TestApp | null = null;
      before(async () => {
        current = await startTestApp(store, options);
      });
      after(async () => {
        await current?.close();
      });
      suite(() => {
        if (!current) throw new Error("test app not started");
        return current;
      });
    });
  }
}

/** Keys that must never authenticate: none, an unknown one, and a malformed header. */
export const BAD_CREDENTIALS: { name: string; headers: Record<string, string> }[] = [
  { name: "no credential", headers: {} },
  { name: "unknown key", headers: { authorization: "Bearer wrn_not-a-real-key" } },
  { name: "not a bearer header", headers: { authorization: "Basic Zm9vOmJhcg==" } },
];
