// Layer 1 of telemetry SQL (docs/telemetry-sql.md): parse with the Postgres grammar, check
// every node against allowlists, rewrite every published relation into an
// organization-filtered subquery with the organization as a bound parameter, and deparse
// the rewritten tree. Pure: no I/O. Anything the walker does not know is refused, so a
// construct added to the grammar later fails closed.
import { loadModule, parseSync } from "libpg-query";
import { deparseSync } from "pgsql-deparser";
import { AppError } from "../../../lib/errors.js";
import {
  ALLOWED_FUNCTIONS,
  ALLOWED_OPERATORS,
  ALLOWED_SQL_VALUE_FUNCTIONS,
  ALLOWED_TYPES,
  MAX_SERIES_ROWS,
  type ParamType,
  type PublishedRelation,
  SQL_SYNTAX_FUNCTIONS,
  TABLE_FUNCTIONS,
} from "./catalog.js";

type Node = Record<string, unknown>;

/** The grammar's WASM module; call once before compile(). */
export const gatewayReady: Promise<void> = loadModule().then(() => undefined);

export interface CompileOptions {
  /** The published relations of the caller's organization, by name. */
  relations: Map<string, PublishedRelation>;
  /** The types of $1..$n, in order; a query naming $k beyond them is refused. */
  paramTypes: ParamType[];
  orgId: string;
}

export interface Compiled {
  /** The deparsed rewritten tree: the only text ever executed. */
  sql: string;
  /** Bound after the caller's own parameters: the organization, then schema names. */
  boundParams: string[];
  /** Published relations the query reads (for messages and tests). */
  relations: string[];
}

/** A refusal: invalid_argument naming the construct and where it is in the caller's text. */
export class SqlRefusal extends AppError {
  constructor(construct: string, text: string, location: number | undefined, reason = "is not allowed") {
    const where = positionOf(text, location);
    super("invalid_argument", `${construct} ${reason}${where ? ` (line ${where.line}, column ${where.column})` : ""}`, {
      details: { construct, ...(where ? { position: where.position, line: where.line, column: where.column } : {}) },
    });
  }
}

/** 1-based character position, line and column of a byte offset into text. */
export function positionOf(
  text: string,
  byteOffset: number | undefined,
): { position: number; line: number; column: number } | null {
  if (byteOffset === undefined || byteOffset < 0) return null;
  const before = Buffer.from(text, "utf8").subarray(0, byteOffset).toString("utf8");
  const lines = before.split("\n");
  return { position: before.length + 1, line: lines.length, column: (lines.at(-1)?.length ?? 0) + 1 };
}

const STATEMENT_NAMES: Record<string, string> = {
  InsertStmt: "INSERT",
  UpdateStmt: "UPDATE",
  DeleteStmt: "DELETE",
  MergeStmt: "MERGE",
  VariableSetStmt: "SET/RESET",
  VariableShowStmt: "SHOW",
  CopyStmt: "COPY",
  DoStmt: "DO",
  PrepareStmt: "PREPARE",
  ExecuteStmt: "EXECUTE",
  DeallocateStmt: "DEALLOCATE",
  ExplainStmt: "EXPLAIN",
  CreateStmt: "CREATE TABLE",
  CreateTableAsStmt: "CREATE TABLE AS",
  DropStmt: "DROP",
  TruncateStmt: "TRUNCATE",
  TransactionStmt: "transaction control",
  CallStmt: "CALL",
  LockStmt: "LOCK",
  ListenStmt: "LISTEN",
  NotifyStmt: "NOTIFY",
  GrantStmt: "GRANT",
  GrantRoleStmt: "GRANT",
  AlterTableStmt: "ALTER TABLE",
  DeclareCursorStmt: "DECLARE CURSOR",
  FetchStmt: "FETCH",
  VacuumStmt: "VACUUM",
  CreateFunctionStmt: "CREATE FUNCTION",
};

