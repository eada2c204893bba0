// TelemetryViewService: saved data views and raw SQL over the telemetry store, through both
// layers of docs/telemetry-sql.md. A view's spec is compiled fresh (layer 1, against the
// organization's current catalog) on store and on every run, then run under layer 2.
import type { Clock } from "../../lib/clock.js";
import { AppError, invalid, notFound } from "../../lib/errors.js";
import type { Db } from "../../store/db.js";
import { BackendMessageTooLarge, MAX_BACKEND_MESSAGE_BYTES } from "../../store/pg-message-guard.js";
import { type Credential, requireOrgScoped } from "../identity/credential.js";
import type { SqlRefusalReason, WarrenMetrics } from "../metrics/registry.js";
import { ReaderLogins } from "./reader-logins.js";
import type { TelemetryReplica } from "./replica.js";
import * as repo from "./repo.js";
import type { DataViewJson, DataViewSpecJson, PutDataViewBody, QueryResultJson, RunDataViewBody } from "./schemas.js";
import { catalogOf, type ParamType } from "./sql/catalog.js";
import { type Compiled, compile, gatewayReady, SqlRefusal } from "./sql/gateway.js";
import { encodeRows } from "./sql/values.js";

export interface QueryLimits {
  defaultRows: number;
  maxRows: number;
  maxResultBytes: number;
  statementTimeoutMs: number;
  workMemKiB: number;
}

/** Data views: documented in docs/telemetry-sql.md. */
export const VIEW_LIMITS: QueryLimits = {
  defaultRows: 1000,
  maxRows: 10_000,
  maxResultBytes: 4 * 1024 * 1024,
  statementTimeoutMs: 5000,
  workMemKiB: 16 * 1024,
};

/** Raw SQL: stricter. */
export const RAW_LIMITS: QueryLimits = {
  defaultRows: 100,
  maxRows: 1000,
  maxResultBytes: 1024 * 1024,
  statementTimeoutMs: 2000,
  workMemKiB: 8 * 1024,
};

function viewJson(row: repo.DataViewRow): DataViewJson {
  return {
    name: row.name,
    description: row.description,
    spec: row.spec as DataViewSpecJson,
    spec_version: row.spec_version,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  };
}

/** The SQLSTATE of a store error, when it has one. */
function sqlState(error: unknown): string | null {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}

/**
 * A planner-cost cap that suits the embedded store when an operator turns the guard on
 * (docs/telemetry-sql.md, "Planner-cost guard"); the guard is off unless configured.
 */
export const EMBEDDED_MAX_COST = 250_000;

export interface TelemetryViewOptions {
  /** WARREN_TELEMETRY_SQL_MAX_COST: null or 0 for no guard (the default). */
  maxCost?: number | null;
  limits?: { views: QueryLimits; raw: QueryLimits };
  /**
   * PostgreSQL's connection string: where set_config is still callable by every role, the
   * queries run on reader logins made with it (reader-logins.ts); without it they are refused.
   */
  readerLogins?: { connectionString: string; size?: number };
  /**
   * On the embedded store: queries run on this replica, in a worker thread, so that a slow
   * one holds neither the server's thread nor its store (replica.ts).
   */
  replica?: TelemetryReplica;
}

/** A connection's end as the pg client reports it: a socket error code, or its own message. */
function connectionLost(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  if (typeof code === "string" && ["ECONNRESET", "EPIPE", "ECONNREFUSED", "ETIMEDOUT"].includes(code)) return true;
  return /^Connection terminated|^Client has encountered a connection error|^Client was closed/.test(
    String((error as Error).message),
  );
}

/** Characters of a database error message passed on to the caller. */
const MAX_MESSAGE_CHARS = 2000;

/** Connections (each its own login role) for telemetry queries when reader logins are used. */
const READER_LOGINS = 4;

/**
 * Telemetry queries running at once on Warren's own store; the others wait. Each holds a
 * pooled connection up to its statement timeout, and unbounded, a tenant's concurrent slow
 * queries took the whole pool from the rest of the server (test/telemetry-sql-redteam.test.ts).
 */
const OWN_CONNECTIONS = 4;

/**
 * Places one organization's queries may hold at once, of the 4 a server has: however many
 * slow queries one tenant sends, the other places stay for the others.
 */
const PER_ORGANIZATION = 2;

