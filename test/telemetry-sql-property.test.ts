// The organization invariant of telemetry SQL as a property, on both stores: random valid
// SELECTs (test/support/sql-generator.ts) over the published relations, with two
// organizations seeded (org B's rows carry MARKER in every text column the test can set).
// Each query is answered through POST /v1/telemetry/sql with no MARKER anywhere in the
// answer, and a fingerprint of its rows (count, and the sorted row hashes when the query is
// deterministic) run through the gateway equals the same text run directly, without the
// gateway, over copies of org A's rows alone (schema oracle_a).
//
// The seed is fixed by default, so `make test` is repeatable; WARREN_SQL_PROPERTY_SEED=random
// explores new queries (the seed is printed on failure; replay it with
// WARREN_SQL_PROPERTY_SEED=<seed>, and WARREN_SQL_PROPERTY_QUERIES=<n> for more queries).
import assert from "node:assert/strict";
import { randomInt } from "node:crypto";
import { before, it } from "node:test";
import * as repo from "../src/modules/telemetry/repo.js";
import { catalogOf, type PublishedRelation } from "../src/modules/telemetry/sql/catalog.js";
import type { Db, Queryable } from "../src/store/db.js";
import { forEachStore, type TestApp, type TestOrg } from "./harness.js";
import { API_ONLY_RUNTIME } from "./support/fixtures.js";
import { seedSpans } from "./support/otlp-fixtures.js";
import { generateQuery } from "./support/sql-generator.js";
import { MARKER } from "./support/telemetry-corpus.js";

const SEED_SETTING = process.env.WARREN_SQL_PROPERTY_SEED ?? "20261123";
const SEED = SEED_SETTING === "random" ? randomInt(2 ** 31) : Number(SEED_SETTING);
const QUERIES = Number(process.env.WARREN_SQL_PROPERTY_QUERIES ?? 300);

const REVIEW_SCHEMA = {
  name: "review",
  json_schema: JSON.stringify({ type: "object", properties: { score: { type: "integer" }, note: { type: "string" } } }),
  promoted_fields: [{ field: "score", identity: false, bloom: false }],
};

/** Org A's texts: the generator compares with these (never with MARKER). */
const WORDS_A = ["ev-start", "ev-step", "ev-end", "alpha", "run-alpha", "succeeded", "running", "note-a", "x", ""];

/** The text org `tag` writes: org A's words as they are, org B's with MARKER in each. */
const text = (org: "a" | "b", word: string) => (org === "a" ? word : `${MARKER}-${word}`);

const DAY_NS = 86_400n * 1_000_000_000n;
const BASE_NS = BigInt(Date.parse("2024-03-01T00:00:00Z")) * 1_000_000n;