/** Wrapped node types walked field by field with no check of their own. */
const PLAIN_NODES = new Set([
  "ResTarget",
  "ColumnRef",
  "A_Star",
  "String",
  "Integer",
  "Float",
  "Boolean",
  "BitString",
  "BoolExpr",
  "NullTest",
  "BooleanTest",
  "CaseExpr",
  "CaseWhen",
  "CoalesceExpr",
  "MinMaxExpr",
  "A_ArrayExpr",
  "A_Indirection",
  "A_Indices",
  "RowExpr",
  "SortBy",
  "WindowDef",
  "GroupingSet",
  "List",
  "NamedArgExpr",
  "CollateClause",
]);

const BETWEEN_NAMES = new Set(["BETWEEN", "NOT BETWEEN", "BETWEEN SYMMETRIC", "NOT BETWEEN SYMMETRIC"]);

/** Keys of nodes holding source positions or flags, never sub-nodes. */
const SCALAR_KEYS = new Set(["location", "stmt_location", "stmt_len"]);

const TYPE_NAMES: Record<ParamType, string[]> = {
  text: ["text"],
  bigint: ["pg_catalog", "int8"],
  "double precision": ["pg_catalog", "float8"],
  numeric: ["pg_catalog", "numeric"],
  boolean: ["pg_catalog", "bool"],
  timestamptz: ["pg_catalog", "timestamptz"],
  jsonb: ["jsonb"],
};

function typeNameNode(type: ParamType): Node {
  return { names: TYPE_NAMES[type].map((sval) => ({ String: { sval } })), typemod: -1 };
}

function stringsOf(list: unknown): string[] {
  return Array.isArray(list)
    ? list.map((item) => String((item as { String?: { sval?: string } }).String?.sval ?? ""))
    : [];
}