/** A counting semaphore: run() waits for one of `size` places, first come first served. */
class Places {
  private used = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly size: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.used < this.size) this.used++;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await fn();
    } finally {
      // The place passes to the next waiter, or is given back.
      const next = this.waiting.shift();
      if (next) next();
      else this.used--;
    }
  }

  get idle(): boolean {
    return this.used === 0 && this.waiting.length === 0;
  }
}

/** Warren's store as the reader's session, with at most `limit` reader transactions at once. */
function limitedSession(db: Db, limit: number): repo.ReaderSession {
  const places = new Places(limit);
  return { tx: (fn) => places.run(() => db.tx(fn)) };
}

/** The class of a refused query (docs/metrics.md); null for an error that is no refusal. */
export function refusalReason(error: unknown): SqlRefusalReason | null {
  if (error instanceof SqlRefusal) return "construct";
  if (!(error instanceof AppError)) return null;
  if (error.code === "deadline_exceeded") return "timeout";
  if (error.code === "unavailable") return "unavailable";
  if (error.code !== "invalid_argument") return null;
  return error.details?.construct === "estimated cost" ? "cost" : "invalid";
}

export class TelemetryViewService {
  /** Where queries run once layer 2 is known to hold: Warren's store, or reader logins. */
  private session: repo.ReaderSession | null = null;
  private opening: Promise<repo.ReaderSession> | null = null;
  private logins: ReaderLogins | null = null;
  /** Each organization's share of the places (PER_ORGANIZATION), while it has queries. */
  private readonly orgPlaces = new Map<string, Places>();
  /** Set by close(): no reader session is opened again (reader logins would outlive it). */
  private closed = false;
  private readonly readerLogins: TelemetryViewOptions["readerLogins"];
  private metrics: WarrenMetrics | null = null;
  private readonly replica: TelemetryReplica | null;
  private readonly replicaPlaces = new Places(OWN_CONNECTIONS);
  private readonly limits: { views: QueryLimits; raw: QueryLimits };
  /** The planner-cost cap in force on this store; null: none. */
  readonly maxCost: number | null;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    options: TelemetryViewOptions = {},
  ) {
    this.limits = options.limits ?? { views: VIEW_LIMITS, raw: RAW_LIMITS };
    // Off unless configured: the planner's estimates come from statistics over every
    // organization's rows, so a refusal (or its estimated cost) tells one organization about
    // the others' data (docs/telemetry-sql.md, "Planner-cost guard").
    this.maxCost = options.maxCost ? options.maxCost : null;
    this.readerLogins = options.readerLogins;
    this.replica = options.replica ?? null;
  }

  /** Layer 1 against the organization's current catalog. */
  async compile(orgId: string, sql: string, paramTypes: ParamType[]): Promise<Compiled> {
    await gatewayReady;
    const relations = catalogOf(await repo.liveSchemas(this.db, orgId));
    return compile(sql, { relations, paramTypes, orgId });
  }

  /** Refusals are counted by reason class in these metrics (GET /metrics). */
  useMetrics(metrics: WarrenMetrics): void {
    this.metrics = metrics;
  }

  /** Layer 1 then layer 2, counting a refusal by its class. */
  private async execute(
    orgId: string,
    sqlText: string,
    paramTypes: ParamType[],
    values: unknown[],
    rows: number,
    limits: QueryLimits,
  ): Promise<QueryResultJson> {
    try {
      return await this.executeChecked(orgId, sqlText, paramTypes, values, rows, limits);
    } catch (error) {
      const reason = refusalReason(error);
      if (reason) this.metrics?.sqlRefused(reason);
      throw error;
    }
  }

  /** Layer 1 then layer 2, with the caps applied and database refusals mapped. */
  private async executeChecked(
    orgId: string,
    sqlText: string,
    paramTypes: ParamType[],
    values: unknown[],
    rows: number,
    limits: QueryLimits,
  ): Promise<QueryResultJson> {
    const compiled = await this.compile(orgId, sqlText, paramTypes);
    const session = await this.readerSession();
    const places = this.orgPlaces.get(orgId) ?? new Places(PER_ORGANIZATION);
    this.orgPlaces.set(orgId, places);
    let raw: Awaited<ReturnType<typeof repo.runAsReader>>;
    try {
      const params = [...values, ...compiled.boundParams];
      const layer2 = {
        statementTimeoutMs: limits.statementTimeoutMs,
        workMemKiB: limits.workMemKiB,
        fetchRows: rows + 1,
        maxCost: this.maxCost,
        maxBytes: limits.maxResultBytes,
      };
      const replica = this.replica;
      raw = await places.run(() =>
        replica
          ? this.replicaPlaces.run(() => replica.run(orgId, compiled.sql, params, layer2))
          : repo.runAsReader(session, orgId, compiled.sql, params, layer2),
      );
    } catch (error) {
      throw this.queryError(error, sqlText);
    } finally {
      if (places.idle) this.orgPlaces.delete(orgId);
    }
    const names = await repo.typeNamesOf(
      this.db,
      raw.fields.map((f) => f.typeId),
    );
    const encoded = encodeRows(raw, rows, limits.maxResultBytes);
    // Rows the database held back at the byte cap: cut there, even if their JSON would fit.
    if (raw.cut && encoded.truncated === null) encoded.truncated = "byte_limit";
    return {
      columns: raw.fields.map((f) => ({ name: f.name, type: names.get(f.typeId) ?? String(f.typeId) })),
      rows: encoded.rows,
      row_count: encoded.rows.length,
      truncated: encoded.truncated !== null,
      ...(encoded.truncated ? { truncated_reason: encoded.truncated } : {}),
    };
  }

  /**
   * Layer 2 must hold alone. Where the reader cannot call set_config (PGlite; PostgreSQL
   * after a superuser's REVOKE) queries run on Warren's own store under SET LOCAL ROLE.
   * Otherwise set_config('role', <Warren's user>) would undo that role, so they run on
   * reader logins; if those cannot be made, telemetry SQL is refused (unavailable) and the
   * next query tries again.
   */
  private readerSession(): Promise<repo.ReaderSession> {
    if (this.closed) return Promise.reject(new AppError("unavailable", "the server is stopping"));
    if (this.session) return Promise.resolve(this.session);
    this.opening ??= this.openSession().finally(() => {
      this.opening = null;
    });
    return this.opening;
  }

  private async openSession(): Promise<repo.ReaderSession> {
    if (!(await repo.readerCanSetConfig(this.db))) {
      const session = limitedSession(this.db, OWN_CONNECTIONS);
      this.session = session;
      return session;
    }
    const off = "telemetry SQL is off: any role may call set_config here";
    const fix =
      "give Warren's database user CREATEROLE and let its reader logins (warren_tq_*) log in with a password, or have a superuser REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC (docs/telemetry-sql.md)";
    if (this.db.kind !== "postgres" || !this.readerLogins) throw new AppError("unavailable", `${off}; ${fix}`);
    const { connectionString, size = READER_LOGINS } = this.readerLogins;
    try {
      this.logins = await ReaderLogins.open(this.db, connectionString, size);
    } catch (error) {
      // The cause (a host, a port, a role name) is for the server's log, not the caller.
      throw new AppError("unavailable", `${off}, and its reader logins failed; ${fix}`, { cause: error });
    }
    this.session = this.logins;
    return this.logins;
  }

  /** Ends the reader logins' connections and drops their roles. */
  async close(): Promise<void> {
    this.closed = true;
    await this.opening?.catch(() => undefined);
    const logins = this.logins;
    this.logins = null;
    this.session = null;
    await logins?.close();
    await this.replica?.close();
  }

  private queryError(error: unknown, sqlText: string): unknown {
    if (error instanceof repo.CostOverCap) {
      const estimated = Math.ceil(error.estimatedCost);
      return new AppError(
        "invalid_argument",
        `the query's estimated cost ${estimated} exceeds the limit ${error.maxCost} (WARREN_TELEMETRY_SQL_MAX_COST): narrow it with a WHERE, a LIMIT or fewer joins`,
        { details: { construct: "estimated cost", estimated_cost: estimated, max_cost: error.maxCost } },
      );
    }
    if (error instanceof BackendMessageTooLarge) {
      return new AppError(
        "invalid_argument",
        `the query's answer or error was ${error.bytes} bytes in one message, over the ${MAX_BACKEND_MESSAGE_BYTES} the server reads: narrow it (a value it builds, or one it fails to convert, is that large)`,
        { details: { construct: "message size", bytes: error.bytes, max_bytes: MAX_BACKEND_MESSAGE_BYTES } },
      );
    }
    const state = sqlState(error);
    if (error instanceof AppError) return error;
    // The connection went away under the query (no SQLSTATE: a reset socket, a restart).
    if (state === null && connectionLost(error)) return new AppError("unavailable", "the store is unavailable");
    if (state === null) return error;
    // PostgreSQL quotes the values it fails on in full: a message is cut to what a person reads.
    const full = (error as Error).message;
    const message =
      full.length > MAX_MESSAGE_CHARS ? `${full.slice(0, MAX_MESSAGE_CHARS)}… (${full.length} characters)` : full;
    if (state === "57014") {
      return new AppError("deadline_exceeded", "the query ran past its statement timeout and was canceled");
    }
    if (state.startsWith("08") || state.startsWith("57P"))
      return new AppError("unavailable", "the store is unavailable");
    const column = /column "?([^"\s]+)"? does not exist/.exec(message)?.[1];
    if (column !== undefined) {
      const name = column.includes(".") ? (column.split(".").at(-1) as string) : column;
      const at = sqlText.toLowerCase().search(new RegExp(`\\b${name.replace(/[^a-z0-9_]/gi, "")}\\b`, "i"));
      return new AppError(
        "invalid_argument",
        `column ${column} is not a published column${at >= 0 ? ` (position ${at + 1})` : ""}`,
        { details: { construct: `column ${column}`, ...(at >= 0 ? { position: at + 1 } : {}) } },
      );
    }
    return new AppError("invalid_argument", `the query failed: ${message}`, { details: { sqlstate: state } });
  }

  async put(cred: Credential, name: string, body: PutDataViewBody): Promise<DataViewJson> {
    requireOrgScoped(cred, "write data views");
    if (body.name !== undefined && body.name !== name) throw invalid("body name must equal the path name");
    const params = body.spec.params ?? [];
    const seen = new Set<string>();
    for (const p of params) {
      if (seen.has(p.name)) throw invalid(`param ${p.name} is declared twice`);
      seen.add(p.name);
    }
    // Validated through the gateway: compiled, then planned and run with no rows under layer 2.
    await this.execute(
      cred.orgId,
      body.spec.sql,
      params.map((p) => p.type),
      params.map(() => null),
      0,
      this.limits.views,
    );
    const row = await repo.putView(this.db, {
      orgId: cred.orgId,
      name,
      description: body.description ?? "",
      spec: body.spec,
      createdBy: cred.principalId,
      now: this.clock.now(),
    });
    return viewJson(row);
  }

  async list(cred: Credential): Promise<DataViewJson[]> {
    requireOrgScoped(cred, "list data views");
    return (await repo.listViews(this.db, cred.orgId)).map(viewJson);
  }

  async run(cred: Credential, name: string, body: RunDataViewBody): Promise<QueryResultJson> {
    requireOrgScoped(cred, "run data views");
    const row = await repo.getView(this.db, cred.orgId, name);
    if (!row) throw notFound("data view");
    const spec = row.spec as DataViewSpecJson;
    const declared = spec.params ?? [];
    const given = body.params ?? {};
    for (const key of Object.keys(given)) {
      if (!declared.some((p) => p.name === key)) throw invalid(`param ${key} is not declared by the view`);
    }
    const values = declared.map((p) => {
      // Own properties only: a param named `constructor` left unset is null, not Object's.
      const value = Object.hasOwn(given, p.name) ? given[p.name] : undefined;
      if (value === undefined || value === null) return null;
      return p.type === "jsonb" ? JSON.stringify(value) : String(value);
    });
    const limits = this.limits.views;
    const rows = Math.min(body.limit ?? limits.defaultRows, limits.maxRows);
    const result = await this.execute(
      cred.orgId,
      spec.sql,
      declared.map((p) => p.type),
      values,
      rows,
      limits,
    );
    return { ...result, spec_version: row.spec_version };
  }

  async delete(cred: Credential, name: string): Promise<void> {
    requireOrgScoped(cred, "delete data views");
    if (!(await repo.deleteView(this.db, cred.orgId, name))) throw notFound("data view");
  }

  /** Raw SQL: never stored; the organization comes from the credential alone. */
  async runSql(cred: Credential, sql: string, limit: number | undefined): Promise<QueryResultJson> {
    requireOrgScoped(cred, "run telemetry SQL");
    const limits = this.limits.raw;
    return this.execute(cred.orgId, sql, [], [], Math.min(limit ?? limits.defaultRows, limits.maxRows), limits);
  }
}
