// Layer 1 without a database: what is refused (and how it is named), and that every
// published relation reference, in every scope, becomes an organization-filtered subquery.
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { parseSync } from "libpg-query";
import { CORPUS } from "../../../../test/support/telemetry-corpus.js";
import { AppError } from "../../../lib/errors.js";
import { catalogOf, FIXED_NAMES } from "./catalog.js";
import { compile, gatewayReady, positionOf } from "./gateway.js";

const relations = catalogOf([
  {
    name: "review",
    jsonSchema: JSON.stringify({ properties: { score: { type: "integer" }, ok: { type: "boolean" } } }),
    promoted: [
      { field: "score", slot: "p1" },
      { field: "ok", slot: "p2" },
    ],
  },
]);
const run = (sql: string, paramTypes: ("text" | "bigint")[] = []) =>
  compile(sql, { relations, paramTypes, orgId: "org_a" });

function refusal(sql: string): AppError {
  try {
    run(sql);
  } catch (error) {
    assert.ok(error instanceof AppError, `${sql}: ${String(error)}`);
    assert.equal(error.code, "invalid_argument");
    return error;
  }
  assert.fail(`not refused: ${sql}`);
}

/** Every FROM item over telemetry_sql in the compiled text, and the relation names the caller could still see. */
function rangeVars(sql: string): { schema: string | undefined; name: string }[] {
  const out: { schema: string | undefined; name: string }[] = [];
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) {
      for (const item of node) visit(item);
      return;
    }
    if (node === null || typeof node !== "object") return;
    const rv = (node as { RangeVar?: { schemaname?: string; relname: string } }).RangeVar;
    if (rv) out.push({ schema: rv.schemaname, name: rv.relname });
    for (const value of Object.values(node)) visit(value);
  };
  visit(parseSync(sql));
  return out;
}

describe("telemetry SQL gateway (layer 1)", () => {
  before(() => gatewayReady);

  it("refuses every query the corpus marks refused, naming a construct", () => {
    for (const entry of CORPUS.filter((e) => e.expect === "refused")) {
      const error = refusal(entry.sql || " ");
      assert.equal(typeof (error.details as { construct?: unknown }).construct, "string", entry.sql);
    }
  });

  it("compiles every query the corpus marks answered, every relation read through telemetry_sql with the org bound", () => {
    for (const entry of CORPUS.filter((e) => e.expect === "answered")) {
      const out = run(entry.sql);
      for (const rv of rangeVars(out.sql)) {
        if (rv.schema === undefined) {
          assert.ok(!FIXED_NAMES.has(rv.name) && rv.name !== "review", `${entry.sql}: ${rv.name} left in place`);
        } else {
          assert.equal(rv.schema, "telemetry_sql", entry.sql);
        }
      }
      assert.equal(out.boundParams[0], "org_a", entry.sql);
      const filters = out.sql.match(/org_id = \$1\b/g)?.length ?? 0;
      assert.equal(filters, rangeVars(out.sql).filter((rv) => rv.schema === "telemetry_sql").length, entry.sql);
    }
  });

  it("binds the organization after the caller's parameters and casts those to their declared types", () => {
    const out = run("SELECT * FROM runs WHERE label = $1 AND depth < $2", ["text", "bigint"]);
    assert.deepEqual(out.boundParams, ["org_a"]);
    assert.match(out.sql, /org_id = \$3/);
    assert.match(out.sql, /CAST\(\$1 AS text\)/);
    assert.match(out.sql, /CAST\(\$2 AS bigint\)/);
    assert.match(refusal("SELECT $3").message, /parameter \$3 is not declared/);
    assert.throws(() => run("SELECT 1", ["text"]), /declared but never used/);
  });

  it("rewrites annotation-schema relations with their schema name bound and promoted fields typed", () => {
    const out = run("SELECT score, ok FROM review");
    assert.deepEqual(out.boundParams, ["org_a", "review"]);
    assert.match(out.sql, /schema_name = \$2/);
    assert.match(out.sql, /CAST\(p1 AS bigint\)/);
  });

  it("keeps aliases and column aliases, and reads a CTE by its own name", () => {
    const out = run("WITH x AS (SELECT id FROM runs) SELECT * FROM x, events AS e(a, b)");
    assert.match(out.sql, /AS e\(a, b\)/);
    assert.match(out.sql, /FROM x/);
    assert.deepEqual(out.relations, ["events", "runs"]);
  });

  it("names construct and position: line and column of the caller's text", () => {
    const error = refusal("SELECT 1,\n  2 FROM\n\tpg_class");
    assert.match(error.message, /relation "pg_class" is not a published relation \(line 3, column 2\)/);
    assert.deepEqual(positionOf("é\nx", 3), { position: 3, line: 2, column: 1 });
  });

  it("refuses generate_series beyond its bound and with non-constant arguments, accepts it within", () => {
    run("SELECT * FROM generate_series(1, 1000)");
    run("SELECT * FROM generate_series('2026-01-01'::timestamptz, '2026-01-02'::timestamptz, interval '1 hour')");
    assert.match(refusal("SELECT * FROM generate_series(1, 10000000)").message, /exceeds/);
    assert.match(refusal("SELECT * FROM generate_series(1, (SELECT 5))").message, /non-constant/);
  });

  it("refuses a CTE shadowing a published relation and schema-qualified names", () => {
    assert.match(refusal("WITH runs AS (SELECT 1) SELECT 1").message, /CTE "runs" shadowing/);
    assert.match(refusal("SELECT * FROM telemetry_sql.runs").message, /schema-qualified/);
  });

  // Its speed is measured in bench/telemetry-sql.ts (compile), not here: a unit test's timing
  // depends on the machine. This checks that repeated compiles of one query agree.
  it("compiles a 30-line query the same way every time", () => {
    const query = Array.from({ length: 30 }, (_, i) =>
      i === 0
        ? "WITH recent AS (SELECT * FROM events WHERE ts > now() - interval '1 day')"
        : `, c${i} AS (SELECT name, count(*) AS n FROM recent GROUP BY name)`,
    ).join("\n");
    const full = `${query}\nSELECT * FROM c1`;
    const first = JSON.stringify(run(full));
    for (let i = 0; i < 50; i++) assert.equal(JSON.stringify(run(full)), first);
  });
});
