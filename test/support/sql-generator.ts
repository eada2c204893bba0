// A seeded generator of random valid telemetry SQL SELECTs over the published relations of a
// catalog (test/telemetry-sql-property.test.ts): joins, LATERAL, derived tables, CTEs
// (recursive too), set operations, aggregates, window functions, VALUES, table functions
// and correlated sublinks. Every query reads only published names and allowed functions, so
// the gateway must answer it. `deterministic` is false when the rows depend on a plan
// (row_number over ties, LIMIT without a total order): only the row count is compared then.
import type { PublishedRelation } from "../../src/modules/telemetry/sql/catalog.js";

type Type = "text" | "int" | "bool" | "ts" | "json";

interface Col {
  name: string;
  type: Type;
}

interface Item {
  alias: string;
  cols: Col[];
  /** A bound on the rows of a CTE (for the join budget). */
  rows?: number;
}

/** What a published relation is taken to hold, and the bounds keeping cross joins small. */
const RELATION_ROWS = 20;
const MAX_ROWS = 2000;
const SUBQUERY_ROWS = 50;

export interface GeneratedQuery {
  sql: string;
  deterministic: boolean;
}

/** mulberry32: small, fast, and the same sequence for the same seed everywhere. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function typeOf(sqlType: string): Type | null {
  switch (sqlType) {
    case "text":
      return "text";
    case "integer":
    case "bigint":
      return "int";
    case "boolean":
      return "bool";
    case "timestamptz":
      return "ts";
    case "jsonb":
      return "json";
    default:
      return null;
  }
}

const quote = (s: string) => `'${s.replaceAll("'", "''")}'`;

class Generator {
  private next = 0;
  private deterministic = true;
  private readonly relations: { name: string; cols: Col[] }[];

  constructor(
    private readonly random: () => number,
    relations: Map<string, PublishedRelation>,
    /** Text literals to compare with (values seeded for the caller, never another organization's). */
    private readonly words: string[],
  ) {
    this.relations = [...relations.values()].map((r) => ({
      name: /^[a-z_][a-z0-9_]*$/.test(r.name) ? r.name : `"${r.name}"`,
      cols: r.columns.flatMap((c) => {
        const type = typeOf(c.type);
        return type ? [{ name: c.name, type }] : [];
      }),
    }));
  }

  query(): GeneratedQuery {
    const sql = this.random() < 0.2 ? this.setOperation(2) : this.select(3, [], undefined).sql;
    return { sql, deterministic: this.deterministic };
  }

  private chance(p: number): boolean {
    return this.random() < p;
  }

  private int(lo: number, hi: number): number {
    return lo + Math.floor(this.random() * (hi - lo + 1));
  }

  private pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.random() * items.length)] as T;
  }

  private alias(prefix: string): string {
    return `${prefix}${this.next++}`;
  }

  private columnsOf(scope: Item[], type: Type): string[] {
    return scope.flatMap((item) => item.cols.filter((c) => c.type === type).map((c) => `${item.alias}.${c.name}`));
  }

  private literal(type: Type): string {
    switch (type) {
      case "text":
        return quote(this.pick(this.words));
      case "int":
        return String(this.int(0, 5));
      case "bool":
        return this.pick(["true", "false"]);
      case "ts":
        return `'2024-0${this.int(1, 9)}-15T10:00:00Z'::timestamptz`;
      case "json":
        return `'{"k": ${this.int(0, 3)}}'::jsonb`;
    }
  }

  /** An expression of `type` over the columns in scope; `depth` bounds nested sublinks. */
  expr(type: Type, scope: Item[], depth: number): string {
    const cols = this.columnsOf(scope, type);
    if (cols.length > 0 && this.chance(0.55)) return this.pick(cols);
    const r = this.random();
    switch (type) {
      case "text": {
        if (r < 0.15) return this.literal("text");
        if (r < 0.3) return `lower(${this.expr("text", scope, depth)})`;
        if (r < 0.4) return `concat(${this.expr("text", scope, depth)}, '-', ${this.expr("int", scope, depth)})`;
        if (r < 0.5) return `coalesce(${this.expr("text", scope, depth)}, 'none')`;
        if (r < 0.6) return `substr(${this.expr("text", scope, depth)}, 1, ${this.int(1, 6)})`;
        if (r < 0.7) return `(${this.expr("json", scope, depth)} ->> 'm')`;
        if (r < 0.78) return `(${this.expr("int", scope, depth)})::text`;
        if (r < 0.85) return `to_char(${this.expr("ts", scope, depth)}, 'YYYY-MM')`;
        if (r < 0.92 && depth > 0) return this.scalarSublink("text", scope, depth);
        return `CASE WHEN ${this.predicate(scope, depth)} THEN ${this.expr("text", scope, depth)} ELSE 'other' END`;
      }
      case "int": {
        if (r < 0.2) return this.literal("int");
        if (r < 0.4) return `length(${this.expr("text", scope, depth)})`;
        if (r < 0.5) return `(${this.expr("int", scope, depth)} + ${this.int(1, 3)})`;
        if (r < 0.6) return `coalesce(${this.expr("int", scope, depth)}, 0)`;
        if (r < 0.7) return `date_part('month', ${this.expr("ts", scope, depth)})::bigint`;
        if (r < 0.8) return `jsonb_array_length(jsonb_build_array(${this.expr("text", scope, depth)}))`;
        if (depth > 0) return `(SELECT count(*)${this.sublinkFrom(scope, depth)}`;
        return `abs(${this.literal("int")} - 2)`;
      }
      case "bool":
        return this.predicate(scope, depth);
      case "ts":
        if (r < 0.3) return this.literal("ts");
        if (r < 0.6) return `date_trunc('day', ${this.expr("ts", scope, depth)})`;
        return `(${this.expr("ts", scope, depth)} + interval '${this.int(1, 48)} hours')`;
      case "json":
        if (r < 0.3) return this.literal("json");
        if (r < 0.6) return `jsonb_build_object('m', ${this.expr("text", scope, depth)})`;
        return `coalesce(${this.expr("json", scope, depth)} -> 'm', '{}'::jsonb)`;
    }
  }

  /** `(SELECT max(x.col) FROM rel x WHERE <correlated>)`. */
  private scalarSublink(type: Type, scope: Item[], depth: number): string {
    const rel = this.relationWith(type);
    const alias = this.alias("s");
    const col = this.pick(rel.cols.filter((c) => c.type === type)).name;
    return `(SELECT max(${alias}.${col})${this.fromRelation(rel, alias, scope, depth)}`;
  }

  private sublinkFrom(scope: Item[], depth: number): string {
    const rel = this.pick(this.relations);
    return this.fromRelation(rel, this.alias("s"), scope, depth);
  }

  /** ` FROM rel alias [WHERE alias.text = <outer text>]`, closing the sublink. */
  private fromRelation(rel: { name: string; cols: Col[] }, alias: string, scope: Item[], depth: number): string {
    const inner: Item = { alias, cols: rel.cols };
    const texts = rel.cols.filter((c) => c.type === "text");
    const where =
      texts.length > 0 && this.chance(0.7)
        ? ` WHERE ${alias}.${this.pick(texts).name} = ${this.expr("text", scope, depth - 1)}`
        : this.chance(0.5)
          ? ` WHERE ${this.predicate([inner, ...scope], depth - 1)}`
          : "";
    return ` FROM ${rel.name} ${alias}${where})`;
  }

  private relationWith(type: Type): { name: string; cols: Col[] } {
    return this.pick(this.relations.filter((r) => r.cols.some((c) => c.type === type)));
  }

  predicate(scope: Item[], depth: number): string {
    const r = this.random();
    if (r < 0.2) return `${this.expr("text", scope, depth)} = ${this.expr("text", scope, depth)}`;
    if (r < 0.3)
      return `${this.expr("int", scope, depth)} ${this.pick(["<", "<=", ">", "<>"])} ${this.expr("int", scope, depth)}`;
    if (r < 0.4) return `${this.expr("text", scope, depth)} IS ${this.pick(["", "NOT "])}NULL`;
    if (r < 0.48) return `${this.expr("text", scope, depth)} LIKE '${this.pick(["ev", "ru", "a", "sn", "re"])}%'`;
    if (r < 0.55) return `${this.expr("text", scope, depth)} IN (${this.literal("text")}, ${this.literal("text")})`;
    if (r < 0.6) return `${this.expr("ts", scope, depth)} < ${this.literal("ts")}`;
    if (r < 0.65) return `${this.expr("json", scope, depth)} ? 'm'`;
    if (r < 0.7) return `${this.expr("int", scope, depth)} BETWEEN 1 AND 4`;
    if (depth > 0 && r < 0.78) return `${this.pick(["", "NOT "])}EXISTS (SELECT 1${this.sublinkFrom(scope, depth)}`;
    if (depth > 0 && r < 0.86) {
      const rel = this.relationWith("text");
      const alias = this.alias("s");
      const col = this.pick(rel.cols.filter((c) => c.type === "text")).name;
      return `${this.expr("text", scope, depth - 1)} IN (SELECT ${alias}.${col}${this.fromRelation(rel, alias, scope, depth)}`;
    }
    if (r < 0.93)
      return `(${this.predicate(scope, depth)} ${this.pick(["AND", "OR"])} ${this.predicate(scope, depth)})`;
    return `NOT (${this.predicate(scope, depth)})`;
  }

  /** A FROM item: a relation, a derived table, VALUES, generate_series or a CTE in scope. */
  private fromItem(depth: number, ctes: Item[]): { sql: string; item: Item; rows: number } {
    const r = this.random();
    if (ctes.length > 0 && r < 0.25) {
      const cte = this.pick(ctes);
      const alias = this.alias("c");
      return { sql: `${cte.alias} ${alias}`, item: { alias, cols: cte.cols }, rows: cte.rows ?? RELATION_ROWS };
    }
    if (depth > 0 && r < 0.4) {
      const alias = this.alias("d");
      const sub = this.subquery(depth - 1, ctes);
      return { sql: `(${sub.sql}) AS ${alias}`, item: { alias, cols: sub.cols }, rows: sub.rows };
    }
    if (r < 0.47) {
      const alias = this.alias("v");
      const rows = Array.from({ length: this.int(1, 3) }, () => `(${this.literal("text")}, ${this.literal("int")})`);
      return {
        sql: `(VALUES ${rows.join(", ")}) AS ${alias}(c0, c1)`,
        item: {
          alias,
          cols: [
            { name: "c0", type: "text" },
            { name: "c1", type: "int" },
          ],
        },
        rows: rows.length,
      };
    }
    if (r < 0.52) {
      const alias = this.alias("g");
      const n = this.int(1, 4);
      return {
        sql: `generate_series(1, ${n}) AS ${alias}(c0)`,
        item: { alias, cols: [{ name: "c0", type: "int" }] },
        rows: n,
      };
    }
    const rel = this.pick(this.relations);
    const alias = this.alias("t");
    return { sql: `${rel.name} ${alias}`, item: { alias, cols: rel.cols }, rows: RELATION_ROWS };
  }

  /** A select with output columns c0..cn of known types (for derived tables and CTEs). */
  private subquery(depth: number, ctes: Item[], types?: Type[]): { sql: string; cols: Col[]; rows: number } {
    const want = types ?? Array.from({ length: this.int(1, 3) }, () => this.pick<Type>(["text", "int", "text", "ts"]));
    const { sql, rows } = this.select(depth, ctes, want);
    return { sql, cols: want.map((type, i) => ({ name: `c${i}`, type })), rows };
  }

  /** A SELECT and a bound on its rows; with `want` its outputs are c0..cn of exactly those types. */
  select(depth: number, outerCtes: Item[], want: Type[] | undefined): { sql: string; rows: number } {
    const ctes = [...outerCtes];
    let withClause = "";
    if (depth > 0 && this.chance(0.25)) {
      const parts: string[] = [];
      const recursive = this.chance(0.4);
      if (recursive) parts.push(this.recursiveCte(ctes));
      for (let i = this.int(recursive ? 0 : 1, 1); i > 0; i--) {
        const name = this.alias("w");
        const sub = this.subquery(depth - 1, ctes);
        parts.push(`${name} AS ${this.chance(0.2) ? "MATERIALIZED " : ""}(${sub.sql})`);
        ctes.push({ alias: name, cols: sub.cols, rows: sub.rows });
      }
      withClause = `WITH ${recursive ? "RECURSIVE " : ""}${parts.join(", ")} `;
    }

    const scope: Item[] = [];
    const first = this.fromItem(depth, ctes);
    scope.push(first.item);
    let from = first.sql;
    let rows = first.rows;
    for (let n = this.int(0, depth > 1 ? 2 : 1); n > 0 && rows < MAX_ROWS; n--) {
      const joined = this.join(depth, ctes, scope);
      from += joined.sql;
      rows *= joined.rows;
    }

    const where = this.chance(0.6) ? ` WHERE ${this.predicate(scope, depth)}` : "";
    const shape = this.random();
    let body: string;
    if (shape < 0.3) body = this.aggregate(scope, want, from, where);
    else if (shape < 0.45) body = this.windowed(scope, depth, want, from, where);
    else if (!want && shape < 0.52) body = `SELECT ${first.item.alias}.* FROM ${from}${where}`;
    else {
      const outputs = (want ?? this.types()).map((type, i) => `${this.expr(type, scope, depth)} AS c${i}`);
      body = `SELECT ${this.chance(0.15) ? "DISTINCT " : ""}${outputs.join(", ")} FROM ${from}${where}`;
    }
    // Derived tables stay small (the cross joins above them multiply): a total order and a LIMIT.
    const cap = want !== undefined && rows > SUBQUERY_ROWS;
    if (cap || this.chance(0.2)) {
      const n = want?.length ?? 1;
      if (want === undefined) this.deterministic = false;
      const order = Array.from({ length: n }, (_, i) => String(i + 1)).join(", ");
      const limit = cap ? SUBQUERY_ROWS : this.int(1, 5);
      body += ` ORDER BY ${order} LIMIT ${limit}`;
      rows = Math.min(rows, limit);
    }
    return { sql: withClause + body, rows };
  }

  private types(): Type[] {
    return Array.from({ length: this.int(1, 3) }, () => this.pick<Type>(["text", "int", "bool", "ts", "json"]));
  }

  /**
   * The next join of a FROM list. Joins are all explicit (`JOIN`, `CROSS JOIN`), never a
   * comma, so a later ON clause may name any item before it.
   */
  private join(depth: number, ctes: Item[], scope: Item[]): { sql: string; rows: number } {
    const r = this.random();
    if (depth > 0 && r < 0.2) {
      // LATERAL: a derived table correlated with what is already in scope.
      const alias = this.alias("l");
      const rel = this.pick(this.relations);
      const inner = this.alias("x");
      const col = this.pick(rel.cols);
      const texts = rel.cols.filter((c) => c.type === "text");
      const on = texts.length > 0 ? `${inner}.${this.pick(texts).name} = ${this.expr("text", scope, 0)}` : "true";
      const agg = this.chance(0.5);
      const select = agg ? "count(*) AS c0" : `${inner}.${col.name} AS c0`;
      scope.push({ alias, cols: [{ name: "c0", type: agg ? "int" : col.type }] });
      const left = this.chance(0.5);
      const sql = `${left ? " LEFT JOIN" : " CROSS JOIN"} LATERAL (SELECT ${select} FROM ${rel.name} ${inner} WHERE ${on}) AS ${alias}${left ? " ON true" : ""}`;
      return { sql, rows: agg ? 1 : RELATION_ROWS };
    }
    const jsonCols = this.columnsOf(scope, "json");
    if (jsonCols.length > 0 && r < 0.28) {
      const alias = this.alias("j");
      scope.push({
        alias,
        cols: [
          { name: "key", type: "text" },
          { name: "value", type: "text" },
        ],
      });
      return { sql: ` CROSS JOIN LATERAL jsonb_each_text(${this.pick(jsonCols)}) AS ${alias}(key, value)`, rows: 3 };
    }
    const next = this.fromItem(Math.max(0, depth - 1), ctes);
    const left = this.columnsOf(scope, "text");
    const rightTexts = next.item.cols.filter((c) => c.type === "text");
    scope.push(next.item);
    if (r < 0.35) return { sql: ` CROSS JOIN ${next.sql}`, rows: next.rows };
    if (left.length > 0 && rightTexts.length > 0) {
      const on = `${this.pick(left)} = ${next.item.alias}.${this.pick(rightTexts).name}`;
      const kind = this.pick(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]);
      return { sql: ` ${kind} ${next.sql} ON ${on}`, rows: next.rows };
    }
    // FULL JOIN needs an equality it can hash or merge; an arbitrary condition takes JOIN.
    return { sql: ` ${this.pick(["JOIN", "LEFT JOIN"])} ${next.sql} ON ${this.predicate(scope, 0)}`, rows: next.rows };
  }
  private aggregate(scope: Item[], want: Type[] | undefined, from: string, where: string): string {
    const types = want ?? ["text", "int"];
    const groups: string[] = [];
    const outputs = types.map((type, i) => {
      const cols = this.columnsOf(scope, type);
      if (cols.length > 0 && this.chance(0.5)) {
        const col = this.pick(cols);
        groups.push(col);
        return `${col} AS c${i}`;
      }
      return `${this.aggregateOf(type, scope)} AS c${i}`;
    });
    const groupBy = groups.length > 0 ? ` GROUP BY ${groups.join(", ")}` : "";
    const having = this.chance(0.3) ? ` HAVING count(*) ${this.pick([">", ">="])} ${this.int(0, 2)}` : "";
    return `SELECT ${outputs.join(", ")} FROM ${from}${where}${groupBy}${having}`;
  }

  private aggregateOf(type: Type, scope: Item[]): string {
    switch (type) {
      case "int":
        return this.pick([
          "count(*)",
          `count(DISTINCT ${this.expr("text", scope, 0)})`,
          `coalesce(sum(${this.expr("int", scope, 0)}), 0)::numeric`,
          `max(${this.expr("int", scope, 0)})`,
        ]);
      case "text": {
        const arg = this.expr("text", scope, 0);
        return this.chance(0.5) ? `min(${arg})` : `string_agg(${arg}, ',' ORDER BY ${arg})`;
      }
      case "bool":
        return `coalesce(bool_or(${this.predicate(scope, 0)}), false)`;
      case "ts":
        return `max(${this.expr("ts", scope, 0)})`;
      case "json":
        return `jsonb_build_object('n', count(*))`;
    }
  }

  private windowed(scope: Item[], depth: number, want: Type[] | undefined, from: string, where: string): string {
    const types = want ?? ["text", "int"];
    const texts = this.columnsOf(scope, "text");
    const partition = texts.length > 0 ? `PARTITION BY ${this.pick(texts)}` : "";
    const outputs = types.map((type, i) => {
      if (type !== "int" || this.chance(0.3)) return `${this.expr(type, scope, depth)} AS c${i}`;
      const order = `ORDER BY ${this.expr("text", scope, 0)}`;
      const fn = this.pick(["count(*)", "rank()", "dense_rank()", "row_number()", "sum(1)"]);
      if (fn === "row_number()") this.deterministic = false;
      const over = fn === "count(*)" ? partition : `${partition} ${order}`;
      return `${fn} OVER (${over}) AS c${i}`;
    });
    return `SELECT ${outputs.join(", ")} FROM ${from}${where}`;
  }

  /** A recursive CTE of two columns (c0 text, c1 int) that ends after a few steps. */
  private recursiveCte(ctes: Item[]): string {
    const name = this.alias("r");
    const rel = this.relationWith("text");
    const base = this.alias("b");
    const col = this.pick(rel.cols.filter((c) => c.type === "text")).name;
    let step: string;
    const limit = this.int(1, 3);
    if (rel.cols.some((c) => c.name === "parent_run_id") && this.chance(0.5)) {
      const child = this.alias("k");
      step = `SELECT ${child}.id, ${name}.c1 + 1 FROM ${rel.name} ${child} JOIN ${name} ON ${child}.parent_run_id = ${name}.c0 WHERE ${name}.c1 < ${limit}`;
      ctes.push({
        alias: name,
        cols: [
          { name: "c0", type: "text" },
          { name: "c1", type: "int" },
        ],
        rows: 4 * RELATION_ROWS,
      });
      return `${name}(c0, c1) AS (SELECT ${base}.id, 0 FROM ${rel.name} ${base} WHERE ${base}.parent_run_id IS NULL UNION ALL ${step})`;
    }
    step = `SELECT ${name}.c0, ${name}.c1 + 1 FROM ${name} WHERE ${name}.c1 < ${limit}`;
    ctes.push({
      alias: name,
      cols: [
        { name: "c0", type: "text" },
        { name: "c1", type: "int" },
      ],
      rows: 4 * RELATION_ROWS,
    });
    return `${name}(c0, c1) AS (SELECT ${base}.${col}, 0 FROM ${rel.name} ${base} ${this.chance(0.5) ? "UNION ALL" : "UNION"} ${step})`;
  }

  /** Two (or more) arms of the same output types combined by UNION, INTERSECT or EXCEPT. */
  setOperation(depth: number): string {
    const types = Array.from({ length: this.int(1, 2) }, () => this.pick<Type>(["text", "int", "bool"]));
    const arm = () => `(${this.select(depth, [], types).sql})`;
    const op = this.pick(["UNION", "UNION ALL", "INTERSECT", "INTERSECT ALL", "EXCEPT", "EXCEPT ALL"]);
    let sql = `${arm()} ${op} ${arm()}`;
    if (this.chance(0.3)) sql = `${sql} ${this.pick(["UNION", "EXCEPT"])} ${arm()}`;
    return sql;
  }
}

/** The query of one seed: the same seed always gives the same text. */
export function generateQuery(
  seed: number,
  relations: Map<string, PublishedRelation>,
  words: string[],
): GeneratedQuery {
  return new Generator(prng(seed), relations, words).query();
}