async function seed(t: TestApp, org: TestOrg, which: "a" | "b"): Promise<void> {
  const db = t.c.db;
  const schema = await t.request("POST", "/v1/annotation-schemas", { key: org.keys.owner, body: REVIEW_SCHEMA });
  assert.equal(schema.status, 200, schema.raw);
  const slot = (schema.body.schema as { promoted_fields: { slot: string }[] }).promoted_fields[0]?.slot ?? "p1";
  // A run tree: root, two children, one grandchild.
  const runs = [0, 1, 2, 3].map((i) => `run-${which}-${i}`);
  const parents = [null, runs[0], runs[0], runs[1]];
  for (const [i, id] of runs.entries()) {
    await db.query(
      `INSERT INTO runs (id, org_id, project_id, label, parent_run_id, root_run_id, lineage_path, depth, status,
                         started_at, ended_at, created_by, execute_as_workload)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
      [
        id,
        org.id,
        org.defaultProjectId,
        text(which, i === 0 ? "run-alpha" : "alpha"),
        parents[i],
        runs[0],
        text(which, `/${i}`),
        i === 3 ? 2 : i === 0 ? 0 : 1,
        i % 2 === 0 ? "succeeded" : "running",
        new Date(Date.parse("2024-03-01T00:00:00Z") + i * 3_600_000),
        i % 2 === 0 ? new Date(Date.parse("2024-03-02T00:00:00Z")) : null,
        text(which, "creator"),
        text(which, "agent"),
      ],
    );
  }
  const names = ["ev-start", "ev-step", "ev-step", "ev-end"];
  for (let i = 0; i < 10; i++) {
    await db.query(
      `INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, principal, payload)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)`,
      [
        org.id,
        text(which, `ev-${which}-${i}`),
        text(which, "project"),
        runs[i % runs.length],
        text(which, `/${i % 4}`),
        String(BASE_NS + BigInt(i) * (DAY_NS / 3n)),
        text(which, names[i % names.length] as string),
        text(which, "alpha"),
        JSON.stringify({ m: text(which, i % 2 ? "note-a" : "alpha"), n: i, [text(which, "k")]: text(which, "v") }),
      ],
    );
  }
  for (let i = 0; i < 3; i++) {
    const payload = JSON.stringify({ score: i + 5, note: text(which, "note-a"), m: text(which, "alpha") });
    await db.query(
      `INSERT INTO events (org_id, event_id, project_id, run_id, lineage_path, ts_wall_ns, name, kind, schema_name,
                           schema_version, principal, target_event_id, range_start_event_id, range_end_event_id,
                           payload, payload_text, ${slot})
       VALUES ($1, $2, $3, $4, $5, $6, $7, 'annotation', 'review', 1, $8, $9, $9, $9, $10::jsonb, $10, $11)`,
      [
        org.id,
        text(which, `an-${which}-${i}`),
        text(which, "project"),
        runs[i],
        text(which, "/0"),
        String(BASE_NS + BigInt(i) * DAY_NS),
        text(which, "annotation"),
        text(which, "alpha"),
        text(which, `ev-${which}-${i}`),
        payload,
        String(i + 5),
      ],
    );
  }
  await seedSpans(t, org.keys.owner, runs[0] as string, which === "a" ? 201 : 202, (word) => text(which, word));
  for (let i = 0; i < 2; i++) {
    const sandbox = await t.request("POST", "/v1/sandboxes", {
      key: org.keys.owner,
      body: { metadata: { m: text(which, "alpha") } },
    });
    assert.equal(sandbox.status, 200, sandbox.raw);
    const id = String(sandbox.body.id);
    await db.query("UPDATE sandboxes SET name = $2, run_id = $3 WHERE id = $1", [
      id,
      text(which, `sandbox-${i}`),
      runs[i],
    ]);
    await db.query(
      `INSERT INTO sandbox_snapshots (id, org_id, project_id, source_sandbox_id, parent_snapshot_id, run_id, name,
         image, lineage_path, storage_class, state, durability, request_hash, created_at)
       SELECT $2, org_id, project_id, id, $3, run_id, $4, image, $5, storage_class, 'sealed', 'local', 'x', now()
         FROM sandboxes WHERE id = $1`,
      [
        id,
        text(which, `snp-${which}-${i}`),
        i === 0 ? null : text(which, `snp-${which}-0`),
        text(which, "snap"),
        text(which, "/0"),
      ],
    );
  }
}

const ident = (name: string) => `"${name.replaceAll('"', '""')}"`;

/** Copies of org A's rows of every published relation, as the query sees them, in schema oracle_a. */
async function buildOracle(t: TestApp, relations: Map<string, PublishedRelation>): Promise<void> {
  const org = t.orgA.id;
  await t.c.db.tx(async (q) => {
    await q.query("CREATE SCHEMA oracle_a");
    // Layer 2 lifted for the copy (the policy is dropped before this transaction commits);
    // the copies keep org A's rows by their own WHERE.
    await liftLayer2(q);
    for (const rel of relations.values()) {
      const cols = rel.columns.map((c) => (c.expr ? `${c.expr} AS ${ident(c.name)}` : ident(c.name))).join(", ");
      const schemaFilter = rel.schemaName === undefined ? "" : ` AND schema_name = '${rel.schemaName}'`;
      await q.query(
        `CREATE TABLE oracle_a.${ident(rel.name)} AS SELECT ${cols} FROM telemetry_sql.${ident(rel.view)}
          WHERE org_id = '${org}'${schemaFilter}`,
      );
    }
    await restoreLayer2(q);
  });
}

const LAYER2 = { statementTimeoutMs: 5000, workMemKiB: 4096, fetchRows: 1 };

function compare(
  what: string,
  got: (string | null)[] | undefined,
  want: (string | null | undefined)[],
  rowForRow: boolean,
  fail: (why: string) => void,
): void {
  const [n, h, leak] = got ?? [];
  if (leak !== "f") fail(`${what}: a row holds org B's marker`);
  if (n !== want[0]) fail(`${what}: ${n} rows, org A's data alone has ${want[0]}`);
  else if (rowForRow && h !== want[1]) fail(`${what}: the rows differ from those of org A's data alone`);
}

const RLS_TABLES = ["runs", "events", "sandboxes", "sandbox_snapshots", "otlp_traces"];

/** In the caller's transaction, a permissive policy lets the views' owner see every row. */
async function liftLayer2(q: Queryable): Promise<void> {
  for (const table of RLS_TABLES) {
    await q.query(`CREATE POLICY property_all ON public.${table} FOR SELECT TO warren_telemetry_views USING (true)`);
  }
}

async function restoreLayer2(q: Queryable): Promise<void> {
  for (const table of RLS_TABLES) await q.query(`DROP POLICY property_all ON public.${table}`);
}

/**
 * Runs fn with layer 2 lifted: in a transaction that is always rolled back, a permissive
 * policy lets the views' owner see every row of the tables under row-level security.
 */
async function withoutLayer2<T>(db: Db, fn: (q: Queryable) => Promise<T>): Promise<T> {
  let answer: { value: T } | null = null;
  await db
    .tx(async (q) => {
      await liftLayer2(q);
      answer = { value: await fn(q) };
      throw new Error("rollback");
    })
    .catch((error: Error) => {
      if (!answer) throw error;
    });
  if (!answer) throw new Error("unreachable");
  return (answer as { value: T }).value;
}

/** Row count, a hash of the sorted row hashes, and whether any row holds MARKER. */
const fingerprint = (sql: string) =>
  `SELECT count(*) AS n, md5(coalesce(string_agg(md5(fp::text), ',' ORDER BY md5(fp::text)), '')) AS h,
          coalesce(bool_or(strpos(fp::text, '${MARKER}') > 0), false) AS leak
     FROM (\n${sql}\n) AS fp`;

forEachStore(
  "telemetry SQL property: random SELECTs keep to the caller's organization",
  (t) => {
    let relations = new Map<string, PublishedRelation>();
    before(async () => {
      await seed(t(), t().orgA, "a");
      await seed(t(), t().orgB, "b");
      relations = catalogOf(await repo.liveSchemas(t().c.db, t().orgA.id));
      await buildOracle(t(), relations);
      // What makes "layer 1 alone" mean something: with layer 2 lifted, the views read both
      // organizations' rows.
      const orgs = await withoutLayer2(t().c.db, (q) =>
        q.query<{ n: number }>("SELECT count(DISTINCT org_id)::int AS n FROM telemetry_sql.events"),
      );
      assert.equal(orgs.rows[0]?.n, 2);
    });

    it(`${QUERIES} random queries: no org B marker, and the rows of org A's data alone`, async () => {
      const failures: string[] = [];
      const started = performance.now();
      let compared = 0;
      for (let i = 0; i < QUERIES && failures.length < 5; i++) {
        const query = generateQuery(SEED + i, relations, WORDS_A);
        const fail = (why: string) =>
          failures.push(
            `query ${i} (seed ${SEED + i}; replay WARREN_SQL_PROPERTY_SEED=${SEED}): ${why}\n  ${query.sql}`,
          );
        const res = await t().request("POST", "/v1/telemetry/sql", {
          key: t().orgA.keys.member,
          body: { sql: query.sql, limit: 1000 },
        });
        if (res.raw.includes(MARKER)) fail(`org B's marker in the answer: ${res.raw.slice(0, 300)}`);
        if (res.status !== 200) {
          fail(`answered ${res.status}: ${res.raw.slice(0, 300)}`);
          continue;
        }
        const text = fingerprint(query.sql);
        const direct = await t()
          .c.db.tx(async (q) => {
            await q.query("SET LOCAL search_path = oracle_a");
            await q.query("SET LOCAL TimeZone = 'UTC'");
            return q.queryRaw(text);
          })
          .catch((error: Error) => error);
        if (direct instanceof Error) {
          fail(`runs through the gateway but not directly on org A's copy: ${direct.message}`);
          continue;
        }
        const [n, h] = direct.rows[0] ?? [];
        const rowCount = Number(res.body.row_count);
        if (rowCount !== Math.min(Number(n), 1000)) fail(`answered ${rowCount} rows, org A's data alone has ${n}`);
        // Layer 1 alone: the rewritten text run with layer 2's row-level security lifted.
        const compiled = await t().c.telemetryViews.compile(t().orgA.id, text, []);
        const layer1 = await withoutLayer2(t().c.db, async (q) => {
          await q.query("SET LOCAL TimeZone = 'UTC'");
          return q.queryRaw(compiled.sql, compiled.boundParams);
        });
        compare("layer 1 alone", layer1.rows[0], [n, h], query.deterministic, fail);
        // Layer 2 alone: the caller's text unrewritten, as the reader; it can name only the
        // fixed relations, and a `.*` there also yields the views' hidden columns.
        if (!/\breview\b/.test(query.sql)) {
          const layer2 = await repo.runAsReader(t().c.db, t().orgA.id, text, [], LAYER2);
          const sameColumns = query.deterministic && !query.sql.includes(".*");
          compare("layer 2 alone", layer2.rows[0], [n, h], sameColumns, fail);
        }
        if (query.deterministic) compared++;
      }
      const seconds = (performance.now() - started) / 1000;
      if (failures.length > 0) assert.fail(`seed ${SEED}:\n${failures.join("\n")}`);
      process.stderr.write(
        `[${t().store}] ${QUERIES} queries (seed ${SEED}, ${compared} compared row for row) in ${seconds.toFixed(1)} s\n`,
      );
    });
  },
  { overrides: { runtime: API_ONLY_RUNTIME } },
);