function ident(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

interface Scope {
  ctes: Set<string>;
}

/** SELECT clauses whose expressions are walked (checked and rewritten) in place. */
const WALKED_SELECT_CLAUSES = [
  "targetList",
  "distinctClause",
  "whereClause",
  "groupClause",
  "havingClause",
  "windowClause",
  "valuesLists",
  "sortClause",
  "limitOffset",
  "limitCount",
] as const;

/** Every SELECT field the walker knows; any other is refused (fail closed). */
const KNOWN_SELECT_CLAUSES = new Set<string>([
  ...WALKED_SELECT_CLAUSES,
  "withClause",
  "op",
  "all",
  "larg",
  "rarg",
  "fromClause",
  "limitOption",
  "groupDistinct",
  "lockingClause",
]);

/**
 * How deep SELECTs may nest (subqueries in FROM or expressions, CTE bodies). Deeper ones are
 * refused here: 300 levels reached the store and failed there with a protocol error.
 */
export const MAX_SELECT_NESTING = 32;

class Compiler {
  private nesting = 0;
  private readonly bound: string[] = [];
  private readonly read = new Set<string>();
  private orgParam = 0;
  private readonly usedParams = new Set<number>();
  private readonly schemaParams = new Map<string, number>();

  constructor(
    private readonly text: string,
    private readonly options: CompileOptions,
  ) {}

  refuse(construct: string, location?: unknown, reason?: string): never {
    throw new SqlRefusal(construct, this.text, typeof location === "number" ? location : undefined, reason);
  }

  run(): Compiled {
    let tree: { version?: number; stmts?: { stmt?: Node; stmt_location?: number }[] };
    try {
      tree = parseSync(this.text) as typeof tree;
    } catch (error) {
      const details = (error as { sqlDetails?: { cursorPosition?: number } }).sqlDetails;
      const at = details?.cursorPosition;
      throw new SqlRefusal(
        `syntax error: ${(error as Error).message}`,
        this.text,
        at === undefined ? undefined : Math.max(0, at),
        "",
      );
    }
    const stmts = tree.stmts ?? [];
    if (stmts.length === 0) this.refuse("an empty query");
    if (stmts.length > 1) this.refuse("multiple statements", stmts[1]?.stmt_location);
    const stmt = stmts[0]?.stmt ?? {};
    const [kind] = Object.keys(stmt);
    if (kind !== "SelectStmt") {
      this.refuse(STATEMENT_NAMES[kind ?? ""] ?? `statement ${kind}`, stmts[0]?.stmt_location ?? 0, "is not a SELECT");
    }
    this.orgParam = this.options.paramTypes.length + 1;
    this.select(stmt.SelectStmt as Node, { ctes: new Set() }, 0);
    // Every declared parameter must be bound by the statement, or the store refuses the bind.
    for (const [i, type] of this.options.paramTypes.entries()) {
      if (!this.usedParams.has(i + 1))
        this.refuse(`parameter $${i + 1} (${type})`, undefined, "is declared but never used");
    }
    const sql = deparseSync({ version: tree.version, stmts: [{ stmt }] } as never);
    return { sql, boundParams: this.bound, relations: [...this.read].sort() };
  }

  private select(s: Node, outer: Scope, at: unknown): void {
    this.nesting++;
    try {
      if (this.nesting > MAX_SELECT_NESTING) {
        this.refuse(`a SELECT nested more than ${MAX_SELECT_NESTING} levels deep`, at, "is not allowed");
      }
      this.selectAtThisLevel(s, outer, at);
    } finally {
      this.nesting--;
    }
  }

  /** One SELECT (and the branches of its set operation, which are not nested deeper). */
  private selectAtThisLevel(s: Node, outer: Scope, at: unknown): void {
    if (s.intoClause) this.refuse("SELECT ... INTO", at);
    if (Array.isArray(s.lockingClause) && s.lockingClause.length > 0)
      this.refuse("locking clause (FOR UPDATE/SHARE)", at);
    const scope: Scope = { ctes: new Set(outer.ctes) };
    const withClause = s.withClause as Node | undefined;
    if (withClause) {
      const ctes = (withClause.ctes as Node[]) ?? [];
      const recursive = withClause.recursive === true;
      const names = ctes.map((c) => String((c.CommonTableExpr as Node).ctename));
      for (const [i, cte] of ctes.entries()) {
        const c = cte.CommonTableExpr as Node;
        const name = names[i] as string;
        if (this.options.relations.has(name)) this.refuse(`CTE "${name}" shadowing a published relation`, c.location);
        if (name.startsWith("pg_")) this.refuse(`CTE name "${name}"`, c.location);
        const visible: Scope = { ctes: new Set([...outer.ctes, ...(recursive ? names : names.slice(0, i))]) };
        if (c.search_clause || c.cycle_clause) this.walkFields(c, visible);
        const query = c.ctequery as Node;
        const [qkind] = Object.keys(query);
        if (qkind !== "SelectStmt")
          this.refuse(STATEMENT_NAMES[qkind ?? ""] ?? `${qkind} in a CTE`, c.location, "is not allowed in a CTE");
        this.select(query.SelectStmt as Node, visible, c.location);
      }
      for (const name of names) scope.ctes.add(name);
    }
    if (s.op && s.op !== "SETOP_NONE") {
      this.selectAtThisLevel(s.larg as Node, scope, at);
      this.selectAtThisLevel(s.rarg as Node, scope, at);
    }
    if (Array.isArray(s.fromClause)) s.fromClause = s.fromClause.map((item: Node) => this.from(item, scope));
    for (const key of WALKED_SELECT_CLAUSES) {
      if (s[key] !== undefined) s[key] = this.walk(s[key], scope);
    }
    for (const key of Object.keys(s)) {
      if (!KNOWN_SELECT_CLAUSES.has(key)) {
        this.refuse(`SELECT clause ${key}`, at);
      }
    }
  }

  /** A FROM item, returned rewritten. */
  private from(item: Node, scope: Scope): Node {
    const [kind] = Object.keys(item);
    const node = item[kind as string] as Node;
    switch (kind) {
      case "RangeVar":
        return this.relation(node, scope);
      case "RangeSubselect":
        this.select((node.subquery as Node).SelectStmt as Node, scope, undefined);
        return item;
      case "JoinExpr":
        node.larg = this.from(node.larg as Node, scope);
        node.rarg = this.from(node.rarg as Node, scope);
        if (node.quals !== undefined) node.quals = this.walk(node.quals, scope);
        return item;
      case "RangeFunction":
        for (const entry of (node.functions as Node[]) ?? []) {
          const [call] = (entry.List as { items: Node[] }).items;
          const fn = call?.FuncCall as Node | undefined;
          if (!fn) this.refuse("a table function that is not a plain call", undefined);
          const names = stringsOf(fn.funcname);
          const name = names.join(".");
          if (names.length !== 1 || !TABLE_FUNCTIONS.has(name)) this.refuse(`table function ${name}`, fn.location);
          this.walk(call, scope);
        }
        return item;
      case "RangeTableSample":
        return this.refuse("TABLESAMPLE", node.location);
      default:
        return this.refuse(kind === "RangeTableFunc" ? "XMLTABLE" : `FROM item ${kind}`, node?.location);
    }
  }

  private relation(rv: Node, scope: Scope): Node {
    const name = String(rv.relname);
    if (rv.schemaname || rv.catalogname)
      this.refuse(`schema-qualified name ${String(rv.schemaname)}.${name}`, rv.location);
    if (scope.ctes.has(name)) return { RangeVar: rv };
    const published = this.options.relations.get(name);
    if (!published) this.refuse(`relation "${name}"`, rv.location, "is not a published relation");
    // The organization is bound once, as the first parameter after the caller's.
    if (this.bound.length === 0) this.bound.push(this.options.orgId);
    this.read.add(name);
    const columns = published.columns.map((c) => (c.expr ? `${c.expr} AS ${ident(c.name)}` : ident(c.name))).join(", ");
    let where = `org_id = $${this.orgParam}`;
    if (published.schemaName !== undefined) {
      let n = this.schemaParams.get(published.schemaName);
      if (n === undefined) {
        this.bound.push(published.schemaName);
        n = this.orgParam + this.bound.length - 1;
        this.schemaParams.set(published.schemaName, n);
      }
      where += ` AND schema_name = $${n}`;
    }
    const sub = parseSync(`SELECT ${columns} FROM telemetry_sql.${ident(published.view)} WHERE ${where}`) as {
      stmts: { stmt: Node }[];
    };
    const alias = (rv.alias as Node | undefined) ?? { aliasname: name };
    return { RangeSubselect: { subquery: sub.stmts[0]?.stmt, alias } };
  }

  /** Walks any expression value (node, list or unwrapped struct), returning it rewritten. */
  private walk(value: unknown, scope: Scope): unknown {
    if (Array.isArray(value)) return value.map((v) => this.walk(v, scope));
    if (value === null || typeof value !== "object") return value;
    const entries = Object.keys(value as Node);
    // DISTINCT without ON is a list holding one empty node.
    if (entries.length === 0) return value;
    const [kind] = entries;
    if (entries.length !== 1 || !kind || !/^[A-Z]/.test(kind)) return this.refuse("an unrecognised construct");
    const node = (value as Node)[kind] as Node;
    switch (kind) {
      case "A_Const":
        return value;
      case "SelectStmt":
        this.select(node, scope, undefined);
        return value;
      case "SubLink":
        for (const op of stringsOf(node.operName))
          if (!ALLOWED_OPERATORS.has(op)) this.refuse(`operator ${op}`, node.location);
        if (node.testexpr !== undefined) node.testexpr = this.walk(node.testexpr, scope);
        this.select((node.subselect as Node).SelectStmt as Node, scope, node.location);
        return value;
      case "ParamRef": {
        const n = Number(node.number);
        const type = this.options.paramTypes[n - 1];
        if (!type) this.refuse(`parameter $${n}`, node.location, "is not declared");
        this.usedParams.add(n);
        return { TypeCast: { arg: { ParamRef: { number: n } }, typeName: typeNameNode(type), location: -1 } };
      }
      case "FuncCall":
        this.funcCall(node);
        this.walkFields(node, scope, ["funcname"]);
        return value;
      case "TypeCast":
        this.typeName(node.typeName as Node);
        node.arg = this.walk(node.arg, scope);
        return value;
      case "A_Expr":
        this.operator(node);
        this.walkFields(node, scope, ["name", "kind"]);
        return value;
      case "SQLValueFunction":
        if (!ALLOWED_SQL_VALUE_FUNCTIONS.has(String(node.op))) {
          this.refuse(String(node.op).replace("SVFOP_", ""), node.location);
        }
        return value;
      case "RangeVar":
        return this.refuse(`relation "${String(node.relname)}" outside FROM`, node.location, "cannot be placed");
      default:
        if (!PLAIN_NODES.has(kind)) return this.refuse(kind, node?.location);
        this.walkFields(node, scope);
        return value;
    }
  }

  private walkFields(node: Node, scope: Scope, skip: string[] = []): void {
    for (const [key, child] of Object.entries(node)) {
      if (skip.includes(key) || SCALAR_KEYS.has(key) || child === null || typeof child !== "object") continue;
      if (Array.isArray(child)) node[key] = this.walk(child, scope);
      else if (key === "typeName") this.typeName(child as Node);
      else if (key === "over" || key === "frame") this.walkFields(child as Node, scope);
      else if (Object.keys(child).length === 1 && /^[A-Z]/.test(Object.keys(child)[0] as string))
        node[key] = this.walk(child, scope);
      else this.refuse(`construct ${key}`, node.location);
    }
  }

  private funcCall(fn: Node): void {
    const names = stringsOf(fn.funcname);
    const name = names.at(-1) ?? "";
    const plain = names.length === 1 && (ALLOWED_FUNCTIONS.has(name) || TABLE_FUNCTIONS.has(name));
    const syntax = names.length === 2 && names[0] === "pg_catalog" && SQL_SYNTAX_FUNCTIONS.has(name);
    if (!plain && !syntax) this.refuse(`function ${names.join(".")}`, fn.location);
    if (name === "generate_series") this.seriesBound(fn);
  }

  /** generate_series takes constant arguments and yields at most MAX_SERIES_ROWS rows when they are integers. */
  private seriesBound(fn: Node): void {
    const args = (fn.args as Node[] | undefined) ?? [];
    const ints: number[] = [];
    for (const arg of args) {
      const c = (arg.A_Const ?? ((arg.TypeCast as Node | undefined)?.arg as Node | undefined)?.A_Const) as
        | Node
        | undefined;
      if (!c) this.refuse("generate_series with a non-constant argument", fn.location);
      if (c.ival !== undefined) ints.push((c.ival as { ival?: number }).ival ?? 0);
    }
    if (ints.length === args.length && ints.length >= 2) {
      const [start = 0, stop = 0, step = 1] = ints;
      const rows = step === 0 ? Number.POSITIVE_INFINITY : Math.floor((stop - start) / step) + 1;
      if (rows > MAX_SERIES_ROWS)
        this.refuse(`generate_series of ${rows} rows`, fn.location, `exceeds ${MAX_SERIES_ROWS}`);
    }
  }

  private typeName(t: Node): void {
    const names = stringsOf(t.names);
    const plain = names[0] === "pg_catalog" ? names.slice(1) : names;
    const name = plain.join(".");
    if (plain.length !== 1 || !ALLOWED_TYPES.has(name)) this.refuse(`type ${names.join(".")}`, t.location);
  }

  private operator(e: Node): void {
    const names = stringsOf(e.name);
    const name = names.join(".");
    if (String(e.kind).includes("BETWEEN")) {
      if (!BETWEEN_NAMES.has(name)) this.refuse(`operator ${name}`, e.location);
      return;
    }
    if (names.length !== 1 || !ALLOWED_OPERATORS.has(name)) this.refuse(`operator ${name}`, e.location);
  }
}

/** Parses, checks and rewrites one caller query; throws SqlRefusal (invalid_argument) when refused. */
export function compile(text: string, options: CompileOptions): Compiled {
  return new Compiler(text, options).run();
}
